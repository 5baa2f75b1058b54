// Sharding from MaxText's default logical axis rules: flax's resolution order and fallbacks, and
// the per-device shape of every weight of a 2-layer llama under fsdp + tensor + multi-slice data
// (hand-derived below from configs/base.yml's rules). The collectives these layouts imply are
// counted on the partitioned program (tests/passes/spmd_partition_test.cpp).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "compiler/analysis/Sharding.h"
#include "compiler/frontend/Frontend.h"
#include "tests/support/MeshTestUtil.h"
#include "tests/support/ConfigTestUtil.h"

namespace precast {
namespace {

Mesh mesh(int64_t fsdp, int64_t tensor, int64_t dcn_data) {
  return testing::fsdp_tensor_mesh(fsdp, tensor, dcn_data);
}

std::vector<AxisRule> default_rules() {
  Config config = testing::load_derived(testing::base_yml(), {}, 1);
  Expected<std::vector<AxisRule>> rules = axis_rules_from_config(config);
  EXPECT_TRUE(rules.ok());
  return *rules;
}

ShardingSpec resolve(std::vector<std::string_view> names, const std::vector<AxisRule>& rules,
                     const Mesh& m) {
  Expected<ShardingSpec> spec = resolve_sharding(names, rules, m);
  EXPECT_TRUE(spec.ok()) << (spec.ok() ? "" : spec.error().message());
  return spec.ok() ? *spec : ShardingSpec{};
}

TEST(Sharding, RulesApplyInOrderWithFallbacks) {
  Mesh m = mesh(4, 2, 1);
  std::vector<AxisRule> rules = {{"mlp", {"fsdp_transpose", "tensor"}},
                                 {"embed", {"fsdp", "fsdp_transpose"}},
                                 {"embed", {"fsdp"}},
                                 {"vocab", {"tensor"}},
                                 {"norm", {}}};
  // mlp comes first and takes fsdp_transpose (size 1, still used) and tensor; embed's first rule
  // clashes on fsdp_transpose, its fallback takes fsdp.
  EXPECT_EQ(resolve({"embed", "mlp"}, rules, m).to_string(),
            "P('fsdp', ('fsdp_transpose', 'tensor'))");
  // Alone, embed takes its first rule.
  EXPECT_EQ(resolve({"embed"}, rules, m).to_string(), "P(('fsdp', 'fsdp_transpose'))");
  // Unmatched and unnamed dimensions are replicated.
  EXPECT_EQ(resolve({"unknown", "", "norm"}, rules, m).to_string(), "P(None, None, None)");
  // vocab's tensor is taken by mlp already: vocab stays replicated.
  EXPECT_EQ(resolve({"mlp", "vocab"}, rules, m).to_string(),
            "P(('fsdp_transpose', 'tensor'), None)");

  Expected<ShardingSpec> twice =
      resolve_sharding(std::vector<std::string_view>{"embed", "embed"}, rules, m);
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.error().message().find("logical axis 'embed' names two dimensions"),
            std::string::npos);
  std::vector<AxisRule> bad = {{"embed", {"fsdpp"}}};
  Expected<ShardingSpec> unknown = resolve_sharding(std::vector<std::string_view>{"embed"}, bad, m);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message().find("mesh axis 'fsdpp', which is not in mesh_axes"),
            std::string::npos);
  EXPECT_EQ(per_device_dims({10, 7}, resolve({"embed", "mlp"}, rules, m), m),
            (std::vector<int64_t>{3, 4}));  // uneven shards round up, as JAX pads
}

frontend::ForwardModel tiny_llama(int64_t rows, int64_t kv_heads = 2) {
  Config config = testing::load_derived(
      testing::base_yml(),
      {"model_name=llama2-7b", "override_model_config=true", "base_emb_dim=64", "base_mlp_dim=128",
       "base_num_decoder_layers=2", "head_dim=16", "vocab_size=256", "max_target_length=32",
       "base_num_query_heads=4", "base_num_kv_heads=" + std::to_string(kv_heads)},
      1);
  Expected<ModelSpec> spec = model_spec_from_config(config);
  EXPECT_TRUE(spec.ok());
  frontend::ForwardOptions options;
  options.loss_sums = true;
  Expected<frontend::ForwardModel> model = frontend::lower_forward(*spec, rows, 32, options);
  EXPECT_TRUE(model.ok());
  return std::move(*model);
}

// MaxText's default rules (configs/base.yml) on a mesh of ici fsdp 4 x tensor 2 in each of 2
// slices (dcn data 2), E 64, H 4, K 2, D 16, M 128, V 256:
//   vocab -> (tensor, tensor_sequence, autoregressive): /2;  embed_vocab -> (fsdp, ...): /4
//   q_heads, kv_heads, heads -> tensor: /2;  kv, kv_head_dim -> replicated
//   mlp -> (fsdp_transpose, tensor, ...) comes before embed in the list: /2, and then embed's
//   first rule clashes on fsdp_transpose, its fallback (fsdp, context, ...) gives /4
//   embed alone -> (fsdp, fsdp_transpose, ...): /4;  norm -> tensor: /2
//   Nothing maps to data: weights are replicated across the two slices.
TEST(Sharding, PerDeviceWeightShapesUnderFsdpTensorAndMultiSliceData) {
  frontend::ForwardModel model = tiny_llama(16);
  Mesh m = mesh(4, 2, 2);
  ASSERT_EQ(m.num_devices, 16);
  std::vector<AxisRule> rules = default_rules();
  Expected<ShardingAnalysis> analysis = analyze_sharding(model.module.function(0), rules, m);
  ASSERT_TRUE(analysis.ok()) << analysis.error().message();
  const std::map<std::string, std::vector<int64_t>> expected = {
      {"token_embedder.embedding", {128, 16}},
      {"pre_self_attention_layer_norm.scale", {32}},
      {"self_attention.query.kernel", {16, 2, 16}},
      {"self_attention.key.kernel", {16, 1, 16}},
      {"self_attention.value.kernel", {16, 1, 16}},
      {"self_attention.out.kernel", {2, 16, 16}},
      {"post_self_attention_layer_norm.scale", {32}},
      {"mlp.wi_0.kernel", {16, 64}},
      {"mlp.wi_1.kernel", {16, 64}},
      {"mlp.wo.kernel", {64, 16}},
      {"decoder.decoder_norm.scale", {32}},
      {"decoder.logits_dense.kernel", {16, 128}},
  };
  const ir::Function& f = model.module.function(0);
  size_t checked = 0;
  for (size_t i = 0; i < model.weights.size(); ++i) {
    const std::string& name = model.weights[i].name;
    std::string key = name;
    if (name.starts_with("decoder.layers_")) key = name.substr(name.find('.', 8) + 1);
    auto it = expected.find(key);
    ASSERT_NE(it, expected.end()) << name;
    ir::Value p = f.params()[i];
    EXPECT_EQ(per_device_dims(f.type(p).dims, analysis->specs[p.id], m), it->second) << name;
    EXPECT_EQ(analysis->device_bytes[p.id], [&] {
      int64_t n = 4;  // f32
      for (int64_t d : it->second) n *= d;
      return n;
    }()) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 1u + 2u * 9u + 2u);  // embedding, 9 per layer, final norm, logits
  // The batch: activation_embed_and_logits_batch -> (data, stage, fsdp, fsdp_transpose, expert)
  // = 2 x 4: 16 rows -> 2 per device; the length axis maps to size-1 axes only.
  ir::Value inputs = f.params()[model.weights.size()];
  EXPECT_EQ(per_device_dims(f.type(inputs).dims, analysis->specs[inputs.id], m),
            (std::vector<int64_t>{2, 32}));
  EXPECT_EQ(analysis->specs[inputs.id].to_string(),
            "P(('data', 'stage', 'fsdp', 'fsdp_transpose', 'expert'), ('tensor_sequence', "
            "'context', 'context_usp_ulysses'))");
}

// Issue 20: the MoE weights carry MaxText's logical axes (router `embed` x none, the expert
// stacks `exp`, `embed_moe`, `mlp_moe`), resolved by base.yml's rules in their order on expert 2
// x fsdp 2 x tensor 2. By hand from configs/base.yml: `exp` takes `expert`; `mlp_moe` (its rule
// comes before `embed_moe`'s) takes fsdp_transpose, tensor, tensor_sequence and autoregressive;
// `embed_moe`'s first rule then clashes on fsdp_transpose and its fallback takes fsdp, context
// and context_usp_ulysses. The router's `embed` takes its first rule (fsdp, fsdp_transpose,
// context, context_usp_ulysses, expert). A tiny mixtral: E 16, 4 experts of width 32.
TEST(Sharding, MoeWeightsResolveMaxTextsExpertAxesInRuleOrder) {
  Config config = testing::load_derived(
      testing::base_yml(),
      {"model_name=mixtral-8x7b", "override_model_config=true", "base_emb_dim=16",
       "base_mlp_dim=32", "base_moe_mlp_dim=32", "base_num_decoder_layers=1", "head_dim=4",
       "vocab_size=32", "max_target_length=8", "base_num_query_heads=4", "base_num_kv_heads=2",
       "num_experts=4", "num_experts_per_tok=2"},
      1);
  Expected<ModelSpec> spec = model_spec_from_config(config);
  ASSERT_TRUE(spec.ok()) << spec.error().message();
  Expected<frontend::ForwardModel> model = frontend::lower_forward(*spec, 2, 8, {});
  ASSERT_TRUE(model.ok()) << model.error().message();
  Mesh m = testing::ici_mesh({{"fsdp", 2}, {"tensor", 2}, {"expert", 2}});
  const std::string stack_in =
      "P('expert', ('fsdp', 'context', 'context_usp_ulysses'), ('fsdp_transpose', 'tensor', "
      "'tensor_sequence', 'autoregressive'))";
  const std::string stack_out =
      "P('expert', ('fsdp_transpose', 'tensor', 'tensor_sequence', 'autoregressive'), ('fsdp', "
      "'context', 'context_usp_ulysses'))";
  const std::map<std::string, std::pair<std::vector<std::string>, std::string>> want = {
      {"gate.kernel",
       {{"embed", ""},
        "P(('fsdp', 'fsdp_transpose', 'context', 'context_usp_ulysses', 'expert'), None)"}},
      {"wi_0", {{"exp", "embed_moe", "mlp_moe"}, stack_in}},
      {"wi_1", {{"exp", "embed_moe", "mlp_moe"}, stack_in}},
      {"wo", {{"exp", "mlp_moe", "embed_moe"}, stack_out}},
  };
  std::vector<AxisRule> rules = default_rules();
  int found = 0;
  for (const frontend::WeightInfo& w : model->weights) {
    const std::string prefix = "decoder.layers_0.MoeBlock_0.";
    if (!w.name.starts_with(prefix)) continue;
    auto it = want.find(w.name.substr(prefix.size()));
    ASSERT_NE(it, want.end()) << w.name;
    ++found;
    EXPECT_EQ(w.axes, it->second.first) << w.name;
    std::vector<std::string_view> names(w.axes.begin(), w.axes.end());
    ShardingSpec sharding = resolve(names, rules, m);
    EXPECT_EQ(sharding.to_string(), it->second.second) << w.name;
    if (w.name.ends_with("wi_0")) {
      // [X 4, E 16, Mm 32] over expert 2, fsdp 2, tensor 2.
      EXPECT_EQ(per_device_dims(w.dims, sharding, m), (std::vector<int64_t>{2, 8, 16}));
    }
  }
  EXPECT_EQ(found, 4);
}

}  // namespace
}  // namespace precast
