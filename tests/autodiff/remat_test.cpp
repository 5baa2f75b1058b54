// Remat policies on the train step: the rewritten step computes the same bits; what each policy
// recomputes matches MaxText's table (maxtext-facts §c), checked through hand counts of
// recomputed matmul FLOPs and attention ops; model FLOPs do not change; errors name the policy.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/analysis/IrCounts.h"
#include "compiler/autodiff/Remat.h"
#include "compiler/autodiff/TrainStep.h"
#include "compiler/frontend/Frontend.h"
#include "ir/Interpreter.h"
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"
#include "tests/support/ConfigTestUtil.h"

namespace precast {
namespace {

using autodiff::apply_remat;
using autodiff::remat_policy;
using ir::DType;
using ir::HostTensor;

constexpr int64_t kLayers = 3;
constexpr int64_t kRows = 2;
constexpr int64_t kLength = 8;

ModelSpec tiny_llama() {
  Config config = testing::load_derived(
      testing::base_yml(),
      {"model_name=llama2-7b", "override_model_config=true", "base_emb_dim=16", "base_mlp_dim=24",
       "base_num_decoder_layers=" + std::to_string(kLayers), "head_dim=4", "vocab_size=32",
       "max_target_length=8", "per_device_batch_size=2", "base_num_query_heads=4",
       "base_num_kv_heads=2", "dtype=float32"},
      1);
  Expected<ModelSpec> spec = model_spec_from_config(config);
  EXPECT_TRUE(spec.ok()) << (spec.ok() ? "" : spec.error().message());
  return *spec;
}

struct Step {
  frontend::ForwardModel model;
  autodiff::TrainStepLayout layout;
  size_t index = 0;  // of train_step in the module
};

Step train_step(int64_t accumulation = 1) {
  frontend::ForwardOptions options;
  options.loss_sums = true;
  Expected<frontend::ForwardModel> forward =
      frontend::lower_forward(tiny_llama(), kRows, kLength, options);
  EXPECT_TRUE(forward.ok());
  Step step{std::move(*forward), {}, 0};
  autodiff::TrainStepSpec spec;
  spec.gradient_accumulation_steps = accumulation;
  Expected<autodiff::TrainStepLayout> layout = autodiff::add_train_step(
      step.model.module, step.model.module.function(0), step.model.weights.size(), spec);
  EXPECT_TRUE(layout.ok()) << (layout.ok() ? "" : layout.error().message());
  step.layout = *layout;
  step.index = step.model.module.num_functions() - 1;
  return step;
}

const ir::Function& function(const Step& s) {
  return s.model.module.function(s.index);
}

// Matmul FLOPs the function executes, remat clones included.
long double executed_dot_flops(const ir::Function& f) {
  long double total = 0;
  for (const ir::Op& op : f.ops()) {
    if (op.kind == ir::OpKind::kDotGeneral) total += dot_general_flops(f, op);
  }
  return total;
}

int64_t count_kind(const ir::Function& f, ir::OpKind kind) {
  int64_t n = 0;
  for (const ir::Op& op : f.ops()) n += op.kind == kind ? 1 : 0;
  return n;
}

// Forward matmul FLOPs of the decoder layers' attention projections and MLPs (by scope).
struct LayerDots {
  long double attention = 0, mlp = 0, other = 0;
};
LayerDots forward_dots(const Step& s) {
  IrCounts counts = count_function(s.model.module.function(0), CountOptions{3, true});
  LayerDots dots;
  for (const ScopeFlops& scope : counts.by_scope) {
    if (scope.scope == "decoder/layers_*/self_attention") {
      dots.attention += scope.dot;
    } else if (scope.scope == "decoder/layers_*/mlp") {
      dots.mlp += scope.dot;
    } else {
      dots.other += scope.dot;
    }
  }
  return dots;
}

std::vector<HostTensor> inputs(const ir::Function& f) {
  std::vector<HostTensor> args;
  uint64_t state = 12345;
  auto next = [&]() {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(state >> 11) * 0x1.0p-53;
  };
  for (size_t i = 0; i < f.params().size(); ++i) {
    const ir::TensorType& type = f.type(f.params()[i]);
    HostTensor t = HostTensor::filled(type, 0);
    std::string_view name = f.value_name(f.params()[i]);
    for (size_t e = 0; e < t.values.size(); ++e) {
      if (type.dtype == DType::kS32) {
        // Batch arrays: tokens < 32, positions 0..7, one segment per row.
        int64_t column = static_cast<int64_t>(e) % kLength;
        if (name.ends_with("segmentation")) {
          t.values[e] = 1;
        } else if (name.ends_with("position")) {
          t.values[e] = static_cast<double>(column);
        } else {
          t.values[e] = std::floor(next() * 32);
        }
      } else if (name == "count") {
        t.values[e] = 0;
      } else if (name.starts_with("nu.") || name.starts_with("mu.")) {
        t.values[e] = 0;
      } else {
        t.values[e] = static_cast<double>(static_cast<float>(0.3 * (2 * next() - 1)));
      }
    }
    args.push_back(std::move(t));
  }
  // Run-time scalars: lr, b1, b2, eps, eps_root, weight decay, clipping threshold.
  const double scalars[] = {1e-3, 0.9, 0.95, 1e-8, 0.0, 0.1, 1.0};
  for (size_t k = 0; k < autodiff::kNumRunTimeScalars; ++k) {
    args[args.size() - autodiff::kNumRunTimeScalars + k] = HostTensor::scalar(scalars[k]);
  }
  return args;
}

TEST(Remat, EveryPolicyComputesTheSameBits) {
  Step plain = train_step();
  std::vector<HostTensor> args = inputs(function(plain));
  Expected<std::vector<HostTensor>> want = ir::interpret(function(plain), args);
  ASSERT_TRUE(want.ok()) << want.error().message();
  for (const char* name : {"full", "minimal", "minimal_with_context", "save_dot_except_mlp",
                           "save_qkv_proj", "save_out_proj", "minimal_offloaded"}) {
    SCOPED_TRACE(name);
    Step step = train_step();
    Expected<autodiff::RematPolicy> policy = remat_policy(name);
    ASSERT_TRUE(policy.ok());
    ASSERT_TRUE(apply_remat(step.model.module, step.index, *policy).ok());
    Status verified = ir::verify_module(step.model.module);
    ASSERT_TRUE(verified.ok()) << verified.error().message();
    Expected<std::vector<HostTensor>> got = ir::interpret(function(step), args);
    ASSERT_TRUE(got.ok()) << got.error().message();
    ASSERT_EQ(got->size(), want->size());
    for (size_t i = 0; i < got->size(); ++i) {
      EXPECT_EQ((*got)[i].values, (*want)[i].values) << "result " << i;
    }
    // Donation survives the rewrite.
    EXPECT_EQ(function(step).result_alias(0), 0);
  }
}

// What each policy recomputes, in matmul FLOPs: the forward dots of the layers it does not keep.
// Without remat the step executes exactly 3x the forward's dots.
TEST(Remat, RecomputedMatmulsFollowThePolicyTable) {
  Step plain = train_step();
  LayerDots dots = forward_dots(plain);
  ASSERT_GT(dots.attention, 0);
  ASSERT_GT(dots.mlp, 0);
  long double forward_total = dots.attention + dots.mlp + dots.other;
  EXPECT_EQ(executed_dot_flops(function(plain)), 3 * forward_total);

  struct Case {
    const char* policy;
    long double recomputed;
    int64_t attention_ops;  // forward L, plus L recomputed unless `context` is kept
  };
  // The MLP's three matmuls have equal cost (E x F each); a layer's output (after wo) is the
  // next layer's input, which is kept, and no backward op reads wo's output, so wo never reruns.
  long double wi = dots.mlp * 2 / 3;
  // Attention projections at E 16, H 4, K 2, D 4: query 256, key 128, value 128, out 256 (of
  // 768) per token; the out projection's output feeds the post-attention residual that the
  // MLP norm's backward reads.
  long double out_proj = dots.attention / 3, qkv = dots.attention * 2 / 3;
  const Case cases[] = {
      // Only the layer input is kept: every matmul whose output the backward reads reruns.
      {"full", qkv + out_proj + wi, 2 * kLayers},
      // q/k/v, out, mlpwi_0/1 and mlpwo are kept: no matmul reruns; attention does (its
      // output `context` is not kept and attention_grad reads it).
      {"minimal", 0, 2 * kLayers},
      {"minimal_with_context", 0, kLayers},
      {"save_dot_except_mlp", wi, 2 * kLayers},
      {"save_dot_with_context_except_mlp", wi, kLayers},
      {"save_dot_except_mlpwi", wi, 2 * kLayers},
      {"save_qkv_proj", out_proj + wi, 2 * kLayers},
      {"save_out_proj", qkv + wi, 2 * kLayers},
      {"minimal_offloaded", 0, 2 * kLayers},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.policy);
    Step step = train_step();
    Expected<autodiff::RematPolicy> policy = remat_policy(c.policy);
    ASSERT_TRUE(policy.ok());
    Expected<autodiff::RematResult> result = apply_remat(step.model.module, step.index, *policy);
    ASSERT_TRUE(result.ok()) << result.error().message();
    EXPECT_EQ(executed_dot_flops(function(step)), 3 * forward_total + c.recomputed);
    EXPECT_EQ(count_kind(function(step), ir::OpKind::kAttention), c.attention_ops);
    // Model FLOPs (MaxText's convention) ignore recomputation.
    EXPECT_EQ(count_function(function(step)).dot_flops, 3 * forward_total);
  }
}

TEST(Remat, OffloadedValuesAreReported) {
  Step step = train_step();
  Expected<autodiff::RematPolicy> policy = remat_policy("qkv_proj_offloaded");
  ASSERT_TRUE(policy.ok());
  Expected<autodiff::RematResult> result = apply_remat(step.model.module, step.index, *policy);
  ASSERT_TRUE(result.ok());
  // q, k and v of each layer live in host memory for the backward pass.
  EXPECT_EQ(result->offloaded.size(), static_cast<size_t>(3 * kLayers));
  for (ir::Value v : result->offloaded) {
    EXPECT_EQ(function(step).axis_names(v)[2], "activation_kv_heads");
  }
}

TEST(Remat, GradientAccumulationRecomputesPerMicroBatch) {
  Step plain = train_step(2);
  std::vector<HostTensor> args = inputs(function(plain));
  Expected<std::vector<HostTensor>> want = ir::interpret(function(plain), args);
  ASSERT_TRUE(want.ok());
  Step step = train_step(2);
  LayerDots dots = forward_dots(step);
  ASSERT_TRUE(apply_remat(step.model.module, step.index, *remat_policy("full")).ok());
  EXPECT_EQ(executed_dot_flops(function(step)),
            2 * (3 * (dots.attention + dots.mlp + dots.other) + dots.attention + dots.mlp * 2 / 3));
  Expected<std::vector<HostTensor>> got = ir::interpret(function(step), args);
  ASSERT_TRUE(got.ok());
  for (size_t i = 0; i < got->size(); ++i) EXPECT_EQ((*got)[i].values, (*want)[i].values);
}

TEST(Remat, RewrittenStepPrintsAndParsesBack) {
  Step step = train_step();
  ASSERT_TRUE(apply_remat(step.model.module, step.index, *remat_policy("full")).ok());
  std::string text = ir::print_module(step.model.module);
  EXPECT_NE(text.find("/remat\""), std::string::npos);
  Expected<ir::Module> parsed = ir::parse_module(text);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message();
  EXPECT_EQ(ir::print_module(*parsed), text);
}

// The scope-name reading of an op that compiler logic used before ops carried facts: a
// "backward" or "remat" component, a "decoder/layers_N" prefix, a "decoder/logits" or "loss"
// prefix, a "gradients/" or "optimizer" prefix. The facts must say the same for every op.
bool has_component(std::string_view scope, std::string_view component) {
  size_t begin = 0;
  while (begin <= scope.size()) {
    size_t end = scope.find('/', begin);
    if (end == std::string_view::npos) end = scope.size();
    if (scope.substr(begin, end - begin) == component) return true;
    begin = end + 1;
  }
  return false;
}

int scope_layer(std::string_view scope) {
  constexpr std::string_view kPrefix = "decoder/layers_";
  if (!scope.starts_with(kPrefix)) return ir::kNoLayer;
  return std::stoi(std::string(scope.substr(kPrefix.size())));
}

struct PhaseCounts {
  int64_t backward = 0, recompute = 0, in_layers = 0, logits = 0, optimizer = 0;
};

PhaseCounts check_facts_against_scopes(const ir::Function& f) {
  PhaseCounts counts;
  for (ir::OpIndex i = 0; i < f.num_ops(); ++i) {
    std::string_view scope = f.scope(f.op(i));
    const ir::OpFacts& facts = f.facts(i);
    bool backward = has_component(scope, "backward"), recompute = has_component(scope, "remat");
    ir::OpPhase phase = backward    ? ir::OpPhase::kBackward
                        : recompute ? ir::OpPhase::kRecompute
                                    : ir::OpPhase::kForward;
    EXPECT_EQ(facts.phase, phase) << "op " << i << " @" << scope;
    EXPECT_EQ(facts.layer, scope_layer(scope)) << "op " << i << " @" << scope;
    ir::OpRegion region = scope.starts_with("decoder/logits") || scope.starts_with("loss")
                              ? ir::OpRegion::kLogits
                          : scope.starts_with("gradients/") || scope.starts_with("optimizer")
                              ? ir::OpRegion::kOptimizer
                              : ir::OpRegion::kNone;
    EXPECT_EQ(facts.region, region) << "op " << i << " @" << scope;
    counts.backward += facts.phase == ir::OpPhase::kBackward;
    counts.recompute += facts.phase == ir::OpPhase::kRecompute;
    counts.in_layers += facts.in_layer();
    counts.logits += facts.region == ir::OpRegion::kLogits;
    counts.optimizer += facts.region == ir::OpRegion::kOptimizer;
  }
  return counts;
}

TEST(OpFacts, TrainStepPhasesLayersAndRegionsMatchTheScopeNames) {
  for (const char* policy : {"full", "minimal", "none"}) {
    SCOPED_TRACE(policy);
    Step step = train_step();
    ASSERT_TRUE(apply_remat(step.model.module, step.index, *remat_policy(policy)).ok());
    PhaseCounts forward = check_facts_against_scopes(step.model.module.function(0));
    EXPECT_EQ(forward.backward, 0);
    EXPECT_GT(forward.in_layers, 0);
    EXPECT_GT(forward.logits, 0);
    PhaseCounts counts = check_facts_against_scopes(function(step));
    EXPECT_GT(counts.backward, 0);
    if (std::string(policy) == "full") {
      EXPECT_GT(counts.recompute, 0);
    }
    EXPECT_GT(counts.optimizer, 0);
    // Every layer has forward and backward ops.
    std::vector<int> forward_ops(kLayers, 0), backward_ops(kLayers, 0);
    for (ir::OpIndex i = 0; i < function(step).num_ops(); ++i) {
      const ir::OpFacts& facts = function(step).facts(i);
      if (!facts.in_layer()) continue;
      ASSERT_LT(facts.layer, kLayers);
      (facts.phase == ir::OpPhase::kBackward ? backward_ops : forward_ops)[facts.layer]++;
    }
    for (int64_t l = 0; l < kLayers; ++l) {
      EXPECT_GT(forward_ops[l], 0) << "layer " << l;
      EXPECT_GT(backward_ops[l], 0) << "layer " << l;
    }
  }
}

TEST(OpFacts, OptimizerStateParametersCarryTheirRole) {
  Step step = train_step();
  const ir::Function& f = function(step);
  int64_t state = 0;
  for (size_t i = 0; i < f.params().size(); ++i) {
    std::string_view name = f.value_name(f.params()[i]);
    bool named_state = name.starts_with("mu.") || name.starts_with("nu.") || name == "count";
    EXPECT_EQ(f.param_role(i) == ir::ParamRole::kOptimizerState, named_state) << name;
    state += named_state;
  }
  EXPECT_EQ(state, 2 * static_cast<int64_t>(step.model.weights.size()) + 1);
  // The facts survive the text.
  std::string text = ir::print_module(step.model.module);
  EXPECT_NE(text.find(" role=optimizer_state"), std::string::npos);
  EXPECT_NE(text.find(" backward layer=0"), std::string::npos);
  EXPECT_NE(text.find(" region=logits"), std::string::npos);
  Expected<ir::Module> parsed = ir::parse_module(text);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message();
  EXPECT_EQ(ir::print_module(*parsed), text);
}

TEST(Remat, PolicyErrors) {
  Expected<autodiff::RematPolicy> unknown = remat_policy("everything");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message().find("remat_policy='everything' is not a remat policy"),
            std::string::npos);
  EXPECT_NE(unknown.error().message().find("minimal_with_context"), std::string::npos);
  Expected<autodiff::RematPolicy> bad = remat_policy("custom", {{"mlpwo", "disk"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message(),
            "mlpwo='disk' is not a remat placement; use remat, device or offload");
  Expected<autodiff::RematPolicy> input =
      remat_policy("custom", {{"decoder_layer_input", "remat"}});
  ASSERT_FALSE(input.ok());
  Expected<autodiff::RematPolicy> custom =
      remat_policy("custom", {{"mlpwo", "device"}, {"out_proj", "offload"}});
  ASSERT_TRUE(custom.ok());
  EXPECT_EQ(custom->names.at("out_proj"), autodiff::Placement::kOffload);
}

}  // namespace
}  // namespace precast
