// The attention composite: the interpreter's direct kernels (flash and plain) and the primitive
// decomposition agree with each other and with a naive reference written here from the
// definition, across causal masks, sliding windows, soft caps, packed segments, GQA and given
// positions.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/support/IrTestSupport.h"
#include "ir/Composites.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"
#include "ir/passes/DecomposeComposites.h"

namespace precast::ir {
namespace {

struct Case {
  const char* name;
  int64_t batch, queries, keys, heads, kv_heads, head_dim, value_dim;
  AttentionOptions options;
  bool segments;
};

// Names the case in gtest output instead of dumping its bytes.
void PrintTo(const Case& c, std::ostream* out) { *out << c.name; }

// With options.positions: query t is at position 2t + 1 and key s at S - 1 - s (reversed), so
// the masks compare positions that are neither the indices nor in order.
int64_t query_position(const Case& c, int64_t t) { return c.options.positions ? 2 * t + 1 : t; }
int64_t key_position(const Case& c, int64_t s) { return c.options.positions ? c.keys - 1 - s : s; }

// Row (b, h, t)'s masked scores, straight from the definition in ir/Composites.h, with no code
// shared with the interpreter.
std::vector<double> naive_scores(const Case& c, const HostTensor& q, const HostTensor& k,
                                 const HostTensor* q_seg, const HostTensor* kv_seg, int64_t b,
                                 int64_t h, int64_t t) {
  const int64_t group = c.heads / c.kv_heads;
  std::vector<double> score(c.keys);
  for (int64_t s = 0; s < c.keys; ++s) {
    double dot = 0;
    for (int64_t d = 0; d < c.head_dim; ++d) {
      dot += q.values[((b * c.queries + t) * c.heads + h) * c.head_dim + d] *
             k.values[((b * c.keys + s) * c.kv_heads + h / group) * c.head_dim + d];
    }
    double x = dot * c.options.scale;
    if (c.options.softcap > 0) x = c.options.softcap * std::tanh(x / c.options.softcap);
    const int64_t tp = query_position(c, t), sp = key_position(c, s);
    bool visible = (!c.options.causal || sp <= tp) &&
                   (c.options.sliding_window == 0 || std::abs(tp - sp) < c.options.sliding_window) &&
                   (!q_seg || q_seg->values[b * c.queries + t] == kv_seg->values[b * c.keys + s]);
    score[s] = visible ? x : attention_mask_value(q.type.dtype);
  }
  return score;
}

HostTensor naive_attention(const Case& c, const HostTensor& q, const HostTensor& k,
                           const HostTensor& v, const HostTensor* q_seg, const HostTensor* kv_seg) {
  const int64_t group = c.heads / c.kv_heads;
  HostTensor out = HostTensor::filled({q.type.dtype, {c.batch, c.queries, c.heads, c.value_dim}}, 0.0);
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < c.heads; ++h) {
      for (int64_t t = 0; t < c.queries; ++t) {
        std::vector<double> score = naive_scores(c, q, k, q_seg, kv_seg, b, h, t);
        double top = *std::max_element(score.begin(), score.end());
        double total = 0;
        for (double& x : score) total += (x = std::exp(x - top));
        for (int64_t e = 0; e < c.value_dim; ++e) {
          double acc = 0;
          for (int64_t s = 0; s < c.keys; ++s) {
            acc += score[s] / total * v.values[((b * c.keys + s) * c.kv_heads + h / group) * c.value_dim + e];
          }
          out.values[((b * c.queries + t) * c.heads + h) * c.value_dim + e] = acc;
        }
      }
    }
  }
  return out;
}

// Each row's log sum_s exp(masked score) (max-subtracted, so a fully masked row's is the mask
// value plus log S rather than log 0).
HostTensor naive_lse(const Case& c, const HostTensor& q, const HostTensor& k, const HostTensor* q_seg,
                     const HostTensor* kv_seg) {
  HostTensor lse = HostTensor::filled({DType::kF64, {c.batch, c.queries, c.heads}}, 0.0);
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < c.heads; ++h) {
      for (int64_t t = 0; t < c.queries; ++t) {
        std::vector<double> row = naive_scores(c, q, k, q_seg, kv_seg, b, h, t);
        double top = *std::max_element(row.begin(), row.end()), total = 0;
        for (double x : row) total += std::exp(x - top);
        lse.values[(b * c.queries + t) * c.heads + h] = top + std::log(total);
      }
    }
  }
  return lse;
}

struct Inputs {
  HostTensor q, k, v, q_seg, kv_seg, q_pos, kv_pos;
};

Inputs make_inputs(const Case& c, DType dtype) {
  Inputs in;
  in.q = HostTensor::of({dtype, {c.batch, c.queries, c.heads, c.head_dim}},
                        testing::pseudo_random(c.batch * c.queries * c.heads * c.head_dim, 1));
  in.k = HostTensor::of({dtype, {c.batch, c.keys, c.kv_heads, c.head_dim}},
                        testing::pseudo_random(c.batch * c.keys * c.kv_heads * c.head_dim, 2));
  in.v = HostTensor::of({dtype, {c.batch, c.keys, c.kv_heads, c.value_dim}},
                        testing::pseudo_random(c.batch * c.keys * c.kv_heads * c.value_dim, 3));
  for (double& x : in.q.values) x *= 3;  // sharper softmax, so masking errors show
  // Packed sequences: segment ids change mid-row and differ between batch rows.
  std::vector<double> q_ids, kv_ids;
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t t = 0; t < c.queries; ++t) q_ids.push_back(static_cast<double>((t + b) / 3));
    for (int64_t s = 0; s < c.keys; ++s) kv_ids.push_back(static_cast<double>((s + b) / 3));
  }
  in.q_seg = HostTensor::of({DType::kS32, {c.batch, c.queries}}, q_ids);
  in.kv_seg = HostTensor::of({DType::kS32, {c.batch, c.keys}}, kv_ids);
  std::vector<double> q_pos, kv_pos;
  for (int64_t t = 0; t < c.queries; ++t) q_pos.push_back(static_cast<double>(query_position(c, t)));
  for (int64_t s = 0; s < c.keys; ++s) kv_pos.push_back(static_cast<double>(key_position(c, s)));
  in.q_pos = HostTensor::of({DType::kS32, {c.queries}}, q_pos);
  in.kv_pos = HostTensor::of({DType::kS32, {c.keys}}, kv_pos);
  return in;
}

// A module with one function computing the attention of its inputs.
Module attention_module(const Case& c, DType dtype, bool flash) {
  Module m;
  Function& f = m.add_function("attention");
  Builder b(f);
  Value q = b.param({dtype, {c.batch, c.queries, c.heads, c.head_dim}}, "q");
  Value k = b.param({dtype, {c.batch, c.keys, c.kv_heads, c.head_dim}}, "k");
  Value v = b.param({dtype, {c.batch, c.keys, c.kv_heads, c.value_dim}}, "v");
  AttentionOptions options = c.options;
  options.flash = flash;
  std::vector<Value> operands = {q, k, v};
  testing::add_attention_mask_params(b, c.batch, c.queries, c.keys, c.segments,
                                     c.options.positions, operands);
  b.set_results({b.attention(operands, options)});
  EXPECT_TRUE(b.ok()) << b.status().error().message();
  return m;
}

HostTensor run(const Module& m, const Case& c, const Inputs& in, const InterpreterOptions& options) {
  std::vector<HostTensor> args = {in.q, in.k, in.v};
  if (c.segments) {
    args.push_back(in.q_seg);
    args.push_back(in.kv_seg);
  }
  if (c.options.positions) {
    args.push_back(in.q_pos);
    args.push_back(in.kv_pos);
  }
  Expected<std::vector<HostTensor>> out = interpret(m, "attention", args, options);
  if (!out.ok()) {
    ADD_FAILURE() << out.error().message();
    return HostTensor{};
  }
  return (*out)[0];
}

class AttentionCases : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionCases, AllImplementationsAgreeInF64) {
  const Case& c = GetParam();
  Inputs in = make_inputs(c, DType::kF64);
  HostTensor reference = naive_attention(c, in.q, in.k, in.v, c.segments ? &in.q_seg : nullptr,
                                         c.segments ? &in.kv_seg : nullptr);
  InterpreterOptions direct;
  InterpreterOptions decomposed;
  decomposed.decompose_composites = true;
  Module plain = attention_module(c, DType::kF64, false);
  Module flash = attention_module(c, DType::kF64, true);
  EXPECT_LT(testing::max_abs_difference(run(plain, c, in, direct), reference), 1e-12);
  EXPECT_LT(testing::max_abs_difference(run(flash, c, in, direct), reference), 1e-12);
  EXPECT_LT(testing::max_abs_difference(run(flash, c, in, decomposed), reference), 1e-12);
  // The decompose-composites pass yields a module of primitives that computes the same.
  ASSERT_TRUE(decompose_composites(flash).ok());
  Status verified = verify_module(flash);
  ASSERT_TRUE(verified.ok()) << verified.error().message();
  EXPECT_EQ(print_module(flash).find("attention "), std::string::npos);
  EXPECT_LT(testing::max_abs_difference(run(flash, c, in, direct), reference), 1e-12);
}

// attention_stats: the same out as attention, and each row's softmax max and sum (max + log sum
// is the row's log-sum-exp), from the direct kernel (flash and plain) and from the
// decomposition, against the definition.
TEST_P(AttentionCases, StatsGiveTheRowsLogSumExp) {
  const Case& c = GetParam();
  Inputs in = make_inputs(c, DType::kF64);
  HostTensor reference = naive_attention(c, in.q, in.k, in.v, c.segments ? &in.q_seg : nullptr,
                                         c.segments ? &in.kv_seg : nullptr);
  HostTensor reference_lse =
      naive_lse(c, in.q, in.k, c.segments ? &in.q_seg : nullptr, c.segments ? &in.kv_seg : nullptr);
  for (bool flash : {false, true}) {
    for (bool decompose : {false, true}) {
      SCOPED_TRACE(std::string(flash ? "flash" : "plain") + (decompose ? " decomposed" : ""));
      Module m;
      Function& f = m.add_function("stats");
      Builder b(f);
      std::vector<Value> operands = {
          b.param({DType::kF64, {c.batch, c.queries, c.heads, c.head_dim}}, "q"),
          b.param({DType::kF64, {c.batch, c.keys, c.kv_heads, c.head_dim}}, "k"),
          b.param({DType::kF64, {c.batch, c.keys, c.kv_heads, c.value_dim}}, "v")};
      testing::add_attention_mask_params(b, c.batch, c.queries, c.keys, c.segments,
                                         c.options.positions, operands);
      AttentionOptions options = c.options;
      options.flash = flash;
      std::array<Value, 3> r = b.attention_stats(operands, options);
      b.set_results({r[0], r[1], r[2]});
      ASSERT_TRUE(b.ok()) << b.status().error().message();
      ASSERT_TRUE(verify_module(m).ok());
      std::vector<HostTensor> args = {in.q, in.k, in.v};
      if (c.segments) args.insert(args.end(), {in.q_seg, in.kv_seg});
      if (c.options.positions) args.insert(args.end(), {in.q_pos, in.kv_pos});
      InterpreterOptions options_run;
      options_run.decompose_composites = decompose;
      Expected<std::vector<HostTensor>> out = interpret(m, "stats", args, options_run);
      ASSERT_TRUE(out.ok()) << out.error().message();
      EXPECT_LT(testing::max_abs_difference((*out)[0], reference), 1e-12);
      // max + log(sum) is the rows' log-sum-exp; each sum counts its max's key at least once.
      HostTensor lse = (*out)[1];
      for (size_t e = 0; e < lse.values.size(); ++e) {
        EXPECT_GE((*out)[2].values[e], 1.0 - 1e-12);
        lse.values[e] += std::log((*out)[2].values[e]);
      }
      EXPECT_LT(testing::max_abs_difference(lse, reference_lse), 1e-12);
    }
  }
}

TEST_P(AttentionCases, F32KernelsMatchTheF32Decomposition) {
  const Case& c = GetParam();
  Inputs in = make_inputs(c, DType::kF32);
  Module flash = attention_module(c, DType::kF32, true);
  InterpreterOptions decomposed;
  decomposed.decompose_composites = true;
  HostTensor kernel = run(flash, c, in, InterpreterOptions{});
  HostTensor primitives = run(flash, c, in, decomposed);
  EXPECT_LT(testing::max_abs_difference(kernel, primitives), 2e-6);
}

const Case kCases[] = {
    {"plain", 1, 5, 5, 2, 2, 4, 4, {0.5}, false},
    {"causal", 2, 7, 7, 2, 2, 4, 4, {0.5, true}, false},
    {"gqa_causal", 1, 6, 6, 6, 2, 4, 3, {0.5, true}, false},
    {"multi_query", 1, 4, 4, 4, 1, 8, 8, {0.35}, false},
    {"sliding_window", 1, 9, 9, 2, 1, 4, 4, {0.5, false, 3}, false},
    {"causal_window_softcap", 2, 8, 8, 4, 2, 4, 4, {0.5, true, 4, 2.0}, false},
    {"segments", 2, 7, 7, 2, 2, 4, 4, {0.5, true}, true},
    {"segments_gqa_softcap", 2, 6, 6, 4, 2, 4, 2, {0.7, false, 0, 5.0}, true},
    {"cross_lengths", 1, 3, 70, 2, 1, 4, 4, {0.5}, false},  // S > flash block size
    {"long_causal", 1, 130, 130, 1, 1, 2, 2, {0.5, true, 50}, false},
    {"positions_causal", 1, 4, 9, 2, 1, 4, 4, {0.5, true, 0, 0.0, false, true}, false},
    {"positions_window_segments_gqa", 2, 6, 70, 4, 2, 4, 4, {0.5, true, 20, 3.0, false, true}, true},
};

INSTANTIATE_TEST_SUITE_P(Attention, AttentionCases, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(Attention, HandComputedTwoByTwo) {
  // q = k = [[1],[0]] (one head, D=1), v = [[10],[20]], scale 1, causal.
  // t=0 sees only s=0 -> 10. t=1: scores (0*1, 0*0) = (0, 0) -> mean 15.
  Case c{"tiny", 1, 2, 2, 1, 1, 1, 1, {1.0, true}, false};
  Module m = attention_module(c, DType::kF64, false);
  Inputs in;
  in.q = testing::f64({1, 2, 1, 1}, {1, 0});
  in.k = testing::f64({1, 2, 1, 1}, {1, 0});
  in.v = testing::f64({1, 2, 1, 1}, {10, 20});
  EXPECT_EQ(run(m, c, in, InterpreterOptions{}).values, (std::vector<double>{10, 15}));
  // Without the mask t=0 weighs exp(1) vs exp(0).
  Case open{"open", 1, 2, 2, 1, 1, 1, 1, {1.0}, false};
  Module m2 = attention_module(open, DType::kF64, true);
  double w = std::exp(1.0) / (std::exp(1.0) + 1.0);
  std::vector<double> got = run(m2, open, in, InterpreterOptions{}).values;
  EXPECT_NEAR(got[0], 10 * w + 20 * (1 - w), 1e-12);
  EXPECT_NEAR(got[1], 15, 1e-12);
}

TEST(Attention, FullyMaskedRowAveragesValues) {
  // Query segment 1 has no key in segment 1: every score is masked, the weights are uniform.
  Case c{"masked", 1, 1, 2, 1, 1, 1, 1, {1.0}, true};
  Module m = attention_module(c, DType::kF64, true);
  Inputs in;
  in.q = testing::f64({1, 1, 1, 1}, {1});
  in.k = testing::f64({1, 2, 1, 1}, {1, 2});
  in.v = testing::f64({1, 2, 1, 1}, {10, 20});
  in.q_seg = testing::s32({1, 1}, {1});
  in.kv_seg = testing::s32({1, 2}, {0, 0});
  EXPECT_EQ(run(m, c, in, InterpreterOptions{}).values, (std::vector<double>{15}));
  InterpreterOptions decomposed;
  decomposed.decompose_composites = true;
  EXPECT_EQ(run(m, c, in, decomposed).values, (std::vector<double>{15}));
}

TEST(Attention, DecompositionKeepsAnnotations) {
  Module m;
  Function& f = m.add_function("f");
  Builder b(f);
  b.set_scope("decoder/layers_0/self_attention");
  Value q = b.param({DType::kF32, {1, 4, 2, 8}}, "q");
  Value out = b.with_checkpoint(b.attention(q, q, q, AttentionOptions{0.25, true}), "context");
  b.with_axes(out, {"activation_batch", "activation_length", "activation_heads", "activation_kv"});
  b.with_name(out, "context");
  b.set_results({out});
  ASSERT_TRUE(decompose_composites(m).ok());
  const Function& g = m.function(0);
  Value result = g.results()[0];
  EXPECT_EQ(g.value_name(result), "context");
  EXPECT_EQ(print_value_type(g, result),
            "f32[1,4,2,8]{activation_batch,activation_length,activation_heads,activation_kv}");
  const Op& last = g.op(g.defining_op(result));
  EXPECT_EQ(g.checkpoint(last), "context");
  for (const Op& op : g.ops()) EXPECT_EQ(g.scope(op), "decoder/layers_0/self_attention");
}

}  // namespace
}  // namespace precast::ir
