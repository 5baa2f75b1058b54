// MaxText's named custom device meshes (custom_mesh with allow_split_physical_axes, or across
// slices): hybrid_ring_64x4 and hybrid_ring_32x8 lay a 16x16 slice out as rings of 4 (a 2x2
// square) or of 8 (a 2x4 block walked around its edge), so one mesh axis runs around short
// physical rings (max_utils.reshape_mesh_to_rings). The device order changes, not the logical
// mesh, so per-device memory is that of the mesh ici_* gives.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/topology/Mesh.h"
#include "ir/support/Error.h"

namespace precast {

// Checks custom_mesh against the filled ICI parallelism and the devices per slice with
// MaxText's messages (max_utils.is_valid_custom_mesh, create_custom_device_mesh): the strategy
// must be one of the two, the ICI values must be {1, 4, 64} (64x4) or {1, 8, 32} (32x8), and a
// slice must be 256 devices (a 16x16 grid).
Status check_custom_mesh(const std::string& strategy, const std::vector<int64_t>& ici,
                         int64_t devices_per_slice);

// maxtext_utils.create_device_mesh consults custom_mesh across slices, or on one slice when
// physical axes may be split (otherwise it is not read): then checks it on `mesh` (built from
// the ici/dcn values) and records it there.
Status apply_custom_mesh(Mesh& mesh, const std::string& strategy, bool allow_split_physical_axes);

// The 16x16 grid positions (row * 16 + column of mesh_utils.create_device_mesh([16, 16]))
// in the custom mesh's order: ring after ring, each ring's devices in walking order; reshaped to
// (64, 4) or (32, 8) and then to the ICI shape as MaxText does.
Expected<std::vector<int64_t>> hybrid_ring_order(const std::string& strategy);

}  // namespace precast
