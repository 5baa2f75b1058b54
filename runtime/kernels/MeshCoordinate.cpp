#include "runtime/kernels/RuntimeContext.h"

namespace precast {

std::vector<int64_t> mesh_coordinates(int64_t device, const std::vector<int64_t>& sizes) {
  std::vector<int64_t> out(sizes.size(), 0);
  for (size_t a = sizes.size(); a-- > 0;) {
    if (sizes[a] <= 0) continue;
    out[a] = device % sizes[a];
    device /= sizes[a];
  }
  return out;
}

}  // namespace precast

extern "C" int64_t precast_mesh_coordinate(const void* context, int64_t axis) {
  if (context == nullptr || axis < 0) return 0;
  const auto& coordinates = static_cast<const precast::RuntimeContext*>(context)->mesh_coordinates;
  return static_cast<size_t>(axis) < coordinates.size() ? coordinates[static_cast<size_t>(axis)]
                                                        : 0;
}
