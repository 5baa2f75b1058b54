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
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t t = 0; t < length; ++t) {
      int64_t i = r * length + t;
      auto token = [&](int64_t position) {
        uint64_t counter = static_cast<uint64_t>(r * (length + 1) + position);
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
