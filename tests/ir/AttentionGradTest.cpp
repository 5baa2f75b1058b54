// The attention_grad composite: the interpreter's streaming kernel agrees with the primitive
// decomposition, and both are the gradient of the forward attention kernel, checked against
// central finite differences of loss = sum(attention(q, k, v) * R), whose cotangent is R.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <string>

#include "tests/support/IrTestSupport.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"
#include "ir/passes/DecomposeComposites.h"

namespace precast::ir {
namespace {

struct GradCase {
  const char* name;
  int64_t batch, queries, keys, heads, kv_heads, head_dim, value_dim;
  AttentionOptions options;
  bool segments;
};

void PrintTo(const GradCase& c, std::ostream* out) {
  *out << c.name;
}

struct GradInputs {
  HostTensor q, k, v, q_seg, kv_seg, q_pos, kv_pos, cotangent;
};

TensorType q_type(const GradCase& c) {
  return {DType::kF64, {c.batch, c.queries, c.heads, c.head_dim}};
}
TensorType k_type(const GradCase& c) {
  return {DType::kF64, {c.batch, c.keys, c.kv_heads, c.head_dim}};
}
TensorType v_type(const GradCase& c) {
  return {DType::kF64, {c.batch, c.keys, c.kv_heads, c.value_dim}};
}
TensorType out_type(const GradCase& c) {
  return {DType::kF64, {c.batch, c.queries, c.heads, c.value_dim}};
}

// Random f64 inputs. Segment ids change mid-row, and the last query of batch row 0 gets a
// segment no key has, so its row is fully masked (its weights are uniform over all keys).
GradInputs make_inputs(const GradCase& c) {
  auto random = [](const TensorType& type, uint32_t seed) {
    return HostTensor::of(type, testing::pseudo_random(type.num_elements(), seed));
  };
  GradInputs in;
  in.q = random(q_type(c), 11);
  in.k = random(k_type(c), 12);
  in.v = random(v_type(c), 13);
  in.cotangent = random(out_type(c), 14);
  for (double& x : in.q.values) x *= 3;  // sharper softmax, so masking errors show
  std::vector<double> q_ids, kv_ids;
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t t = 0; t < c.queries; ++t) q_ids.push_back(static_cast<double>((t + b) / 3));
    for (int64_t s = 0; s < c.keys; ++s) kv_ids.push_back(static_cast<double>((s + b) / 3));
  }
  q_ids[c.queries - 1] = 99;
  in.q_seg = HostTensor::of({DType::kS32, {c.batch, c.queries}}, q_ids);
  in.kv_seg = HostTensor::of({DType::kS32, {c.batch, c.keys}}, kv_ids);
  // With options.positions: query t at position 2t + 1, key s at S - 1 - s (reversed).
  std::vector<double> q_pos, kv_pos;
  for (int64_t t = 0; t < c.queries; ++t) q_pos.push_back(static_cast<double>(2 * t + 1));
  for (int64_t s = 0; s < c.keys; ++s) kv_pos.push_back(static_cast<double>(c.keys - 1 - s));
  in.q_pos = HostTensor::of({DType::kS32, {c.queries}}, q_pos);
  in.kv_pos = HostTensor::of({DType::kS32, {c.keys}}, kv_pos);
  return in;
}

// Appends the masking parameters the case has: segment ids, then positions.
void add_mask_params(Builder& b, const GradCase& c, std::vector<Value>& operands) {
  testing::add_attention_mask_params(b, c.batch, c.queries, c.keys, c.segments,
                                     c.options.positions, operands);
}

// @attention(q, k, v [, q_segment, kv_segment] [, q_positions, kv_positions]) -> out.
Module forward_module(const GradCase& c) {
  Module m;
  Function& f = m.add_function("attention");
  Builder b(f);
  std::vector<Value> operands = {b.param(q_type(c), "q"), b.param(k_type(c), "k"),
                                 b.param(v_type(c), "v")};
  add_mask_params(b, c, operands);
  b.set_results({b.attention(operands, c.options)});
  EXPECT_TRUE(b.ok()) << b.status().error().message();
  return m;
}

// @grad(q, k, v, out, dout [, q_segment, kv_segment] [, q_positions, kv_positions])
// -> (dq, dk, dv).
Module grad_module(const GradCase& c) {
  Module m;
  Function& f = m.add_function("grad");
  Builder b(f);
  std::vector<Value> operands = {b.param(q_type(c), "q"), b.param(k_type(c), "k"),
                                 b.param(v_type(c), "v"), b.param(out_type(c), "out"),
                                 b.param(out_type(c), "dout")};
  add_mask_params(b, c, operands);
  b.set_results(b.attention_grad(operands, c.options));
  EXPECT_TRUE(b.ok()) << b.status().error().message();
  return m;
}

std::vector<HostTensor> run(const Module& m, std::string_view name, std::vector<HostTensor> args,
                            const GradCase& c, const GradInputs& in,
                            const InterpreterOptions& options = {}) {
  if (c.segments) {
    args.push_back(in.q_seg);
    args.push_back(in.kv_seg);
  }
  if (c.options.positions) {
    args.push_back(in.q_pos);
    args.push_back(in.kv_pos);
  }
  Expected<std::vector<HostTensor>> results = interpret(m, name, args, options);
  if (!results.ok()) {
    ADD_FAILURE() << results.error().message();
    return {};
  }
  return *results;
}

HostTensor forward(const Module& m, const GradCase& c, const GradInputs& in) {
  std::vector<HostTensor> results = run(m, "attention", {in.q, in.k, in.v}, c, in);
  return results.empty() ? HostTensor{} : results[0];
}

std::vector<HostTensor> gradients(const Module& m, const GradCase& c, const GradInputs& in,
                                  const InterpreterOptions& options = {}) {
  HostTensor out = forward(forward_module(c), c, in);
  return run(m, "grad", {in.q, in.k, in.v, out, in.cotangent}, c, in, options);
}

double loss(const Module& forward_m, const GradCase& c, const GradInputs& in) {
  HostTensor out = forward(forward_m, c, in);
  double total = 0;
  for (size_t i = 0; i < out.values.size(); ++i) total += out.values[i] * in.cotangent.values[i];
  return total;
}

// "1.2e-14": RecordProperty's std::to_string would print 0.000000.
std::string scientific(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2e", x);
  return text;
}

double max_abs(const HostTensor& t) {
  double m = 0;
  for (double x : t.values) m = std::max(m, std::fabs(x));
  return m;
}

class AttentionGradCases : public ::testing::TestWithParam<GradCase> {};

TEST_P(AttentionGradCases, KernelMatchesDecompositionInF64) {
  const GradCase& c = GetParam();
  GradInputs in = make_inputs(c);
  Module m = grad_module(c);
  InterpreterOptions decomposed;
  decomposed.decompose_composites = true;
  std::vector<HostTensor> kernel = gradients(m, c, in);
  std::vector<HostTensor> primitives = gradients(m, c, in, decomposed);
  ASSERT_EQ(kernel.size(), 3u);
  ASSERT_EQ(primitives.size(), 3u);
  const char* names[] = {"dq", "dk", "dv"};
  for (size_t i = 0; i < 3; ++i) {
    double error = testing::max_abs_difference(kernel[i], primitives[i]);
    EXPECT_LT(error, 1e-12) << names[i];
    EXPECT_GT(max_abs(kernel[i]), 1e-3) << names[i] << " is trivially zero";
    RecordProperty(std::string("kernel_vs_decomposition_") + names[i], scientific(error));
  }
  // The decompose-composites pass leaves primitives only, computing the same.
  ASSERT_TRUE(decompose_composites(m).ok());
  Status verified = verify_module(m);
  ASSERT_TRUE(verified.ok()) << verified.error().message();
  EXPECT_EQ(print_module(m).find("attention_grad"), std::string::npos);
  std::vector<HostTensor> rebuilt = gradients(m, c, in);
  ASSERT_EQ(rebuilt.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_LT(testing::max_abs_difference(rebuilt[i], kernel[i]), 1e-12) << names[i];
  }
}

TEST_P(AttentionGradCases, MatchesFiniteDifferencesOfTheForwardKernel) {
  const GradCase& c = GetParam();
  GradInputs in = make_inputs(c);
  Module forward_m = forward_module(c);
  std::vector<HostTensor> grads = gradients(grad_module(c), c, in);
  ASSERT_EQ(grads.size(), 3u);
  const double step = 1e-5;
  HostTensor* inputs[] = {&in.q, &in.k, &in.v};
  const char* names[] = {"dq", "dk", "dv"};
  for (size_t i = 0; i < 3; ++i) {
    HostTensor& x = *inputs[i];
    HostTensor numeric = HostTensor::filled(x.type, 0.0);
    for (size_t e = 0; e < x.values.size(); ++e) {
      const double saved = x.values[e];
      x.values[e] = saved + step;
      double up = loss(forward_m, c, in);
      x.values[e] = saved - step;
      double down = loss(forward_m, c, in);
      x.values[e] = saved;
      numeric.values[e] = (up - down) / (2 * step);
    }
    double relative = testing::max_abs_difference(grads[i], numeric) / max_abs(numeric);
    EXPECT_LT(relative, 1e-7) << names[i];
    RecordProperty(std::string("finite_difference_relative_") + names[i], scientific(relative));
  }
}

TEST_P(AttentionGradCases, F32KernelMatchesTheF32Decomposition) {
  GradCase c = GetParam();
  GradInputs in = make_inputs(c);
  auto to_f32 = [](HostTensor t) {
    if (t.type.dtype == DType::kF64) t.type.dtype = DType::kF32;
    return t;
  };
  Module m;
  Function& f = m.add_function("grad");
  Builder b(f);
  std::vector<Value> operands = {b.param(to_f32(in.q).type), b.param(to_f32(in.k).type),
                                 b.param(to_f32(in.v).type), b.param(to_f32(in.cotangent).type),
                                 b.param(to_f32(in.cotangent).type)};
  add_mask_params(b, c, operands);
  b.set_results(b.attention_grad(operands, c.options));
  ASSERT_TRUE(b.ok()) << b.status().error().message();
  HostTensor out_f64 = forward(forward_module(c), c, in);
  std::vector<HostTensor> args = {to_f32(in.q), to_f32(in.k), to_f32(in.v), to_f32(out_f64),
                                  to_f32(in.cotangent)};
  InterpreterOptions decomposed;
  decomposed.decompose_composites = true;
  std::vector<HostTensor> kernel = run(m, "grad", args, c, in);
  std::vector<HostTensor> primitives = run(m, "grad", args, c, in, decomposed);
  ASSERT_EQ(kernel.size(), 3u);
  ASSERT_EQ(primitives.size(), 3u);
  const char* names[] = {"dq", "dk", "dv"};
  for (size_t i = 0; i < 3; ++i) {
    double relative = testing::max_abs_difference(kernel[i], primitives[i]) / max_abs(kernel[i]);
    EXPECT_LT(relative, 2e-6) << names[i];
    RecordProperty(std::string("f32_relative_") + names[i], scientific(relative));
  }
}

const GradCase kGradCases[] = {
    {"non_causal", 1, 5, 5, 2, 2, 4, 4, {0.5}, false},
    {"causal", 2, 7, 7, 2, 2, 4, 4, {0.5, true}, false},
    {"sliding_window", 1, 9, 9, 2, 1, 4, 4, {0.5, false, 3}, false},
    {"softcap", 2, 6, 6, 2, 2, 4, 4, {0.6, false, 0, 1.5}, false},
    {"causal_window_softcap", 1, 8, 8, 2, 2, 4, 4, {0.5, true, 4, 2.0}, false},
    {"segments_fully_masked_row", 2, 7, 7, 2, 2, 4, 4, {0.5, true}, true},
    {"gqa", 2, 6, 6, 4, 2, 4, 4, {0.5, true}, false},
    {"value_dim_differs", 1, 5, 5, 2, 1, 4, 3, {0.5}, false},
    {"gqa_segments_softcap_dv", 2, 6, 6, 4, 2, 3, 5, {0.7, false, 0, 5.0, true}, true},
    {"cross_lengths", 1, 3, 11, 2, 1, 4, 2, {0.5}, false},
    {"positions_causal", 1, 4, 9, 2, 1, 4, 4, {0.5, true, 0, 0.0, false, true}, false},
    {"positions_window_segments_gqa_softcap", 2, 5, 12, 4, 2, 3, 4,
     {0.6, true, 6, 4.0, false, true}, true},
};

INSTANTIATE_TEST_SUITE_P(AttentionGrad, AttentionGradCases, ::testing::ValuesIn(kGradCases),
                         [](const ::testing::TestParamInfo<GradCase>& info) {
                           return info.param.name;
                         });

TEST(AttentionGrad, FullyMaskedRowSpreadsDoutEvenlyOverValues) {
  // One query whose segment no key shares: out = mean(v), so dv[s] = dout / S, dq = dk = 0.
  GradCase c{"masked", 1, 1, 2, 1, 1, 1, 1, {1.0}, true};
  GradInputs in;
  in.q = testing::f64({1, 1, 1, 1}, {1});
  in.k = testing::f64({1, 2, 1, 1}, {1, 2});
  in.v = testing::f64({1, 2, 1, 1}, {10, 20});
  in.q_seg = testing::s32({1, 1}, {1});
  in.kv_seg = testing::s32({1, 2}, {0, 0});
  in.cotangent = testing::f64({1, 1, 1, 1}, {4});
  Module m = grad_module(c);
  for (bool decompose : {false, true}) {
    InterpreterOptions options;
    options.decompose_composites = decompose;
    std::vector<HostTensor> grads = gradients(m, c, in, options);
    ASSERT_EQ(grads.size(), 3u);
    EXPECT_EQ(grads[0].values, (std::vector<double>{0}));
    EXPECT_EQ(grads[1].values, (std::vector<double>{0, 0}));
    EXPECT_EQ(grads[2].values, (std::vector<double>{2, 2}));
  }
}

TEST(AttentionGrad, BuilderReportsShapeErrors) {
  Module m;
  Function& f = m.add_function("f");
  Builder b(f);
  Value q = b.param({DType::kF32, {1, 4, 2, 8}});
  Value wrong = b.param({DType::kF32, {1, 4, 2, 7}});
  std::array<Value, 3> grads = b.attention_grad(q, q, q, q, wrong, AttentionOptions{0.5});
  for (Value g : grads) EXPECT_FALSE(g.valid());
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().error().message(),
            "builder: attention_grad: dout must be f32[1,4,2,8] (the attention result "
            "[B,T,H,Dv]), got f32[1,4,2,7]");
}

}  // namespace
}  // namespace precast::ir
