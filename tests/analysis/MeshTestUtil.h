// MaxText's mesh axes and a mesh of ICI fsdp x tensor in each of `slices` slices (DCN data), for
// tests of sharding and SPMD partitioning.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "compiler/topology/Mesh.h"

namespace precast::testing {

inline const std::vector<std::string> kMaxTextMeshAxes = {
    "diloco",  "data",   "stage",    "fsdp",   "fsdp_transpose", "context", "context_usp_ulysses",
    "context_autoregressive", "tensor", "tensor_sequence", "expert", "autoregressive"};

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
