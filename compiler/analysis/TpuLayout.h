// Role: the bytes XLA's TPU backend allocates for an array: its tiled layout's padded size.
//
// XLA lays a TPU array out in tiles over its two most-minor dimensions: the minor one is padded
// to a multiple of 128 lanes and the second-minor one to the tile's rows — 8 for 32-bit types,
// 16 for 16-bit and 32 for 8-bit ones, or the smallest power of two that holds a dimension
// shorter than that (a [1, 2048] batch array takes a (1, 128) tile: no padding). It picks the
// layout (which dimensions are minor) that pads least: f32[2048, 18] is laid out 18-major and
// takes 2048 x 24 floats; u32[16, 4] is 16-minor and takes 4 x 128. A rank-1 array is padded to
// 4096 bytes once it fills that (f32[2304] takes 12288 bytes), else to 512; no allocation is
// smaller than 512 bytes (a scalar takes 512).
// Read off XLA's buffer-assignment dumps of MaxText's steps (benchmarks/xla_reference).
#pragma once

#include <cstdint>

#include "ir/Types.h"

namespace precast {

inline constexpr int64_t kTpuMinAllocationBytes = 512;

int64_t tpu_buffer_bytes(const ir::TensorType& type);

}  // namespace precast
