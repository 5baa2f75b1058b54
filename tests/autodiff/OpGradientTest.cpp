// Per-op gradient checks: each op with a floating-point derivative, in a tiny f64 function
// wrapped as L = sum(op(x...) * R) for a fixed pseudo-random R, differentiated with
// add_gradient_function and compared element by element with central differences evaluated in
// the reference interpreter. Inputs stay away from kinks and domain edges.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "compiler/autodiff/Autodiff.h"
#include "ir/Builder.h"
#include "tests/autodiff/GradientCheck.h"

namespace precast::autodiff {
namespace {

using ir::Builder;
using ir::DType;
using ir::HostTensor;
using ir::OpKind;
using ir::TensorType;
using ir::Value;
using testing::f64_tensor;
using testing::signed_values;
using testing::uniform_values;

constexpr double kTolerance = 1e-6;  // relative to the parameter's largest |gradient|

struct Input {
  HostTensor value;
  bool differentiate = true;  // false: a constant input (integers are never differentiated)
};

Input f64_input(std::vector<int64_t> dims, std::vector<double> values) {
  return Input{f64_tensor(std::move(dims), std::move(values))};
}

// A differentiated f64 input of pseudo-random values in [low, high).
Input random_input(std::vector<int64_t> dims, uint32_t seed, double low = -1.0, double high = 1.0) {
  int64_t count = TensorType{DType::kF64, dims}.num_elements();
  return f64_input(std::move(dims), uniform_values(static_cast<size_t>(count), seed, low, high));
}

Input s32_input(std::vector<int64_t> dims, std::vector<double> values) {
  return Input{HostTensor::of(TensorType{DType::kS32, std::move(dims)}, std::move(values)), false};
}

Input constant_input(Input input) {
  input.differentiate = false;
  return input;
}

using BuildOp = std::function<Value(Builder&, const std::vector<Value>&)>;

// Builds @op(inputs) = build(...), @loss(inputs) = reduce_sum(op(inputs) * R) through
// inline_call, and @loss_grad = add_gradient_function(@loss) with respect to every
// differentiated input; checks that the module verifies and round-trips, that @loss_grad
// reproduces the loss, and that each gradient element matches its central difference. Returns
// the gradients, one per differentiated input.
std::vector<HostTensor> check_gradient(const std::string& label, const std::vector<Input>& inputs,
                                       const BuildOp& build) {
  SCOPED_TRACE(label);
  ir::Module module;
  ir::Function& op_function = module.add_function("op");
  Builder b(op_function);
  std::vector<Value> params;
  for (size_t i = 0; i < inputs.size(); ++i) {
    params.push_back(b.param(inputs[i].value.type, fmt::format("x{}", i)));
  }
  Value result = build(b, params);
  b.set_results({result});
  if (!b.ok()) {
    ADD_FAILURE() << b.status().error().message();
    return {};
  }

  ir::Function& loss = module.add_function("loss");
  Builder w(loss);
  std::vector<Value> loss_params;
  for (size_t i = 0; i < inputs.size(); ++i) {
    loss_params.push_back(w.param(inputs[i].value.type, fmt::format("x{}", i)));
  }
  Expected<std::vector<Value>> inlined = inline_call(w, op_function, loss_params);
  if (!inlined.ok()) {
    ADD_FAILURE() << inlined.error().message();
    return {};
  }
  TensorType result_type = w.type((*inlined)[0]);
  std::vector<double> weights =
      uniform_values(static_cast<size_t>(result_type.num_elements()), 7, -1.0, 1.0);
  Value weighted = w.mul((*inlined)[0], w.constant(weights, result_type));
  std::vector<int64_t> all_dims(result_type.dims.size());
  for (size_t d = 0; d < all_dims.size(); ++d) all_dims[d] = static_cast<int64_t>(d);
  w.set_results({w.reduce_sum(weighted, all_dims)});
  if (!w.ok()) {
    ADD_FAILURE() << w.status().error().message();
    return {};
  }

  std::vector<size_t> wrt;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].differentiate) wrt.push_back(i);
  }
  Expected<ir::Function*> gradient_function =
      add_gradient_function(module, loss, 0, wrt, "loss_grad");
  if (!gradient_function.ok()) {
    ADD_FAILURE() << gradient_function.error().message();
    return {};
  }
  testing::expect_verifies_and_round_trips(module);

  std::vector<HostTensor> arguments;
  for (const Input& input : inputs) arguments.push_back(input.value);
  std::vector<HostTensor> outputs = testing::run(**gradient_function, arguments);
  std::vector<HostTensor> expected_loss = testing::run(loss, arguments);
  if (outputs.size() != 1 + wrt.size() || expected_loss.size() != 1) {
    ADD_FAILURE() << "@loss_grad returned " << outputs.size() << " results";
    return {};
  }
  EXPECT_EQ(outputs[0].values[0], expected_loss[0].values[0]);

  double worst = 0;
  for (size_t k = 0; k < wrt.size(); ++k) {
    const HostTensor& gradient = outputs[1 + k];
    EXPECT_EQ(gradient.type, inputs[wrt[k]].value.type) << "gradient of x" << wrt[k];
    std::vector<double> numeric;
    double scale = 0;
    for (size_t e = 0; e < gradient.values.size(); ++e) {
      double x = arguments[wrt[k]].values[e];
      double h = 1e-6 * std::max(std::abs(x), 0.1);
      numeric.push_back(testing::central_difference(loss, arguments, wrt[k], e, h));
      scale = std::max({scale, std::abs(numeric.back()), std::abs(gradient.values[e])});
    }
    for (size_t e = 0; e < numeric.size(); ++e) {
      double error = testing::relative_error(gradient.values[e], numeric[e], scale);
      worst = std::max(worst, error);
      EXPECT_LE(error, kTolerance) << "x" << wrt[k] << " element " << e << ": analytic "
                                   << gradient.values[e] << ", central difference " << numeric[e];
    }
  }
  testing::record_error(label, worst);
  return std::vector<HostTensor>(outputs.begin() + 1, outputs.end());
}

BuildOp unary(OpKind kind) {
  return [kind](Builder& b, const std::vector<Value>& x) { return b.unary(kind, x[0]); };
}

BuildOp binary(OpKind kind) {
  return [kind](Builder& b, const std::vector<Value>& x) { return b.binary(kind, x[0], x[1]); };
}

void expect_all_zero(const HostTensor& gradient) {
  for (double v : gradient.values) EXPECT_EQ(v, 0.0);
}

TEST(OpGradient, Unary) {
  struct Case {
    OpKind kind;
    double low, high;
    bool keep_sign_away_from_zero;  // |x| in [low, high) with either sign
  };
  const Case cases[] = {
      {OpKind::kNeg, -2.0, 2.0, false},      {OpKind::kAbs, 0.2, 2.0, true},
      {OpKind::kExp, -1.5, 1.5, false},      {OpKind::kExpm1, -1.5, 1.5, false},
      {OpKind::kLog, 0.2, 3.0, false},       {OpKind::kLog1p, -0.6, 2.0, false},
      {OpKind::kLogistic, -3.0, 3.0, false}, {OpKind::kTanh, -2.0, 2.0, false},
      {OpKind::kSqrt, 0.2, 3.0, false},      {OpKind::kRsqrt, 0.2, 3.0, false},
      {OpKind::kSin, -3.0, 3.0, false},      {OpKind::kCos, -3.0, 3.0, false},
      {OpKind::kErf, -2.0, 2.0, false},
  };
  uint32_t seed = 100;
  for (const Case& c : cases) {
    std::vector<double> values = c.keep_sign_away_from_zero
                                     ? signed_values(12, seed, c.low, c.high)
                                     : uniform_values(12, seed, c.low, c.high);
    ++seed;
    check_gradient(std::string(ir::op_name(c.kind)), {f64_input({3, 4}, values)}, unary(c.kind));
  }
}

// floor, ceil, round_nearest_even and sign are piecewise constant: away from their jumps the
// central difference is 0, and the gradient must be exactly 0.
TEST(OpGradient, PiecewiseConstantOpsGiveExactZeros) {
  // Integer parts in [-3, 3) plus fractions in [0.1, 0.4) or [0.6, 0.9): no jump within reach.
  std::vector<double> values;
  std::vector<double> fractions = uniform_values(12, 11, 0.1, 0.4);
  for (size_t i = 0; i < fractions.size(); ++i) {
    double whole = static_cast<double>(static_cast<int>(i % 6) - 3);
    values.push_back(whole + fractions[i] + (i % 2 == 0 ? 0.5 : 0.0));
  }
  for (OpKind kind : {OpKind::kFloor, OpKind::kCeil, OpKind::kRoundNearestEven, OpKind::kSign}) {
    std::vector<HostTensor> g =
        check_gradient(std::string(ir::op_name(kind)), {f64_input({3, 4}, values)}, unary(kind));
    ASSERT_EQ(g.size(), 1u);
    expect_all_zero(g[0]);
  }
  // Through an integer: convert to s32 and back.
  std::vector<HostTensor> g =
      check_gradient("convert f64->s32->f64", {f64_input({3, 4}, values)},
                     [](Builder& b, const std::vector<Value>& x) {
                       return b.convert(b.convert(x[0], DType::kS32), DType::kF64);
                     });
  ASSERT_EQ(g.size(), 1u);
  expect_all_zero(g[0]);
  // A select whose branches are constants, fed by a comparison of x: x gets exact zeros.
  g = check_gradient("select of constants by compare(x)", {f64_input({3, 4}, values)},
                     [](Builder& b, const std::vector<Value>& x) {
                       Value positive =
                           b.compare(x[0], b.splat(0.0, x[0]), ir::ComparisonDirection::kGt);
                       return b.select(positive, b.splat(2.0, x[0]), b.splat(-1.0, x[0]));
                     });
  ASSERT_EQ(g.size(), 1u);
  expect_all_zero(g[0]);
}

TEST(OpGradient, BinaryArithmetic) {
  for (OpKind kind : {OpKind::kAdd, OpKind::kSub, OpKind::kMul}) {
    check_gradient(std::string(ir::op_name(kind)),
                   {random_input({3, 4}, 1), random_input({3, 4}, 2)}, binary(kind));
    // Both operands the same value: the two cotangents must add up.
    check_gradient(
        fmt::format("{} x, x", ir::op_name(kind)), {random_input({3, 4}, 3)},
        [kind](Builder& b, const std::vector<Value>& x) { return b.binary(kind, x[0], x[0]); });
  }
  check_gradient("div",
                 {random_input({3, 4}, 4), f64_input({3, 4}, signed_values(12, 5, 0.4, 2.0))},
                 binary(OpKind::kDiv));
  check_gradient("div x, x", {f64_input({3, 4}, signed_values(12, 6, 0.4, 2.0))},
                 [](Builder& b, const std::vector<Value>& x) { return b.div(x[0], x[0]); });
  check_gradient(
      "div by a constant input",
      {random_input({3, 4}, 7), constant_input(f64_input({3, 4}, signed_values(12, 8, 0.4, 2.0)))},
      binary(OpKind::kDiv));
}

TEST(OpGradient, Rem) {
  // a = b * q with |q| = k + f, f in [0.2, 0.8): trunc(a / b) is constant within reach.
  std::vector<double> divisors = signed_values(12, 21, 0.6, 1.4);
  std::vector<double> fractions = uniform_values(12, 22, 0.2, 0.8);
  std::vector<double> dividends;
  for (size_t i = 0; i < divisors.size(); ++i) {
    double q = static_cast<double>(i % 3) + fractions[i];
    dividends.push_back(divisors[i] * (i % 4 < 2 ? q : -q));
  }
  check_gradient("rem", {f64_input({3, 4}, dividends), f64_input({3, 4}, divisors)},
                 binary(OpKind::kRem));
}

TEST(OpGradient, MaxMinIncludingTies) {
  std::vector<double> a = uniform_values(12, 31, -1.0, 1.0);
  std::vector<double> c = uniform_values(12, 32, -1.0, 1.0);
  // Every third element tied: the central difference there is the one-sided average 1/2, which
  // is the even split the rule gives each operand.
  for (size_t i = 0; i < c.size(); i += 3) c[i] = a[i];
  for (OpKind kind : {OpKind::kMax, OpKind::kMin}) {
    check_gradient(std::string(ir::op_name(kind)), {f64_input({3, 4}, a), f64_input({3, 4}, c)},
                   binary(kind));
    check_gradient(
        fmt::format("{} x, x", ir::op_name(kind)), {f64_input({3, 4}, a)},
        [kind](Builder& b, const std::vector<Value>& x) { return b.binary(kind, x[0], x[0]); });
  }
  // Hand-checked split at a tie: d max(a, b) / da = d / db = 1/2 with R = 1.
  ir::Module module;
  ir::Function& f = module.add_function("f");
  Builder b(f);
  Value x = b.param(TensorType{DType::kF64, {}}, "x");
  Value y = b.param(TensorType{DType::kF64, {}}, "y");
  b.set_results({b.max(x, y)});
  std::vector<size_t> wrt = {0, 1};
  Expected<ir::Function*> grad = add_gradient_function(module, f, 0, wrt, "grad");
  ASSERT_TRUE(grad.ok()) << grad.error().message();
  std::vector<HostTensor> args = {HostTensor::scalar(2.0, DType::kF64),
                                  HostTensor::scalar(2.0, DType::kF64)};
  std::vector<HostTensor> out = testing::run(**grad, args);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[1].values[0], 0.5);
  EXPECT_EQ(out[2].values[0], 0.5);
}

TEST(OpGradient, Pow) {
  check_gradient("pow", {random_input({3, 4}, 41, 0.4, 2.0), random_input({3, 4}, 42, -1.5, 2.5)},
                 binary(OpKind::kPow));
  // A zero base: d(0^e)/de is taken as 0, which is also the central difference for e > 0.
  std::vector<double> base = uniform_values(12, 43, 0.4, 2.0);
  base[0] = base[5] = 0.0;
  check_gradient("pow exponent with zero bases",
                 {constant_input(f64_input({3, 4}, base)), random_input({3, 4}, 44, 0.5, 2.5)},
                 binary(OpKind::kPow));
  check_gradient(
      "pow base only",
      {random_input({3, 4}, 45, 0.4, 2.0), constant_input(random_input({3, 4}, 46, -1.5, 2.5))},
      binary(OpKind::kPow));
}

TEST(OpGradient, Atan2) {
  check_gradient("atan2",
                 {f64_input({3, 4}, signed_values(12, 51, 0.2, 1.5)),
                  f64_input({3, 4}, signed_values(12, 52, 0.2, 1.5))},
                 binary(OpKind::kAtan2));
}

TEST(OpGradient, Select) {
  // The condition comes from a differentiated input; it must get exact zeros.
  std::vector<HostTensor> g = check_gradient(
      "select(compare(c, 0), x, y)",
      {f64_input({3, 4}, signed_values(12, 61, 0.2, 1.0)), random_input({3, 4}, 62),
       random_input({3, 4}, 63)},
      [](Builder& b, const std::vector<Value>& x) {
        Value positive = b.compare(x[0], b.splat(0.0, x[0]), ir::ComparisonDirection::kGt);
        return b.select(positive, x[1], x[2]);
      });
  ASSERT_EQ(g.size(), 3u);
  expect_all_zero(g[0]);
  check_gradient("select(p, x, x)",
                 {f64_input({3, 4}, signed_values(12, 64, 0.2, 1.0)), random_input({3, 4}, 65)},
                 [](Builder& b, const std::vector<Value>& x) {
                   Value positive =
                       b.compare(x[0], b.splat(0.0, x[0]), ir::ComparisonDirection::kLt);
                   return b.select(positive, x[1], x[1]);
                 });
}

TEST(OpGradient, Convert) {
  Input f32_values{
      HostTensor::of(TensorType{DType::kF32, {3, 4}}, uniform_values(12, 71, -1.0, 1.0))};
  check_gradient("convert f32->f64", {f32_values}, [](Builder& b, const std::vector<Value>& x) {
    return b.convert(x[0], DType::kF64);
  });
  check_gradient(
      "convert f64->f32", {random_input({3, 4}, 72)},
      [](Builder& b, const std::vector<Value>& x) { return b.convert(x[0], DType::kF32); });
}

TEST(OpGradient, BroadcastInDim) {
  check_gradient("broadcast_in_dim [3] -> [2,3,4]", {random_input({3}, 81)},
                 [](Builder& b, const std::vector<Value>& x) {
                   return b.broadcast_in_dim(x[0], {2, 3, 4}, {1});
                 });
  check_gradient("broadcast_in_dim [1,3] -> [4,3] (size-1 stretched)", {random_input({1, 3}, 82)},
                 [](Builder& b, const std::vector<Value>& x) {
                   return b.broadcast_in_dim(x[0], {4, 3}, {0, 1});
                 });
  check_gradient("broadcast_in_dim [2,1] -> [2,5,3] (stretched and new)",
                 {random_input({2, 1}, 83)}, [](Builder& b, const std::vector<Value>& x) {
                   return b.broadcast_in_dim(x[0], {2, 5, 3}, {0, 2});
                 });
  check_gradient("broadcast_in_dim [] -> [2,2]", {random_input({}, 84)},
                 [](Builder& b, const std::vector<Value>& x) {
                   return b.broadcast_in_dim(x[0], {2, 2}, {});
                 });
  check_gradient("broadcast_in_dim [1,1] -> [1,4] (size 1 kept)", {random_input({1, 1}, 85)},
                 [](Builder& b, const std::vector<Value>& x) {
                   return b.broadcast_in_dim(x[0], {1, 4}, {0, 1});
                 });
}

TEST(OpGradient, ReshapeAndTranspose) {
  check_gradient("reshape [2,3,4] -> [6,4]", {random_input({2, 3, 4}, 91)},
                 [](Builder& b, const std::vector<Value>& x) {
                   return b.reshape(x[0], {6, 4});
                 });
  check_gradient("reshape [1,1] -> []", {random_input({1, 1}, 92)},
                 [](Builder& b, const std::vector<Value>& x) { return b.reshape(x[0], {}); });
  check_gradient("transpose [2,0,1]", {random_input({2, 3, 4}, 93)},
                 [](Builder& b, const std::vector<Value>& x) {
                   return b.transpose(x[0], {2, 0, 1});
                 });
  check_gradient("transpose [1,2,0]", {random_input({2, 3, 4}, 94)},
                 [](Builder& b, const std::vector<Value>& x) {
                   return b.transpose(x[0], {1, 2, 0});
                 });
}

TEST(OpGradient, Slice) {
  check_gradient("slice", {random_input({5, 7}, 101)}, [](Builder& b, const std::vector<Value>& x) {
    return b.slice(x[0], {1, 2}, {4, 6});
  });
  check_gradient("slice with strides [2,3]", {random_input({5, 7}, 102)},
                 [](Builder& b, const std::vector<Value>& x) {
                   return b.slice(x[0], {1, 0}, {5, 7}, {2, 3});
                 });
  check_gradient("slice with strides, limit past the last taken", {random_input({6, 8}, 103)},
                 [](Builder& b, const std::vector<Value>& x) {
                   return b.slice(x[0], {0, 1}, {5, 7}, {3, 4});
                 });
  check_gradient("slice to nothing", {random_input({3, 4}, 104)},
                 [](Builder& b, const std::vector<Value>& x) {
                   Value empty = b.slice(x[0], {1, 2}, {1, 4});
                   return b.reduce_sum(empty, {0});  // [2] of zeros
                 });
}

TEST(OpGradient, Concatenate) {
  check_gradient("concatenate along 1",
                 {random_input({2, 2}, 111), random_input({2, 1}, 112), random_input({2, 3}, 113)},
                 [](Builder& b, const std::vector<Value>& x) { return b.concatenate(x, 1); });
  check_gradient("concatenate x, c, x along 0",
                 {random_input({2, 3}, 114), constant_input(random_input({1, 3}, 115))},
                 [](Builder& b, const std::vector<Value>& x) {
                   std::vector<Value> parts = {x[0], x[1], x[0]};
                   return b.concatenate(parts, 0);
                 });
}

TEST(OpGradient, Pad) {
  // Each case also differentiates the padding value: it gets the sum of R over padded positions.
  check_gradient("pad low/high", {random_input({3, 4}, 121), random_input({}, 122)},
                 [](Builder& b, const std::vector<Value>& x) {
                   return b.pad(x[0], x[1], {1, 2}, {2, 0});
                 });
  check_gradient("pad negative low/high (crop)", {random_input({3, 4}, 123), random_input({}, 124)},
                 [](Builder& b, const std::vector<Value>& x) {
                   return b.pad(x[0], x[1], {-1, 2}, {1, -2});
                 });
  check_gradient("pad interior", {random_input({3, 4}, 125), random_input({}, 126)},
                 [](Builder& b, const std::vector<Value>& x) {
                   return b.pad(x[0], x[1], {0, 0}, {0, 0}, {1, 2});
                 });
  check_gradient("pad interior with negative edges",
                 {random_input({3, 4}, 127), random_input({}, 128)},
                 [](Builder& b, const std::vector<Value>& x) {
                   return b.pad(x[0], x[1], {-2, 1}, {1, -3}, {1, 2});
                 });
  check_gradient(
      "pad rank 1 crop into interior", {random_input({5}, 129), random_input({}, 130)},
      [](Builder& b, const std::vector<Value>& x) { return b.pad(x[0], x[1], {-1}, {-2}, {2}); });
}

TEST(OpGradient, ReduceSum) {
  check_gradient("reduce_sum dims [0,2]", {random_input({2, 3, 4}, 131)},
                 [](Builder& b, const std::vector<Value>& x) {
                   return b.reduce_sum(x[0], {0, 2});
                 });
  check_gradient("reduce_sum dims [1]", {random_input({2, 3, 4}, 132)},
                 [](Builder& b, const std::vector<Value>& x) { return b.reduce_sum(x[0], {1}); });
  check_gradient("reduce_sum dims []", {random_input({2, 3}, 133)},
                 [](Builder& b, const std::vector<Value>& x) { return b.reduce_sum(x[0], {}); });
  check_gradient("reduce_sum all dims", {random_input({2, 3, 4}, 134)},
                 [](Builder& b, const std::vector<Value>& x) {
                   return b.reduce_sum(x[0], {0, 1, 2});
                 });
}

TEST(OpGradient, ReduceMaxMinIncludingTies) {
  std::vector<double> values = uniform_values(24, 141, -1.0, 1.0);
  for (OpKind kind : {OpKind::kReduceMax, OpKind::kReduceMin}) {
    std::string name(ir::op_name(kind));
    check_gradient(
        name + " dims [1]", {f64_input({2, 3, 4}, values)},
        [kind](Builder& b, const std::vector<Value>& x) { return b.reduce(kind, x[0], {1}); });
    check_gradient(name + " dims [0,2]", {f64_input({2, 3, 4}, values)},
                   [kind](Builder& b, const std::vector<Value>& x) {
                     return b.reduce(kind, x[0], {0, 2});
                   });
    // Two-way ties in every row: the central difference gives each 1/2, the rule's even split.
    std::vector<double> tied = {0.5, -0.3, 0.5, 0.1, -0.7, 0.2, 0.9, -0.7, 0.3, 0.3, 0.3, 0.3};
    for (size_t i = 8; i < 12; ++i)
      tied[i] = i % 2 == 0 ? 0.4 : (kind == OpKind::kReduceMax ? -0.2 : 0.9);
    check_gradient(
        name + " two-way ties", {f64_input({3, 4}, tied)},
        [kind](Builder& b, const std::vector<Value>& x) { return b.reduce(kind, x[0], {1}); });
  }
  // A three-way tie splits the cotangent in thirds (central differences would say 1/2, so this
  // one is checked by hand).
  ir::Module module;
  ir::Function& f = module.add_function("f");
  Builder b(f);
  Value x = b.param(TensorType{DType::kF64, {4}}, "x");
  b.set_results({b.reduce_max(x, {0})});
  std::vector<size_t> wrt = {0};
  Expected<ir::Function*> grad = add_gradient_function(module, f, 0, wrt, "grad");
  ASSERT_TRUE(grad.ok()) << grad.error().message();
  std::vector<HostTensor> args = {f64_tensor({4}, {3.0, 1.0, 3.0, 3.0})};
  std::vector<HostTensor> out = testing::run(**grad, args);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].values, (std::vector<double>{1.0 / 3, 0.0, 1.0 / 3, 1.0 / 3}));
}

BuildOp dot(ir::DotDims dims) {
  return
      [dims](Builder& b, const std::vector<Value>& x) { return b.dot_general(x[0], x[1], dims); };
}

TEST(OpGradient, DotGeneral) {
  check_gradient("dot_general matmul", {random_input({3, 4}, 151), random_input({4, 5}, 152)},
                 dot({{}, {}, {1}, {0}}));
  check_gradient("dot_general batch", {random_input({2, 3, 4}, 153), random_input({2, 4, 5}, 154)},
                 dot({{0}, {0}, {2}, {1}}));
  check_gradient("dot_general two contracting dims",
                 {random_input({3, 2, 4}, 155), random_input({4, 2, 5}, 156)},
                 dot({{}, {}, {1, 2}, {1, 0}}));
  check_gradient("dot_general contracting dims unsorted",
                 {random_input({3, 2, 4}, 157), random_input({4, 2, 5}, 158)},
                 dot({{}, {}, {2, 1}, {0, 1}}));
  check_gradient("dot_general batch dim not leading",
                 {random_input({4, 2, 3}, 159), random_input({5, 2, 4}, 160)},
                 dot({{1}, {1}, {0}, {2}}));
  check_gradient("dot_general two batch dims swapped",
                 {random_input({2, 3, 4, 5}, 161), random_input({3, 2, 5, 2}, 162)},
                 dot({{1, 0}, {0, 1}, {3}, {2}}));
  check_gradient("dot_general free dims both sides, two each",
                 {random_input({2, 3, 4}, 163), random_input({3, 5, 2, 2}, 164)},
                 dot({{}, {}, {1}, {0}}));
  check_gradient("dot_general outer product", {random_input({3}, 165), random_input({4}, 166)},
                 dot({{}, {}, {}, {}}));
  check_gradient("dot_general x . x", {random_input({3, 4}, 167)},
                 [](Builder& b, const std::vector<Value>& x) {
                   return b.dot_general(x[0], x[0], {{}, {}, {1}, {1}});
                 });
  check_gradient("dot_general rhs only",
                 {constant_input(random_input({3, 4}, 168)), random_input({2, 4, 3}, 169)},
                 dot({{}, {}, {1, 0}, {1, 2}}));
  Input lhs32{HostTensor::of(TensorType{DType::kF32, {3, 4}}, uniform_values(12, 170, -1.0, 1.0))};
  Input rhs32{HostTensor::of(TensorType{DType::kF32, {4, 2}}, uniform_values(8, 171, -1.0, 1.0))};
  check_gradient("dot_general f32 x f32 -> f64", {lhs32, rhs32},
                 [](Builder& b, const std::vector<Value>& x) {
                   return b.dot_general(x[0], x[1], {{}, {}, {1}, {0}}, DType::kF64);
                 });
}

TEST(OpGradient, TakeAndScatterAdd) {
  check_gradient("take axis 0, repeated ids",
                 {random_input({5, 3}, 181), s32_input({4}, {1, 3, 1, 0})},
                 [](Builder& b, const std::vector<Value>& x) { return b.take(x[0], x[1], 0); });
  check_gradient("take axis 0, ids [2,3]",
                 {random_input({5, 3}, 182), s32_input({2, 3}, {4, 4, 0, 2, 4, 1})},
                 [](Builder& b, const std::vector<Value>& x) { return b.take(x[0], x[1], 0); });
  check_gradient("take axis 1", {random_input({3, 5, 2}, 183), s32_input({4}, {2, 2, 4, 0})},
                 [](Builder& b, const std::vector<Value>& x) { return b.take(x[0], x[1], 1); });
  check_gradient(
      "scatter_add axis 0",
      {random_input({5, 3}, 184), s32_input({4}, {4, 0, 4, 2}), random_input({4, 3}, 185)},
      [](Builder& b, const std::vector<Value>& x) { return b.scatter_add(x[0], x[1], x[2], 0); });
  check_gradient(
      "scatter_add axis 1, ids [2,2]",
      {random_input({3, 5}, 186), s32_input({2, 2}, {1, 1, 3, 0}), random_input({3, 2, 2}, 187)},
      [](Builder& b, const std::vector<Value>& x) { return b.scatter_add(x[0], x[1], x[2], 1); });
}

// MoE's grouped matmul and its weight gradient (whose own rule the second derivatives use),
// against central differences; ids sorted as the frontend sorts them, one group left empty.
TEST(OpGradient, GroupedDotAndItsWeightGradient) {
  Input ids = s32_input({2, 3}, {0, 0, 2, 0, 2, 2});
  check_gradient("grouped_dot", {random_input({2, 3, 4}, 191), random_input({3, 4, 5}, 192), ids},
                 [](Builder& b, const std::vector<Value>& x) {
                   return b.grouped_dot(x[0], x[1], x[2]);
                 });
  check_gradient("grouped_dot_weight_grad",
                 {random_input({2, 3, 4}, 193), random_input({2, 3, 5}, 194), ids},
                 [](Builder& b, const std::vector<Value>& x) {
                   return b.grouped_dot_weight_grad(x[0], x[1], x[2], 3);
                 });
}

// take clamps an out-of-range id into the table; its gradient clamps the ids the same way (as
// JAX's gather transposes to a scatter in the same clip mode), so the row the forward read gets
// the share of every position that read it: the derivative of the clamped forward.
TEST(OpGradient, OutOfRangeTakeIdsGiveTheClampedRowItsGradient) {
  ir::Module module;
  ir::Function& f = module.add_function("f");
  Builder b(f);
  Value table = b.param(TensorType{DType::kF64, {3, 2}}, "table");
  Value ids = b.param(TensorType{DType::kS32, {2}}, "ids");
  b.set_results({b.reduce_sum(b.take(table, ids, 0), {0, 1})});
  std::vector<size_t> wrt = {0};
  Expected<ir::Function*> grad = add_gradient_function(module, f, 0, wrt, "grad");
  ASSERT_TRUE(grad.ok()) << grad.error().message();
  std::vector<HostTensor> args = {f64_tensor({3, 2}, {1, 2, 3, 4, 5, 6}),
                                  HostTensor::of(TensorType{DType::kS32, {2}}, {0, 7})};
  std::vector<HostTensor> out = testing::run(**grad, args);
  ASSERT_EQ(out.size(), 2u);
  // The forward reads rows 0 and 2 (7 clamped); the gradient reaches both.
  EXPECT_EQ(out[0].values[0], 1 + 2 + 5 + 6);
  EXPECT_EQ(out[1].values, (std::vector<double>{1, 1, 0, 0, 1, 1}));
}

struct AttentionCase {
  std::string label;
  ir::AttentionOptions options;
  bool segments = false;
  int64_t kv_heads = 2;
  int64_t keys = 5;
  double q_scale = 1.0;  // larger q pushes scores into the soft cap's nonlinear range
  std::vector<double> q_segment_ids = {1, 1, 1, 2, 2, 1, 1, 1, 1, 0};
  std::vector<double> kv_segment_ids = {1, 1, 1, 2, 2, 1, 1, 1, 1, 0};
};

void check_attention(const AttentionCase& c) {
  const int64_t batch = 2, queries = 5, heads = 4, depth = 3, value_depth = 2;
  uint32_t seed = static_cast<uint32_t>(200 + c.label.size());
  Input q = random_input({batch, queries, heads, depth}, seed, -c.q_scale, c.q_scale);
  Input k = random_input({batch, c.keys, c.kv_heads, depth}, seed + 1);
  Input v = random_input({batch, c.keys, c.kv_heads, value_depth}, seed + 2);
  std::vector<Input> inputs = {q, k, v};
  if (c.segments) {
    inputs.push_back(s32_input({batch, queries}, c.q_segment_ids));
    inputs.push_back(s32_input({batch, c.keys}, c.kv_segment_ids));
  }
  if (c.options.positions) {  // queries at 2t + 1, keys in reverse order
    std::vector<double> q_positions, kv_positions;
    for (int64_t t = 0; t < queries; ++t) q_positions.push_back(static_cast<double>(2 * t + 1));
    for (int64_t s = 0; s < c.keys; ++s) kv_positions.push_back(static_cast<double>(c.keys - 1 - s));
    inputs.push_back(s32_input({queries}, q_positions));
    inputs.push_back(s32_input({c.keys}, kv_positions));
  }
  ir::AttentionOptions options = c.options;
  for (bool flash : {false, true}) {
    options.flash = flash;
    check_gradient(c.label + (flash ? ", flash" : ""), inputs,
                   [options](Builder& b, const std::vector<Value>& x) {
                     return b.attention(x, options);
                   });
  }
}

TEST(OpGradient, Attention) {
  check_attention({.label = "attention GQA", .options = {.scale = 0.7}});
  check_attention({.label = "attention causal GQA", .options = {.scale = 0.7, .causal = true}});
  check_attention({.label = "attention causal window 2 segments",
                   .options = {.scale = 0.7, .causal = true, .sliding_window = 2},
                   .segments = true});
  check_attention(
      {.label = "attention window 3 (two-sided)", .options = {.scale = 0.7, .sliding_window = 3}});
  check_attention({.label = "attention causal softcap segments",
                   .options = {.scale = 0.9, .causal = true, .softcap = 1.0},
                   .segments = true,
                   .q_scale = 3.0});
  check_attention({.label = "attention multi-head segments",
                   .options = {.scale = 0.7},
                   .segments = true,
                   .kv_heads = 4});
  check_attention(
      {.label = "attention 7 keys for 5 queries", .options = {.scale = 0.7}, .keys = 7});
  // Query 2 of row 0 sees no key (its segment is absent from the keys): its output is the mean
  // of v and its q gets no gradient.
  check_attention({.label = "attention fully masked query",
                   .options = {.scale = 0.7, .causal = true},
                   .segments = true,
                   .q_segment_ids = {1, 1, 3, 2, 2, 1, 1, 1, 1, 0}});
  // Given positions (a context-parallel device's queries against the whole sequence's keys).
  check_attention({.label = "attention causal window 4 positions segments",
                   .options = {.scale = 0.7, .causal = true, .sliding_window = 4, .positions = true},
                   .segments = true,
                   .keys = 7,
                   .q_segment_ids = {1, 1, 1, 2, 2, 1, 1, 1, 1, 1},
                   .kv_segment_ids = {1, 1, 1, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1}});
}

// The backward ops are themselves differentiable (all but attention's): the gradient of
// <grad f(x), R> is a Hessian-vector product, checked against central differences of grad f.
TEST(OpGradient, SecondDerivativesThroughTheRules) {
  ir::Module forward_module;
  ir::Function& f = forward_module.add_function("f");
  Builder b(f);
  Value x = b.param(TensorType{DType::kF64, {3, 4}}, "x");
  Value table = b.param(TensorType{DType::kF64, {5, 4}}, "table");
  Value ids = b.param(TensorType{DType::kS32, {3}}, "ids");
  Value rows = b.take(table, ids, 0);                     // [3,4]
  Value h = b.tanh(b.mul(x, rows));                       // [3,4]
  Value mixed = b.dot_general(h, x, {{}, {}, {1}, {1}});  // [3,3]
  Value padded = b.pad(b.exp(b.slice(mixed, {0, 0}, {3, 3}, {2, 1})), b.scalar(0.5, DType::kF64),
                       {1, 0}, {0, 1}, {0, 1});                                // [3,6]
  Value peak = b.reduce_max(b.log(b.add(padded, b.splat(2.0, padded))), {1});  // [3]
  Value spread = b.broadcast_in_dim(peak, {3, 4}, {0});
  Value loss =
      b.reduce_sum(b.mul(b.max(spread, h), b.div(x, b.add(b.mul(x, x), b.splat(1.0, x)))), {0, 1});
  b.set_results({loss});
  ASSERT_TRUE(b.ok()) << b.status().error().message();
  const ir::Function& forward = f;

  std::vector<Input> inputs = {random_input({3, 4}, 301), random_input({5, 4}, 302),
                               s32_input({3}, {4, 1, 4})};
  check_gradient("second derivative (Hessian-vector product)", inputs,
                 [&forward](Builder& inner, const std::vector<Value>& args) {
                   std::vector<Value> cotangents = {inner.scalar(1.0, DType::kF64)};
                   std::vector<size_t> wrt = {0, 1};
                   Expected<VjpResult> vjp = inline_vjp(inner, forward, args, cotangents, wrt);
                   if (!vjp.ok()) {
                     ADD_FAILURE() << vjp.error().message();
                     return Value{};
                   }
                   // Both gradients in one result: d/dx [3,4] next to d/dtable [5,4].
                   std::vector<Value> parts = vjp->gradients;
                   return inner.concatenate(parts, 0);
                 });
}

}  // namespace
}  // namespace precast::autodiff
