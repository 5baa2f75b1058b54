#include "runtime/train/DataSource.h"

#include "ir/Random.h"
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

}  // namespace precast::runtime
