// Rounding doubles to the IR's element types. The interpreter computes in double and rounds
// every op result with round_to_dtype, so f32/bf16/f16 results match a correctly rounded
// single operation of that format; constants are rounded the same way when created.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "ir/Types.h"

namespace precast::ir {

// Round-to-nearest-even into a binary format with `fraction_bits` stored mantissa bits,
// smallest normal exponent `min_exponent` and largest finite value `max_finite`. Exact: the
// division by a power of two and nearbyint (default rounding mode) introduce no extra rounding.
inline double round_to_binary_format(double x, int fraction_bits, int min_exponent,
                                     double max_finite) {
  if (!std::isfinite(x) || x == 0.0) return x;
  int exponent = 0;
  std::frexp(x, &exponent);  // x = m * 2^exponent with 0.5 <= |m| < 1
  int leading = std::max(exponent - 1, min_exponent);
  double quantum = std::ldexp(1.0, leading - fraction_bits);
  double rounded = std::nearbyint(x / quantum) * quantum;
  if (std::fabs(rounded) > max_finite) return std::copysign(std::numeric_limits<double>::infinity(), x);
  return rounded;
}

inline double round_to_bf16(double x) {
  if (std::isnan(x)) return x;
  return round_to_binary_format(x, 7, -126, 3.38953138925153547590470800371487866880e38);
}

inline double round_to_f16(double x) {
  if (std::isnan(x)) return x;
  return round_to_binary_format(x, 10, -14, 65504.0);
}

// Two's-complement wrap of an integer-valued double into 32 bits.
// Non-finite or huge input (never produced by integer kernels) maps to 0 instead of UB.
inline int64_t to_int64_or_zero(double x) {
  return (std::isfinite(x) && std::fabs(x) < 9.2e18) ? static_cast<int64_t>(x) : 0;
}
inline double wrap_to_s32(double x) {
  return static_cast<double>(static_cast<int32_t>(static_cast<uint32_t>(to_int64_or_zero(x))));
}
inline double wrap_to_u32(double x) {
  return static_cast<double>(static_cast<uint32_t>(to_int64_or_zero(x)));
}

// Float -> integer conversion: truncate toward zero, saturate, NaN -> 0 (documented in README).
inline double saturate_to_integer(double x, double low, double high) {
  if (std::isnan(x)) return 0.0;
  return std::clamp(std::trunc(x), low, high);
}

// The value an element of `dtype` holds for x. Integer dtypes expect integer-valued input
// (wrapping), except when converting from floats, which goes through convert_to_dtype.
inline double round_to_dtype(DType dtype, double x) {
  switch (dtype) {
    case DType::kF64:
      return x;
    case DType::kF32:
      return static_cast<double>(static_cast<float>(x));
    case DType::kBF16:
      return round_to_bf16(x);
    case DType::kF16:
      return round_to_f16(x);
    case DType::kS32:
      return wrap_to_s32(x);
    case DType::kU32:
      return wrap_to_u32(x);
    case DType::kPred:
      return x != 0.0 ? 1.0 : 0.0;
  }
  return x;
}

// convert's semantics: like round_to_dtype, but floats going to integers truncate and saturate.
inline double convert_to_dtype(DType from, DType to, double x) {
  if (is_floating(from) && to == DType::kS32) return saturate_to_integer(x, -2147483648.0, 2147483647.0);
  if (is_floating(from) && to == DType::kU32) return saturate_to_integer(x, 0.0, 4294967295.0);
  return round_to_dtype(to, x);
}

}  // namespace precast::ir
