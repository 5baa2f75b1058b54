// Role: what compiled code runs with — the GEMM implementation, the thread pool and the device's
// place in the mesh — as one value the runtime owns and passes to every step function (the
// entry's fourth argument, a `const RuntimeContext*`), which generated code hands on to
// precast_gemm_f32/f64, precast_parallel_for and precast_mesh_coordinate. No process-wide state:
// two contexts may run side by side (two devices of one mesh in one process, in tests).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace precast {

class ThreadPool;

enum class GemmImpl { kOpenBlas, kEigen, kPacked };

struct RuntimeContext {
  GemmImpl impl = GemmImpl::kOpenBlas;
  ThreadPool* pool = nullptr;  // null: one thread, the caller's
  // This device's coordinate along each axis of the artifact's mesh (CompatibilityKey::mesh
  // order; the runtime takes rank r's from DeviceMesh, which numbers devices in MaxText's order,
  // slices outermost), owned by the caller. Empty: device 0 (every coordinate 0).
  std::span<const int64_t> mesh_coordinates;
};

// The coordinates of device `device` of a mesh of axis sizes `sizes`: its row-major digits. This
// is MaxText's order for a single slice only; a mesh with DCN axes takes DeviceMesh's numbering.
std::vector<int64_t> mesh_coordinates(int64_t device, const std::vector<int64_t>& sizes);

}  // namespace precast

// For generated code: the coordinate along mesh axis `axis` of the device that `context` (a
// const RuntimeContext*, may be null) runs; 0 for a null context or an axis it does not list.
extern "C" int64_t precast_mesh_coordinate(const void* context, int64_t axis);
