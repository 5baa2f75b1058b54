// Role: the training state's initial values: each parameter drawn as the compiler recorded
// (TensorSignature::init) from init_weights_seed, the same bits as the IR's @init; everything
// else (optimizer moments) stays the zeros its fresh buffer holds.
#pragma once

#include <cstddef>
#include <cstdint>

#include "compiler/artifact/Artifact.h"
#include "ir/support/Error.h"
#include "runtime/kernels/ThreadPool.h"
#include "runtime/train/TensorShard.h"

namespace precast::runtime {

// Fills `buffer` (zeros on entry) with input `index`'s initial value: "normal <stddev>" or
// "truncated_normal <stddev> <bound>" (stream = the input's index), "ones" or "zeros". The
// normal draws are split over the pool; the bits do not depend on its thread count. An
// initialiser this runtime does not know is an Error (exit 4) naming the input. `shard` (null:
// the whole tensor) is the piece this device holds: each element is drawn by its global index,
// so every mesh starts from the same global weights.
Status initialise(void* buffer, const artifact::TensorSignature& t, size_t index, uint32_t seed,
                  ThreadPool& pool, const TensorShard* shard = nullptr);

// For tests: the standard normal draws ir::random_normal(seed, stream, index[j]) of `n` elements,
// by the initialiser's block loop built for instruction-set version `version` (0 baseline, 1
// x86-64-v3, 2 x86-64-v4). False where this build or this CPU has no such version.
bool normal_block_version(int version, uint32_t seed, uint32_t stream, const uint64_t* index,
                          int n, double* z);

}  // namespace precast::runtime
