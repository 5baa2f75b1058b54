// Device meshes from ici_*/dcn_* parallelism with MaxText's -1 fill rules and error messages
// (maxtext-facts §b). A Mesh is a shape over named axes; device placement comes later.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/support/Error.h"

namespace precast {

// At most one -1, filled as target / (-product); the product must then equal target.
// `kind` is "ICI" or "DCN".
Expected<std::vector<int64_t>> fill_unspecified_mesh_axes(std::vector<int64_t> values,
                                                          int64_t target, std::string_view kind);

struct MeshRequest {
  std::vector<std::string> axes;  // mesh_axes
  std::vector<int64_t> ici, dcn;  // per axis, unfilled (-1 allowed)
  int64_t num_devices = 1, num_slices = 1;
};

struct Mesh {
  std::vector<std::string> axes;
  std::vector<int64_t> ici, dcn, shape;  // shape[i] = ici[i] * dcn[i]
  int64_t num_devices = 1, num_slices = 1;
  std::string custom_mesh;  // the custom device order in use ("" = mesh_utils' own)

  int64_t axis_size(std::string_view axis) const;  // 1 for an axis not in the mesh
  std::string shape_string() const;                // "(1, 1, 1, 4, 1)" as Python prints a tuple
  std::string num_devices_line() const;            // "Num_devices: 4, shape (1, 1, 1, 4, 1)"
};

// ICI target = num_devices / num_slices; DCN target = num_slices. DCN values are consulted only
// when num_slices > 1.
Expected<Mesh> build_mesh(const MeshRequest& request);

}  // namespace precast
