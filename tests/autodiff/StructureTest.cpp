// The shape of what autodiff builds: gradient functions verify and print/parse identically, the
// backward ops carry "<forward scope>/backward", inlining a forward twice keeps value names
// unique, cotangents of several results combine, unrelated parameters get zeros, the caller's
// scope survives, and every misuse fails with a message instead of a half-built module.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "compiler/autodiff/Autodiff.h"
#include "ir/Builder.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"
#include "tests/autodiff/GradientCheck.h"

namespace precast::autodiff {
namespace {

using ir::Builder;
using ir::DType;
using ir::HostTensor;
using ir::TensorType;
using ir::Value;
using testing::f64_tensor;

const TensorType kVector{DType::kF64, {3}};
const TensorType kScalar{DType::kF64, {}};

// @forward(x: f64[3]{embed}, w: f64[3]) -> (loss: f64[], h: f64[3]) with scoped, named ops and a
// checkpoint name; `loss` = sum(tanh(x * w) * w) + sum(exp(w)).
void add_forward(ir::Module& module) {
  ir::Function& f = module.add_function("forward");
  Builder b(f);
  Value x = b.param(kVector, "x", {"embed"});
  Value w = b.param(kVector, "w");
  b.set_scope("layer/mlp");
  Value h = b.with_name(b.tanh(b.mul(x, w)), "h");
  b.with_checkpoint(h, "mlp_out");
  b.set_scope("loss");
  Value weighted = b.reduce_sum(b.mul(h, w), {0});
  b.set_scope("");
  Value regulariser = b.reduce_sum(b.exp(w), {0});  // no scope: its backward is "backward"
  Value loss = b.with_name(b.add(weighted, regulariser), "loss");
  b.set_results({loss, h});
  ASSERT_TRUE(b.ok()) << b.status().error().message();
}

std::vector<std::string> value_names(const ir::Function& f) {
  std::vector<std::string> names;
  for (size_t i = 0; i < f.num_values(); ++i) {
    std::string_view name = f.value_name(Value{static_cast<uint32_t>(i)});
    if (!name.empty()) names.emplace_back(name);
  }
  return names;
}

TEST(Structure, GradientFunctionVerifiesRoundTripsAndKeepsAnnotations) {
  ir::Module module;
  add_forward(module);
  const ir::Function& forward = *module.find_function("forward");
  std::vector<size_t> wrt = {0, 1};
  Expected<ir::Function*> grad = add_gradient_function(module, forward, 0, wrt, "forward_grad");
  ASSERT_TRUE(grad.ok()) << grad.error().message();
  testing::expect_verifies_and_round_trips(module);
  const ir::Function& g = **grad;
  // Signature: the forward's parameters (names, axes) -> forward results, then one gradient each.
  ASSERT_EQ(g.params().size(), 2u);
  EXPECT_EQ(g.value_name(g.params()[0]), "x");
  EXPECT_EQ(g.axis_names(g.params()[0]), (std::vector<std::string_view>{"embed"}));
  ASSERT_EQ(g.results().size(), 4u);
  EXPECT_EQ(g.value_name(g.results()[0]), "loss");
  EXPECT_EQ(g.value_name(g.results()[1]), "h");
  EXPECT_EQ(g.type(g.results()[2]), kVector);
  EXPECT_EQ(g.type(g.results()[3]), kVector);
  // The cloned op keeps its checkpoint name.
  EXPECT_EQ(g.checkpoint(g.op(g.defining_op(g.results()[1]))), "mlp_out");

  // Values: d loss / dx = w^2 (1 - tanh^2(xw)); d loss / dw = x w (1 - tanh^2) + tanh + exp(w).
  std::vector<HostTensor> args = {f64_tensor({3}, {0.3, -0.5, 0.8}),
                                  f64_tensor({3}, {1.2, 0.4, -0.7})};
  std::vector<HostTensor> out = testing::run(g, args);
  ASSERT_EQ(out.size(), 4u);
  for (size_t i = 0; i < 3; ++i) {
    double x = args[0].values[i], w = args[1].values[i], t = std::tanh(x * w);
    EXPECT_NEAR(out[2].values[i], w * w * (1 - t * t), 1e-15);
    EXPECT_NEAR(out[3].values[i], x * w * (1 - t * t) + t + std::exp(w), 1e-14);
  }
}

TEST(Structure, BackwardOpsCarryTheForwardScopeSlashBackward) {
  ir::Module module;
  add_forward(module);
  const ir::Function& forward = *module.find_function("forward");
  std::vector<size_t> wrt = {0, 1};
  Expected<ir::Function*> grad = add_gradient_function(module, forward, 0, wrt, "forward_grad");
  ASSERT_TRUE(grad.ok()) << grad.error().message();
  const ir::Function& g = **grad;
  std::set<std::string> forward_scopes;
  for (const ir::Op& op : forward.ops()) forward_scopes.emplace(forward.scope(op));
  // Op 0 is the seed (cotangent 1 of the loss); the forward's clones follow with their scopes;
  // every later op belongs to the backward pass.
  ASSERT_GT(g.num_ops(), 1 + forward.num_ops());
  EXPECT_EQ(g.op(0).kind, ir::OpKind::kConstant);
  for (ir::OpIndex i = 0; i < forward.num_ops(); ++i) {
    EXPECT_EQ(g.op(1 + i).kind, forward.op(i).kind);
    EXPECT_EQ(g.scope(g.op(1 + i)), forward.scope(forward.op(i)));
  }
  std::multiset<std::string> backward_scopes;
  for (ir::OpIndex i = static_cast<ir::OpIndex>(1 + forward.num_ops()); i < g.num_ops(); ++i) {
    std::string scope(g.scope(g.op(i)));
    backward_scopes.insert(scope);
    if (scope == kBackwardScope) continue;  // the backward of an unscoped op
    ASSERT_TRUE(scope.ends_with(std::string("/") + kBackwardScope)) << scope;
    std::string forward_scope =
        scope.substr(0, scope.size() - 1 - std::string(kBackwardScope).size());
    EXPECT_EQ(forward_scopes.count(forward_scope), 1u) << scope;
  }
  EXPECT_GT(backward_scopes.count("layer/mlp/backward"), 0u);
  EXPECT_GT(backward_scopes.count("loss/backward"), 0u);
  EXPECT_GT(backward_scopes.count("backward"), 0u);
}

TEST(Structure, InliningTheSameForwardTwiceKeepsNamesUnique) {
  ir::Module module;
  add_forward(module);
  const ir::Function& forward = *module.find_function("forward");
  // Two micro-batches through one forward, as gradient accumulation does; the caller's own
  // parameter is named like one of the forward's values.
  ir::Function& step = module.add_function("step");
  Builder b(step);
  Value x1 = b.param(kVector, "x1");
  Value x2 = b.param(kVector, "h");
  Value w = b.param(kVector, "w");
  std::vector<size_t> wrt = {1};
  Value one = b.constant(1.0, kScalar);
  std::vector<Value> cotangents = {one, Value{}};
  std::vector<Value> first_args = {x1, w}, second_args = {x2, w};
  Expected<VjpResult> first = inline_vjp(b, forward, first_args, cotangents, wrt);
  ASSERT_TRUE(first.ok()) << first.error().message();
  Expected<VjpResult> second = inline_vjp(b, forward, second_args, cotangents, wrt);
  ASSERT_TRUE(second.ok()) << second.error().message();
  b.set_results({b.add(first->results[0], second->results[0]),
                 b.add(first->gradients[0], second->gradients[0])});
  ASSERT_TRUE(b.ok()) << b.status().error().message();
  testing::expect_verifies_and_round_trips(module);

  std::vector<std::string> names = value_names(step);
  std::set<std::string> unique(names.begin(), names.end());
  EXPECT_EQ(unique.size(), names.size());
  for (const char* name : {"h_2", "h_3", "loss", "loss_2"})
    EXPECT_EQ(unique.count(name), 1u) << name;

  // The accumulated gradient is the sum of the two single-batch gradients.
  Expected<ir::Function*> grad = add_gradient_function(module, forward, 0, wrt, "forward_grad");
  ASSERT_TRUE(grad.ok()) << grad.error().message();
  HostTensor a = f64_tensor({3}, {0.3, -0.5, 0.8}), c = f64_tensor({3}, {-0.2, 0.9, 0.1});
  HostTensor weights = f64_tensor({3}, {1.2, 0.4, -0.7});
  std::vector<HostTensor> both = testing::run(step, std::vector<HostTensor>{a, c, weights});
  std::vector<HostTensor> only_a = testing::run(**grad, std::vector<HostTensor>{a, weights});
  std::vector<HostTensor> only_c = testing::run(**grad, std::vector<HostTensor>{c, weights});
  ASSERT_EQ(both.size(), 2u);
  ASSERT_EQ(only_a.size(), 3u);
  ASSERT_EQ(only_c.size(), 3u);
  EXPECT_DOUBLE_EQ(both[0].values[0], only_a[0].values[0] + only_c[0].values[0]);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_DOUBLE_EQ(both[1].values[i], only_a[2].values[i] + only_c[2].values[i]);
  }
}

TEST(Structure, InlineVjpKeepsTheCallersScope) {
  ir::Module module;
  add_forward(module);
  const ir::Function& forward = *module.find_function("forward");
  ir::Function& step = module.add_function("step");
  Builder b(step);
  Value x = b.param(kVector, "x");
  Value w = b.param(kVector, "w");
  b.set_scope("train_step");
  std::vector<Value> args = {x, w};
  std::vector<Value> cotangents = {b.constant(1.0, kScalar), Value{}};
  std::vector<size_t> wrt = {1};
  Expected<VjpResult> vjp = inline_vjp(b, forward, args, cotangents, wrt);
  ASSERT_TRUE(vjp.ok()) << vjp.error().message();
  EXPECT_EQ(b.scope(), "train_step");
  Value update = b.sub(w, vjp->gradients[0]);
  EXPECT_EQ(step.scope(step.op(step.defining_op(update))), "train_step");
}

// The train step may live in another module than the forward: names, scopes and attributes are
// re-interned in the caller's context.
TEST(Structure, InliningAForwardFromAnotherModule) {
  ir::Module forward_module;
  add_forward(forward_module);
  const ir::Function& forward = *forward_module.find_function("forward");
  ir::Module module;
  ir::Function& step = module.add_function("step");
  Builder b(step);
  Value x = b.param(kVector, "x");
  Value w = b.param(kVector, "w");
  std::vector<Value> args = {x, w};
  std::vector<Value> cotangents = {b.constant(1.0, kScalar), Value{}};
  std::vector<size_t> wrt = {0, 1};
  Expected<VjpResult> vjp = inline_vjp(b, forward, args, cotangents, wrt);
  ASSERT_TRUE(vjp.ok()) << vjp.error().message();
  b.set_results({vjp->results[0], vjp->gradients[0], vjp->gradients[1]});
  testing::expect_verifies_and_round_trips(module);

  std::vector<size_t> same_wrt = {0, 1};
  Expected<ir::Function*> grad =
      add_gradient_function(forward_module, forward, 0, same_wrt, "grad");
  ASSERT_TRUE(grad.ok()) << grad.error().message();
  std::vector<HostTensor> in = {f64_tensor({3}, {0.3, -0.5, 0.8}),
                                f64_tensor({3}, {1.2, 0.4, -0.7})};
  std::vector<HostTensor> here = testing::run(step, in);
  std::vector<HostTensor> there = testing::run(**grad, in);
  ASSERT_EQ(here.size(), 3u);
  ASSERT_EQ(there.size(), 4u);
  EXPECT_EQ(here[0].values, there[0].values);
  EXPECT_EQ(here[1].values, there[2].values);
  EXPECT_EQ(here[2].values, there[3].values);
  // The printed backward ops match, scopes included.
  std::string printed = ir::print_function(step);
  EXPECT_NE(printed.find("@\"layer/mlp/backward\""), std::string::npos) << printed;
}

TEST(Structure, CotangentsOfSeveralResultsCombine) {
  ir::Module module;
  add_forward(module);
  const ir::Function& forward = *module.find_function("forward");
  // <1, loss> + <c, h>: d/dx = w^2 (1 - t^2) + c w (1 - t^2).
  ir::Function& step = module.add_function("step");
  Builder b(step);
  Value x = b.param(kVector, "x");
  Value w = b.param(kVector, "w");
  Value c = b.param(kVector, "c");
  std::vector<Value> args = {x, w};
  std::vector<Value> cotangents = {b.constant(1.0, kScalar), c};
  std::vector<size_t> wrt = {0};
  Expected<VjpResult> vjp = inline_vjp(b, forward, args, cotangents, wrt);
  ASSERT_TRUE(vjp.ok()) << vjp.error().message();
  b.set_results({vjp->gradients[0]});
  testing::expect_verifies_and_round_trips(module);
  std::vector<HostTensor> in = {f64_tensor({3}, {0.3, -0.5, 0.8}),
                                f64_tensor({3}, {1.2, 0.4, -0.7}),
                                f64_tensor({3}, {0.5, -2.0, 3.0})};
  std::vector<HostTensor> out = testing::run(step, in);
  ASSERT_EQ(out.size(), 1u);
  for (size_t i = 0; i < 3; ++i) {
    double xv = in[0].values[i], wv = in[1].values[i], cv = in[2].values[i], t = std::tanh(xv * wv);
    EXPECT_NEAR(out[0].values[i], (wv * wv + cv * wv) * (1 - t * t), 1e-14);
  }
}

TEST(Structure, UnrelatedParametersGetZeroGradients) {
  ir::Module module;
  ir::Function& f = module.add_function("f");
  Builder b(f);
  Value x = b.param(kVector, "x");
  b.param(TensorType{DType::kF64, {2, 2}}, "unused");
  Value only_compared = b.param(kVector, "only_compared");
  Value positive =
      b.compare(only_compared, b.splat(0.0, only_compared), ir::ComparisonDirection::kGt);
  Value chosen = b.select(positive, b.exp(x), b.splat(0.0, x));
  b.set_results({b.reduce_sum(chosen, {0})});
  ASSERT_TRUE(b.ok());
  std::vector<size_t> wrt = {0, 1, 2};
  Expected<ir::Function*> grad = add_gradient_function(module, f, 0, wrt, "grad");
  ASSERT_TRUE(grad.ok()) << grad.error().message();
  testing::expect_verifies_and_round_trips(module);
  std::vector<HostTensor> args = {f64_tensor({3}, {0.1, 0.2, 0.3}),
                                  f64_tensor({2, 2}, {1, 2, 3, 4}),
                                  f64_tensor({3}, {1.0, -1.0, 2.0})};
  std::vector<HostTensor> out = testing::run(**grad, args);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[1].values, (std::vector<double>{std::exp(0.1), 0.0, std::exp(0.3)}));
  EXPECT_EQ(out[2].type, args[1].type);
  EXPECT_EQ(out[2].values, (std::vector<double>(4, 0.0)));
  EXPECT_EQ(out[3].values, (std::vector<double>(3, 0.0)));
}

// A failed add_gradient_function leaves the module as it was: nothing half-built, still valid.
void expect_module_unchanged(const ir::Module& module, size_t functions) {
  EXPECT_EQ(module.num_functions(), functions);
  Status verified = ir::verify_module(module);
  EXPECT_TRUE(verified.ok()) << verified.error().message() << "\n" << ir::print_module(module);
}

std::string error_of(const Expected<ir::Function*>& result) {
  return result.ok() ? "<no error>" : result.error().message();
}

TEST(Structure, GradientOfAnIntegerParameterIsAnError) {
  ir::Module module;
  ir::Function& f = module.add_function("f");
  Builder b(f);
  Value x = b.param(kVector, "x");
  Value ids = b.param(TensorType{DType::kS32, {2}}, "ids");
  b.set_results({b.reduce_sum(b.take(x, ids, 0), {0})});
  ASSERT_TRUE(b.ok());
  std::vector<size_t> wrt = {0, 1};
  Expected<ir::Function*> grad = add_gradient_function(module, f, 0, wrt, "grad");
  ASSERT_FALSE(grad.ok());
  EXPECT_EQ(error_of(grad), "autodiff: parameter 1 of @f is s32[2], not floating point");
  expect_module_unchanged(module, 1);
}

TEST(Structure, MisuseFailsWithAMessage) {
  ir::Module module;
  add_forward(module);
  const ir::Function& forward = *module.find_function("forward");
  std::vector<size_t> wrt = {0};
  Expected<ir::Function*> grad = add_gradient_function(module, forward, 1, wrt, "grad");
  EXPECT_EQ(error_of(grad), "autodiff: result 1 of @forward is not a scalar");
  expect_module_unchanged(module, 1);
  grad = add_gradient_function(module, forward, 0, wrt, "forward");
  EXPECT_EQ(error_of(grad), "autodiff: the module already has a function @forward");
  expect_module_unchanged(module, 1);
  std::vector<size_t> bad_wrt = {5};
  grad = add_gradient_function(module, forward, 0, bad_wrt, "grad");
  EXPECT_EQ(error_of(grad), "autodiff: @forward has no parameter 5");
  expect_module_unchanged(module, 1);

  ir::Function& step = module.add_function("step");
  Builder b(step);
  Value x = b.param(kVector, "x");
  Value n = b.param(TensorType{DType::kF64, {4}}, "n");
  std::vector<Value> too_few = {x};
  Expected<std::vector<Value>> call = inline_call(b, forward, too_few);
  ASSERT_FALSE(call.ok());
  EXPECT_EQ(call.error().message(), "autodiff: @forward takes 2 parameters, given 1");
  std::vector<Value> wrong_type = {x, n};
  call = inline_call(b, forward, wrong_type);
  ASSERT_FALSE(call.ok());
  EXPECT_EQ(call.error().message(), "autodiff: argument 1 of @forward must be f64[3], got f64[4]");
  std::vector<Value> args = {x, x};
  Value vector_cotangent = b.constant(1.0, kVector);
  std::vector<Value> wrong_cotangent = {vector_cotangent, Value{}};
  size_t ops_before = step.num_ops();
  Expected<VjpResult> vjp = inline_vjp(b, forward, args, wrong_cotangent, wrt);
  ASSERT_FALSE(vjp.ok());
  EXPECT_EQ(vjp.error().message(), "autodiff: cotangent of result 0 must be f64[], got f64[3]");
  std::vector<Value> one_cotangent = {Value{}};
  vjp = inline_vjp(b, forward, args, one_cotangent, wrt);
  ASSERT_FALSE(vjp.ok());
  EXPECT_EQ(vjp.error().message(), "autodiff: @forward has 2 results, given 1 cotangents");
  // None of these misuses built anything into the caller's function.
  EXPECT_EQ(step.num_ops(), ops_before);
}

// attention_grad has no rule (no second derivatives of attention): differentiating through it
// names the op.
TEST(Structure, SecondDerivativeOfAttentionIsAnError) {
  ir::Module module;
  ir::Function& f = module.add_function("f");
  Builder b(f);
  TensorType qkv{DType::kF64, {1, 2, 1, 2}};
  Value q = b.param(qkv, "q");
  Value k = b.param(qkv, "k");
  Value v = b.param(qkv, "v");
  ir::AttentionOptions options{.scale = 1.0};
  Value out = b.attention(q, k, v, options);
  std::array<Value, 3> grads = b.attention_grad(q, k, v, out, out, options);
  b.set_results({b.reduce_sum(grads[0], {0, 1, 2, 3})});
  ASSERT_TRUE(b.ok()) << b.status().error().message();
  std::vector<size_t> wrt = {0};
  Expected<ir::Function*> grad = add_gradient_function(module, f, 0, wrt, "grad");
  ASSERT_FALSE(grad.ok());
  EXPECT_NE(error_of(grad).find("attention_grad"), std::string::npos) << error_of(grad);
  EXPECT_NE(error_of(grad).find("no derivative rule"), std::string::npos) << error_of(grad);
  expect_module_unchanged(module, 1);
}

}  // namespace
}  // namespace precast::autodiff
