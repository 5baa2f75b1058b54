// Leaves and elementwise kernels of the reference interpreter.
#include <cmath>
#include <cstdint>
#include <limits>

#include "ir/FloatFormats.h"
#include "ir/Random.h"
#include "ir/interpreter/Kernels.h"

namespace precast::ir::kernels {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The 32-bit pattern of an integer element.
uint32_t bits_of(double x) { return static_cast<uint32_t>(to_int64_or_zero(x)); }

double from_bits(DType dtype, uint64_t bits) {
  auto low = static_cast<uint32_t>(bits);
  if (dtype == DType::kS32) return static_cast<double>(static_cast<int32_t>(low));
  return static_cast<double>(low);
}

double unary_float(OpKind kind, double x) {
  switch (kind) {
    case OpKind::kNeg: return -x;
    case OpKind::kAbs: return std::fabs(x);
    case OpKind::kSign: return std::isnan(x) ? x : x > 0 ? 1.0 : x < 0 ? -1.0 : x;
    case OpKind::kFloor: return std::floor(x);
    case OpKind::kCeil: return std::ceil(x);
    case OpKind::kRoundNearestEven: return std::nearbyint(x);
    case OpKind::kExp: return std::exp(x);
    case OpKind::kExpm1: return std::expm1(x);
    case OpKind::kLog: return std::log(x);
    case OpKind::kLog1p: return std::log1p(x);
    case OpKind::kLogistic: return 1.0 / (1.0 + std::exp(-x));
    case OpKind::kTanh: return std::tanh(x);
    case OpKind::kSqrt: return std::sqrt(x);
    case OpKind::kRsqrt: return 1.0 / std::sqrt(x);
    case OpKind::kSin: return std::sin(x);
    case OpKind::kCos: return std::cos(x);
    case OpKind::kErf: return std::erf(x);
    case OpKind::kIsFinite: return std::isfinite(x) ? 1.0 : 0.0;
    default: return kNaN;
  }
}

double unary_integer(OpKind kind, DType dtype, double x) {
  int64_t v = to_int64_or_zero(x);
  switch (kind) {
    case OpKind::kNeg: return from_bits(dtype, static_cast<uint64_t>(-v));
    case OpKind::kAbs: return from_bits(dtype, static_cast<uint64_t>(v < 0 ? -v : v));
    case OpKind::kSign: return static_cast<double>((v > 0) - (v < 0));
    case OpKind::kNot: return from_bits(dtype, ~bits_of(x));
    default: return 0.0;
  }
}

double binary_float(OpKind kind, double a, double b) {
  switch (kind) {
    case OpKind::kAdd: return a + b;
    case OpKind::kSub: return a - b;
    case OpKind::kMul: return a * b;
    case OpKind::kDiv: return a / b;
    case OpKind::kRem: return std::fmod(a, b);
    // max and min propagate NaN, as XLA does.
    case OpKind::kMax: return (std::isnan(a) || std::isnan(b)) ? kNaN : std::max(a, b);
    case OpKind::kMin: return (std::isnan(a) || std::isnan(b)) ? kNaN : std::min(a, b);
    case OpKind::kPow: return std::pow(a, b);
    case OpKind::kAtan2: return std::atan2(a, b);
    default: return kNaN;
  }
}

// Signed division follows XLA: x/0 = -1, x%0 = x, INT_MIN/-1 = INT_MIN, INT_MIN%-1 = 0.
double signed_divide(OpKind kind, int64_t a, int64_t b) {
  if (b == 0) return kind == OpKind::kDiv ? -1.0 : static_cast<double>(a);
  if (a == std::numeric_limits<int32_t>::min() && b == -1) {
    return kind == OpKind::kDiv ? static_cast<double>(a) : 0.0;
  }
  return static_cast<double>(kind == OpKind::kDiv ? a / b : a % b);
}

// Unsigned: x/0 = UINT32_MAX, x%0 = x.
double unsigned_divide(OpKind kind, int64_t a, int64_t b) {
  if (b == 0) return kind == OpKind::kDiv ? 4294967295.0 : static_cast<double>(a);
  return static_cast<double>(kind == OpKind::kDiv ? a / b : a % b);
}

double binary_integer(OpKind kind, DType dtype, double x, double y) {
  int64_t a = to_int64_or_zero(x), b = to_int64_or_zero(y);
  uint32_t shift = bits_of(y);
  switch (kind) {
    case OpKind::kAdd: return from_bits(dtype, static_cast<uint64_t>(a + b));
    case OpKind::kSub: return from_bits(dtype, static_cast<uint64_t>(a - b));
    case OpKind::kMul: return from_bits(dtype, static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
    case OpKind::kDiv:
    case OpKind::kRem:
      return dtype == DType::kS32 ? signed_divide(kind, a, b) : unsigned_divide(kind, a, b);
    case OpKind::kMax: return static_cast<double>(std::max(a, b));
    case OpKind::kMin: return static_cast<double>(std::min(a, b));
    case OpKind::kAnd: return from_bits(dtype, bits_of(x) & bits_of(y));
    case OpKind::kOr: return from_bits(dtype, bits_of(x) | bits_of(y));
    case OpKind::kXor: return from_bits(dtype, bits_of(x) ^ bits_of(y));
    case OpKind::kShiftLeft: return shift >= 32 ? 0.0 : from_bits(dtype, bits_of(x) << shift);
    case OpKind::kShiftRightLogical:
      return shift >= 32 ? 0.0 : from_bits(dtype, bits_of(x) >> shift);
    default: return 0.0;
  }
}

double binary_pred(OpKind kind, double a, double b) {
  bool x = a != 0.0, y = b != 0.0;
  switch (kind) {
    case OpKind::kAnd: return x && y;
    case OpKind::kOr: return x || y;
    case OpKind::kXor: return x != y;
    default: return 0.0;
  }
}

double compare(ComparisonDirection direction, double a, double b) {
  switch (direction) {
    case ComparisonDirection::kEq: return a == b;
    case ComparisonDirection::kNe: return a != b;
    case ComparisonDirection::kLt: return a < b;
    case ComparisonDirection::kLe: return a <= b;
    case ComparisonDirection::kGt: return a > b;
    case ComparisonDirection::kGe: return a >= b;
  }
  return 0.0;
}

HostTensor unary(const KernelInput& in) {
  const HostTensor& x = *in.operands[0];
  HostTensor out = HostTensor::filled(in.result, 0.0);
  DType dtype = x.type.dtype;
  for (size_t i = 0; i < x.values.size(); ++i) {
    double v = x.values[i];
    if (is_floating(dtype)) {
      out.values[i] = unary_float(in.kind, v);
    } else if (dtype == DType::kPred) {
      out.values[i] = v != 0.0 ? 0.0 : 1.0;  // not
    } else {
      out.values[i] = unary_integer(in.kind, dtype, v);
    }
  }
  return out;
}

HostTensor binary(const KernelInput& in) {
  const HostTensor& a = *in.operands[0];
  const HostTensor& b = *in.operands[1];
  HostTensor out = HostTensor::filled(in.result, 0.0);
  DType dtype = a.type.dtype;
  for (size_t i = 0; i < a.values.size(); ++i) {
    if (is_floating(dtype)) {
      out.values[i] = binary_float(in.kind, a.values[i], b.values[i]);
    } else if (dtype == DType::kPred) {
      out.values[i] = binary_pred(in.kind, a.values[i], b.values[i]);
    } else {
      out.values[i] = binary_integer(in.kind, dtype, a.values[i], b.values[i]);
    }
  }
  return out;
}

HostTensor iota(const KernelInput& in) {
  HostTensor out = HostTensor::filled(in.result, 0.0);
  int64_t dimension = in.attrs.integer(AttrKey::kDimension);
  std::vector<int64_t> strides = row_major_strides(in.result.dims);
  int64_t size = in.result.dims[dimension];
  for (size_t i = 0; i < out.values.size(); ++i) {
    out.values[i] = static_cast<double>((static_cast<int64_t>(i) / strides[dimension]) % size);
  }
  return out;
}

HostTensor random(const KernelInput& in) {
  HostTensor out = HostTensor::filled(in.result, 0.0);
  uint32_t seed = bits_of(in.operands[0]->values[0]);
  auto stream = static_cast<uint32_t>(in.attrs.integer(AttrKey::kStream));
  const int uniform = uniform_bits(in.result.dtype == DType::kBF16, in.result.dtype == DType::kF16);
  const double truncate = in.attrs.real(AttrKey::kTruncate);
  for (size_t i = 0; i < out.values.size(); ++i) {
    switch (in.kind) {
      case OpKind::kRngBits: out.values[i] = random_bits(seed, stream, i); break;
      case OpKind::kRngUniform: out.values[i] = random_uniform(seed, stream, i, uniform); break;
      default:
        out.values[i] = truncate > 0 ? random_truncated_normal(seed, stream, i, truncate)
                                     : random_normal(seed, stream, i);
        break;
    }
  }
  return out;
}

}  // namespace

HostTensor leaf(const KernelInput& in) {
  switch (in.kind) {
    case OpKind::kConstant: {
      std::span<const double> literal = in.attrs.reals(AttrKey::kValue);
      if (literal.size() == 1) return HostTensor::filled(in.result, literal[0]);
      return HostTensor::of(in.result, std::vector<double>(literal.begin(), literal.end()));
    }
    case OpKind::kIota:
      return iota(in);
    default:
      return random(in);
  }
}

HostTensor elementwise(const KernelInput& in) {
  switch (in.kind) {
    case OpKind::kCompare: {
      HostTensor out = HostTensor::filled(in.result, 0.0);
      const HostTensor& a = *in.operands[0];
      const HostTensor& b = *in.operands[1];
      for (size_t i = 0; i < out.values.size(); ++i) {
        out.values[i] = compare(in.attrs.direction(), a.values[i], b.values[i]);
      }
      return out;
    }
    case OpKind::kSelect: {
      HostTensor out = *in.operands[2];
      const HostTensor& predicate = *in.operands[0];
      const HostTensor& on_true = *in.operands[1];
      for (size_t i = 0; i < out.values.size(); ++i) {
        if (predicate.values[i] != 0.0) out.values[i] = on_true.values[i];
      }
      return out;
    }
    case OpKind::kConvert: {
      HostTensor out = HostTensor::filled(in.result, 0.0);
      const HostTensor& x = *in.operands[0];
      // Float to float is left to the driver's rounding, which InterpreterOptions may disable.
      bool float_to_float = is_floating(x.type.dtype) && is_floating(in.result.dtype);
      for (size_t i = 0; i < out.values.size(); ++i) {
        double v = x.values[i];
        out.values[i] = float_to_float ? v : convert_to_dtype(x.type.dtype, in.result.dtype, v);
      }
      return out;
    }
    default:
      return op_info(in.kind).op_class == OpClass::kUnary ? unary(in) : binary(in);
  }
}

}  // namespace precast::ir::kernels
