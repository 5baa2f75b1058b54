#include "compiler/topology/Mesh.h"

#include <cstdlib>

namespace precast {
namespace {

int64_t product(const std::vector<int64_t>& values) {
  int64_t p = 1;
  for (int64_t v : values) p *= v;
  return p;
}

}  // namespace

Expected<std::vector<int64_t>> fill_unspecified_mesh_axes(std::vector<int64_t> values,
                                                          int64_t target, std::string_view kind) {
  std::string type(kind);
  int unspecified = 0;
  for (int64_t v : values) unspecified += v == -1 ? 1 : 0;
  if (unspecified > 1) {
    return usage_error("Found unspecified values (-1) for more than one " + type +
                       " parallelism axis. At most one axis can be unspecified.");
  }
  if (unspecified == 1) {
    int64_t known = -product(values);  // the -1 makes the product negative
    if (known <= 0 || target % known != 0 || target / known < 1) {
      return usage_error("Unspecified value unable to be determined with the given " + type +
                         " parallelism values");
    }
    for (int64_t& v : values) {
      if (v == -1) v = target / known;
    }
  }
  int64_t p = product(values);
  if (p != target) {
    std::string what = type == "ICI" ? "devices per slice" : "slices";
    return usage_error("Number of " + what + " " + std::to_string(target) +
                       " does not match the product of the " + type + " parallelism " +
                       std::to_string(p));
  }
  return values;
}

Expected<Mesh> build_mesh(const MeshRequest& request) {
  if (request.num_slices < 1 || request.num_devices % request.num_slices != 0) {
    return usage_error("num_slices " + std::to_string(request.num_slices) + " does not divide " +
                       std::to_string(request.num_devices) + " devices.");
  }
  Mesh mesh;
  mesh.axes = request.axes;
  mesh.num_devices = request.num_devices;
  mesh.num_slices = request.num_slices;
  PRECAST_ASSIGN_OR_RETURN(
      mesh.ici,
      fill_unspecified_mesh_axes(request.ici, request.num_devices / request.num_slices, "ICI"));
  if (request.num_slices > 1) {
    PRECAST_ASSIGN_OR_RETURN(mesh.dcn,
                             fill_unspecified_mesh_axes(request.dcn, request.num_slices, "DCN"));
  } else {
    if (std::llabs(product(request.dcn)) > 1) {
      return usage_error("DCN parallelism requested but only one slice available.");
    }
    mesh.dcn.assign(request.axes.size(), 1);
  }
  for (size_t i = 0; i < mesh.axes.size(); ++i) mesh.shape.push_back(mesh.ici[i] * mesh.dcn[i]);
  return mesh;
}

int64_t Mesh::axis_size(std::string_view axis) const {
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] == axis) return shape[i];
  }
  return 1;
}

std::string Mesh::shape_string() const {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) out += ",";
  return out + ")";
}

std::string Mesh::num_devices_line() const {
  return "Num_devices: " + std::to_string(num_devices) + ", shape " + shape_string();
}

}  // namespace precast
