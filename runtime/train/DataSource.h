// Role: where each step's batch comes from. DataSource is what a dataset reader implements;
// SyntheticBatch is MaxText's synthetic data (dataset_type=synthetic), the one source today.
#pragma once

#include <array>
#include <cstdint>
#include <utility>

#include "compiler/artifact/Artifact.h"
#include "ir/support/Error.h"
#include "runtime/train/StepSignature.h"
#include "runtime/train/TensorShard.h"

namespace precast::runtime {

// One array of the batch: its signature (shape, dtype) and the buffer the step reads.
struct BatchArray {
  const artifact::TensorSignature* tensor = nullptr;
  void* data = nullptr;
};
// The six arrays of one batch, in kBatchNames order (inputs, inputs_position, ...).
using BatchArrays = std::array<BatchArray, kBatchNames.size()>;

class DataSource {
 public:
  virtual ~DataSource() = default;
  // Writes the batch of `step` (0, 1, ...) into `batch`, whose buffers keep what the previous
  // call wrote. An error ends the run.
  virtual Status next_batch(int64_t step, const BatchArrays& batch) = 0;
};

// MaxText's synthetic batch: tokens [rows, T+1] drawn once, uniform in [0, vocab); inputs are
// tokens[:, :-1], targets tokens[:, 1:], positions 0..T-1 and 1..T, segmentation all ones. The
// same batch every step (MaxText draws it from PRNGKey(0); ours from data_shuffle_seed), so it
// is written on the first call only. With `shard` (the piece of the [rows, T] global batch this
// device holds, the same for the six arrays) only that piece is built, each token drawn by its
// global row and position, so every mesh trains on the same global batch.
class SyntheticBatch final : public DataSource {
 public:
  SyntheticBatch(int64_t vocab, uint32_t seed, TensorShard shard = {})
      : vocab_(vocab), seed_(seed), shard_(std::move(shard)) {}
  Status next_batch(int64_t step, const BatchArrays& batch) override;

 private:
  int64_t vocab_;
  uint32_t seed_;
  TensorShard shard_;  // empty: the whole batch
  bool written_ = false;
};

}  // namespace precast::runtime
