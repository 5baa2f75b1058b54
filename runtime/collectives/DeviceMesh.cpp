#include "runtime/collectives/DeviceMesh.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <optional>

namespace precast::runtime {
namespace {

Error mesh_error(const std::string& why) {
  return Error(ExitCode::kIncompatible, why);
}

// The row-major digits of `index` over `sizes` (the last size varies fastest).
std::vector<int64_t> digits(int64_t index, const std::vector<int64_t>& sizes) {
  std::vector<int64_t> out(sizes.size());
  for (size_t a = sizes.size(); a-- > 0;) {
    out[a] = index % sizes[a];
    index /= sizes[a];
  }
  return out;
}

// "[1, 2, 1]" (a recorded list of integers) -> {1, 2, 1}; nullopt when it is not one.
std::optional<std::vector<int64_t>> integer_list(const std::string& text) {
  if (text.size() < 2 || text.front() != '[' || text.back() != ']') return std::nullopt;
  std::vector<int64_t> out;
  size_t i = 1;
  while (i + 1 < text.size()) {
    while (i + 1 < text.size() && (text[i] == ' ' || text[i] == ',')) ++i;
    if (i + 1 >= text.size()) break;
    int64_t value = 0;
    auto [end, ec] = std::from_chars(text.data() + i, text.data() + text.size() - 1, value);
    if (ec != std::errc()) return std::nullopt;
    out.push_back(value);
    i = static_cast<size_t>(end - text.data());
  }
  return out;
}

}  // namespace

DeviceMesh::DeviceMesh(std::vector<MeshAxisSplit> axes) : axes_(std::move(axes)) {
  for (const MeshAxisSplit& a : axes_) {
    num_slices_ *= a.dcn;
    devices_per_slice_ *= a.ici;
  }
}

Expected<DeviceMesh> DeviceMesh::create(std::vector<MeshAxisSplit> axes) {
  if (axes.empty()) return mesh_error("a device mesh needs at least one axis");
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i].ici < 1 || axes[i].dcn < 1) {
      return mesh_error(
          fmt::format("mesh axis '{}' has ICI size {} and DCN size {}; both must "
                      "be at least 1",
                      axes[i].name, axes[i].ici, axes[i].dcn));
    }
    for (size_t j = 0; j < i; ++j) {
      if (axes[j].name == axes[i].name) {
        return mesh_error(fmt::format("mesh axis '{}' is named twice", axes[i].name));
      }
    }
  }
  return DeviceMesh(std::move(axes));
}

Expected<DeviceMesh> DeviceMesh::single_slice(const std::vector<artifact::MeshAxis>& mesh) {
  std::vector<MeshAxisSplit> axes;
  for (const artifact::MeshAxis& a : mesh) axes.push_back({a.name, a.size, 1});
  return create(std::move(axes));
}

Expected<DeviceMesh> DeviceMesh::of_artifact(const artifact::Artifact& a) {
  std::optional<std::vector<int64_t>> ici, dcn;
  for (const artifact::ConfigEntry& e : a.config) {
    if (e.key == "ici_parallelism") ici = integer_list(e.value);
    if (e.key == "dcn_parallelism") dcn = integer_list(e.value);
  }
  if (!ici || !dcn || ici->size() != a.key.mesh.size() || dcn->size() != a.key.mesh.size()) {
    return mesh_error(fmt::format(
        "the artifact's config lacks ici_parallelism and dcn_parallelism lists of one entry per "
        "mesh axis ({} axes); recompile it with this build's precast compile",
        a.key.mesh.size()));
  }
  std::vector<MeshAxisSplit> axes;
  for (size_t i = 0; i < a.key.mesh.size(); ++i) {
    const artifact::MeshAxis& axis = a.key.mesh[i];
    // An unfilled entry (-1) is the rest of the axis: with one slice the DCN sizes stay unfilled.
    int64_t inside = (*ici)[i], across = (*dcn)[i];
    if (across < 1 && inside >= 1 && axis.size % inside == 0) across = axis.size / inside;
    if (inside < 1 && across >= 1 && axis.size % across == 0) inside = axis.size / across;
    if (inside < 1 || across < 1 || inside * across != axis.size) {
      return mesh_error(fmt::format(
          "mesh axis '{}' has {} devices but ici_parallelism gives {} and dcn_parallelism {}; "
          "recompile it with this build's precast compile",
          axis.name, axis.size, (*ici)[i], (*dcn)[i]));
    }
    axes.push_back({axis.name, inside, across});
  }
  return create(std::move(axes));
}

std::vector<int64_t> DeviceMesh::coordinates(int64_t device) const {
  std::vector<int64_t> ici_sizes, dcn_sizes;
  for (const MeshAxisSplit& a : axes_) {
    ici_sizes.push_back(a.ici);
    dcn_sizes.push_back(a.dcn);
  }
  std::vector<int64_t> inside = digits(device % devices_per_slice_, ici_sizes);
  std::vector<int64_t> across = digits(slice_of(device), dcn_sizes);
  std::vector<int64_t> out(axes_.size());
  for (size_t a = 0; a < axes_.size(); ++a) out[a] = across[a] * axes_[a].ici + inside[a];
  return out;
}

int64_t DeviceMesh::device(std::span<const int64_t> coordinates) const {
  int64_t slice = 0, inside = 0;
  for (size_t a = 0; a < axes_.size(); ++a) {
    slice = slice * axes_[a].dcn + coordinates[a] / axes_[a].ici;
    inside = inside * axes_[a].ici + coordinates[a] % axes_[a].ici;
  }
  return slice * devices_per_slice_ + inside;
}

Expected<DeviceGroup> DeviceMesh::group(int64_t device, std::span<const std::string> axes) const {
  std::vector<size_t> chosen;
  for (const std::string& name : axes) {
    auto it = std::find_if(axes_.begin(), axes_.end(),
                           [&](const MeshAxisSplit& a) { return a.name == name; });
    if (it == axes_.end()) {
      return mesh_error(
          fmt::format("the group's axis '{}' is not an axis of the mesh ({})", name, describe()));
    }
    size_t index = static_cast<size_t>(it - axes_.begin());
    if (std::find(chosen.begin(), chosen.end(), index) != chosen.end()) {
      return mesh_error(fmt::format("the group names mesh axis '{}' twice", name));
    }
    chosen.push_back(index);
  }
  std::vector<int64_t> coords = coordinates(device);
  DeviceGroup g;
  std::vector<int64_t> sizes;
  for (size_t a : chosen) {
    g.position = g.position * axes_[a].size() + coords[a];
    sizes.push_back(axes_[a].size());
    g.spans_slices = g.spans_slices || axes_[a].dcn > 1;
  }
  for (size_t a = 0; a < axes_.size(); ++a) {
    if (std::find(chosen.begin(), chosen.end(), a) == chosen.end()) {
      g.color = g.color * axes_[a].size() + coords[a];
    }
  }
  int64_t group_size = 1;
  for (int64_t s : sizes) group_size *= s;
  for (int64_t p = 0; p < group_size; ++p) {
    std::vector<int64_t> along = digits(p, sizes);
    for (size_t k = 0; k < chosen.size(); ++k) coords[chosen[k]] = along[k];
    g.members.push_back(this->device(coords));
  }
  return g;
}

Expected<DeviceGroup> DeviceMesh::replica_group(
    int64_t device, const std::vector<std::vector<int64_t>>& groups) const {
  std::vector<int> seen(static_cast<size_t>(num_devices()), 0);
  DeviceGroup found;
  bool have = false;
  for (size_t i = 0; i < groups.size(); ++i) {
    for (size_t p = 0; p < groups[i].size(); ++p) {
      int64_t d = groups[i][p];
      if (d < 0 || d >= num_devices()) {
        return mesh_error(
            fmt::format("replica group {} names device {}, but the mesh ({}) has "
                        "devices 0 to {}",
                        i, d, describe(), num_devices() - 1));
      }
      if (seen[static_cast<size_t>(d)]++ > 0) {
        return mesh_error(fmt::format("device {} is in more than one replica group", d));
      }
      if (d == device) {
        found.color = static_cast<int64_t>(i);
        found.position = static_cast<int64_t>(p);
        found.members = groups[i];
        have = true;
      }
    }
  }
  for (size_t d = 0; d < seen.size(); ++d) {
    if (seen[d] == 0) {
      return mesh_error(
          fmt::format("device {} of the mesh ({}) is in no replica group", d, describe()));
    }
  }
  if (!have)
    return mesh_error(fmt::format("device {} is not in the mesh ({})", device, describe()));
  for (int64_t m : found.members) {
    found.spans_slices = found.spans_slices || slice_of(m) != slice_of(found.members[0]);
  }
  return found;
}

std::string DeviceMesh::describe() const {
  std::vector<std::string> parts;
  for (const MeshAxisSplit& a : axes_) {
    std::string part = fmt::format("{}={}", a.name, a.size());
    if (a.dcn > 1) part += fmt::format(" (ici {} x dcn {})", a.ici, a.dcn);
    parts.push_back(part);
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace precast::runtime
