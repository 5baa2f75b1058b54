// Counts from the IR: hand-counted FLOPs of single ops, grouping by scope, and the invariant that
// the forward graph of every shipped model has exactly MaxText's model FLOPs (formula in
// ModelFormulas.cpp, itself checked against MaxText's published numbers in formulas_test).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "compiler/analysis/IrCounts.h"
#include "compiler/analysis/ModelFormulas.h"
#include "compiler/autodiff/TrainStep.h"
#include "compiler/frontend/Frontend.h"
#include "ir/Parser.h"
#include "tests/support/ConfigTestUtil.h"
#include "tests/support/MoeFlops.h"
#include "tests/support/IrTestSupport.h"

namespace precast {
namespace {

ir::Module parse(std::string_view text) {
  return ir::testing::parse_or_fail(text);
}

TEST(IrCounts, DotGeneralFlopsAreTwiceResultTimesContraction) {
  // [2,3,5] x [2,5,7] batched over dim 0, contracting 5: result [2,3,7] = 42 elements, each
  // 5 multiplies and 5 adds: 2 * 42 * 5 = 420.
  ir::Module m = parse(R"(
func @f(%a: f32[2,3,5], %b: f32[2,5,7]) -> (f32[2,3,7]) {
  %d = dot_general %a, %b {lhs_batch=[0], rhs_batch=[0], lhs_contract=[2], rhs_contract=[1]} : f32[2,3,7] @"decoder/layers_0/mlp/wi"
  return %d
}
)");
  IrCounts counts = count_function(m.function(0));
  EXPECT_EQ(counts.dot_flops, 420.0L);
  EXPECT_EQ(counts.attention_flops, 0.0L);
  EXPECT_EQ(counts.weight_tensors, 2);
  EXPECT_EQ(counts.weight_elements, 30 + 70);
  EXPECT_EQ(counts.weight_bytes, 4 * (30 + 70));
}

TEST(IrCounts, TwoContractingDimsMultiply) {
  // [4,3,5] x [3,5,6] contracting (1,2) with (0,1): result [4,6], 15 terms each: 2*24*15 = 720.
  ir::Module m = parse(R"(
func @f(%a: f32[4,3,5], %b: f32[3,5,6]) -> (f32[4,6]) {
  %d = dot_general %a, %b {lhs_contract=[1, 2], rhs_contract=[0, 1]} : f32[4,6]
  return %d
}
)");
  EXPECT_EQ(count_function(m.function(0)).dot_flops, 720.0L);
}

TEST(IrCounts, AttentionPairsFollowMaxTextsConventions) {
  // Non-causal: every pair.
  EXPECT_EQ(attention_pairs(8, 6, false, 0), 48.0L);
  // Causal: MaxText halves T^2 (not T(T+1)/2).
  EXPECT_EQ(attention_pairs(8, 8, true, 0), 32.0L);
  // Window 3 of 8: T*W - W^2/2 = 24 - 4.5.
  EXPECT_EQ(attention_pairs(8, 8, true, 3), 19.5L);
  // A window longer than the sequence is no window.
  EXPECT_EQ(attention_pairs(8, 8, true, 100), 32.0L);
}

TEST(IrCounts, AttentionFlopsCountQkAndPv) {
  // B=2, T=S=8, H=4, D=16, Dv=16, causal: 2*B*H*(D+Dv) per pair = 512, times 32 pairs.
  ir::Module m = parse(R"(
func @f(%q: f32[2,8,4,16], %k: f32[2,8,2,16], %v: f32[2,8,2,16]) -> (f32[2,8,4,16]) {
  %o = attention %q, %k, %v {scale=0.25, causal=true} : f32[2,8,4,16] @"decoder/layers_1/self_attention"
  return %o
}
)");
  IrCounts counts = count_function(m.function(0));
  EXPECT_EQ(counts.attention_flops, 512.0L * 32.0L);
  EXPECT_EQ(counts.dot_flops, 0.0L);
  ASSERT_EQ(counts.by_scope.size(), 1u);
  EXPECT_EQ(counts.by_scope[0].scope, "decoder/layers_1");
  EXPECT_EQ(counts.by_scope[0].attention, 512.0L * 32.0L);
}

TEST(IrCounts, OpsByKindAndScopeGrouping) {
  ir::Module m = parse(R"(
func @f(%x: f32[2,4], %w0: f32[4,4], %w1: f32[4,4], %ids: s32[2]) -> (f32[2,4]) {
  %a = dot_general %x, %w0 {lhs_contract=[1], rhs_contract=[0]} : f32[2,4] @"decoder/layers_0/mlp/wi"
  %b = tanh %a : f32[2,4] @"decoder/layers_0/mlp"
  %c = dot_general %b, %w1 {lhs_contract=[1], rhs_contract=[0]} : f32[2,4] @"decoder/layers_1/mlp/wi"
  %d = tanh %c : f32[2,4] @"decoder/layers_1/mlp"
  %e = add %d, %x : f32[2,4]
  return %e
}
)");
  const ir::Function& f = m.function(0);
  IrCounts counts = count_function(f);
  EXPECT_EQ(counts.ops, 5);
  ASSERT_EQ(counts.ops_by_kind.size(), 3u);
  EXPECT_EQ(counts.ops_by_kind[0].kind, "dot_general");
  EXPECT_EQ(counts.ops_by_kind[0].ops, 2);
  EXPECT_EQ(counts.ops_by_kind[1].kind, "tanh");
  EXPECT_EQ(counts.ops_by_kind[2].kind, "add");
  EXPECT_EQ(counts.weight_tensors, 3);
  EXPECT_EQ(counts.other_inputs, 1);
  EXPECT_EQ(counts.other_input_elements, 2);
  // Each dot: 2 * 8 * 4 = 64.
  EXPECT_EQ(counts.dot_flops, 128.0L);

  ASSERT_EQ(counts.by_scope.size(), 3u);
  EXPECT_EQ(counts.by_scope[0].scope, "decoder/layers_0");
  EXPECT_EQ(counts.by_scope[0].ops, 2);
  EXPECT_EQ(counts.by_scope[0].dot, 64.0L);
  EXPECT_EQ(counts.by_scope[1].scope, "decoder/layers_1");
  EXPECT_EQ(counts.by_scope[2].scope, "");

  IrCounts merged = count_function(f, CountOptions{3, true});
  ASSERT_EQ(merged.by_scope.size(), 2u);
  EXPECT_EQ(merged.by_scope[0].scope, "decoder/layers_*/mlp");
  EXPECT_EQ(merged.by_scope[0].ops, 4);
  EXPECT_EQ(merged.by_scope[0].dot, 128.0L);
  EXPECT_EQ(merged.by_scope[1].scope, "");
  EXPECT_EQ(merged.by_scope[1].ops, 1);
}

// Invariant 4: the IR's forward dots and attention, scaled by MaxText's conventions, are the
// formula's numbers exactly, at each model's own size and sequence length.
TEST(IrCounts, ModelFlopsFromTheIrEqualTheFormulaForEveryShippedModel) {
  std::vector<std::string> names = testing::shipped_models();
  ASSERT_EQ(names.size(), 56u);
  for (const std::string& name : names) {
    for (int64_t accumulation : {1, 4}) {
      SCOPED_TRACE(name + " gradient_accumulation_steps=" + std::to_string(accumulation));
      Config config =
          testing::load_derived(testing::base_yml(),
                                {"model_name=" + name, "per_device_batch_size=2",
                                 "gradient_accumulation_steps=" + std::to_string(accumulation)},
                                4);
      Expected<ModelSpec> spec = model_spec_from_config(config);
      ASSERT_TRUE(spec.ok()) << spec.error().message();
      BatchSpec batch = batch_spec_from_config(config);
      Expected<frontend::ForwardModel> forward = frontend::lower_forward(*spec, batch);
      ASSERT_TRUE(forward.ok()) << forward.error().message();
      IrCounts counts = count_function(forward->module.function(0));
      EXPECT_EQ(counts.weight_elements, count_parameters(*spec));

      ModelFlops from_ir = model_flops_from_ir(counts, forward->batch_rows, batch);
      ModelFlops formula = model_flops_per_device(*spec, batch);
      long double surplus = testing::dense_expert_surplus(config, batch);
      EXPECT_EQ(from_ir.learnable, formula.learnable + surplus)
          << static_cast<double>(from_ir.learnable) << " vs "
          << static_cast<double>(formula.learnable);
      EXPECT_EQ(from_ir.attention, formula.attention)
          << static_cast<double>(from_ir.attention) << " vs "
          << static_cast<double>(formula.attention);
      if (surplus == 0) {
        EXPECT_EQ(format_tflops_block(from_ir), format_tflops_block(formula));
      }
    }
  }
}

// Every shipped qwen3 and qwen2.5 config at per_device_batch_size=1 and max_target_length 2048
// and 8192: MaxText's formulas (maxtext-facts §d) written out here from the config's dimensions —
// per layer q/k/v/out kernels, the gated MLP, two RMSNorm scales, the qk-norm scales [D]
// (use_qk_norm) and the q/k/v biases (attention_bias); the embedding, logits_dense unless tied,
// the final norm; the default FLOP branch — equal count_parameters and model_flops_per_device,
// and the lowered forward's weights, dots and attention equal them too.
TEST(IrCounts, QwenConfigsEqualMaxTextsFormulasAtTwoLengths) {
  int qwen3 = 0, qwen2 = 0;
  for (const std::string& name : testing::shipped_models()) {
    if (!name.starts_with("qwen")) continue;
    // qwen3_moe (qwen3-30b-a3b, ...) has its own checks (moe_formulas_test).
    if (testing::load_derived(testing::base_yml(), {"model_name=" + name}, 1)
            .get_string("decoder_block") == "qwen3_moe") {
      continue;
    }
    ++(name.starts_with("qwen3") ? qwen3 : qwen2);
    for (int64_t length : {2048, 8192}) {
      SCOPED_TRACE(name + " max_target_length=" + std::to_string(length));
      Config config = testing::load_derived(testing::base_yml(),
                                            {"model_name=" + name, "per_device_batch_size=1",
                                             "max_target_length=" + std::to_string(length)},
                                            4);
      Expected<ModelSpec> spec = model_spec_from_config(config);
      ASSERT_TRUE(spec.ok()) << spec.error().message();
      ASSERT_EQ(config.get_string("decoder_block"), name.starts_with("qwen3") ? "qwen3" : "qwen2");
      const bool qk_norm = config.get_bool("use_qk_norm"),
                 biases = config.get_bool("attention_bias");
      BatchSpec batch = batch_spec_from_config(config);
      const int64_t e = config.get_int("emb_dim"), h = config.get_int("num_query_heads"),
                    k = config.get_int("num_kv_heads"), d = config.get_int("head_dim"),
                    m = config.get_int("mlp_dim"), layers = config.get_int("num_decoder_layers"),
                    v = config.get_int("vocab_size");
      const bool tied = config.get_bool("logits_via_embedding");
      const int64_t activations =
          static_cast<int64_t>(config.get_string_list("mlp_activations").size());
      int64_t per_layer = e * h * d + 2 * e * k * d + h * d * e + (activations + 1) * e * m +
                          2 * e + (qk_norm ? 2 * d : 0) + (biases ? (h + 2 * k) * d : 0);
      int64_t parameters = per_layer * layers + v * e * (tied ? 1 : 2) + e;
      EXPECT_EQ(count_parameters(*spec), parameters);

      const long double t = static_cast<long double>(length), bt = t;  // B = 1
      long double ffn = 2 * bt * m * e * activations + 2 * bt * m * e;
      long double qkv = 2 * bt * e * (h + 2 * k) * d, projection = 2 * bt * e * h * d;
      long double learnable = (ffn * layers + (qkv + projection) * layers + 2 * bt * e * v) * 3;
      long double attention = 4 * bt * t * h * d / 2 * layers * 3;
      ModelFlops formula = model_flops_per_device(*spec, batch);
      EXPECT_EQ(formula.learnable, learnable);
      EXPECT_EQ(formula.attention, attention);

      Expected<frontend::ForwardModel> forward = frontend::lower_forward(*spec, batch);
      ASSERT_TRUE(forward.ok()) << forward.error().message();
      IrCounts counts = count_function(forward->module.function(0));
      EXPECT_EQ(counts.weight_elements, parameters);
      ModelFlops from_ir = model_flops_from_ir(counts, forward->batch_rows, batch);
      EXPECT_EQ(from_ir.learnable, learnable);
      EXPECT_EQ(from_ir.attention, attention);
      EXPECT_EQ(format_tflops_block(from_ir), format_tflops_block(formula));
    }
  }
  EXPECT_EQ(qwen3, 11);
  EXPECT_EQ(qwen2, 3);
}

// Every shipped gemma3 config at per_device_batch_size=1, lengths 2048 and 8192: maxtext-facts
// §d's gemma3 branch written out here — L // 6 global layers with causal attention over T, the
// other layers over the window W = min(sliding_window_size, T) — and the parameters (four norm
// scales and the qk-norm scales [D] per layer, tied logits); the formulas and the IR agree.
TEST(IrCounts, Gemma3ConfigsEqualMaxTextsFormulasAtTwoLengths) {
  int gemma3 = 0;
  for (const std::string& name : testing::shipped_models()) {
    if (!name.starts_with("gemma3")) continue;
    ++gemma3;
    for (int64_t length : {2048, 8192}) {
      SCOPED_TRACE(name + " max_target_length=" + std::to_string(length));
      Config config = testing::load_derived(testing::base_yml(),
                                            {"model_name=" + name, "per_device_batch_size=1",
                                             "max_target_length=" + std::to_string(length)},
                                            4);
      Expected<ModelSpec> spec = model_spec_from_config(config);
      ASSERT_TRUE(spec.ok()) << spec.error().message();
      BatchSpec batch = batch_spec_from_config(config);
      const int64_t e = config.get_int("emb_dim"), h = config.get_int("num_query_heads"),
                    k = config.get_int("num_kv_heads"), d = config.get_int("head_dim"),
                    m = config.get_int("mlp_dim"), layers = config.get_int("num_decoder_layers"),
                    v = config.get_int("vocab_size"),
                    window = config.get_int("sliding_window_size");
      ASSERT_TRUE(config.get_bool("logits_via_embedding"));
      int64_t per_layer = e * h * d + 2 * e * k * d + h * d * e + 3 * e * m + 4 * e + 2 * d;
      int64_t parameters = per_layer * layers + v * e + e;
      EXPECT_EQ(count_parameters(*spec), parameters);

      const long double t = static_cast<long double>(length);
      const long double w = std::min<long double>(static_cast<long double>(window), t);
      const long double global = static_cast<long double>(layers / 6);
      const long double local = static_cast<long double>(layers) - global;
      long double ffn = 2 * t * m * e * 2 + 2 * t * m * e;
      long double qkv = 2 * t * e * (h + 2 * k) * d, projection = 2 * t * e * h * d;
      long double learnable = (ffn * layers + (qkv + projection) * layers + 2 * t * e * v) * 3;
      long double attention =
          (global * 2 * t * t * h * d + local * 4 * (t * w - w * w / 2) * h * d) * 3;
      ModelFlops formula = model_flops_per_device(*spec, batch);
      EXPECT_EQ(formula.learnable, learnable);
      EXPECT_EQ(formula.attention, attention);

      Expected<frontend::ForwardModel> forward = frontend::lower_forward(*spec, batch);
      ASSERT_TRUE(forward.ok()) << forward.error().message();
      IrCounts counts = count_function(forward->module.function(0));
      EXPECT_EQ(counts.weight_elements, parameters);
      ModelFlops from_ir = model_flops_from_ir(counts, forward->batch_rows, batch);
      EXPECT_EQ(from_ir.learnable, learnable);
      EXPECT_EQ(from_ir.attention, attention);
    }
  }
  EXPECT_EQ(gemma3, 3);
}

// Every shipped olmo3 config at per_device_batch_size=1, lengths 2048 and 8192. MaxText counts
// olmo3 with its default branch (maxtext-facts §d), every layer full causal attention, written
// out here; the parameters: per layer the four attention kernels, the SwiGLU MLP, two post norms
// [E] and the qk-norm scales [H*D] + [K*D]; embedding, untied logits, final norm. The IR's
// weights and dots equal them. Its attention equals MaxText's at 2048, where the window (4096)
// covers the sequence; at 8192 the IR counts what the layers compute — layers 0-2 of every 4
// within W = 4096, pairs T·W − W²/2 — which is less than MaxText's formula, which ignores olmo3's
// window.
TEST(IrCounts, Olmo3ConfigsEqualMaxTextsFormulasAtTwoLengths) {
  int olmo3 = 0;
  for (const std::string& name : testing::shipped_models()) {
    if (!name.starts_with("olmo3")) continue;
    ++olmo3;
    for (int64_t length : {2048, 8192}) {
      SCOPED_TRACE(name + " max_target_length=" + std::to_string(length));
      Config config = testing::load_derived(testing::base_yml(),
                                            {"model_name=" + name, "per_device_batch_size=1",
                                             "max_target_length=" + std::to_string(length)},
                                            4);
      Expected<ModelSpec> spec = model_spec_from_config(config);
      ASSERT_TRUE(spec.ok()) << spec.error().message();
      BatchSpec batch = batch_spec_from_config(config);
      const int64_t e = config.get_int("emb_dim"), h = config.get_int("num_query_heads"),
                    k = config.get_int("num_kv_heads"), d = config.get_int("head_dim"),
                    m = config.get_int("mlp_dim"), layers = config.get_int("num_decoder_layers"),
                    v = config.get_int("vocab_size"),
                    window = config.get_int("sliding_window_size");
      ASSERT_FALSE(config.get_bool("logits_via_embedding"));
      ASSERT_TRUE(config.get_bool("use_qk_norm"));
      int64_t per_layer = e * h * d + 2 * e * k * d + h * d * e + 3 * e * m + 2 * e + (h + k) * d;
      int64_t parameters = per_layer * layers + 2 * v * e + e;
      EXPECT_EQ(count_parameters(*spec), parameters);

      const long double t = static_cast<long double>(length);
      long double ffn = 2 * t * m * e * 2 + 2 * t * m * e;
      long double qkv = 2 * t * e * (h + 2 * k) * d, projection = 2 * t * e * h * d;
      long double learnable = (ffn * layers + (qkv + projection) * layers + 2 * t * e * v) * 3;
      long double attention = 4 * t * t * h * d / 2 * layers * 3;
      ModelFlops formula = model_flops_per_device(*spec, batch);
      EXPECT_EQ(formula.learnable, learnable);
      EXPECT_EQ(formula.attention, attention);

      Expected<frontend::ForwardModel> forward = frontend::lower_forward(*spec, batch);
      ASSERT_TRUE(forward.ok()) << forward.error().message();
      IrCounts counts = count_function(forward->module.function(0));
      EXPECT_EQ(counts.weight_elements, parameters);
      ModelFlops from_ir = model_flops_from_ir(counts, forward->batch_rows, batch);
      EXPECT_EQ(from_ir.learnable, learnable);
      const long double w = std::min<long double>(static_cast<long double>(window), t);
      const long double global = static_cast<long double>(layers / 4);
      const long double local = static_cast<long double>(layers) - global;
      long double windowed =
          (global * 4 * t * t / 2 * h * d + local * 4 * (t * w - w * w / 2) * h * d) * 3;
      EXPECT_EQ(from_ir.attention, windowed);
      if (length == 2048) {
        EXPECT_EQ(from_ir.attention, attention);
        EXPECT_EQ(format_tflops_block(from_ir), format_tflops_block(formula));
      } else {
        EXPECT_LT(from_ir.attention, attention);
      }
    }
  }
  EXPECT_EQ(olmo3, 3);
}

// gpt-oss-20b and gpt-oss-120b at per_device_batch_size=1, lengths 2048 and 8192: maxtext-facts
// §d written out here. Parameters per layer: q/k/v/out kernels, their biases [H·D], [K·D], [K·D],
// [E], the sinks [H], two norm scales [E], the router E·X and its bias X (routed_bias), the
// experts' wi_0, wi_1 [X, E, M], wo [X, M, E] and their biases [X, M] twice and [X, E]; then the
// embedding, the untied logits and the final norm. FLOPs: MaxText's "MoE other" branch for the
// weights (router plus num_experts_per_tok experts of A = 2 input kernels in every layer) and the
// gpt_oss branch for attention: L // 2 global layers over T, the rest within W = min(128, T).
TEST(IrCounts, GptOssConfigsEqualMaxTextsFormulasAtTwoLengths) {
  int gpt_oss = 0;
  for (const std::string& name : testing::shipped_models()) {
    if (!name.starts_with("gpt-oss")) continue;
    ++gpt_oss;
    for (int64_t length : {2048, 8192}) {
      SCOPED_TRACE(name + " max_target_length=" + std::to_string(length));
      Config config = testing::load_derived(testing::base_yml(),
                                            {"model_name=" + name, "per_device_batch_size=1",
                                             "max_target_length=" + std::to_string(length)},
                                            4);
      Expected<ModelSpec> spec = model_spec_from_config(config);
      ASSERT_TRUE(spec.ok()) << spec.error().message();
      BatchSpec batch = batch_spec_from_config(config);
      const int64_t e = 2880, h = 64, k = 8, d = 64, m = 2880, v = 201088, window = 128;
      const int64_t layers = name == "gpt-oss-20b" ? 24 : 36;
      const int64_t experts = name == "gpt-oss-20b" ? 32 : 128, chosen = 4;
      int64_t attention_params = e * h * d + 2 * e * k * d + h * d * e + (h + 2 * k) * d + e + h;
      int64_t expert_params = e * experts + experts + 3 * experts * e * m + experts * (2 * m + e);
      int64_t per_layer = attention_params + expert_params + 2 * e;
      int64_t parameters = per_layer * layers + 2 * v * e + e;
      EXPECT_EQ(count_parameters(*spec), parameters);

      const long double t = static_cast<long double>(length);
      long double gate = 2 * t * e * experts, ffn = 2 * t * m * e * 2 + 2 * t * m * e;
      long double qkv = 2 * t * e * (h + 2 * k) * d, projection = 2 * t * e * h * d;
      long double learnable =
          ((gate + ffn * chosen) * layers + (qkv + projection) * layers + 2 * t * e * v) * 3;
      const long double w = std::min<long double>(window, t);
      const long double global = static_cast<long double>(layers / 2);
      const long double local = static_cast<long double>(layers) - global;
      long double attention =
          (global * 2 * t * t * h * d + local * 4 * (t * w - w * w / 2) * h * d) * 3;
      ModelFlops formula = model_flops_per_device(*spec, batch);
      EXPECT_EQ(formula.learnable, learnable);
      EXPECT_EQ(formula.attention, attention);

      Expected<frontend::ForwardModel> forward = frontend::lower_forward(*spec, batch);
      ASSERT_TRUE(forward.ok()) << forward.error().message();
      IrCounts counts = count_function(forward->module.function(0));
      EXPECT_EQ(counts.weight_elements, parameters);
      ModelFlops from_ir = model_flops_from_ir(counts, forward->batch_rows, batch);
      EXPECT_EQ(from_ir.learnable, learnable);
      EXPECT_EQ(from_ir.attention, attention);
      EXPECT_EQ(format_tflops_block(from_ir), format_tflops_block(formula));

      // The train step (the figure `analyze` holds against the formula): the sinks' backward
      // computes one more, zero, value column, which is hardware work but not model FLOPs, so
      // the step's dots and attention are the formula's to the FLOP.
      frontend::ForwardOptions options;
      options.loss_sums = true;
      Expected<frontend::ForwardModel> trained = frontend::lower_forward(*spec, batch, options);
      ASSERT_TRUE(trained.ok()) << trained.error().message();
      Expected<autodiff::TrainStepLayout> layout =
          autodiff::add_train_step(trained->module, trained->module.function(0),
                                   trained->weights.size(), autodiff::TrainStepSpec{});
      ASSERT_TRUE(layout.ok()) << layout.error().message();
      IrCounts step_counts = count_function(*layout->function);
      ModelFlops step = model_flops_of_train_step(step_counts, layout->rows_per_step, batch);
      EXPECT_EQ(step.learnable, learnable);
      EXPECT_EQ(step.attention, attention);
      EXPECT_EQ(format_tflops_block(step), format_tflops_block(formula));
    }
  }
  EXPECT_EQ(gpt_oss, 2);
}

// llama4-17b-16e and llama4-17b-128e at per_device_batch_size=1, lengths 2048 and 8192:
// maxtext-facts §d written out here from the model files' numbers. Parameters per layer: the
// q/k/v/out kernels and two norm scales [E] (llama4's L2 qk-norm has no scale); the MoE layers
// (every layer of 16e, every second of 128e) the router E·X, the experts' wi_0, wi_1, wo and one
// shared expert of width 8192 (three kernels), the dense layers an MLP of width mlp_dim (three
// kernels); then the embedding, the untied logits and the final norm. FLOPs: MaxText's llama4
// branch: dense layers ffn(mlp_dim), MoE layers the router, the shared expert and the one chosen
// expert; attention over L // 4 = 12 global layers of 4BT²HD and 36 chunked layers of
// 4B((T // 8192)·8192² + (T % 8192)²)HD, halved; everything times 3.
TEST(IrCounts, Llama4ConfigsEqualMaxTextsFormulasAtTwoLengths) {
  int llama4 = 0;
  for (const std::string& name : testing::shipped_models()) {
    if (!name.starts_with("llama4")) continue;
    ++llama4;
    for (int64_t length : {2048, 8192}) {
      SCOPED_TRACE(name + " max_target_length=" + std::to_string(length));
      Config config = testing::load_derived(testing::base_yml(),
                                            {"model_name=" + name, "per_device_batch_size=1",
                                             "max_target_length=" + std::to_string(length)},
                                            4);
      Expected<ModelSpec> spec = model_spec_from_config(config);
      ASSERT_TRUE(spec.ok()) << spec.error().message();
      BatchSpec batch = batch_spec_from_config(config);
      const bool scout = name == "llama4-17b-16e";
      const int64_t e = 5120, h = 40, k = 8, d = 128, v = 202048, layers = 48, chunk = 8192;
      const int64_t experts = scout ? 16 : 128, moe_width = 8192;
      const int64_t dense_width = scout ? 8192 : 16384;
      const int64_t moe_layers = scout ? 48 : 24, dense_layers = layers - moe_layers;
      int64_t attention_params = e * h * d + 2 * e * k * d + h * d * e;
      int64_t moe_params = e * experts + 3 * experts * e * moe_width + 3 * e * moe_width;
      int64_t parameters = (attention_params + 2 * e) * layers + moe_params * moe_layers +
                           3 * e * dense_width * dense_layers + 2 * v * e + e;
      EXPECT_EQ(count_parameters(*spec), parameters);

      const long double t = static_cast<long double>(length);
      auto ffn = [&](long double width) { return 2 * t * width * e * 2 + 2 * t * width * e; };
      long double gate = 2 * t * e * experts;
      long double ffn_total =
          ffn(dense_width) * dense_layers + (gate + ffn(moe_width) + ffn(moe_width)) * moe_layers;
      long double qkv = 2 * t * e * (h + 2 * k) * d, projection = 2 * t * e * h * d;
      long double learnable = (ffn_total + (qkv + projection) * layers + 2 * t * e * v) * 3;
      const long double whole = static_cast<long double>(length / chunk);
      const long double rest = static_cast<long double>(length % chunk);
      long double chunked = 4 * (whole * chunk * chunk + rest * rest) * h * d;
      long double global = 4 * t * t * h * d;
      long double attention = (12 * global + 36 * chunked) / 2 * 3;
      ModelFlops formula = model_flops_per_device(*spec, batch);
      EXPECT_EQ(formula.learnable, learnable);
      EXPECT_EQ(formula.attention, attention);

      // The IR holds the same weights and, at these lengths (T <= one chunk, so a chunked layer
      // is a full causal one), the same FLOPs.
      Expected<frontend::ForwardModel> forward = frontend::lower_forward(*spec, batch);
      ASSERT_TRUE(forward.ok()) << forward.error().message();
      IrCounts counts = count_function(forward->module.function(0));
      EXPECT_EQ(counts.weight_elements, parameters);
      ModelFlops from_ir = model_flops_from_ir(counts, forward->batch_rows, batch);
      EXPECT_EQ(from_ir.learnable, learnable);
      EXPECT_EQ(from_ir.attention, attention);
    }
  }
  EXPECT_EQ(llama4, 2);
}

}  // namespace
}  // namespace precast
