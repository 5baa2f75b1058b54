#include "compiler/topology/CustomMesh.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

namespace precast {
namespace {

constexpr int64_t kGrid = 16;  // the [16, 16] device mesh the rings are cut from

int64_t at(int64_t row, int64_t column) {
  return row * kGrid + column;
}

}  // namespace

Status check_custom_mesh(const std::string& strategy, const std::vector<int64_t>& ici,
                         int64_t devices_per_slice) {
  if (strategy.empty()) return Status::success();
  std::vector<int64_t> valid;
  if (strategy == "hybrid_ring_64x4") {
    valid = {1, 4, 64};
  } else if (strategy == "hybrid_ring_32x8") {
    valid = {1, 8, 32};
  } else {
    return usage_error(fmt::format(
        "custom_mesh='{}': The strategy {} to reshape the mesh is invalid. Use hybrid_ring_64x4 "
        "or hybrid_ring_32x8, or leave custom_mesh empty.",
        strategy, strategy));
  }
  std::set<int64_t> distinct(ici.begin(), ici.end());
  if (std::vector<int64_t>(distinct.begin(), distinct.end()) != valid) {
    return usage_error(fmt::format(
        "custom_mesh='{}': Invalid custom_mesh:{} chosen for ICI mesh shape [{}]. Its ICI "
        "parallelism values must be {{{}}} (e.g. ici_fsdp_parallelism={} with "
        "ici_{}_parallelism={}).",
        strategy, strategy, fmt::join(ici, ", "), fmt::join(valid, ", "), valid[2],
        valid[1] == 4 ? "context" : "expert", valid[1]));
  }
  if (devices_per_slice != kGrid * kGrid) {
    return usage_error(fmt::format(
        "custom_mesh='{}': This custom mesh is not valid for {} devices: it cuts rings from a "
        "16x16 slice of 256 devices (e.g. compile_topology=v6e-256 or v5e-256).",
        strategy, devices_per_slice));
  }
  return Status::success();
}

Status apply_custom_mesh(Mesh& mesh, const std::string& strategy, bool allow_split_physical_axes) {
  if (strategy.empty() || (mesh.num_slices <= 1 && !allow_split_physical_axes)) {
    return Status::success();
  }
  PRECAST_RETURN_IF_ERROR(
      check_custom_mesh(strategy, mesh.ici, mesh.num_devices / mesh.num_slices));
  mesh.custom_mesh = strategy;
  return Status::success();
}

Expected<std::vector<int64_t>> hybrid_ring_order(const std::string& strategy) {
  std::vector<int64_t> order;
  if (strategy == "hybrid_ring_64x4") {
    // 8 x 8 squares of 2 x 2, each walked (0,0) (0,1) (1,1) (1,0).
    for (int64_t i = 0; i < 8; ++i) {
      for (int64_t j = 0; j < 8; ++j) {
        int64_t r = 2 * i, c = 2 * j;
        for (int64_t d : {at(r, c), at(r, c + 1), at(r + 1, c + 1), at(r + 1, c)})
          order.push_back(d);
      }
    }
  } else if (strategy == "hybrid_ring_32x8") {
    // 8 x 4 blocks of 2 x 4: along the top row, then back along the bottom row.
    for (int64_t i = 0; i < 8; ++i) {
      for (int64_t j = 0; j < 4; ++j) {
        int64_t r = 2 * i, c = 4 * j;
        for (int64_t k = 0; k < 4; ++k) order.push_back(at(r, c + k));
        for (int64_t k = 3; k >= 0; --k) order.push_back(at(r + 1, c + k));
      }
    }
  } else {
    return usage_error(
        fmt::format("The strategy {} to reshape the mesh is not implemented.", strategy));
  }
  return order;
}

}  // namespace precast
