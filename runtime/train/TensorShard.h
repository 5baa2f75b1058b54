// Role: which piece of a global tensor this device holds. The artifact's signature gives the
// per-device shape and the global sharding ("P('fsdp', ('data', 'tensor'))"); the device's mesh
// coordinates give its place along each dimension, numbered as SpmdPartition's shard_of numbers
// them (row-major over a dimension's axes in the order listed).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "compiler/artifact/Artifact.h"
#include "ir/support/Error.h"

namespace precast::runtime {

struct TensorShard {
  std::vector<int64_t> local_dims;   // the signature's per-device shape
  std::vector<int64_t> global_dims;  // local_dims[d] times the devices dimension d is split over
  std::vector<int64_t> offsets;      // where the piece starts along each dimension

  // The whole tensor (every offset 0, global = local): a replicated value or one device.
  bool whole() const { return local_dims == global_dims; }
  // The row-major index in the global tensor of the piece's row-major element `local`.
  int64_t global_index(int64_t local) const;
};

// The piece of `tensor` that the device at `coordinates` (one per axis of `mesh`, or empty for
// device 0) holds. Errors (exit 4): a sharding that does not parse, names an axis the mesh lacks
// or has more dimensions than the tensor.
Expected<TensorShard> tensor_shard(const artifact::TensorSignature& tensor,
                                   const std::vector<artifact::MeshAxis>& mesh,
                                   std::span<const int64_t> coordinates);

}  // namespace precast::runtime
