// Role: where each step's batch comes from. DataSource is what a dataset reader implements;
// SyntheticBatch is MaxText's synthetic data (dataset_type=synthetic), DatasetBatch the token and
// text files of runtime/data (dataset_type=tokens|text); make_data_source picks one.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "compiler/artifact/Artifact.h"
#include "ir/support/Error.h"
#include "runtime/checkpoint/JsonValue.h"
#include "runtime/data/BatchBuilder.h"
#include "runtime/data/Corpus.h"
#include "runtime/data/DataSettings.h"
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
  // True when the data is used up (num_epoch passes done): the run ends before the next step.
  virtual bool exhausted() const { return false; }
  // Where the batch after `next_step - 1`'s starts, as a JSON object for a checkpoint's
  // metadata.json ("data"); empty: synthetic data's default.
  virtual std::string position_json(int64_t /*next_step*/) const { return ""; }
  // Continues from a checkpoint's saved position (exit 4 when it belongs to other data).
  virtual Status restore_position(const checkpoint::JsonValue& /*data*/) {
    return Status::success();
  }
  // One log line on the data (empty: none).
  virtual std::string describe() const { return ""; }
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
  // data/SyntheticPosition.h: the seed is recorded, and a checkpoint of other data is refused.
  std::string position_json(int64_t next_step) const override;
  Status restore_position(const checkpoint::JsonValue& data) override;

 private:
  int64_t vocab_;
  uint32_t seed_;
  TensorShard shard_;  // empty: the whole batch
  bool written_ = false;
};

// Batches of a dataset (runtime/data): every device builds the same global batch from the same
// document order and writes its piece of it (`shard`, as SyntheticBatch's).
class DatasetBatch final : public DataSource {
 public:
  DatasetBatch(data::Corpus corpus, const data::DataSettings& settings, TensorShard shard);
  Status next_batch(int64_t step, const BatchArrays& batch) override;
  bool exhausted() const override { return builder_.exhausted(); }
  std::string position_json(int64_t next_step) const override;
  Status restore_position(const checkpoint::JsonValue& data) override;
  std::string describe() const override;
  // Back to the first batch of the first epoch (each evaluation reads its set from the start).
  void rewind() { (void)builder_.set_position({}); }

 private:
  std::unique_ptr<data::Corpus> corpus_;  // the builder points into it
  data::DataSettings settings_;
  data::BatchBuilder builder_;
  TensorShard shard_;
  data::GlobalBatch global_;
};

// The data source `settings` name, for a model of `vocab` (its corpus read and checked now, so
// bad data fails before the first step: exit 2 naming the file and offset).
Expected<std::unique_ptr<DataSource>> make_data_source(const data::DataSettings& settings,
                                                       int64_t vocab, TensorShard shard);

}  // namespace precast::runtime
