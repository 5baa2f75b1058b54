// Interpreter: every op against hand-computed values, rounding rules, and argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>

#include "tests/support/IrTestSupport.h"
#include "ir/FloatFormats.h"
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Random.h"
#include "ir/Verifier.h"

namespace precast::ir {
namespace {

using testing::eval_op;
using testing::f32;
using testing::f64;
using testing::s32;
using Values = std::vector<double>;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

Values run(std::string_view op, const std::vector<HostTensor>& args, const InterpreterOptions& o = {}) {
  return eval_op(op, args, o).values;
}

// Within 4 ulps: libm at run time and the compiler's constant folding may differ in the last bit.
void expect_close(const Values& got, const Values& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_DOUBLE_EQ(got[i], want[i]) << "element " << i;
}

TEST(Interpreter, Leaves) {
  EXPECT_EQ(run("constant 2.5 : f32[2,2]", {}), (Values{2.5, 2.5, 2.5, 2.5}));
  EXPECT_EQ(run("constant [1, 2, 3] : s32[3]", {}), (Values{1, 2, 3}));
  EXPECT_EQ(run("iota {dimension=0} : s32[2,3]", {}), (Values{0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(run("iota {dimension=1} : f32[2,3]", {}), (Values{0, 1, 2, 0, 1, 2}));
}

TEST(Interpreter, RandomOpsFollowTheCounterDefinition) {
  HostTensor seed = HostTensor::scalar(7, DType::kU32);
  Values bits = run("rng_bits %a {stream=3} : u32[4]", {seed});
  for (int i = 0; i < 4; ++i) EXPECT_EQ(bits[i], random_bits(7, 3, i));
  Values uniform = run("rng_uniform %a {stream=3} : f32[4]", {seed});
  for (int i = 0; i < 4; ++i) EXPECT_EQ(uniform[i], random_uniform(7, 3, i));
  Values normal = run("rng_normal %a : f64[4]", {seed});
  for (int i = 0; i < 4; ++i) EXPECT_EQ(normal[i], random_normal(7, 0, i));
  // A negative s32 seed uses its bit pattern.
  Values signed_seed = run("rng_bits %a : u32[1]", {HostTensor::scalar(-1, DType::kS32)});
  EXPECT_EQ(signed_seed[0], random_bits(0xffffffffu, 0, 0));
}

// A uniform draw is exact in its format and below 1.0 in every float type: bf16 draws are
// multiples of 2^-8 and f16 draws of 2^-11, the largest of 100000 being 1 - 2^-8 and 1 - 2^-11
// (a 24-bit draw would round up to 1.0 in both).
TEST(Interpreter, UniformDrawsAreExactAndBelowOneInEveryFormat) {
  HostTensor seed = HostTensor::scalar(11, DType::kU32);
  for (auto [type, bits] : {std::pair{"bf16", 8}, std::pair{"f16", 11}, std::pair{"f32", 24}}) {
    SCOPED_TRACE(type);
    Values u = run(std::string("rng_uniform %a {stream=5} : ") + type + "[100000]", {seed});
    double top = 0;
    for (size_t i = 0; i < u.size(); ++i) {
      ASSERT_GE(u[i], 0.0);
      ASSERT_LT(u[i], 1.0) << "element " << i;
      double scaled = std::ldexp(u[i], bits);
      ASSERT_EQ(scaled, std::floor(scaled)) << "element " << i;
      EXPECT_EQ(u[i], random_uniform(11, 5, i, bits));
      top = std::max(top, u[i]);
    }
    if (bits < 24) {
      EXPECT_EQ(top, 1.0 - std::ldexp(1.0, -bits));
    }
  }
}

// rng_normal {truncate=2} is ir/Random.h's redrawing definition, and its draws have the moments
// of N(0, 1) truncated to [-2, 2]: none outside, mean 0, variance 1 - 4 phi(2) / (Phi(2) -
// Phi(-2)) = 0.773741 (phi, Phi: the standard normal density and distribution), i.e. 0.879626^2,
// the constant MaxText's truncated_normal initialiser divides by. 200000 draws: the variance's
// standard error is about 0.0016, the mean's 0.002.
TEST(Interpreter, TruncatedNormalDrawsAreRedrawnIntoTheBound) {
  HostTensor seed = HostTensor::scalar(3, DType::kU32);
  Values z = run("rng_normal %a {stream=9, truncate=2.0} : f64[200000]", {seed});
  double sum = 0, squares = 0;
  int64_t redrawn = 0;
  for (size_t i = 0; i < z.size(); ++i) {
    ASSERT_EQ(z[i], random_truncated_normal(3, 9, i, 2.0));
    ASSERT_LE(std::fabs(z[i]), 2.0);
    sum += z[i];
    squares += z[i] * z[i];
    redrawn += std::fabs(random_normal(3, 9, i)) > 2.0;
  }
  double n = static_cast<double>(z.size()), mean = sum / n, variance = squares / n - mean * mean;
  const double phi2 = std::exp(-2.0) / std::sqrt(2 * std::numbers::pi);
  const double inside = std::erf(2.0 / std::sqrt(2.0));
  EXPECT_NEAR(variance, 1.0 - 4.0 * phi2 / inside, 0.008);
  EXPECT_NEAR(std::sqrt(1.0 - 4.0 * phi2 / inside), 0.87962566103423978, 1e-12);
  EXPECT_NEAR(mean, 0.0, 0.01);
  // About 4.55% of first draws fall outside and are redrawn.
  EXPECT_NEAR(static_cast<double>(redrawn) / n, 1.0 - inside, 0.003);
}

TEST(Interpreter, UnaryFloat) {
  HostTensor x = f64({4}, {-2.5, -0.5, 0.5, 3.5});
  EXPECT_EQ(run("neg %a : f64[4]", {x}), (Values{2.5, 0.5, -0.5, -3.5}));
  EXPECT_EQ(run("abs %a : f64[4]", {x}), (Values{2.5, 0.5, 0.5, 3.5}));
  EXPECT_EQ(run("sign %a : f64[4]", {x}), (Values{-1, -1, 1, 1}));
  EXPECT_EQ(run("floor %a : f64[4]", {x}), (Values{-3, -1, 0, 3}));
  EXPECT_EQ(run("ceil %a : f64[4]", {x}), (Values{-2, -0.0, 1, 4}));
  EXPECT_EQ(run("round_nearest_even %a : f64[4]", {x}), (Values{-2, -0.0, 0, 4}));
  HostTensor p = f64({2}, {0.25, 2.0});
  expect_close(run("exp %a : f64[2]", {p}), (Values{std::exp(0.25), std::exp(2.0)}));
  expect_close(run("expm1 %a : f64[2]", {p}), (Values{std::expm1(0.25), std::expm1(2.0)}));
  expect_close(run("log %a : f64[2]", {p}), (Values{std::log(0.25), std::log(2.0)}));
  expect_close(run("log1p %a : f64[2]", {p}), (Values{std::log1p(0.25), std::log1p(2.0)}));
  expect_close(run("logistic %a : f64[2]", {p}), (Values{1 / (1 + std::exp(-0.25)), 1 / (1 + std::exp(-2.0))}));
  expect_close(run("tanh %a : f64[2]", {p}), (Values{std::tanh(0.25), std::tanh(2.0)}));
  EXPECT_EQ(run("sqrt %a : f64[2]", {p}), (Values{0.5, std::sqrt(2.0)}));
  EXPECT_EQ(run("rsqrt %a : f64[2]", {p}), (Values{2.0, 1 / std::sqrt(2.0)}));
  expect_close(run("sin %a : f64[2]", {p}), (Values{std::sin(0.25), std::sin(2.0)}));
  expect_close(run("cos %a : f64[2]", {p}), (Values{std::cos(0.25), std::cos(2.0)}));
  expect_close(run("erf %a : f64[2]", {p}), (Values{std::erf(0.25), std::erf(2.0)}));
  EXPECT_EQ(run("is_finite %a : pred[3]", {f32({3}, {1.0, kInf, kNaN})}), (Values{1, 0, 0}));
}

TEST(Interpreter, UnaryIntegerAndPred) {
  HostTensor i = s32({3}, {-2147483648.0, -5, 7});
  EXPECT_EQ(run("neg %a : s32[3]", {i}), (Values{-2147483648.0, 5, -7}));
  EXPECT_EQ(run("abs %a : s32[3]", {i}), (Values{-2147483648.0, 5, 7}));
  EXPECT_EQ(run("sign %a : s32[3]", {i}), (Values{-1, -1, 1}));
  EXPECT_EQ(run("not %a : s32[3]", {i}), (Values{2147483647, 4, -8}));
  EXPECT_EQ(run("not %a : u32[2]", {testing::tensor(DType::kU32, {2}, {0, 5})}),
            (Values{4294967295.0, 4294967290.0}));
  EXPECT_EQ(run("not %a : pred[2]", {testing::tensor(DType::kPred, {2}, {0, 1})}), (Values{1, 0}));
}

TEST(Interpreter, BinaryFloat) {
  HostTensor a = f64({3}, {6, -7.5, kNaN});
  HostTensor b = f64({3}, {4, 2, 1});
  EXPECT_EQ(run("add %a, %b : f64[3]", {a, b})[0], 10);
  EXPECT_EQ(run("sub %a, %b : f64[3]", {a, b})[1], -9.5);
  EXPECT_EQ(run("mul %a, %b : f64[3]", {a, b})[1], -15);
  EXPECT_EQ(run("div %a, %b : f64[3]", {a, b})[0], 1.5);
  EXPECT_EQ(run("rem %a, %b : f64[3]", {a, b})[1], -1.5);
  Values max = run("max %a, %b : f64[3]", {a, b});
  EXPECT_EQ(max[0], 6);
  EXPECT_TRUE(std::isnan(max[2]));  // NaN propagates
  EXPECT_TRUE(std::isnan(run("min %a, %b : f64[3]", {a, b})[2]));
  EXPECT_EQ(run("pow %a, %b : f64[3]", {a, b})[0], 1296);
  EXPECT_EQ(run("atan2 %a, %b : f64[3]", {a, b})[0], std::atan2(6.0, 4.0));
}

TEST(Interpreter, BinaryIntegerWrapsAndDividesLikeXla) {
  HostTensor a = s32({5}, {2147483647, -2147483648.0, 7, -7, 9});
  HostTensor b = s32({5}, {1, -1, 0, 2, 65536});
  EXPECT_EQ(run("add %a, %b : s32[5]", {a, b}), (Values{-2147483648.0, 2147483647, 7, -5, 65545}));
  EXPECT_EQ(run("mul %a, %b : s32[5]", {a, b}), (Values{2147483647, -2147483648.0, 0, -14, 589824}));
  EXPECT_EQ(run("div %a, %b : s32[5]", {a, b}), (Values{2147483647, -2147483648.0, -1, -3, 0}));
  EXPECT_EQ(run("rem %a, %b : s32[5]", {a, b}), (Values{0, 0, 7, -1, 9}));
  HostTensor big = s32({1}, {65536});
  EXPECT_EQ(run("mul %a, %a : s32[1]", {big}), (Values{0}));  // 2^32 wraps to 0
  HostTensor u = testing::tensor(DType::kU32, {3}, {5, 4294967295.0, 1});
  HostTensor z = testing::tensor(DType::kU32, {3}, {0, 1, 33});
  EXPECT_EQ(run("div %a, %b : u32[3]", {u, z}), (Values{4294967295.0, 4294967295.0, 0}));
  EXPECT_EQ(run("add %a, %b : u32[3]", {u, z}), (Values{5, 0, 34}));
  EXPECT_EQ(run("shift_left %a, %b : u32[3]", {u, z}), (Values{5, 4294967294.0, 0}));
  EXPECT_EQ(run("shift_right_logical %a, %b : u32[3]", {u, z}), (Values{5, 2147483647, 0}));
  EXPECT_EQ(run("shift_right_logical %a, %b : s32[1]", {s32({1}, {-1}), s32({1}, {28})}), (Values{15}));
  EXPECT_EQ(run("and %a, %b : s32[1]", {s32({1}, {12}), s32({1}, {10})}), (Values{8}));
  EXPECT_EQ(run("or %a, %b : s32[1]", {s32({1}, {12}), s32({1}, {10})}), (Values{14}));
  EXPECT_EQ(run("xor %a, %b : s32[1]", {s32({1}, {12}), s32({1}, {-1})}), (Values{-13}));
  EXPECT_EQ(run("max %a, %b : s32[2]", {s32({2}, {-3, 4}), s32({2}, {2, 1})}), (Values{2, 4}));
  HostTensor p = testing::tensor(DType::kPred, {4}, {0, 0, 1, 1});
  HostTensor q = testing::tensor(DType::kPred, {4}, {0, 1, 0, 1});
  EXPECT_EQ(run("and %a, %b : pred[4]", {p, q}), (Values{0, 0, 0, 1}));
  EXPECT_EQ(run("or %a, %b : pred[4]", {p, q}), (Values{0, 1, 1, 1}));
  EXPECT_EQ(run("xor %a, %b : pred[4]", {p, q}), (Values{0, 1, 1, 0}));
}

TEST(Interpreter, CompareSelectConvert) {
  HostTensor a = f32({3}, {1, 2, kNaN});
  HostTensor b = f32({3}, {2, 2, kNaN});
  EXPECT_EQ(run("compare %a, %b {direction=eq} : pred[3]", {a, b}), (Values{0, 1, 0}));
  EXPECT_EQ(run("compare %a, %b {direction=ne} : pred[3]", {a, b}), (Values{1, 0, 1}));
  EXPECT_EQ(run("compare %a, %b {direction=lt} : pred[3]", {a, b}), (Values{1, 0, 0}));
  EXPECT_EQ(run("compare %a, %b {direction=le} : pred[3]", {a, b}), (Values{1, 1, 0}));
  EXPECT_EQ(run("compare %a, %b {direction=gt} : pred[3]", {a, b}), (Values{0, 0, 0}));
  EXPECT_EQ(run("compare %a, %b {direction=ge} : pred[3]", {a, b}), (Values{0, 1, 0}));
  HostTensor p = testing::tensor(DType::kPred, {3}, {1, 0, 1});
  EXPECT_EQ(run("select %a, %b, %c : f32[3]", {p, f32({3}, {1, 2, 3}), f32({3}, {4, 5, 6})}),
            (Values{1, 5, 3}));
  HostTensor x = f32({5}, {-2.7, 2.7, 1e20, kNaN, 0.1});
  EXPECT_EQ(run("convert %a : s32[5]", {x}), (Values{-2, 2, 2147483647, 0, 0}));
  EXPECT_EQ(run("convert %a : pred[5]", {x}), (Values{1, 1, 1, 1, 1}));
  EXPECT_EQ(run("convert %a : bf16[5]", {x})[4], round_to_bf16(static_cast<float>(0.1)));
  EXPECT_EQ(run("convert %a : f32[2]", {s32({2}, {-3, 16777217})}), (Values{-3, 16777216}));
}

TEST(Interpreter, ResultsRoundToTheirDtype) {
  HostTensor one = f32({1}, {1.0});
  HostTensor tiny = f32({1}, {static_cast<float>(1e-8)});
  EXPECT_EQ(run("add %a, %b : f32[1]", {one, tiny})[0], 1.0);
  InterpreterOptions wide;
  wide.round_to_dtype = false;
  EXPECT_EQ(run("add %a, %b : f32[1]", {one, tiny}, wide)[0], 1.0 + static_cast<float>(1e-8));
  HostTensor h = testing::tensor(DType::kF16, {1}, {1000});
  EXPECT_EQ(run("mul %a, %a : f16[1]", {h})[0], kInf);
  HostTensor third = testing::tensor(DType::kBF16, {1}, {round_to_bf16(1.0 / 3)});
  EXPECT_EQ(run("add %a, %a : bf16[1]", {third})[0], round_to_bf16(2 * round_to_bf16(1.0 / 3)));
}

TEST(Interpreter, DataMovement) {
  HostTensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(run("broadcast_in_dim %a {dims=[1, 2]} : f32[2,2,3]", {x}),
            (Values{1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(run("broadcast_in_dim %a {dims=[0, 2]} : f32[2,2,3]", {f32({2, 1}, {7, 8})}),
            (Values{7, 7, 7, 7, 7, 7, 8, 8, 8, 8, 8, 8}));
  EXPECT_EQ(run("broadcast_in_dim %a {dims=[]} : f32[3]", {f32({}, {9})}), (Values{9, 9, 9}));
  EXPECT_EQ(run("reshape %a : f32[3,2]", {x}), (Values{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(run("transpose %a {permutation=[1, 0]} : f32[3,2]", {x}), (Values{1, 4, 2, 5, 3, 6}));
  HostTensor cube = f32({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  EXPECT_EQ(run("transpose %a {permutation=[2, 0, 1]} : f32[2,2,2]", {cube}),
            (Values{0, 2, 4, 6, 1, 3, 5, 7}));
  EXPECT_EQ(run("slice %a {start=[0, 0], limit=[2, 3], stride=[1, 2]} : f32[2,2]", {x}),
            (Values{1, 3, 4, 6}));
  EXPECT_EQ(run("slice %a {start=[1, 1], limit=[2, 3]} : f32[1,2]", {x}), (Values{5, 6}));
  EXPECT_EQ(run("concatenate %a, %b {dimension=1} : f32[2,4]", {x, f32({2, 1}, {-1, -2})}),
            (Values{1, 2, 3, -1, 4, 5, 6, -2}));
  EXPECT_EQ(run("concatenate %a, %b {dimension=0} : f32[3,3]", {x, f32({1, 3}, {7, 8, 9})}),
            (Values{1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(run("pad %a, %b {low=[1], high=[2], interior=[1]} : f32[8]",
                {f32({3}, {1, 2, 3}), f32({}, {0})}),
            (Values{0, 1, 0, 2, 0, 3, 0, 0}));
  EXPECT_EQ(run("pad %a, %b {low=[-1], high=[1]} : f32[3]", {f32({3}, {1, 2, 3}), f32({}, {9})}),
            (Values{2, 3, 9}));
}

TEST(Interpreter, Reductions) {
  HostTensor x = f32({2, 3}, {1, -2, 3, 4, 5, -6});
  EXPECT_EQ(run("reduce_sum %a {dims=[1]} : f32[2]", {x}), (Values{2, 3}));
  EXPECT_EQ(run("reduce_sum %a {dims=[0]} : f32[3]", {x}), (Values{5, 3, -3}));
  EXPECT_EQ(run("reduce_max %a {dims=[0, 1]} : f32[]", {x}), (Values{5}));
  EXPECT_EQ(run("reduce_min %a {dims=[1]} : f32[2]", {x}), (Values{-2, -6}));
  EXPECT_EQ(run("reduce_sum %a {dims=[]} : f32[2,3]", {x}), x.values);
  EXPECT_EQ(run("reduce_max %a {dims=[0]} : s32[0]", {s32({2, 0}, {})}), (Values{}));
  EXPECT_EQ(run("reduce_max %a {dims=[1]} : s32[2]", {s32({2, 0}, {})}),
            (Values{-2147483648.0, -2147483648.0}));
}

TEST(Interpreter, DotGeneral) {
  HostTensor a = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  HostTensor b = f32({3, 2}, {7, 8, 9, 10, 11, 12});
  EXPECT_EQ(run("dot_general %a, %b {lhs_contract=[1], rhs_contract=[0]} : f32[2,2]", {a, b}),
            (Values{58, 64, 139, 154}));
  // Contract the rhs over its last dimension (a @ a^T) and keep a batch dimension.
  EXPECT_EQ(run("dot_general %a, %b {lhs_contract=[1], rhs_contract=[1]} : f32[2,2]", {a, a}),
            (Values{14, 32, 32, 77}));
  HostTensor batched = f32({2, 1, 2}, {1, 2, 3, 4});
  EXPECT_EQ(run("dot_general %a, %b {lhs_batch=[0], rhs_batch=[0], lhs_contract=[2], "
                "rhs_contract=[2]} : f32[2,1,1]",
                {batched, batched}),
            (Values{5, 25}));
  // Outer product: nothing contracted.
  EXPECT_EQ(run("dot_general %a, %b {lhs_contract=[], rhs_contract=[]} : f32[2,2]",
                {f32({2}, {1, 2}), f32({2}, {3, 4})}),
            (Values{3, 4, 6, 8}));
  // Mixed precision: bf16 operands, f32 result keeps the exact sum.
  HostTensor h = testing::tensor(DType::kBF16, {2}, {256, 1});
  EXPECT_EQ(run("dot_general %a, %b {lhs_contract=[0], rhs_contract=[0]} : f32[]", {h, h}),
            (Values{65537}));
  EXPECT_EQ(run("dot_general %a, %b {lhs_contract=[0], rhs_contract=[0]} : bf16[]", {h, h}),
            (Values{65536}));
}

TEST(Interpreter, EmbeddingTakeAndScatterAdd) {
  HostTensor table = f32({4, 2}, {0, 1, 10, 11, 20, 21, 30, 31});
  HostTensor ids = s32({2, 2}, {3, 0, 1, 1});
  EXPECT_EQ(run("take %a, %b {axis=0} : f32[2,2,2]", {table, ids}),
            (Values{30, 31, 0, 1, 10, 11, 10, 11}));
  EXPECT_EQ(run("take %a, %b {axis=0} : f32[2,2]", {table, s32({2}, {-5, 99})}),
            (Values{0, 1, 30, 31}));  // clamped
  EXPECT_EQ(run("take %a, %b {axis=1} : f32[4,1]", {table, s32({1}, {1})}), (Values{1, 11, 21, 31}));
  HostTensor zeros = f32({4, 2}, Values(8, 0.0));
  HostTensor updates = f32({3, 2}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(run("scatter_add %a, %b, %c {axis=0} : f32[4,2]", {zeros, s32({3}, {1, 1, 7}), updates}),
            (Values{0, 0, 4, 6, 0, 0, 0, 0}));  // duplicates add up, out of range is dropped
}

// jax.lax.top_k's indices per row of the last dimension: largest first, equal values by lower
// index, NaN below every number; the result is s32.
TEST(Interpreter, TopKIndices) {
  HostTensor x = f32({2, 4}, {3, 1, 3, 2, -1, kNaN, 5, -kInf});
  EXPECT_EQ(run("top_k %a {k=3} : s32[2,3]", {x}), (Values{0, 2, 3, 2, 0, 3}));
  EXPECT_EQ(run("top_k %a {k=1} : s32[2,1]", {x}), (Values{0, 2}));
  EXPECT_EQ(run("top_k %a {k=4} : s32[2,4]", {x}), (Values{0, 2, 3, 1, 2, 0, 3, 1}));
  Expected<Module> bad = parse_module(
      "func @f(%x: f32[2,4]) -> (s32[2,5]) {\n  %y = top_k %x {k=5} : s32[2,5]\n  return %y\n}\n");
  ASSERT_TRUE(bad.ok()) << bad.error().message();
  Status verified = verify_module(*bad);
  ASSERT_FALSE(verified.ok());
  EXPECT_NE(verified.error().message().find("k 5 must be in [1, 4] (the last dimension of f32[2,4])"),
            std::string::npos)
      << verified.error().message();
}

// grouped_dot: row (r, n) times the matrix of its group; an id outside [0, G) gives zeros.
// Hand products: [1, 2] x G0 = [[1, 0], [0, 1]] -> [1, 2]; [3, 4] x G1 = [[1, 1], [2, 0]]
// -> [3 + 8, 3] = [11, 3]; [5, 6] x G0 -> [5, 6]; [7, 8] has id 2 -> [0, 0].
TEST(Interpreter, GroupedDotRowsTakeTheirGroupsMatrix) {
  HostTensor lhs = f32({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  HostTensor rhs = f32({2, 2, 2}, {1, 0, 0, 1, 1, 1, 2, 0});
  HostTensor ids = HostTensor::of(TensorType{DType::kS32, {2, 2}}, {0, 1, 0, 2});
  EXPECT_EQ(run("grouped_dot %a, %b, %c : f32[2,2,2]", {lhs, rhs, ids}),
            (Values{1, 2, 11, 3, 5, 6, 0, 0}));
  // Weight gradient with dout = lhs: group 0 = [1,2]ᵀ[1,2] + [5,6]ᵀ[5,6] = [[26, 32], [32, 40]];
  // group 1 = [3,4]ᵀ[3,4] = [[9, 12], [12, 16]]; row [7, 8] (id 2) is dropped.
  EXPECT_EQ(run("grouped_dot_weight_grad %a, %b, %c : f32[2,2,2]", {lhs, lhs, ids}),
            (Values{26, 32, 32, 40, 9, 12, 12, 16}));
  Expected<Module> bad = parse_module(
      "func @f(%x: f32[1,2,3], %w: f32[4,2,5], %i: s32[1,2]) -> (f32[1,2,5]) {\n"
      "  %y = grouped_dot %x, %w, %i : f32[1,2,5]\n  return %y\n}\n");
  ASSERT_TRUE(bad.ok()) << bad.error().message();
  Status verified = verify_module(*bad);
  ASSERT_FALSE(verified.ok());
  EXPECT_NE(verified.error().message().find("rhs f32[4,2,5] must be [G, 3, M] (lhs's K)"),
            std::string::npos)
      << verified.error().message();
}

TEST(Interpreter, WholeFunctionWithNamedValues) {
  Module m = testing::parse_or_fail(R"(func @affine(%x: f32[2,2], %w: f32[2,2], %bias: f32[2]) -> (f32[2,2], f32[]) {
  %xw = dot_general %x, %w {lhs_contract=[1], rhs_contract=[0]} : f32[2,2]
  %b = broadcast_in_dim %bias {dims=[1]} : f32[2,2]
  %y = add %xw, %b : f32[2,2]
  %total = reduce_sum %y {dims=[0, 1]} : f32[]
  return %y, %total
}
)");
  std::vector<HostTensor> args = {f32({2, 2}, {1, 2, 3, 4}), f32({2, 2}, {1, 0, 0, 1}), f32({2}, {10, 20})};
  Expected<std::vector<HostTensor>> out = interpret(m, "affine", args);
  ASSERT_TRUE(out.ok()) << out.error().message();
  EXPECT_EQ((*out)[0].values, (Values{11, 22, 13, 24}));
  EXPECT_EQ((*out)[1].values, (Values{70}));
}

TEST(Interpreter, ArgumentErrorsAreUsageErrors) {
  Module m = testing::parse_or_fail("func @f(%x: f32[2]) -> (f32[2]) {\n  return %x\n}\n");
  std::vector<HostTensor> none;
  Expected<std::vector<HostTensor>> r = interpret(m, "f", none);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message(), "@f takes 1 arguments, got 0");
  std::vector<HostTensor> wrong = {f32({3}, {1, 2, 3})};
  EXPECT_EQ(interpret(m, "f", wrong).error().message(), "@f argument 0 must be f32[2], got f32[3]");
  std::vector<HostTensor> short_values = {f32({2}, {1})};
  EXPECT_EQ(interpret(m, "f", short_values).error().message(), "@f argument 0 has 1 values for type f32[2]");
  EXPECT_EQ(interpret(m, "g", none).error().message(), "no function @g in the module");
}

TEST(Interpreter, RefusesModulesThatDoNotVerify) {
  Module m = testing::parse_or_fail("func @f(%x: f32[2], %y: f32[3]) -> () {\n  %0 = add %x, %y : f32[2]\n  return\n}\n");
  std::vector<HostTensor> args = {f32({2}, {1, 2}), f32({3}, {1, 2, 3})};
  Expected<std::vector<HostTensor>> r = interpret(m, "f", args);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ExitCode::kUsage);
}

}  // namespace
}  // namespace precast::ir

namespace precast::ir {
namespace {

// A 2x2 mesh (data, fsdp): device d = 2*data + fsdp. Device d holds [10d, 10d+1] (shape [2]) or
// the 2x2 matrix [10d .. 10d+3].
std::vector<std::vector<HostTensor>> per_device(const TensorType& type, int devices) {
  std::vector<std::vector<HostTensor>> out;
  for (int d = 0; d < devices; ++d) {
    std::vector<double> values;
    for (int64_t i = 0; i < type.num_elements(); ++i) values.push_back(10.0 * d + i);
    out.push_back({HostTensor::of(type, values)});
  }
  return out;
}

std::vector<std::vector<double>> run_spmd(std::string_view text, const TensorType& type,
                                          const InterpreterMesh& mesh = {{"data", "fsdp"},
                                                                         {2, 2},
                                                                         {}}) {
  Expected<Module> m = parse_module(text);
  EXPECT_TRUE(m.ok()) << m.error().message();
  auto args = per_device(type, 4);
  auto results = interpret_spmd(m->function(0), mesh, args);
  EXPECT_TRUE(results.ok()) << results.error().message();
  std::vector<std::vector<double>> out;
  for (const auto& r : *results) out.push_back(r[0].values);
  return out;
}

using DeviceValues = std::vector<std::vector<double>>;

TEST(InterpreterSpmd, AllGatherConcatenatesTheGroupInMeshOrder) {
  // fsdp groups: {0,1} and {2,3}.
  EXPECT_EQ(run_spmd("func @f(%x: f32[2]) -> (f32[4]) {\n"
                     "  %y = all_gather %x {dimension=0, mesh_axes=[fsdp], group_size=2} : f32[4]\n"
                     "  return %y\n}\n",
                     {DType::kF32, {2}}),
            (DeviceValues{{0, 1, 10, 11}, {0, 1, 10, 11}, {20, 21, 30, 31}, {20, 21, 30, 31}}));
  // data groups: {0,2} and {1,3}.
  EXPECT_EQ(run_spmd("func @f(%x: f32[2]) -> (f32[4]) {\n"
                     "  %y = all_gather %x {dimension=0, mesh_axes=[data], group_size=2} : f32[4]\n"
                     "  return %y\n}\n",
                     {DType::kF32, {2}}),
            (DeviceValues{{0, 1, 20, 21}, {10, 11, 30, 31}, {0, 1, 20, 21}, {10, 11, 30, 31}}));
}

TEST(InterpreterSpmd, AllReduceAndReduceScatterSum) {
  EXPECT_EQ(run_spmd("func @f(%x: f32[2]) -> (f32[2]) {\n"
                     "  %y = all_reduce %x {mesh_axes=[data, fsdp], group_size=4} : f32[2]\n"
                     "  return %y\n}\n",
                     {DType::kF32, {2}}),
            (DeviceValues{{60, 64}, {60, 64}, {60, 64}, {60, 64}}));
  // max: the group's elementwise maximum; fsdp groups {0,1} and {2,3}.
  EXPECT_EQ(run_spmd("func @f(%x: f32[2]) -> (f32[2]) {\n"
                     "  %y = all_reduce %x {mesh_axes=[fsdp], group_size=2, max=true} : f32[2]\n"
                     "  return %y\n}\n",
                     {DType::kF32, {2}}),
            (DeviceValues{{10, 11}, {10, 11}, {30, 31}, {30, 31}}));
  // fsdp group {0,1} sums to [10, 12]; position 0 keeps [10], position 1 keeps [12].
  EXPECT_EQ(run_spmd("func @f(%x: f32[2]) -> (f32[1]) {\n"
                     "  %y = reduce_scatter %x {dimension=0, mesh_axes=[fsdp], group_size=2} : f32[1]\n"
                     "  return %y\n}\n",
                     {DType::kF32, {2}}),
            (DeviceValues{{10}, {12}, {50}, {52}}));
}

TEST(InterpreterSpmd, AllToAllPermuteAndShardSlice) {
  // [2,2] per device; all_to_all over fsdp splits dim 1 and concatenates dim 0: device 0 gets
  // column 0 of devices 0 and 1 stacked: [[0],[2],[10],[12]].
  EXPECT_EQ(run_spmd("func @f(%x: f32[2,2]) -> (f32[4,1]) {\n"
                     "  %y = all_to_all %x {dimension=0, mesh_axes=[fsdp], group_size=2, "
                     "split_dimension=1} : f32[4,1]\n"
                     "  return %y\n}\n",
                     {DType::kF32, {2, 2}}),
            (DeviceValues{{0, 2, 10, 12}, {1, 3, 11, 13}, {20, 22, 30, 32}, {21, 23, 31, 33}}));
  // Over (data, fsdp) positions 0..3 = devices 0..3; position i receives position i-1's.
  EXPECT_EQ(run_spmd("func @f(%x: f32[2]) -> (f32[2]) {\n"
                     "  %y = collective_permute %x {mesh_axes=[data, fsdp], group_size=4, "
                     "shift=1} : f32[2]\n"
                     "  return %y\n}\n",
                     {DType::kF32, {2}}),
            (DeviceValues{{30, 31}, {0, 1}, {10, 11}, {20, 21}}));
  EXPECT_EQ(run_spmd("func @f(%x: f32[2,2]) -> (f32[1,2]) {\n"
                     "  %y = shard_slice %x {dimension=0, mesh_axes=[data], group_size=2} : f32[1,2]\n"
                     "  return %y\n}\n",
                     {DType::kF32, {2, 2}}),
            (DeviceValues{{0, 1}, {10, 11}, {22, 23}, {32, 33}}));
}

// ragged_all_to_all over expert 2, capacity 2. Device 0 sends rows [1, 2, 3, 4] to [1, 0, 1, 1],
// device 1 rows [5, 6, 7, 8] to [0, 0, 1, 0]. Position 0 receives, per sender in order: from 0
// its row 2 (then padding), from 1 its rows 5 and 6 (8 is a third row for position 0: past the
// capacity, dropped); position 1: from 0 its rows 1 and 3 (4 dropped), from 1 its row 7. The
// doubled buffers go back with combine: each row gets twice itself, the dropped rows zero.
TEST(InterpreterSpmd, RaggedAllToAllSendsRowsToTheirDestinationsAndBack) {
  std::string text =
      "func @f(%x: f32[1,4,1], %dest: s32[1,4]) -> (f32[2,2,1], f32[1,4,1]) {\n"
      "  %y = ragged_all_to_all %x, %dest {mesh_axes=[expert], group_size=2, capacity=2} : "
      "f32[2,2,1]\n"
      "  %z = add %y, %y : f32[2,2,1]\n"
      "  %w = ragged_all_to_all %z, %dest {mesh_axes=[expert], group_size=2, capacity=2, "
      "combine=true} : f32[1,4,1]\n"
      "  return %y, %w\n}\n";
  Expected<Module> m = parse_module(text);
  ASSERT_TRUE(m.ok()) << m.error().message();
  Expected<Module> again = parse_module(print_module(*m));
  ASSERT_TRUE(again.ok()) << again.error().message();
  EXPECT_EQ(print_module(*again), print_module(*m));
  TensorType rows{DType::kF32, {1, 4, 1}}, dest{DType::kS32, {1, 4}};
  std::vector<std::vector<HostTensor>> args = {
      {HostTensor::of(rows, {1, 2, 3, 4}), HostTensor::of(dest, {1, 0, 1, 1})},
      {HostTensor::of(rows, {5, 6, 7, 8}), HostTensor::of(dest, {0, 0, 1, 0})}};
  auto results = interpret_spmd(m->function(0), InterpreterMesh{{"expert"}, {2}, {}}, args);
  ASSERT_TRUE(results.ok()) << results.error().message();
  EXPECT_EQ((*results)[0][0].values, (std::vector<double>{2, 0, 5, 6}));
  EXPECT_EQ((*results)[1][0].values, (std::vector<double>{1, 3, 7, 0}));
  EXPECT_EQ((*results)[0][1].values, (std::vector<double>{2, 4, 6, 0}));
  EXPECT_EQ((*results)[1][1].values, (std::vector<double>{10, 12, 14, 0}));

  // The dispatch's buffer is [group_size, capacity, ...] and its dest must match the rows.
  Expected<Module> bad = parse_module(
      "func @f(%x: f32[1,4,1], %dest: s32[1,3]) -> (f32[2,2,1]) {\n"
      "  %y = ragged_all_to_all %x, %dest {mesh_axes=[expert], group_size=2, capacity=2} : "
      "f32[2,2,1]\n"
      "  return %y\n}\n");
  ASSERT_TRUE(bad.ok()) << bad.error().message();
  Status verified = verify_function(bad->function(0));
  ASSERT_FALSE(verified.ok());
  EXPECT_NE(verified.error().message().find("must match the operand's rows"), std::string::npos)
      << verified.error().message();
}

// Two slices, fsdp across them (DCN 2) and data inside (ICI 2), in MaxText's hybrid order as the
// MPI runtime numbers ranks: device d is in slice d / 2 = its fsdp coordinate, and its data
// coordinate is d % 2, so device 1 is (data 1, fsdp 0) where row-major numbering would make it
// (data 0, fsdp 1). The fsdp groups are therefore {0, 2} and {1, 3}, the data groups {0, 1} and
// {2, 3}: the reverse of the one-slice mesh above.
TEST(InterpreterSpmd, TwoSlicesNumberDevicesInMaxTextsHybridOrder) {
  InterpreterMesh slices{{"data", "fsdp"}, {2, 2}, {1, 2}};
  EXPECT_EQ(slices.coordinates(0), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(slices.coordinates(1), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(slices.coordinates(2), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(slices.coordinates(3), (std::vector<int64_t>{1, 1}));
  InterpreterMesh one{{"data", "fsdp"}, {2, 2}, {}};
  EXPECT_EQ(one.coordinates(1), (std::vector<int64_t>{0, 1}));
  // 2 slices x (ici data 2, fsdp 2), dcn data 2: data = 2 * slice + ici digit.
  InterpreterMesh wide{{"data", "fsdp"}, {4, 2}, {2, 1}};
  EXPECT_EQ(wide.coordinates(5), (std::vector<int64_t>{2, 1}));  // slice 1, in-slice (0, 1)
  EXPECT_EQ(wide.coordinates(6), (std::vector<int64_t>{3, 0}));  // slice 1, in-slice (1, 0)

  EXPECT_EQ(run_spmd("func @f(%x: f32[2]) -> (f32[4]) {\n"
                     "  %y = all_gather %x {dimension=0, mesh_axes=[fsdp], group_size=2} : f32[4]\n"
                     "  return %y\n}\n",
                     {DType::kF32, {2}}, slices),
            (DeviceValues{{0, 1, 20, 21}, {10, 11, 30, 31}, {0, 1, 20, 21}, {10, 11, 30, 31}}));
  EXPECT_EQ(run_spmd("func @f(%x: f32[2,2]) -> (f32[1,2]) {\n"
                     "  %y = shard_slice %x {dimension=0, mesh_axes=[data], group_size=2} : f32[1,2]\n"
                     "  return %y\n}\n",
                     {DType::kF32, {2, 2}}, slices),
            (DeviceValues{{0, 1}, {12, 13}, {20, 21}, {32, 33}}));

  Expected<Module> m = parse_module("func @f(%x: f32[2]) -> (f32[2]) {\n  return %x\n}\n");
  ASSERT_TRUE(m.ok());
  auto bad = interpret_spmd(m->function(0), InterpreterMesh{{"data", "fsdp"}, {2, 2}, {1, 3}},
                            per_device({DType::kF32, {2}}, 4));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("mesh axis 'fsdp' has 2 devices, which its dcn size 3 "
                                       "does not divide"),
            std::string::npos)
      << bad.error().message();
}

TEST(InterpreterSpmd, SingleDeviceInterpretRefusesARealGroup) {
  Expected<Module> m = parse_module(
      "func @f(%x: f32[2]) -> (f32[4]) {\n"
      "  %y = all_gather %x {dimension=0, mesh_axes=[fsdp], group_size=2} : f32[4]\n"
      "  return %y\n}\n");
  ASSERT_TRUE(m.ok());
  auto r = interpret(m->function(0), std::vector<HostTensor>{HostTensor::filled({DType::kF32, {2}}, 1)});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("spans mesh axis 'fsdp'"), std::string::npos)
      << r.error().message();
}

}  // namespace
}  // namespace precast::ir
