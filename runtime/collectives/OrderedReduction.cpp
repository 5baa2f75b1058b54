#include "runtime/collectives/OrderedReduction.h"

#include <cmath>
#include <cstring>
#include <type_traits>

namespace precast::runtime {
namespace {

// Elements handled per block: the f32 accumulators of a bf16/f16 block stay on the stack.
constexpr int64_t kBlock = 1024;

template <typename T>
T max_keeping_nan(T acc, T x) {
  if (std::isnan(acc)) return acc;
  if (std::isnan(x) || x > acc) return x;
  return acc;
}

// Accumulates in T itself: f32, f64, and the integers (as unsigned, so sums wrap).
template <typename T, typename Sum>
void reduce_same_type(const T* pieces, int64_t n, int64_t count, ReduceOp op, T* out, Sum sum) {
  std::memcpy(out, pieces, static_cast<size_t>(count) * sizeof(T));
  for (int64_t p = 1; p < n; ++p) {
    const T* x = pieces + p * count;
    if (op == ReduceOp::kSum) {
      for (int64_t e = 0; e < count; ++e) out[e] = sum(out[e], x[e]);
    } else {
      for (int64_t e = 0; e < count; ++e) {
        if constexpr (std::is_floating_point_v<T>) {
          out[e] = max_keeping_nan(out[e], x[e]);
        } else {
          out[e] = x[e] > out[e] ? x[e] : out[e];
        }
      }
    }
  }
}

// bf16 / f16: widen each piece's block to f32, combine, round once.
template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void reduce_half(const uint16_t* pieces, int64_t n, int64_t count, ReduceOp op, uint16_t* out) {
  float acc[kBlock];
  for (int64_t start = 0; start < count; start += kBlock) {
    int64_t len = count - start < kBlock ? count - start : kBlock;
    for (int64_t e = 0; e < len; ++e) acc[e] = Widen(pieces[start + e]);
    for (int64_t p = 1; p < n; ++p) {
      const uint16_t* x = pieces + p * count + start;
      if (op == ReduceOp::kSum) {
        for (int64_t e = 0; e < len; ++e) acc[e] += Widen(x[e]);
      } else {
        for (int64_t e = 0; e < len; ++e) acc[e] = max_keeping_nan(acc[e], Widen(x[e]));
      }
    }
    for (int64_t e = 0; e < len; ++e) out[start + e] = Narrow(acc[e]);
  }
}

void reduce_pred(const uint8_t* pieces, int64_t n, int64_t count, uint8_t* out) {
  for (int64_t e = 0; e < count; ++e) out[e] = pieces[e] != 0;
  for (int64_t p = 1; p < n; ++p) {
    const uint8_t* x = pieces + p * count;
    for (int64_t e = 0; e < count; ++e) out[e] = static_cast<uint8_t>(out[e] | (x[e] != 0));
  }
}

template <typename T>
T plain_sum(T a, T b) {
  return a + b;
}

uint32_t wrapping_sum(uint32_t a, uint32_t b) {
  return a + b;
}

int32_t wrapping_signed_sum(int32_t a, int32_t b) {
  return static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
}

}  // namespace

float bf16_to_f32(uint16_t bits) {
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &wide, sizeof f);
  return f;
}

uint16_t f32_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if (std::isnan(value)) return static_cast<uint16_t>((bits >> 16) | 0x40);  // stays quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);  // nearest, ties to the even upper half
  return static_cast<uint16_t>(bits >> 16);
}

float f16_to_f32(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, sizeof h);
  return static_cast<float>(h);
}

uint16_t f32_to_f16(float value) {
  _Float16 h = static_cast<_Float16>(value);  // IEEE conversion: nearest even
  uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}

void reduce_in_order(const void* pieces, int64_t num_pieces, int64_t count, ElementType type,
                     ReduceOp op, void* out) {
  if (num_pieces < 1 || count < 1) return;
  switch (type) {
    case ElementType::kF32:
      reduce_same_type(static_cast<const float*>(pieces), num_pieces, count, op,
                       static_cast<float*>(out), plain_sum<float>);
      return;
    case ElementType::kF64:
      reduce_same_type(static_cast<const double*>(pieces), num_pieces, count, op,
                       static_cast<double*>(out), plain_sum<double>);
      return;
    case ElementType::kS32:
      reduce_same_type(static_cast<const int32_t*>(pieces), num_pieces, count, op,
                       static_cast<int32_t*>(out), wrapping_signed_sum);
      return;
    case ElementType::kU32:
      reduce_same_type(static_cast<const uint32_t*>(pieces), num_pieces, count, op,
                       static_cast<uint32_t*>(out), wrapping_sum);
      return;
    case ElementType::kBF16:
      reduce_half<bf16_to_f32, f32_to_bf16>(static_cast<const uint16_t*>(pieces), num_pieces, count,
                                            op, static_cast<uint16_t*>(out));
      return;
    case ElementType::kF16:
      reduce_half<f16_to_f32, f32_to_f16>(static_cast<const uint16_t*>(pieces), num_pieces, count,
                                          op, static_cast<uint16_t*>(out));
      return;
    case ElementType::kPred:
      reduce_pred(static_cast<const uint8_t*>(pieces), num_pieces, count,
                  static_cast<uint8_t*>(out));
      return;
  }
}

}  // namespace precast::runtime
