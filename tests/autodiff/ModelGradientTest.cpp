// End to end: d loss / d weights of each decoder family's forward (tiny configs, f64, a packed
// batch with padding) against central differences of the forward in the reference interpreter,
// for the first, middle, last and largest-gradient elements of every weight tensor.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "compiler/autodiff/Autodiff.h"
#include "compiler/config/ModelSpec.h"
#include "compiler/frontend/Frontend.h"
#include "tests/autodiff/GradientCheck.h"
#include "tests/support/ConfigTestUtil.h"

namespace precast::autodiff {
namespace {

using ir::HostTensor;

constexpr double kStep = 1e-5;
constexpr double kTolerance = 1e-6;  // relative to the tensor's largest |gradient|
// Besides the first, middle, last and largest-gradient elements of each weight tensor.
constexpr size_t kRandomElements = 12;

// Small dimensions that keep each family's structure: 2 layers, 4 query heads over 2 kv heads
// (GQA) except gpt3, which needs as many kv heads as query heads.
std::vector<std::string> tiny(const std::string& model_name, std::vector<std::string> extra) {
  std::vector<std::string> overrides = {"model_name=" + model_name,
                                        "override_model_config=true",
                                        "base_emb_dim=16",
                                        "base_num_query_heads=4",
                                        "head_dim=4",
                                        "base_mlp_dim=24",
                                        "base_num_decoder_layers=2",
                                        "vocab_size=32",
                                        "max_target_length=12",
                                        "per_device_batch_size=2"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return overrides;
}

// Row 0 packs two segments (ids 1 and 2) and two padding tokens (segment 0) at the end; row 1 is
// one segment. Positions restart per segment; targets are the next token within the segment.
std::vector<HostTensor> packed_batch(int64_t rows, int64_t length, int64_t vocab) {
  ir::TensorType type{ir::DType::kS32, {rows, length}};
  std::vector<HostTensor> batch(frontend::kNumBatchArrays, HostTensor::filled(type, 0));
  std::vector<double> tokens = testing::uniform_values(static_cast<size_t>(rows * (length + 2)), 5,
                                                       0.0, static_cast<double>(vocab));
  size_t next_token = 0;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int64_t> segments = r % 2 == 0 ? std::vector<int64_t>{length / 2, length / 2 - 2}
                                               : std::vector<int64_t>{length};
    int64_t t = 0;
    for (size_t s = 0; s < segments.size(); ++s) {
      for (int64_t j = 0; j < segments[s]; ++j, ++t) {
        size_t at = static_cast<size_t>(r * length + t);
        batch[0].values[at] = std::floor(tokens[next_token + static_cast<size_t>(j)]);
        batch[3].values[at] = std::floor(tokens[next_token + static_cast<size_t>(j) + 1]);
        batch[1].values[at] = batch[4].values[at] = static_cast<double>(j);
        batch[2].values[at] = batch[5].values[at] = static_cast<double>(s + 1);
      }
      next_token += static_cast<size_t>(segments[s]) + 1;
    }
  }
  return batch;
}

// Scope of every op in the gradient function: a forward scope, one with "/backward" appended,
// "backward" (the backward of an unscoped op) or none (the seed).
void expect_scopes(const ir::Function& forward, const ir::Function& gradient) {
  std::set<std::string> allowed = {"", kBackwardScope};
  for (const ir::Op& op : forward.ops()) {
    std::string scope(forward.scope(op));
    allowed.insert(scope);
    allowed.insert(scope + "/" + kBackwardScope);
  }
  size_t backward = 0;
  for (const ir::Op& op : gradient.ops()) {
    std::string scope(gradient.scope(op));
    EXPECT_EQ(allowed.count(scope), 1u) << scope;
    backward += scope.ends_with(kBackwardScope) ? 1 : 0;
  }
  EXPECT_GT(backward, forward.num_ops());
}

// dtype_override f64, or the config's own dtypes (f32 weights, bf16 activations, f32 norm
// statistics and logits): evaluated without rounding, those differentiate the same math
// through every convert and mixed-dtype dot_general.
enum class Precision { kF64, kConfig };

void check_family(const std::string& label, const std::string& model_name,
                  std::vector<std::string> extra, Precision precision = Precision::kF64) {
  SCOPED_TRACE(label);
  Config config = precast::testing::load_derived(precast::testing::base_yml(),
                                                 tiny(model_name, std::move(extra)), 1);
  Expected<ModelSpec> spec = model_spec_from_config(config);
  ASSERT_TRUE(spec.ok()) << spec.error().message();
  BatchSpec batch = batch_spec_from_config(config);
  frontend::ForwardOptions options;
  if (precision == Precision::kF64) options.dtype_override = ir::DType::kF64;
  Expected<frontend::ForwardModel> model = frontend::lower_forward(
      *spec, batch.micro_batch_size_to_train_on, batch.max_target_length, options);
  ASSERT_TRUE(model.ok()) << model.error().message();
  ASSERT_TRUE(frontend::add_init_function(*model).ok());
  ir::Module& module = model->module;
  const ir::Function& forward = *module.find_function("forward");

  std::vector<size_t> wrt(model->weights.size());
  for (size_t i = 0; i < wrt.size(); ++i) wrt[i] = i;
  Expected<ir::Function*> gradient_function =
      add_gradient_function(module, forward, 0, wrt, "forward_grad");
  ASSERT_TRUE(gradient_function.ok()) << gradient_function.error().message();
  testing::expect_verifies_and_round_trips(module);
  expect_scopes(forward, **gradient_function);

  // Weights: the frontend's init, then a perturbation so ones and zeros (norm scales, biases)
  // are generic points.
  std::vector<HostTensor> seed = {HostTensor::scalar(3, ir::DType::kU32)};
  std::vector<HostTensor> arguments = testing::run(*module.find_function("init"), seed);
  ASSERT_EQ(arguments.size(), model->weights.size());
  for (size_t i = 0; i < arguments.size(); ++i) {
    std::vector<double> noise = testing::uniform_values(arguments[i].values.size(),
                                                        static_cast<uint32_t>(1000 + i), -0.2, 0.2);
    for (size_t e = 0; e < noise.size(); ++e) arguments[i].values[e] += noise[e];
  }
  std::vector<HostTensor> batch_arrays =
      packed_batch(model->batch_rows, model->length, spec->vocab_size);
  arguments.insert(arguments.end(), batch_arrays.begin(), batch_arrays.end());

  std::vector<HostTensor> outputs = testing::run(**gradient_function, arguments);
  std::vector<HostTensor> loss = testing::run(forward, arguments);
  ASSERT_EQ(outputs.size(), forward.results().size() + wrt.size());
  ASSERT_FALSE(loss.empty());
  EXPECT_EQ(outputs[0].values[0], loss[0].values[0]);
  EXPECT_TRUE(std::isfinite(loss[0].values[0]));

  double worst = 0;
  for (size_t w = 0; w < wrt.size(); ++w) {
    const HostTensor& gradient = outputs[forward.results().size() + w];
    const std::string& name = model->weights[w].name;
    EXPECT_EQ(gradient.type, arguments[w].type) << name;
    size_t count = gradient.values.size();
    double scale = 0;
    size_t largest = 0;
    for (size_t e = 0; e < count; ++e) {
      if (std::abs(gradient.values[e]) > scale) {
        scale = std::abs(gradient.values[e]);
        largest = e;
      }
    }
    // deepseek3's router bias only selects experts (the weights are the scores before it).
    if (name.ends_with("gate.bias") && model_name.starts_with("deepseek3")) {
      EXPECT_EQ(scale, 0.0) << name << " only selects, yet gets a gradient";
      continue;
    }
    EXPECT_GT(scale, 0.0) << name << " gets no gradient";
    std::set<size_t> elements = {0, count / 2, count - 1, largest};
    std::vector<double> picks = testing::uniform_values(kRandomElements, static_cast<uint32_t>(w),
                                                        0.0, static_cast<double>(count));
    for (double pick : picks) elements.insert(static_cast<size_t>(pick));
    for (size_t e : elements) {
      double numeric = testing::central_difference(forward, arguments, w, e, kStep);
      double error = testing::relative_error(gradient.values[e], numeric, scale);
      worst = std::max(worst, error);
      EXPECT_LE(error, kTolerance)
          << name << " element " << e << ": analytic " << gradient.values[e]
          << ", central difference " << numeric << ", max |grad| " << scale;
    }
  }
  testing::record_error(label, worst);
}

TEST(ModelGradient, Llama2) {
  check_family("llama2", "llama2-7b", {"base_num_kv_heads=2"});
}

TEST(ModelGradient, Llama2ZLossFlash) {
  check_family("llama2 z_loss 1e-4, flash", "llama2-7b",
               {"base_num_kv_heads=2", "z_loss_multiplier=1e-4", "attention=flash"});
}

TEST(ModelGradient, MistralSlidingWindow) {
  check_family("mistral sliding window 5", "mistral-7b",
               {"base_num_kv_heads=2", "attention_type=local_sliding", "sliding_window_size=5"});
}

TEST(ModelGradient, Llama2MixedPrecision) {
  check_family("llama2 bf16 activations, f32 weights", "llama2-7b",
               {"base_num_kv_heads=2", "dtype=bfloat16"}, Precision::kConfig);
}

TEST(ModelGradient, Gemma) {
  check_family("gemma", "gemma-2b", {"base_num_kv_heads=2"});
}

TEST(ModelGradient, Gemma2) {
  check_family("gemma2 window 4, soft caps 2.0", "gemma2-2b",
               {"base_num_kv_heads=2", "sliding_window_size=4", "attn_logits_soft_cap=2.0",
                "final_logits_soft_cap=2.0"});
}

// qk-norm (its scales and everything upstream of it), the D^-0.5 query scaling, untied logits.
TEST(ModelGradient, Qwen3) {
  check_family("qwen3", "qwen3-8b", {"base_num_kv_heads=2"});
}

// Tied logits: the embedding's gradient has the lookup's and the logits' parts.
TEST(ModelGradient, Qwen3TiedLogits) {
  check_family("qwen3 tied logits", "qwen3-0.6b", {"base_num_kv_heads=2"});
}

// gemma3: 7 layers (local 0-4, global 5, local 6), always-on qk-norm, post norms, the local
// layers' unscaled RoPE.
TEST(ModelGradient, Gemma3) {
  check_family("gemma3 5:1 local/global, window 4", "gemma3-4b",
               {"base_num_kv_heads=2", "base_num_decoder_layers=7", "sliding_window_size=4"});
}

// olmo3: 4 layers (local 0-2, global 3, window 4), the qk-norm over all heads at once (its [H*D]
// and [K*D] scales and everything upstream), post-attention and post-MLP norms only, YaRN
// (rope_factor 8, halves, attention scaling; at head_dim 4 the correction range [0, 2] blends
// dimension 1).
TEST(ModelGradient, Olmo3YarnAllHeadsQkNorm) {
  check_family("olmo3 yarn, all-heads qk-norm, window 4", "olmo3-7b",
               {"base_num_kv_heads=2", "base_num_decoder_layers=4", "sliding_window_size=4"});
}

// YaRN reading interleaved pairs (rope_interleave=true) without truncating the correction range.
TEST(ModelGradient, Olmo3YarnInterleaved) {
  check_family("olmo3 yarn interleaved", "olmo3-7b",
               {"base_num_kv_heads=2", "base_num_decoder_layers=4", "sliding_window_size=4",
                "rope_interleave=true", "rope_truncate=false"});
}

// q/k/v biases (attention_bias; the key bias is rotated with the key, so it is not flat).
TEST(ModelGradient, Qwen2Biases) {
  check_family("qwen2 q/k/v biases", "qwen2.5-7b", {"base_num_kv_heads=2"});
}

// deepseek: MLA without a query LoRA (query, wkv_a, kv_norm, wkv_b, out; YaRN on the RoPE slice,
// the mscale-scaled queries), one dense layer then one MoE layer: softmax router scores, the top
// 2 of 4 experts (their scores' gradient through the mask; the selection is constant under the
// finite differences' small steps), the dense expert combine and a shared expert.
TEST(ModelGradient, DeepseekMlaSoftmaxRouting) {
  check_family("deepseek mla, softmax top-2 of 4, shared expert", "deepseek2-16b",
               {"base_num_kv_heads=4", "kv_lora_rank=8", "qk_nope_head_dim=4",
                "qk_rope_head_dim=4", "v_head_dim=6", "num_experts=4", "num_experts_per_tok=2",
                "base_moe_mlp_dim=8", "shared_experts=1", "first_num_dense_layers=1"});
}

// deepseek with a query LoRA (wq_a, q_norm, wq_b), sigmoid scores with a routing bias (in the
// weights, deepseek2's way), the sigmoid weights renormalised and scaled by 2.5.
TEST(ModelGradient, DeepseekQueryLoraSigmoidBias) {
  check_family("deepseek q_lora, sigmoid + bias, scale 2.5", "deepseek2-16b",
               {"base_num_kv_heads=4", "q_lora_rank=6", "kv_lora_rank=8", "qk_nope_head_dim=4",
                "qk_rope_head_dim=4", "v_head_dim=4", "num_experts=4", "num_experts_per_tok=2",
                "base_moe_mlp_dim=8", "shared_experts=2", "first_num_dense_layers=1",
                "routed_score_func=sigmoid", "routed_bias=true", "routed_scaling_factor=2.5"});
}

// deepseek3's routing groups: 8 experts in 4 groups of 2, the top 3 chosen from the best 2
// groups; the weights are the sigmoid scores before the (zero-initialised, perturbed) bias, which
// only selects and so gets no gradient of its own here.
TEST(ModelGradient, Deepseek3RoutingGroups) {
  check_family("deepseek3 routing groups 4, top 2 groups", "deepseek3-tiny",
               {"base_num_kv_heads=4", "q_lora_rank=6", "kv_lora_rank=8", "qk_nope_head_dim=4",
                "qk_rope_head_dim=4", "v_head_dim=4", "num_experts=8", "num_experts_per_tok=3",
                "base_moe_mlp_dim=8", "first_num_dense_layers=1", "n_routing_groups=4",
                "topk_routing_group=2"});
}

// mixtral: GQA attention, every layer top-2 of 4 experts weighted by a softmax over the chosen
// router logits.
TEST(ModelGradient, MixtralTopTwoOfFour) {
  check_family("mixtral top-2 of 4", "mixtral-8x7b",
               {"base_num_kv_heads=2", "num_experts=4", "num_experts_per_tok=2",
                "base_moe_mlp_dim=24"});
}

// gpt_oss: layer 0 within a window of 4, layer 1 global, YaRN (halves), q/k/v/out biases, the
// attention sinks (their derivative goes through attention_stats' rule), top-2 of 4 experts with
// the router bias, expert biases and the clamped activation at a limit of 0.3, low enough that
// some expert inputs are clamped (the clamped ones get no gradient through that input).
TEST(ModelGradient, GptOssSinksBiasesClampedExperts) {
  check_family("gpt_oss sinks, biases, clamp 0.3, window 4", "gpt-oss-20b",
               {"base_num_kv_heads=2", "num_experts=4", "num_experts_per_tok=2",
                "base_moe_mlp_dim=24", "sliding_window_size=4", "mlp_activations_limit=0.3"});
  check_family(
      "gpt_oss dense experts", "gpt-oss-20b",
      {"base_num_kv_heads=2", "num_experts=4", "num_experts_per_tok=2", "base_moe_mlp_dim=24",
       "sliding_window_size=4", "mlp_activations_limit=0.3", "sparse_matmul=false"});
}

// llama4: 4 layers, so layers 0-2 RoPE with the L2 qk-norm and causal within chunks of 4 of the
// 12 rows (the packed row's segments cut across the chunks), layer 3 NoPE and global; layers 1
// and 3 MoE (top-1 of 4, the input scaled by sigmoid of the chosen logit, a shared expert),
// 0 and 2 dense. Grouped and dense experts.
TEST(ModelGradient, Llama4ChunkedNopeInterleavedTopOneSigmoid) {
  std::vector<std::string> extra = {
      "base_num_kv_heads=2", "base_num_decoder_layers=4", "num_experts=4",
      "base_moe_mlp_dim=8",  "chunk_attn_window_size=4",  "interleave_moe_layer_step=2"};
  check_family("llama4 chunk 4, NoPE layer 3, MoE layers 1 and 3", "llama4-17b-16e", extra);
  extra.push_back("sparse_matmul=false");
  check_family("llama4 dense experts", "llama4-17b-16e", extra);
}

// qwen3_moe: qk-norm, top-3 of 5 with norm_topk_prob.
TEST(ModelGradient, Qwen3MoeNormTopK) {
  check_family("qwen3_moe top-3 of 5, norm_topk_prob", "qwen3-30b-a3b",
               {"base_num_kv_heads=2", "num_experts=5", "num_experts_per_tok=3",
                "base_moe_mlp_dim=8"});
}

// MaxText's load-balancing loss in the loss (weight 0.5, large enough to matter next to the
// cross entropy): its gradient reaches the router through softmax(s_b) only (the routed share f
// is a count). mixtral: every layer MoE; deepseek: the MoE layer after a dense one, with the
// router bias inside the softmax.
TEST(ModelGradient, MixtralLoadBalanceLoss) {
  check_family("mixtral top-2 of 4, load_balance_loss_weight 0.5", "mixtral-8x7b",
               {"base_num_kv_heads=2", "num_experts=4", "num_experts_per_tok=2",
                "base_moe_mlp_dim=24", "load_balance_loss_weight=0.5"});
}

TEST(ModelGradient, DeepseekLoadBalanceLoss) {
  check_family("deepseek sigmoid + bias, load_balance_loss_weight 0.5", "deepseek2-16b",
               {"base_num_kv_heads=4", "kv_lora_rank=8", "qk_nope_head_dim=4",
                "qk_rope_head_dim=4", "v_head_dim=4", "num_experts=4", "num_experts_per_tok=2",
                "base_moe_mlp_dim=8", "shared_experts=1", "first_num_dense_layers=1",
                "routed_score_func=sigmoid", "routed_bias=true", "load_balance_loss_weight=0.5"});
}

// Token dropping (capacity_factor 0.5: 12 tokens x top 2 over 4 experts leave 3 slots per expert
// and row): the dropped choices' weights are zero, the kept ones' gradients flow as dropless.
TEST(ModelGradient, MixtralCapacityDropping) {
  check_family("mixtral top-2 of 4, capacity_factor 0.5, load_balance_loss_weight 0.5",
               "mixtral-8x7b",
               {"base_num_kv_heads=2", "num_experts=4", "num_experts_per_tok=2",
                "base_moe_mlp_dim=24", "capacity_factor=0.5", "sparse_matmul=false",
                "load_balance_loss_weight=0.5"});
}

// The loss and every weight's gradient (f64, the frontend's init perturbed as above, the packed
// batch) of a tiny model: the outputs of its gradient function.
std::vector<HostTensor> loss_and_gradients(const std::string& model_name,
                                           std::vector<std::string> extra) {
  Config config = precast::testing::load_derived(precast::testing::base_yml(),
                                                 tiny(model_name, std::move(extra)), 1);
  Expected<ModelSpec> spec = model_spec_from_config(config);
  EXPECT_TRUE(spec.ok()) << spec.error().message();
  if (!spec.ok()) return {};
  BatchSpec batch = batch_spec_from_config(config);
  frontend::ForwardOptions options;
  options.dtype_override = ir::DType::kF64;
  Expected<frontend::ForwardModel> model = frontend::lower_forward(
      *spec, batch.micro_batch_size_to_train_on, batch.max_target_length, options);
  EXPECT_TRUE(model.ok() && frontend::add_init_function(*model).ok());
  if (!model.ok()) return {};
  ir::Module& module = model->module;
  std::vector<size_t> wrt(model->weights.size());
  for (size_t i = 0; i < wrt.size(); ++i) wrt[i] = i;
  Expected<ir::Function*> gradient_function =
      add_gradient_function(module, *module.find_function("forward"), 0, wrt, "forward_grad");
  EXPECT_TRUE(gradient_function.ok());
  if (!gradient_function.ok()) return {};
  std::vector<HostTensor> seed = {HostTensor::scalar(3, ir::DType::kU32)};
  std::vector<HostTensor> arguments = testing::run(*module.find_function("init"), seed);
  for (size_t i = 0; i < arguments.size(); ++i) {
    std::vector<double> noise = testing::uniform_values(arguments[i].values.size(),
                                                        static_cast<uint32_t>(1000 + i), -0.2, 0.2);
    for (size_t e = 0; e < noise.size(); ++e) arguments[i].values[e] += noise[e];
  }
  std::vector<HostTensor> batch_arrays =
      packed_batch(model->batch_rows, model->length, spec->vocab_size);
  arguments.insert(arguments.end(), batch_arrays.begin(), batch_arrays.end());
  return testing::run(**gradient_function, arguments);
}

// sparse_matmul=true (grouped matmuls over each token's chosen experts) and false (every expert
// on every token, masked) are the same math: the same loss and the same gradient for every
// weight, to f64 round-off (1e-12 relative to each tensor's largest value), for mixtral's and
// deepseek's routing.
TEST(ModelGradient, SparseAndDenseExpertsGiveTheSameLossAndGradients) {
  struct Case {
    std::string model_name;
    std::vector<std::string> extra;
  };
  std::vector<Case> cases = {
      {"mixtral-8x7b", {"base_num_kv_heads=2", "num_experts=4", "num_experts_per_tok=2",
                        "base_moe_mlp_dim=24"}},
      {"deepseek2-16b", {"base_num_kv_heads=4", "q_lora_rank=6", "kv_lora_rank=8",
                         "qk_nope_head_dim=4", "qk_rope_head_dim=4", "v_head_dim=4",
                         "num_experts=4", "num_experts_per_tok=2", "base_moe_mlp_dim=8",
                         "shared_experts=2", "first_num_dense_layers=1",
                         "routed_score_func=sigmoid", "routed_bias=true",
                         "routed_scaling_factor=2.5"}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.model_name);
    std::vector<std::string> sparse = c.extra, dense = c.extra;
    sparse.push_back("sparse_matmul=true");
    dense.push_back("sparse_matmul=false");
    std::vector<HostTensor> a = loss_and_gradients(c.model_name, sparse);
    std::vector<HostTensor> b = loss_and_gradients(c.model_name, dense);
    ASSERT_EQ(a.size(), b.size());
    ASSERT_GT(a.size(), 4u);
    for (size_t t = 0; t < a.size(); ++t) {
      ASSERT_EQ(a[t].type, b[t].type) << "output " << t;
      double scale = 0;
      for (double v : b[t].values) scale = std::max(scale, std::abs(v));
      for (size_t e = 0; e < a[t].values.size(); ++e) {
        EXPECT_LE(std::abs(a[t].values[e] - b[t].values[e]), 1e-12 * scale)
            << "output " << t << " element " << e << ": sparse " << a[t].values[e] << ", dense "
            << b[t].values[e];
      }
    }
  }
}

TEST(ModelGradient, Gpt3) {
  check_family("gpt3", "gpt3-52k", {"base_num_kv_heads=4", "trainable_position_size=16"});
}

}  // namespace
}  // namespace precast::autodiff
