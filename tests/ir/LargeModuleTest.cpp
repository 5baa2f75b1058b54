// A 100k-op module (decoder-like layers repeated to 100k ops) prints, parses back identically and
// verifies. Asserts correctness only; the times are printed for the reader.
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>

#include "tests/support/IrTestSupport.h"
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"
#include "ir/passes/CommonSubexpressionElimination.h"
#include "ir/passes/DeadCodeElimination.h"

namespace precast::ir {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// One layer: RMS-norm, an MLP with gating, residual: about 26 ops.
Value build_layer(Builder& b, Value x, int layer) {
  const int64_t batch = 8, length = 128, embed = 256, mlp = 1024;
  Builder::ScopeGuard scope(b, "layers_" + std::to_string(layer));
  std::vector<int64_t> shape = {batch, length, embed};
  Value scale = b.param({DType::kF32, {embed}}, "norm_scale_" + std::to_string(layer), {"norm"});
  Value wi0 = b.param({DType::kF32, {embed, mlp}}, "wi_0_" + std::to_string(layer), {"embed", "mlp"});
  Value wi1 = b.param({DType::kF32, {embed, mlp}}, "wi_1_" + std::to_string(layer), {"embed", "mlp"});
  Value wo = b.param({DType::kF32, {mlp, embed}}, "wo_" + std::to_string(layer), {"mlp", "embed"});
  Value squares = b.mul(x, x);
  Value mean = b.div(b.reduce_sum(squares, {2}), b.constant(static_cast<double>(embed), {DType::kF32, {batch, length}}));
  Value inv = b.rsqrt(b.add(mean, b.constant(1e-6, {DType::kF32, {batch, length}})));
  Value normed = b.mul(x, b.broadcast_in_dim(inv, shape, {0, 1}));
  normed = b.mul(normed, b.broadcast_in_dim(scale, shape, {2}));
  b.with_axes(normed, {"activation_batch", "activation_norm_length", "activation_embed"});
  DotDims up{{}, {}, {2}, {0}};
  Value h0 = b.with_checkpoint(b.dot_general(normed, wi0, up), "mlpwi_0");
  Value h1 = b.with_checkpoint(b.dot_general(normed, wi1, up), "mlpwi_1");
  b.with_axes(h0, {"activation_batch", "activation_length", "activation_mlp"});
  Value gate = b.mul(h0, b.logistic(h0));
  Value hidden = b.mul(gate, h1);
  Value out = b.with_checkpoint(b.dot_general(hidden, wo, up), "mlpwo");
  Value y = b.add(x, out);
  // Filler elementwise work to reach the op count of a forward+backward+optimizer step.
  for (int i = 0; i < 12; ++i) y = b.add(b.neg(b.neg(y)), b.constant(0.0, {DType::kF32, shape}));
  return y;
}

TEST(LargeModule, HundredThousandOpsRoundTripAndVerify) {
  Module m;
  Function& f = m.add_function("train_step");
  Builder b(f);
  Builder::ScopeGuard decoder(b, "decoder");
  Value x = b.param({DType::kF32, {8, 128, 256}}, "x", {"activation_batch", "activation_norm_length", "activation_embed"});
  int layers = 0;
  while (f.num_ops() < 100000) x = build_layer(b, x, layers++);
  b.set_results({x});
  ASSERT_TRUE(b.ok()) << b.status().error().message();
  std::cout << "[ module ] " << layers << " layers, " << f.num_ops() << " ops, " << f.num_values()
            << " values\n";

  auto start = std::chrono::steady_clock::now();
  Status verified = verify_module(m);
  double verify_seconds = seconds_since(start);
  ASSERT_TRUE(verified.ok()) << verified.error().message();

  start = std::chrono::steady_clock::now();
  std::string text = print_module(m);
  double print_seconds = seconds_since(start);

  start = std::chrono::steady_clock::now();
  Expected<Module> parsed = parse_module(text);
  double parse_seconds = seconds_since(start);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message();

  start = std::chrono::steady_clock::now();
  Status reverified = verify_module(*parsed);
  double reverify_seconds = seconds_since(start);
  ASSERT_TRUE(reverified.ok()) << reverified.error().message();
  EXPECT_EQ(print_module(*parsed), text);

  start = std::chrono::steady_clock::now();
  ASSERT_TRUE(eliminate_common_subexpressions(*parsed).ok());
  ASSERT_TRUE(eliminate_dead_code(*parsed).ok());
  double passes_seconds = seconds_since(start);
  std::cout << "[ timing ] print " << print_seconds * 1e3 << " ms (" << text.size() / 1e6
            << " MB), parse " << parse_seconds * 1e3 << " ms, verify " << verify_seconds * 1e3
            << " ms / " << reverify_seconds * 1e3 << " ms, cse+dce " << passes_seconds * 1e3 << " ms\n";
}

}  // namespace
}  // namespace precast::ir
