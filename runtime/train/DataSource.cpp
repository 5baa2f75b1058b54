#include "runtime/train/DataSource.h"

#include "ir/Random.h"
#include "runtime/data/SyntheticPosition.h"
#include "runtime/train/TensorElements.h"

namespace precast::runtime {

Status SyntheticBatch::next_batch(int64_t /*step*/, const BatchArrays& batch) {
  if (written_) return Status::success();
  written_ = true;
  const artifact::TensorSignature& shape = *batch[0].tensor;
  int64_t rows = shape.shape.size() == 2 ? shape.shape[0] : 1;
  int64_t length = shape.shape.size() == 2 ? shape.shape[1] : elements(shape);
  // This device's rows and positions of the global [global_rows, global_length] batch.
  bool piece = shard_.local_dims.size() == 2 && shape.shape.size() == 2;
  int64_t row_offset = piece ? shard_.offsets[0] : 0;
  int64_t position_offset = piece ? shard_.offsets[1] : 0;
  int64_t global_length = piece ? shard_.global_dims[1] : length;
  for (int64_t local_row = 0; local_row < rows; ++local_row) {
    int64_t r = row_offset + local_row;
    for (int64_t local_t = 0; local_t < length; ++local_t) {
      int64_t t = position_offset + local_t;
      int64_t i = local_row * length + local_t;
      auto token = [&](int64_t position) {
        uint64_t counter = static_cast<uint64_t>(r * (global_length + 1) + position);
        return static_cast<double>(ir::random_bits(seed_, 0xda7a, counter) %
                                   static_cast<uint32_t>(vocab_));
      };
      double values[kBatchNames.size()] = {token(t), static_cast<double>(t), 1.0, token(t + 1),
                                            static_cast<double>(t + 1), 1.0};
      for (size_t k = 0; k < batch.size(); ++k) {
        store(batch[k].data, i, batch[k].tensor->dtype, values[k]);
      }
    }
  }
  return Status::success();
}

std::string SyntheticBatch::position_json(int64_t next_step) const {
  return data::synthetic_position_json(seed_, next_step);
}

Status SyntheticBatch::restore_position(const checkpoint::JsonValue& data) {
  return data::check_synthetic_position(data, seed_);
}

DatasetBatch::DatasetBatch(data::Corpus corpus, const data::DataSettings& settings,
                           TensorShard shard)
    : corpus_(std::make_unique<data::Corpus>(std::move(corpus))),
      settings_(settings),
      builder_(&corpus_->train, data::BatchOptions{settings.packing, settings.shuffle,
                                                  settings.shuffle_seed, settings.num_epoch,
                                                  corpus_->pad}),
      shard_(std::move(shard)) {}

Status DatasetBatch::next_batch(int64_t /*step*/, const BatchArrays& batch) {
  const artifact::TensorSignature& shape = *batch[0].tensor;
  int64_t rows = shape.shape.size() == 2 ? shape.shape[0] : 1;
  int64_t length = shape.shape.size() == 2 ? shape.shape[1] : elements(shape);
  bool piece = shard_.local_dims.size() == 2 && shape.shape.size() == 2;
  global_.rows = piece ? shard_.global_dims[0] : rows;
  global_.length = piece ? shard_.global_dims[1] : length;
  int64_t row_offset = piece ? shard_.offsets[0] : 0;
  int64_t position_offset = piece ? shard_.offsets[1] : 0;
  builder_.build(global_);  // every device: the whole global batch, the same order
  for (size_t k = 0; k < batch.size(); ++k) {
    const std::vector<int32_t>& values = global_.arrays[k];
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t t = 0; t < length; ++t) {
        int64_t global_index = (row_offset + r) * global_.length + position_offset + t;
        store(batch[k].data, r * length + t, batch[k].tensor->dtype,
              static_cast<double>(values[static_cast<size_t>(global_index)]));
      }
    }
  }
  return Status::success();
}

std::string DatasetBatch::position_json(int64_t next_step) const {
  return data::position_json(settings_.type, corpus_->train, settings_.shuffle_seed,
                             builder_.position(), next_step);
}

Status DatasetBatch::restore_position(const checkpoint::JsonValue& saved) {
  PRECAST_ASSIGN_OR_RETURN(data::DataPosition p,
                           data::parse_position(saved, settings_.type, corpus_->train,
                                                settings_.shuffle_seed));
  return builder_.set_position(p);
}

std::string DatasetBatch::describe() const { return data::describe(*corpus_); }

Expected<std::unique_ptr<DataSource>> make_data_source(const data::DataSettings& settings,
                                                       int64_t vocab, TensorShard shard) {
  if (settings.type == "synthetic") {
    return std::unique_ptr<DataSource>(
        std::make_unique<SyntheticBatch>(vocab, settings.shuffle_seed, std::move(shard)));
  }
  PRECAST_ASSIGN_OR_RETURN(data::Corpus corpus, data::load_corpus(settings, vocab));
  return std::unique_ptr<DataSource>(
      std::make_unique<DatasetBatch>(std::move(corpus), settings, std::move(shard)));
}

}  // namespace precast::runtime
