// tpu_buffer_bytes against the allocation sizes of XLA's own buffer assignment of MaxText's step
// (the default model on v6e-32: `benchmarks/xla_reference`, *buffer-assignment.txt), and the
// padding of gemma-2b's stacked norm scales that its argument bytes show (f32[2048, 18]).
#include <gtest/gtest.h>

#include "compiler/analysis/TpuLayout.h"

namespace precast {
namespace {

using ir::DType;
using ir::TensorType;

TEST(TpuLayout, AllocationSizesOfXlasBufferAssignment) {
  // Scalars and short vectors: 512 bytes (allocations 45-56 of the dump).
  EXPECT_EQ(tpu_buffer_bytes(TensorType{DType::kS32, {}}), 512);
  EXPECT_EQ(tpu_buffer_bytes(TensorType{DType::kU32, {}}), 512);
  EXPECT_EQ(tpu_buffer_bytes(TensorType{DType::kU32, {4}}), 512);
  EXPECT_EQ(tpu_buffer_bytes(TensorType{DType::kU32, {16}}), 512);
  // u32[16, 4]: laid out 16-minor in a (4, 128) tile, 4 x 128 words (allocations 42-44).
  EXPECT_EQ(tpu_buffer_bytes(TensorType{DType::kU32, {16, 4}}), 2048);
  // A batch row: a (1, 128) tile, no padding (allocations 37-41).
  EXPECT_EQ(tpu_buffer_bytes(TensorType{DType::kS32, {1, 2048}}), 8192);
  // Unpadded shapes keep their bytes (allocations 1, 10, 22, 28, 34).
  EXPECT_EQ(tpu_buffer_bytes(TensorType{DType::kF32, {64, 16, 7168}}), 29360128);
  EXPECT_EQ(tpu_buffer_bytes(TensorType{DType::kF32, {64, 16, 16, 128}}), 8388608);
  EXPECT_EQ(tpu_buffer_bytes(TensorType{DType::kF32, {32000, 64}}), 8192000);
  EXPECT_EQ(tpu_buffer_bytes(TensorType{DType::kF32, {2048, 16}}), 131072);
  EXPECT_EQ(tpu_buffer_bytes(TensorType{DType::kF32, {2048}}), 8192);
}

// gemma2-2b's decoder norm scale, f32[2304]: 12288 bytes in XLA's buffer assignment (a vector
// takes tiles of 1024 words); u32[13] (its blocks' RNG counts) 512.
TEST(TpuLayout, VectorsTakeWholeTilesOfAThousandWords) {
  EXPECT_EQ(tpu_buffer_bytes(TensorType{DType::kF32, {2304}}), 12288);
  EXPECT_EQ(tpu_buffer_bytes(TensorType{DType::kU32, {13}}), 512);
  EXPECT_EQ(tpu_buffer_bytes(TensorType{DType::kF32, {3584}}), 16384);
  EXPECT_EQ(tpu_buffer_bytes(TensorType{DType::kF32, {4096}}), 16384);
}

TEST(TpuLayout, SecondMinorDimensionsPadToTheTile) {
  // 18 layers stacked on a 2048-wide scale: rows padded to 24 (8-row tiles of f32).
  EXPECT_EQ(tpu_buffer_bytes(TensorType{DType::kF32, {2048, 18}}), 2048 * 24 * 4);
  // bf16 tiles hold 16 rows; a minor dimension pads to 128 lanes.
  EXPECT_EQ(tpu_buffer_bytes(TensorType{DType::kBF16, {18, 2048}}), 32 * 2048 * 2);
  // [100, 200]: 100-minor pads less (200 rows of 128 lanes) than 200-minor (104 rows of 256).
  EXPECT_EQ(tpu_buffer_bytes(TensorType{DType::kF32, {100, 200}}), 200 * 128 * 4);
  // The layout that pads least: [130, 8] is 130-minor (8 rows of 256 lanes), not 8-minor.
  EXPECT_EQ(tpu_buffer_bytes(TensorType{DType::kF32, {130, 8}}), 8 * 256 * 4);
  EXPECT_EQ(tpu_buffer_bytes(TensorType{DType::kF32, {0, 8}}), 0);
}

}  // namespace
}  // namespace precast
