// Element types, tensor types, rounding to the narrow float formats, interning, and the
// counter-based random numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

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

}  // namespace
}  // namespace precast::ir
