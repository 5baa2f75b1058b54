// Element types, tensor types, rounding to the narrow float formats, interning, and the
// counter-based random numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "ir/Context.h"
#include "ir/FloatFormats.h"
#include "ir/Random.h"
#include "ir/Types.h"

namespace precast::ir {
namespace {

TEST(Types, DTypeNamesRoundTrip) {
  for (int i = 0; i < kNumDTypes; ++i) {
    auto dtype = static_cast<DType>(i);
    EXPECT_EQ(dtype_from_name(dtype_name(dtype)), dtype);
  }
  EXPECT_FALSE(dtype_from_name("f8").has_value());
}

TEST(Types, BytesPerElement) {
  EXPECT_EQ(bytes_per_element(DType::kF32), 4);
  EXPECT_EQ(bytes_per_element(DType::kF64), 8);
  EXPECT_EQ(bytes_per_element(DType::kBF16), 2);
  EXPECT_EQ(bytes_per_element(DType::kF16), 2);
  EXPECT_EQ(bytes_per_element(DType::kS32), 4);
  EXPECT_EQ(bytes_per_element(DType::kU32), 4);
  EXPECT_EQ(bytes_per_element(DType::kPred), 1);
}

TEST(Types, TensorTypeSizes) {
  TensorType t{DType::kBF16, {8, 128, 512}};
  EXPECT_EQ(t.rank(), 3);
  EXPECT_EQ(t.num_elements(), 8 * 128 * 512);
  EXPECT_EQ(t.byte_size(), 8 * 128 * 512 * 2);
  EXPECT_EQ(to_string(t), "bf16[8,128,512]");
  TensorType scalar{DType::kF32, {}};
  EXPECT_TRUE(scalar.is_scalar());
  EXPECT_EQ(scalar.num_elements(), 1);
  EXPECT_EQ(to_string(scalar), "f32[]");
}

TEST(Types, DTypeSetDescribe) {
  EXPECT_EQ(kFloatTypes.describe(), "f32, f64, bf16 or f16");
  EXPECT_TRUE(kLogicalTypes.contains(DType::kPred));
  EXPECT_FALSE(kNumericTypes.contains(DType::kPred));
}

TEST(FloatFormats, Bf16RoundsToNearestEven) {
  EXPECT_EQ(round_to_bf16(1.0), 1.0);
  EXPECT_EQ(round_to_bf16(1.0 + 0x1p-8), 1.0);                  // tie, even stays
  EXPECT_EQ(round_to_bf16(1.0 + 3 * 0x1p-8), 1.0 + 0x1p-6);     // tie, rounds up to even
  EXPECT_EQ(round_to_bf16(1.0 + 0x1p-8 + 0x1p-20), 1.0 + 0x1p-7);
  EXPECT_EQ(round_to_bf16(3.0e38), 226 * 0x1p120);
  EXPECT_TRUE(std::isinf(round_to_bf16(3.4e38)));
  EXPECT_TRUE(std::isnan(round_to_bf16(NAN)));
}

TEST(FloatFormats, F16RangeAndSubnormals) {
  EXPECT_EQ(round_to_f16(65504.0), 65504.0);
  EXPECT_EQ(round_to_f16(65519.0), 65504.0);
  EXPECT_TRUE(std::isinf(round_to_f16(65520.0)));
  EXPECT_EQ(round_to_f16(0x1p-24), 0x1p-24);        // smallest subnormal
  EXPECT_EQ(round_to_f16(0x1p-26), 0.0);            // below half of it
  EXPECT_EQ(round_to_f16(0.1), 0.0999755859375);
  EXPECT_EQ(round_to_f16(-0.1), -0.0999755859375);
}

TEST(FloatFormats, IntegerWrapAndConvert) {
  EXPECT_EQ(wrap_to_s32(2147483648.0), -2147483648.0);
  EXPECT_EQ(wrap_to_u32(-1.0), 4294967295.0);
  EXPECT_EQ(convert_to_dtype(DType::kF32, DType::kS32, -2.7), -2.0);
  EXPECT_EQ(convert_to_dtype(DType::kF32, DType::kS32, 1e20), 2147483647.0);
  EXPECT_EQ(convert_to_dtype(DType::kF32, DType::kS32, NAN), 0.0);
  EXPECT_EQ(convert_to_dtype(DType::kF32, DType::kPred, 0.25), 1.0);
  EXPECT_EQ(round_to_dtype(DType::kF32, 0.1), static_cast<double>(0.1f));
}

TEST(Context, InterningGivesEqualIds) {
  Context c;
  EXPECT_EQ(c.intern_string(""), 0u);
  EXPECT_EQ(c.intern_string("embed"), c.intern_string("embed"));
  EXPECT_NE(c.intern_string("embed"), c.intern_string("mlp"));
  TypeId a = c.intern_type({DType::kF32, {2, 3}});
  EXPECT_EQ(a, c.intern_type({DType::kF32, {2, 3}}));
  EXPECT_NE(a, c.intern_type({DType::kF64, {2, 3}}));
  EXPECT_NE(a, c.intern_type({DType::kF32, {3, 2}}));
  std::vector<StringId> none = {0, 0};
  EXPECT_EQ(c.intern_axes(none), 0u);
  std::vector<StringId> names = {c.intern_string("batch"), 0};
  EXPECT_EQ(c.intern_axes(names), c.intern_axes(names));
  EXPECT_NE(c.intern_axes(names), 0u);
}

TEST(Context, AttributeSetsCompareBitwise) {
  Context c;
  AttrSet a, b, negative_zero;
  a.set_ints(AttrKey::kDims, {0, 1});
  b.set_ints(AttrKey::kDims, {0, 1});
  EXPECT_EQ(c.intern_attrs(a), c.intern_attrs(b));
  AttrSet zero;
  zero.set_reals(AttrKey::kValue, {0.0});
  negative_zero.set_reals(AttrKey::kValue, {-0.0});
  EXPECT_NE(c.intern_attrs(zero), c.intern_attrs(negative_zero));
  AttrSet nan1, nan2;
  nan1.set_reals(AttrKey::kValue, {std::numeric_limits<double>::quiet_NaN()});
  nan2.set_reals(AttrKey::kValue, {std::numeric_limits<double>::quiet_NaN()});
  EXPECT_EQ(c.intern_attrs(nan1), c.intern_attrs(nan2));
  EXPECT_EQ(c.intern_attrs(AttrSet{}), 0u);
}

TEST(Random, CounterBasedAndDeterministic) {
  EXPECT_EQ(random_bits(1, 2, 3), random_bits(1, 2, 3));
  EXPECT_NE(random_bits(1, 2, 3), random_bits(1, 2, 4));
  EXPECT_NE(random_bits(1, 2, 3), random_bits(1, 3, 3));
  EXPECT_NE(random_bits(1, 2, 3), random_bits(2, 2, 3));
  double sum = 0, sum_sq = 0, normal_sum = 0, normal_sq = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    double u = random_uniform(42, 0, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    sum_sq += u * u;
    double z = random_normal(42, 1, i);
    ASSERT_TRUE(std::isfinite(z));
    normal_sum += z;
    normal_sq += z * z;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.01);
  EXPECT_NEAR(sum_sq / n - 0.25, 1.0 / 12, 0.01);
  EXPECT_NEAR(normal_sum / n, 0.0, 0.03);
  EXPECT_NEAR(normal_sq / n, 1.0, 0.05);
}

// The normal draw's own log and cos (plain IEEE double, no libm) against long double references
// over every input they take (2^24 each, every 97th here): within an ulp.
TEST(Random, OwnLogAndCosAreAccurate) {
  const long double two_pi = 2.0L * 3.14159265358979323846264338327950288L;
  double worst_log = 0, worst_cos = 0;
  for (uint32_t k = 0; k <= (1u << 24) / 97 + 1; ++k) {
    uint32_t a = std::min<uint32_t>(1 + 97 * k, 1u << 24);
    long double log_ref = std::log(static_cast<long double>(a) / 16777216.0L);
    if (a < (1u << 24)) {
      long double err = std::fabs((log_of_fraction(a) - log_ref) / log_ref);
      worst_log = std::max(worst_log, static_cast<double>(err));
    } else {
      EXPECT_EQ(log_of_fraction(a), 0.0);  // u1 = 1
    }
    uint32_t b = std::min<uint32_t>(97 * k, (1u << 24) - 1);
    long double cos_ref = std::cos(two_pi * static_cast<long double>(b) / 16777216.0L);
    worst_cos = std::max(worst_cos, static_cast<double>(std::fabs(cos_of_turn_fraction(b) - cos_ref)));
  }
  EXPECT_LE(worst_log, 0x1p-52);  // relative
  EXPECT_LE(worst_cos, 0x1p-52);  // absolute (|cos| <= 1)
  // The exact quarter turns, and the folds around an eighth of a turn.
  EXPECT_EQ(cos_of_turn_fraction(0), 1.0);
  EXPECT_EQ(cos_of_turn_fraction(1u << 23), -1.0);
  EXPECT_LE(std::fabs(cos_of_turn_fraction(1u << 22)), 2e-16);
  EXPECT_NEAR(cos_of_turn_fraction(1u << 21), std::numbers::sqrt2 / 2, 2e-16);
  EXPECT_NEAR(cos_of_turn_fraction((1u << 21) + 1), std::cos(std::numbers::pi / 4 + 0x1p-23 * std::numbers::pi), 4e-16);
  EXPECT_NEAR(cos_of_turn_fraction(3 * (1u << 21)), -std::numbers::sqrt2 / 2, 2e-16);
  EXPECT_NEAR(cos_of_turn_fraction(7 * (1u << 21)), std::numbers::sqrt2 / 2, 2e-16);
}

// The draws are a definition, not an approximation: these bits hold on every platform and
// every executor (interpreter, runtime, generated code). Values of the fdlibm-kernel version
// (libm's log and cos gave ...565p-5 for the first: the last bits differ now and then; after
// rounding to f32, 3 draws in 10^7 do).
TEST(Random, NormalDrawsArePinned) {
  EXPECT_EQ(random_normal(42, 1, 0), 0x1.9da17e690f567p-5);
  EXPECT_EQ(random_normal(42, 1, 1), -0x1.9a6b6ae299c2fp+0);
  EXPECT_EQ(random_normal(42, 1, 2), -0x1.651993890be95p+0);
  EXPECT_EQ(random_normal(42, 1, 3), 0x1.b82e61753cb11p-2);
}

// Box-Muller's tails: P(|z| > 2) = 4.55%, P(|z| > 3) = 0.27%.
TEST(Random, NormalTails) {
  const int n = 200000;
  int beyond2 = 0, beyond3 = 0;
  for (int i = 0; i < n; ++i) {
    double z = std::fabs(random_normal(3, 5, i));
    beyond2 += z > 2;
    beyond3 += z > 3;
  }
  EXPECT_NEAR(beyond2 / static_cast<double>(n), 0.0455, 0.002);
  EXPECT_NEAR(beyond3 / static_cast<double>(n), 0.0027, 0.0005);
}

}  // namespace
}  // namespace precast::ir
