// Role: a device's piece of the final training state on disk (precast-run --save-final-state=DIR):
// every parameter and optimizer-state input, by signature name, in the per-device shape, as
// DIR/state.rank-<r>.safetensors. The artifact's signature (each input's global sharding) and
// the rank's mesh coordinates say where each piece sits in the global tensor (TensorShard.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/artifact/Artifact.h"
#include "ir/support/Error.h"

namespace precast::runtime {

// "state.rank-3.safetensors".
std::string state_piece_name(int64_t rank);

// Writes DIR/state.rank-<rank>.safetensors from `final_state` (one byte buffer per signature
// input, TrainReport::final_state): written under a temporary name, fsynced, renamed into place,
// DIR created when missing. I/O errors are exit 1 naming the file.
Status save_state_piece(const std::string& directory, int64_t rank,
                        const artifact::Signature& signature,
                        const std::vector<std::vector<uint8_t>>& final_state);

}  // namespace precast::runtime
