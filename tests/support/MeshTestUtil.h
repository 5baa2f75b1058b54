// MaxText's mesh axes and a mesh of ICI fsdp x tensor in each of `slices` slices (DCN data), for
// tests of sharding and SPMD partitioning.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "compiler/analysis/Sharding.h"
#include "compiler/topology/Mesh.h"

namespace precast::testing {

inline const std::vector<std::string> kMaxTextMeshAxes = {
    "diloco",  "data",   "stage",    "fsdp",   "fsdp_transpose", "context", "context_usp_ulysses",
    "context_autoregressive", "tensor", "tensor_sequence", "expert", "autoregressive"};

// Megatron-style tensor parallelism: heads, mlp and vocab split over `tensor`, the batch and the
// activations' embed dimension whole.
inline std::vector<AxisRule> megatron_rules() {
  return {{"activation_batch", {}},   {"activation_embed", {}}, {"activation_heads", {"tensor"}},
          {"activation_kv_heads", {"tensor"}}, {"activation_mlp", {"tensor"}},
          {"activation_vocab", {"tensor"}},    {"q_heads", {"tensor"}},
          {"kv_heads", {"tensor"}},            {"heads", {"tensor"}},
          {"mlp", {"tensor"}},                 {"vocab", {"tensor"}}};
}

// A one-slice mesh with the given ICI sizes by axis name (others 1).
inline Mesh ici_mesh(const std::vector<std::pair<std::string, int64_t>>& sizes) {
  MeshRequest request;
  request.axes = kMaxTextMeshAxes;
  request.ici.assign(kMaxTextMeshAxes.size(), 1);
  request.dcn.assign(kMaxTextMeshAxes.size(), 1);
  request.num_devices = 1;
  for (const auto& [axis, size] : sizes) {
    for (size_t i = 0; i < kMaxTextMeshAxes.size(); ++i) {
      if (kMaxTextMeshAxes[i] == axis) request.ici[i] = size;
    }
    request.num_devices *= size;
  }
  Expected<Mesh> m = build_mesh(request);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message());
  return m.ok() ? *m : Mesh{};
}

inline Mesh fsdp_tensor_mesh(int64_t fsdp, int64_t tensor, int64_t slices) {
  MeshRequest request;
  request.axes = kMaxTextMeshAxes;
  request.ici.assign(kMaxTextMeshAxes.size(), 1);
  request.dcn.assign(kMaxTextMeshAxes.size(), 1);
  request.ici[3] = fsdp;
  request.ici[8] = tensor;
  request.dcn[1] = slices;
  request.num_slices = slices;
  request.num_devices = fsdp * tensor * slices;
  Expected<Mesh> m = build_mesh(request);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message());
  return m.ok() ? *m : Mesh{};
}

}  // namespace precast::testing
