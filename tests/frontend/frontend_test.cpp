// The frontend's forward graphs: parameter counts against MaxText's formula for every shipped
// model, print/parse round trips and the verifier for every family, the loss at initialisation
// against its closed form, and the errors for what cannot be lowered.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "compiler/analysis/IrCounts.h"
#include "compiler/analysis/ModelFormulas.h"
#include "compiler/frontend/Frontend.h"
#include "ir/Interpreter.h"
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"
#include "tests/support/ConfigTestUtil.h"

namespace precast {
namespace {

using frontend::ForwardModel;
using frontend::lower_forward;
using testing::load_model;
using testing::ModelAndBatch;

int64_t weight_elements(const ForwardModel& m) {
  const ir::Function& f = m.module.function(0);
  int64_t total = 0;
  for (size_t i = 0; i < m.weights.size(); ++i) total += f.type(f.params()[i]).num_elements();
  return total;
}

// Small dimensions that keep each family's structure (GQA, several layers, gemma2's window
// shorter than the sequence).
std::vector<std::string> tiny(const std::string& model_name) {
  std::vector<std::string> o = {"model_name=" + model_name,
                                "override_model_config=true",
                                "base_emb_dim=32",
                                "base_mlp_dim=48",
                                "base_num_decoder_layers=2",
                                "head_dim=8",
                                "vocab_size=96",
                                "max_target_length=12",
                                "per_device_batch_size=2",
                                "dtype=float32"};
  bool gpt3 = model_name.starts_with("gpt3");
  o.push_back("base_num_query_heads=4");
  o.push_back(gpt3 ? "base_num_kv_heads=4" : "base_num_kv_heads=2");
  if (model_name.starts_with("gemma2") || model_name.starts_with("gemma3") ||
      model_name.starts_with("olmo3")) {
    o.push_back("sliding_window_size=4");
  }
  if (model_name.starts_with("olmo3")) o.push_back("base_num_decoder_layers=4");
  if (gpt3) o.push_back("trainable_position_size=16");
  return o;
}

// Each attention op's sliding window (0 = global), in program order; the i-th belongs to layer i.
std::vector<int64_t> attention_windows(const ir::Function& f) {
  std::vector<int64_t> windows;
  for (ir::OpIndex i = 0; i < f.num_ops(); ++i) {
    const ir::Op& op = f.op(i);
    if (op.kind != ir::OpKind::kAttention) continue;
    EXPECT_EQ(f.facts(i).layer, static_cast<int16_t>(windows.size()));
    windows.push_back(f.attrs(op).integer(ir::AttrKey::kSlidingWindow));
  }
  return windows;
}

TEST(Frontend, ParameterCountsEqualTheFormulaForEveryShippedModel) {
  std::vector<std::string> names = testing::shipped_models();
  ASSERT_GE(names.size(), 20u);
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    ModelAndBatch l = load_model({"model_name=" + name});
    Expected<ForwardModel> m = lower_forward(l.model, 1, l.batch.max_target_length);
    ASSERT_TRUE(m.ok()) << m.error().message();
    EXPECT_EQ(weight_elements(*m), count_parameters(l.model));
  }
}

TEST(Frontend, EveryFamilyVerifiesAndRoundTrips) {
  for (std::string name :
       {"llama2-7b", "llama3.1-8b", "mistral-7b", "gemma-2b", "gemma2-2b", "gpt3-52k", "qwen3-8b",
        "qwen3-0.6b", "qwen2.5-7b", "gemma3-4b", "olmo3-7b", "olmo3-7b-pt"}) {
    SCOPED_TRACE(name);
    ModelAndBatch l = load_model(tiny(name));
    for (bool logits : {false, true}) {
      frontend::ForwardOptions options;
      options.return_logits = logits;
      Expected<ForwardModel> m = lower_forward(l.model, l.batch, options);
      ASSERT_TRUE(m.ok()) << m.error().message();
      ASSERT_TRUE(frontend::add_init_function(*m).ok());
      Status verified = ir::verify_module(m->module);
      ASSERT_TRUE(verified.ok()) << verified.error().message();
      std::string text = ir::print_module(m->module);
      Expected<ir::Module> parsed = ir::parse_module(text);
      ASSERT_TRUE(parsed.ok()) << parsed.error().message();
      EXPECT_EQ(ir::print_module(*parsed), text);
    }
  }
}

TEST(Frontend, BatchFollowsTheWeightsAndResultsAreNamed) {
  ModelAndBatch l = load_model(tiny("llama2-7b"));
  Expected<ForwardModel> m = lower_forward(l.model, l.batch);
  ASSERT_TRUE(m.ok());
  const ir::Function& f = m->module.function(0);
  ASSERT_EQ(f.params().size(), m->weights.size() + 6);
  EXPECT_EQ(f.value_name(f.params()[m->weights.size()]), "inputs");
  EXPECT_EQ(f.value_name(f.params().back()), "targets_segmentation");
  EXPECT_EQ(m->weights.front().name, "token_embedder.embedding");
  EXPECT_EQ(m->weights[1].name, "decoder.layers_0.pre_self_attention_layer_norm.scale");
  EXPECT_EQ(m->weights[2].name, "decoder.layers_0.self_attention.query.kernel");
  EXPECT_EQ((m->weights[2].dims), (std::vector<int64_t>{32, 4, 8}));
  EXPECT_EQ((m->weights[2].axes), (std::vector<std::string>{"embed", "q_heads", "kv"}));
  ASSERT_EQ(f.results().size(), 3u);
  EXPECT_EQ(f.value_name(f.results()[0]), "loss");
  EXPECT_EQ(f.value_name(f.results()[2]), "total_weights");
}

const frontend::WeightInfo* find_weight(const ForwardModel& m, const std::string& name) {
  for (const frontend::WeightInfo& w : m.weights) {
    if (w.name == name) return &w;
  }
  return nullptr;
}

// qwen3's attention as MaxText builds it (models/qwen3.py, layers/attentions.py): query_norm and
// key_norm RMSNorm scales [D] (axes norm, initialised to one) in every layer; the query kernel
// drawn with variance 1/E (use_qk_norm turns off the 1/sqrt(D) folded into llama2's query
// initialiser; the queries are scaled by D^-0.5 after RoPE instead); query_proj, key_proj and
// value_proj named after the norm, RoPE and that scaling, then context and out_proj; tied
// configs have no logits_dense.
TEST(Frontend, Qwen3WeightsInitialisersAndCheckpointNames) {
  ModelAndBatch l = load_model(tiny("qwen3-8b"));
  Expected<ForwardModel> m = lower_forward(l.model, l.batch);
  ASSERT_TRUE(m.ok()) << m.error().message();
  const int64_t e = 32, d = 8;
  for (int layer = 0; layer < 2; ++layer) {
    for (const char* norm : {"query_norm", "key_norm"}) {
      std::string name = fmt::format("decoder.layers_{}.self_attention.{}.scale", layer, norm);
      const frontend::WeightInfo* w = find_weight(*m, name);
      ASSERT_NE(w, nullptr) << name;
      EXPECT_EQ(w->dims, (std::vector<int64_t>{d}));
      EXPECT_EQ(w->axes, (std::vector<std::string>{"norm"}));
      EXPECT_EQ(w->init, frontend::InitKind::kOnes);
    }
  }
  const frontend::WeightInfo* query =
      find_weight(*m, "decoder.layers_0.self_attention.query.kernel");
  ASSERT_NE(query, nullptr);
  EXPECT_EQ(query->init, frontend::InitKind::kNormal);
  EXPECT_DOUBLE_EQ(query->stddev, 1 / std::sqrt(static_cast<double>(e)));
  EXPECT_NE(find_weight(*m, "decoder.logits_dense.kernel"), nullptr);

  const ir::Function& f = m->module.function(0);
  std::vector<std::string> names;
  for (ir::OpIndex i = 0; i < f.num_ops(); ++i) {
    const ir::Op& op = f.op(i);
    if (f.facts(i).layer != 0 || f.checkpoint(op).empty()) continue;
    names.emplace_back(f.checkpoint(op));
    if (f.checkpoint(op) == "query_proj") {
      EXPECT_EQ(op.kind, ir::OpKind::kMul);  // q * D^-0.5
      EXPECT_EQ(f.scope(op), "decoder/layers_0/self_attention");
    }
  }
  // Layer 0's last add is layer 1's decoder_layer_input.
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names,
            (std::vector<std::string>{"context", "decoder_layer_input", "key_proj", "mlpwi_0",
                                      "mlpwi_1", "mlpwo", "out_proj", "query_proj", "value_proj"}));

  ModelAndBatch tied = load_model(tiny("qwen3-0.6b"));
  Expected<ForwardModel> t = lower_forward(tied.model, tied.batch);
  ASSERT_TRUE(t.ok()) << t.error().message();
  EXPECT_EQ(find_weight(*t, "decoder.logits_dense.kernel"), nullptr);
  EXPECT_EQ(t->weights.size(), m->weights.size() - 1);
}

// qwen2's q/k/v biases (attention_bias): each with its kernel's output shape and axes, zeros,
// added after the kernel; no bias on out (MaxText's qwen2 exception).
TEST(Frontend, Qwen2AttentionBiases) {
  ModelAndBatch l = load_model(tiny("qwen2.5-7b"));
  Expected<ForwardModel> m = lower_forward(l.model, l.batch);
  ASSERT_TRUE(m.ok()) << m.error().message();
  struct Bias {
    const char* name;
    std::vector<int64_t> dims;
    std::vector<std::string> axes;
  };
  for (const Bias& want :
       {Bias{"query", {4, 8}, {"q_heads", "kv"}}, Bias{"key", {2, 8}, {"kv_heads", "kv_head_dim"}},
        Bias{"value", {2, 8}, {"kv_heads", "kv_head_dim"}}}) {
    std::string name = fmt::format("decoder.layers_1.self_attention.{}.bias", want.name);
    const frontend::WeightInfo* w = find_weight(*m, name);
    ASSERT_NE(w, nullptr) << name;
    EXPECT_EQ(w->dims, want.dims);
    EXPECT_EQ(w->axes, want.axes);
    EXPECT_EQ(w->init, frontend::InitKind::kZeros);
    // Declared right after its kernel: the use order.
    EXPECT_EQ((w - 1)->name, fmt::format("decoder.layers_1.self_attention.{}.kernel", want.name));
  }
  // No qk-norm, but the queries are scaled by D^-0.5 explicitly, so the initialiser is N(0, 1/E).
  const frontend::WeightInfo* query =
      find_weight(*m, "decoder.layers_1.self_attention.query.kernel");
  ASSERT_NE(query, nullptr);
  EXPECT_DOUBLE_EQ(query->stddev, 1 / std::sqrt(32.0));
  EXPECT_EQ(find_weight(*m, "decoder.layers_1.self_attention.out.bias"), nullptr);
  EXPECT_EQ(find_weight(*m, "decoder.layers_1.self_attention.query_norm.scale"), nullptr);
}

// gemma3's 5:1 pattern over 7 layers: layers 0-4 and 6 attend within the window, layer 5
// globally; every layer has qk-norm and post norms, and its query kernel is N(0, 1/E).
TEST(Frontend, Gemma3LocalGlobalPattern) {
  std::vector<std::string> overrides = tiny("gemma3-4b");
  overrides.push_back("base_num_decoder_layers=7");
  ModelAndBatch l = load_model(overrides);
  Expected<ForwardModel> m = lower_forward(l.model, l.batch);
  ASSERT_TRUE(m.ok()) << m.error().message();
  const ir::Function& f = m->module.function(0);
  std::vector<int64_t> windows = attention_windows(f);
  EXPECT_EQ(windows, (std::vector<int64_t>{4, 4, 4, 4, 4, 0, 4}));
  for (const char* name : {"self_attention.query_norm.scale", "self_attention.key_norm.scale",
                           "post_self_attention_norm.scale", "post_ffw_norm.scale"}) {
    EXPECT_NE(find_weight(*m, fmt::format("decoder.layers_6.{}", name)), nullptr) << name;
  }
  const frontend::WeightInfo* query =
      find_weight(*m, "decoder.layers_0.self_attention.query.kernel");
  ASSERT_NE(query, nullptr);
  EXPECT_DOUBLE_EQ(query->stddev, 1 / std::sqrt(32.0));
}

// olmo3 as MaxText builds it (models/olmo3.py): layers 0-2 attend within the window and layer 3
// globally (OLMO3_ATTENTION_PATTERN); no pre-norms, the attention module named `attention`, the
// qk-norm scales over all heads ([H*D] = 32, [K*D] = 16), post-attention and post-MLP norms; the
// query kernel N(0, 1/E) (the queries are scaled after RoPE).
TEST(Frontend, Olmo3WeightsAndWindowPattern) {
  ModelAndBatch l = load_model(tiny("olmo3-7b"));
  Expected<ForwardModel> m = lower_forward(l.model, l.batch);
  ASSERT_TRUE(m.ok()) << m.error().message();
  const ir::Function& f = m->module.function(0);
  std::vector<int64_t> windows = attention_windows(f);
  EXPECT_EQ(windows, (std::vector<int64_t>{4, 4, 4, 0}));
  std::vector<std::string> layer0;
  for (const frontend::WeightInfo& w : m->weights) {
    if (w.name.starts_with("decoder.layers_0.")) layer0.push_back(w.name.substr(17));
  }
  EXPECT_EQ(layer0,
            (std::vector<std::string>{
                "attention.query.kernel", "attention.key.kernel", "attention.value.kernel",
                "attention.query_norm.scale", "attention.key_norm.scale", "attention.out.kernel",
                "post_self_attention_layer_norm.scale", "mlp.wi_0.kernel", "mlp.wi_1.kernel",
                "mlp.wo.kernel", "post_mlp_layer_norm.scale"}));
  EXPECT_EQ(find_weight(*m, "decoder.layers_3.attention.query_norm.scale")->dims,
            (std::vector<int64_t>{32}));
  EXPECT_EQ(find_weight(*m, "decoder.layers_3.attention.key_norm.scale")->dims,
            (std::vector<int64_t>{16}));
  EXPECT_DOUBLE_EQ(find_weight(*m, "decoder.layers_0.attention.query.kernel")->stddev,
                   1 / std::sqrt(32.0));
}

// olmo3's blocks are MaxText's pattern of four layers; other block sizes, and a scanned stack
// that is not whole blocks, are refused naming the key.
TEST(Frontend, Olmo3RefusesOtherBlocks) {
  ModelAndBatch l = load_model(tiny("olmo3-7b"));
  l.model.inhomogeneous_layer_cycle_interval = 2;
  Expected<ForwardModel> m = lower_forward(l.model, l.batch);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code(), ExitCode::kUsage);
  EXPECT_NE(m.error().message().find("inhomogeneous_layer_cycle_interval=2 is not supported yet"),
            std::string::npos);
  l.model.inhomogeneous_layer_cycle_interval = 4;
  l.model.num_decoder_layers = 6;
  m = lower_forward(l.model, l.batch);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message().find("num_decoder_layers 6 must be a multiple of"),
            std::string::npos);
  l.model.scan_layers = false;
  EXPECT_TRUE(lower_forward(l.model, l.batch).ok());
}

// gpt_oss as MaxText builds it (models/gpt_oss.py): layer 0 within the window, layer 1 global
// (GPT_OSS_ATTENTION_PATTERN), as attention_stats ops (the sinks); layer 0's weights in first-use
// order with MaxText's module names (GptOssAttention, GptOssMlp), the sinks [H] = [4], the expert
// biases [X, Mm] = [4, 48] twice and [X, E] = [4, 32]; the query kernel N(0, 1/E) (queries scaled
// after RoPE); blocks of other than 2 layers, 3 scanned layers and the sinks on another family are
// refused by key.
TEST(Frontend, GptOssWeightsWindowsAndRefusals) {
  std::vector<std::string> overrides = tiny("gpt-oss-20b");
  for (const char* o :
       {"sliding_window_size=4", "num_experts=4", "num_experts_per_tok=2", "base_moe_mlp_dim=48"}) {
    overrides.push_back(o);
  }
  ModelAndBatch l = load_model(overrides);
  Expected<ForwardModel> m = lower_forward(l.model, l.batch);
  ASSERT_TRUE(m.ok()) << m.error().message();
  const ir::Function& f = m->module.function(0);
  std::vector<int64_t> windows;
  for (const ir::Op& op : f.ops()) {
    EXPECT_NE(op.kind, ir::OpKind::kAttention);
    if (op.kind == ir::OpKind::kAttentionStats) {
      windows.push_back(f.attrs(op).integer(ir::AttrKey::kSlidingWindow));
    }
  }
  EXPECT_EQ(windows, (std::vector<int64_t>{4, 0}));
  std::vector<std::string> layer0;
  for (const frontend::WeightInfo& w : m->weights) {
    if (w.name.starts_with("decoder.layers_0.")) layer0.push_back(w.name.substr(17));
  }
  EXPECT_EQ(layer0, (std::vector<std::string>{
                        "pre_self_attention_layer_norm.scale",
                        "GptOssAttention.query.kernel",
                        "GptOssAttention.query.bias",
                        "GptOssAttention.key.kernel",
                        "GptOssAttention.key.bias",
                        "GptOssAttention.value.kernel",
                        "GptOssAttention.value.bias",
                        "GptOssAttention.sinks",
                        "GptOssAttention.out.kernel",
                        "GptOssAttention.out.bias",
                        "post_self_attention_layer_norm.scale",
                        "GptOssMlp.gate.kernel",
                        "GptOssMlp.gate.bias",
                        "GptOssMlp.wi_0",
                        "GptOssMlp.wi_0_bias",
                        "GptOssMlp.wi_1",
                        "GptOssMlp.wi_1_bias",
                        "GptOssMlp.wo",
                        "GptOssMlp.wo_bias",
                    }));
  EXPECT_EQ(find_weight(*m, "decoder.layers_1.GptOssAttention.sinks")->dims,
            (std::vector<int64_t>{4}));
  EXPECT_EQ(find_weight(*m, "decoder.layers_1.GptOssMlp.wi_1_bias")->dims,
            (std::vector<int64_t>{4, 48}));
  EXPECT_EQ(find_weight(*m, "decoder.layers_1.GptOssMlp.wo_bias")->dims,
            (std::vector<int64_t>{4, 32}));
  EXPECT_EQ(find_weight(*m, "decoder.layers_1.GptOssAttention.out.bias")->dims,
            (std::vector<int64_t>{32}));
  EXPECT_DOUBLE_EQ(find_weight(*m, "decoder.layers_0.GptOssAttention.query.kernel")->stddev,
                   1 / std::sqrt(32.0));

  l.model.inhomogeneous_layer_cycle_interval = 4;
  m = lower_forward(l.model, l.batch);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code(), ExitCode::kUsage);
  EXPECT_NE(m.error().message().find("inhomogeneous_layer_cycle_interval=4 is not supported yet "
                                     "for decoder_block gpt_oss"),
            std::string::npos);
  l.model.inhomogeneous_layer_cycle_interval = 2;
  l.model.num_decoder_layers = 3;
  m = lower_forward(l.model, l.batch);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message().find("num_decoder_layers 3 must be a multiple of"),
            std::string::npos);
  l.model.scan_layers = false;
  EXPECT_TRUE(lower_forward(l.model, l.batch).ok());

  Expected<ModelSpec> sinks = model_spec_from_config(
      testing::load_derived(testing::base_yml(), {"attention_sink=true"}, 1));
  ASSERT_FALSE(sinks.ok());
  EXPECT_EQ(sinks.error().message(),
            "attention_sink=true (command line argument 1): attention sinks are supported for "
            "decoder_block gpt_oss only, not yet for llama2; set attention_sink=false.");
  Expected<ModelSpec> limit = model_spec_from_config(testing::load_derived(
      testing::base_yml(), {"model_name=mixtral-8x7b", "mlp_activations_limit=7.0"}, 1));
  ASSERT_FALSE(limit.ok());
  EXPECT_EQ(limit.error().message(),
            "mlp_activations_limit=7.0 (command line argument 2): the clamped expert activation "
            "is supported for decoder_block gpt_oss only, not yet for mixtral; set "
            "mlp_activations_limit=-1.0.");
}

// llama4 with 4 layers: layer 3 NoPE (nope_layer_interval 4), layers 1 and 3 MoE
// (interleave_moe_layer_step 2), the rest dense; MaxText's names and shapes, the query kernel's
// N(0, 1/E) (queries scaled by D^-0.5 after RoPE), the chunked layers' segment operand computed
// (t // chunk folded into the segment ids) and the NoPE layer's the batch's own; then MaxText's
// llama4 checks with its messages.
std::vector<std::string> tiny_llama4() {
  std::vector<std::string> o = tiny("llama4-17b-16e");
  for (const char* extra : {"base_num_decoder_layers=4", "num_experts=4", "base_moe_mlp_dim=16",
                            "chunk_attn_window_size=4", "interleave_moe_layer_step=2"}) {
    o.push_back(extra);
  }
  return o;
}

TEST(Frontend, Llama4LayerPatternWeightsAndRefusals) {
  ModelAndBatch l = load_model(tiny_llama4());
  Expected<ForwardModel> m = lower_forward(l.model, l.batch);
  ASSERT_TRUE(m.ok()) << m.error().message();
  const ir::Function& f = m->module.function(0);
  ir::Value segments = f.params()[m->weights.size() + 2];  // inputs_segmentation
  std::vector<bool> computed_segments;
  for (const ir::Op& op : f.ops()) {
    if (op.kind != ir::OpKind::kAttention) continue;
    EXPECT_EQ(f.attrs(op).integer(ir::AttrKey::kSlidingWindow), 0);
    computed_segments.push_back(f.operands(op)[3].id != segments.id);
  }
  EXPECT_EQ(computed_segments, (std::vector<bool>{true, true, true, false}));
  auto layer_weights = [&](int layer) {
    std::string prefix = fmt::format("decoder.layers_{}.", layer);
    std::vector<std::string> names;
    for (const frontend::WeightInfo& w : m->weights) {
      if (w.name.starts_with(prefix)) names.push_back(w.name.substr(prefix.size()));
    }
    return names;
  };
  std::vector<std::string> attention = {
      "pre_self_attention_layer_norm.scale", "self_attention.query.kernel",
      "self_attention.key.kernel",           "self_attention.value.kernel",
      "self_attention.out.kernel",           "post_self_attention_layer_norm.scale"};
  std::vector<std::string> dense = attention;
  for (const char* w : {"mlp.wi_0.kernel", "mlp.wi_1.kernel", "mlp.wo.kernel"}) dense.push_back(w);
  std::vector<std::string> moe = attention;
  for (const char* w :
       {"Llama4MoEBlock_0.MoeBlock_0.gate.kernel", "Llama4MoEBlock_0.MoeBlock_0.wi_0",
        "Llama4MoEBlock_0.MoeBlock_0.wi_1", "Llama4MoEBlock_0.MoeBlock_0.wo",
        "Llama4MoEBlock_0.shared_experts.wi_0.kernel",
        "Llama4MoEBlock_0.shared_experts.wi_1.kernel",
        "Llama4MoEBlock_0.shared_experts.wo.kernel"}) {
    moe.push_back(w);
  }
  EXPECT_EQ(layer_weights(0), dense);
  EXPECT_EQ(layer_weights(1), moe);
  EXPECT_EQ(layer_weights(2), dense);
  EXPECT_EQ(layer_weights(3), moe);
  EXPECT_EQ(find_weight(*m, "decoder.layers_1.Llama4MoEBlock_0.MoeBlock_0.wi_0")->dims,
            (std::vector<int64_t>{4, 32, 16}));
  EXPECT_EQ(find_weight(*m, "decoder.layers_1.Llama4MoEBlock_0.shared_experts.wo.kernel")->dims,
            (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(find_weight(*m, "decoder.layers_0.mlp.wo.kernel")->dims,
            (std::vector<int64_t>{48, 32}));
  EXPECT_DOUBLE_EQ(find_weight(*m, "decoder.layers_0.self_attention.query.kernel")->stddev,
                   1 / std::sqrt(32.0));
  EXPECT_EQ(frontend::scan_layout(l.model).layers_per_block, 4);

  // MaxText's checks (types.py) and what the scanned block needs.
  auto refusal = [](std::vector<std::string> overrides) {
    Config c = testing::load_derived(testing::base_yml(), overrides, 1);
    Expected<ModelSpec> spec = model_spec_from_config(c);
    if (!spec.ok()) return spec.error().message();
    Expected<ForwardModel> forward = lower_forward(*spec, 2, 12);
    return forward.ok() ? std::string("accepted") : forward.error().message();
  };
  std::vector<std::string> base = tiny_llama4();
  auto with = [&](const char* o) {
    std::vector<std::string> v = base;
    v.push_back(o);
    return v;
  };
  EXPECT_EQ(refusal(with("num_experts_per_tok=2")),
            "num_experts_per_tok=2 (command line argument 18): Only top-1 routing is supported "
            "for Llama4 for now! (MaxText's check); set num_experts_per_tok=1.");
  EXPECT_EQ(refusal(with("capacity_factor=1.0")),
            "capacity_factor=1.0 (command line argument 18): Llama4 decoder has not been tested "
            "with capacity_factor >= 0 -- please set that value to -1 for now! (MaxText's check)");
  EXPECT_NE(refusal(with("interleave_moe_layer_step=3"))
                .find("The number of decoder layers (4) must be divisible by interleave moe "
                      "layer step (3)"),
            std::string::npos);
  EXPECT_NE(refusal(with("chunk_attn_window_size=0"))
                .find("`chunk_attn_window_size` must be an integer > 0 for 'chunk' attention"),
            std::string::npos);
  EXPECT_NE(refusal(with("nope_layer_interval=-1")).find("llama4 needs nope_layer_interval >= 1"),
            std::string::npos);
  EXPECT_NE(refusal(with("inhomogeneous_layer_cycle_interval=2"))
                .find("inhomogeneous_layer_cycle_interval=2 is not supported yet for "
                      "decoder_block llama4 with scan_layers=true"),
            std::string::npos);
  EXPECT_EQ(refusal({"model_name=llama2-7b", "chunk_attn_window_size=4"}),
            "chunk_attn_window_size=4 (command line argument 2): is read by decoder_block llama4 "
            "only, not yet by llama2; leave it at its default (interleave_moe_layer_step=1, "
            "nope_layer_interval=-1, chunk_attn_window_size=0, temperature_tuning=false).");
}

// Chunked attention, checked from its definition: with chunks of 4 tokens (and no NoPE layer
// among the 2), the logits of tokens 4..7 of an 8-token sequence are those of the 4-token
// sequence of tokens 4..7 alone at positions 4..7 (each token sees only its own chunk; the
// router and experts act per token), and tokens 0..3's those of the first four alone. A chunk
// of 8 lets tokens 4..7 see 0..3, and their logits change.
TEST(Frontend, Llama4ChunkedAttentionSeesOnlyItsChunk) {
  ModelAndBatch l = load_model(
      {"model_name=llama4-17b-16e", "override_model_config=true", "base_emb_dim=32",
       "base_num_query_heads=4", "base_num_kv_heads=2", "head_dim=8", "base_mlp_dim=48",
       "base_moe_mlp_dim=16", "base_num_decoder_layers=2", "num_experts=4",
       "interleave_moe_layer_step=2", "chunk_attn_window_size=4", "scan_layers=false",
       "vocab_size=96", "max_target_length=8", "per_device_batch_size=1", "dtype=float32"});
  frontend::ForwardOptions options;
  options.dtype_override = ir::DType::kF64;
  options.return_logits = true;
  std::vector<double> tokens = {5, 17, 42, 3, 88, 11, 60, 29};
  auto logits = [&](const ModelSpec& spec, int64_t first, int64_t length) {
    Expected<ForwardModel> m = lower_forward(spec, 1, length, options);
    EXPECT_TRUE(m.ok()) << m.error().message();
    EXPECT_TRUE(frontend::add_init_function(*m).ok());
    std::vector<ir::HostTensor> seed = {ir::HostTensor::scalar(5, ir::DType::kU32)};
    std::vector<ir::HostTensor> args = *ir::interpret(m->module, "init", seed);
    ir::TensorType type{ir::DType::kS32, {1, length}};
    std::vector<double> in, position, segment, target;
    for (int64_t t = first; t < first + length; ++t) {
      in.push_back(tokens[static_cast<size_t>(t)]);
      position.push_back(static_cast<double>(t));
      segment.push_back(1);
      target.push_back(tokens[static_cast<size_t>((t + 1) % 8)]);
    }
    for (const std::vector<double>* v : {&in, &position, &segment, &target, &position, &segment}) {
      args.push_back(ir::HostTensor::of(type, *v));
    }
    Expected<std::vector<ir::HostTensor>> out = ir::interpret(m->module, "forward", args);
    EXPECT_TRUE(out.ok()) << out.error().message();
    return out->back().values;  // [1, length, V]
  };
  const int64_t v = l.model.vocab_size;
  std::vector<double> whole = logits(l.model, 0, 8);
  std::vector<double> first = logits(l.model, 0, 4), second = logits(l.model, 4, 4);
  ASSERT_EQ(whole.size(), static_cast<size_t>(8 * v));
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_NEAR(whole[i], first[i], 1e-12) << i;
    EXPECT_NEAR(whole[4 * v + i], second[i], 1e-12) << i;
  }
  ModelSpec longer = l.model;
  longer.llama4.chunk_attn_window_size = 8;
  std::vector<double> unchunked = logits(longer, 0, 8);
  double largest = 0;
  for (size_t i = 0; i < second.size(); ++i) {
    largest = std::max(largest, std::abs(unchunked[4 * v + i] - second[i]));
  }
  EXPECT_GT(largest, 1e-3);
}

// Options a family does not lower are refused with the key, not silently dropped.
TEST(Frontend, RefusesOptionsItsFamilyDoesNotLower) {
  ModelAndBatch l = load_model(tiny("llama2-7b"));
  l.model.attention.qk_norm = true;
  Expected<ForwardModel> m = lower_forward(l.model, l.batch);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code(), ExitCode::kUsage);
  EXPECT_EQ(m.error().message(), "use_qk_norm=true is not supported yet for decoder_block llama2");
  ModelAndBatch q = load_model(tiny("qwen3-8b"));
  q.model.attention.bias = true;
  m = lower_forward(q.model, q.batch);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().message(),
            "attention_bias=true is not supported yet for decoder_block qwen3");
}

// Runs init(seed) then forward on random tokens; returns (loss, total_weights). With
// `logits_kernel_scale`, the initialised logits kernel is multiplied by it before the forward.
std::pair<double, double> loss_at_init(const ModelAndBatch& l, uint32_t seed,
                                       double logits_kernel_scale = 1.0) {
  Expected<ForwardModel> m = lower_forward(l.model, l.batch);
  EXPECT_TRUE(m.ok());
  EXPECT_TRUE(frontend::add_init_function(*m).ok());
  std::vector<ir::HostTensor> seed_arg = {ir::HostTensor::scalar(seed, ir::DType::kU32)};
  auto weights = ir::interpret(m->module, "init", seed_arg);
  EXPECT_TRUE(weights.ok()) << weights.error().message();
  std::vector<ir::HostTensor> args = *weights;
  if (logits_kernel_scale != 1.0) {
    auto kernel = std::find_if(m->weights.begin(), m->weights.end(), [](const auto& w) {
      return w.name == "decoder.logits_dense.kernel";
    });
    EXPECT_NE(kernel, m->weights.end());
    if (kernel != m->weights.end())
      for (double& x : args[kernel - m->weights.begin()].values) x *= logits_kernel_scale;
  }
  int64_t rows = m->batch_rows, length = m->length;
  ir::TensorType batch_type{ir::DType::kS32, {rows, length}};
  std::vector<double> tokens, positions, segments;
  uint64_t state = 12345;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t t = 0; t < length; ++t) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      tokens.push_back(static_cast<double>((state >> 33) % l.model.vocab_size));
      positions.push_back(static_cast<double>(t));
      segments.push_back(1);
    }
  }
  std::vector<double> targets(tokens.begin() + 1, tokens.end());
  targets.push_back(0);
  args.push_back(ir::HostTensor::of(batch_type, tokens));
  args.push_back(ir::HostTensor::of(batch_type, positions));
  args.push_back(ir::HostTensor::of(batch_type, segments));
  args.push_back(ir::HostTensor::of(batch_type, targets));
  args.push_back(ir::HostTensor::of(batch_type, positions));
  args.push_back(ir::HostTensor::of(batch_type, segments));
  auto out = ir::interpret(m->module, "forward", args);
  EXPECT_TRUE(out.ok()) << out.error().message();
  return {(*out)[0].values[0], (*out)[2].values[0]};
}

// At MaxText's initialisation the final norm makes every position's features unit-RMS and the
// logits kernel has variance 1/E, so the logits are ~N(0, 1): E[logsumexp] = ln V + 1/2 for large
// V, and the target's logit averages 0. MaxText's own first step agrees: loss 10.877 at
// V = 32000 (ln V = 10.373). With logits_via_embedding and normalize_embedding_logits the
// embedding's N(0, 1) rows, divided by sqrt(E), give the same unit variance. The per-token loss
// varies with the target's logit (standard deviation 1), so the mean is taken over 4 seeds of
// 512 tokens: a standard error of about 0.022 against the 0.1 asked.
TEST(Frontend, LossAtInitialisationIsLnVocabPlusHalf) {
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "logits_via_embedding" : "logits_dense");
    ModelAndBatch l =
        load_model({"model_name=llama2-7b", "override_model_config=true", "base_emb_dim=64",
                    "base_num_query_heads=4", "base_num_kv_heads=2", "head_dim=16",
                    "base_mlp_dim=128", "base_num_decoder_layers=2", "vocab_size=2048",
                    "max_target_length=64", "per_device_batch_size=8", "dtype=float32",
                    tied ? "logits_via_embedding=true" : "logits_via_embedding=false"});
    double mean = 0;
    for (uint32_t seed : {7u, 8u, 9u, 10u}) {
      auto [loss, total_weights] = loss_at_init(l, seed);
      EXPECT_EQ(total_weights, 8 * 64);
      mean += loss / 4;
    }
    double expected = std::log(2048.0) + 0.5;
    EXPECT_NEAR(mean, expected, 0.1) << "ln V = " << std::log(2048.0);
    std::printf("%s: mean loss at init %.4f, ln V + 1/2 = %.4f\n", tied ? "tied" : "logits_dense",
                mean, expected);
  }
}

// The same for a tiny deepseek-style MoE model (MLA, a dense first layer, then top-2 of 8 experts
// with a shared expert): the final norm and the logits kernel set the loss at initialisation,
// whatever the layers compute.
TEST(Frontend, MoeLossAtInitialisationIsLnVocabPlusHalf) {
  ModelAndBatch l = load_model(
      {"model_name=deepseek2-16b", "override_model_config=true", "base_emb_dim=64",
       "base_num_query_heads=4", "base_num_kv_heads=4", "base_mlp_dim=128", "base_moe_mlp_dim=32",
       "base_num_decoder_layers=3", "first_num_dense_layers=1", "num_experts=8",
       "num_experts_per_tok=2", "shared_experts=1", "kv_lora_rank=16", "qk_nope_head_dim=8",
       "qk_rope_head_dim=8", "v_head_dim=8", "vocab_size=2048", "max_target_length=64",
       "per_device_batch_size=8", "dtype=float32"});
  double mean = 0;
  for (uint32_t seed : {7u, 8u, 9u, 10u}) mean += loss_at_init(l, seed).first / 4;
  double expected = std::log(2048.0) + 0.5;
  EXPECT_NEAR(mean, expected, 0.1) << "ln V = " << std::log(2048.0);
  std::printf("deepseek-style MoE: mean loss at init %.4f, ln V + 1/2 = %.4f\n", mean, expected);
}

// deepseek's layers carry MaxText's names: its unscanned tree (decoders.py) numbers the dense and
// the MoE layers apart — `decoder.dense_layers_0`, then `decoder.moe_layers_0`,
// `decoder.moe_layers_1` for decoder layers 0, 1 and 2 (first_num_dense_layers=1) — in the
// weights (so in checkpoints) and in the scopes; the ops keep the decoder layer index as their
// layer fact, the same place in the two MoE layers is one site (one scanned stack) and the dense
// layer's query another, and `inspect --merge-layers` groups them as MaxText's two stacks.
TEST(Frontend, DeepseekLayersAreNamedAsMaxTextsDenseAndMoeStacks) {
  ModelAndBatch l = load_model(
      {"model_name=deepseek2-16b", "override_model_config=true", "base_emb_dim=64",
       "base_num_query_heads=4", "base_num_kv_heads=4", "base_mlp_dim=128", "base_moe_mlp_dim=32",
       "base_num_decoder_layers=3", "first_num_dense_layers=1", "num_experts=8",
       "num_experts_per_tok=2", "shared_experts=1", "kv_lora_rank=16", "qk_nope_head_dim=8",
       "qk_rope_head_dim=8", "v_head_dim=8", "vocab_size=96", "max_target_length=8",
       "per_device_batch_size=2", "dtype=float32"});
  Expected<ForwardModel> m = lower_forward(l.model, l.batch);
  ASSERT_TRUE(m.ok()) << m.error().message();
  std::vector<std::string> layers;
  for (const frontend::WeightInfo& w : m->weights) {
    EXPECT_FALSE(w.name.starts_with("decoder.layers_")) << w.name;
    if (!w.name.starts_with("decoder.") || w.name.starts_with("decoder.decoder_norm") ||
        w.name.starts_with("decoder.logits_dense")) {
      continue;
    }
    std::string layer = w.name.substr(0, w.name.find('.', 8));
    if (layers.empty() || layers.back() != layer) layers.push_back(layer);
  }
  EXPECT_EQ(layers, (std::vector<std::string>{"decoder.dense_layers_0", "decoder.moe_layers_0",
                                              "decoder.moe_layers_1"}));
  EXPECT_EQ(find_weight(*m, "decoder.dense_layers_0.mlp.wi_0.kernel")->dims,
            (std::vector<int64_t>{64, 128}));
  EXPECT_EQ(find_weight(*m, "decoder.moe_layers_1.DeepSeekMoeBlock_0.MoeBlock_0.wi_0")->dims,
            (std::vector<int64_t>{8, 64, 32}));
  EXPECT_EQ(
      find_weight(*m, "decoder.moe_layers_0.DeepSeekMoeBlock_0.shared_experts.wo.kernel")->dims,
      (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(find_weight(*m, "decoder.moe_layers_0.self_attention.wkv_a.kernel")->dims,
            (std::vector<int64_t>{64, 16 + 8}));

  // Layer facts and sites per layer: the two MoE layers' ops are at the same places (wi_1's in
  // decoder layer 1 too, whose name ends in "_1"), the dense layer's at places of its own.
  const ir::Function& f = m->module.function(0);
  std::vector<std::set<uint16_t>> sites(3);
  for (ir::OpIndex i = 0; i < f.num_ops(); ++i) {
    const ir::OpFacts& facts = f.facts(i);
    if (!facts.in_layer()) continue;
    std::string_view scope = f.scope(f.op(i));
    std::string want = facts.layer == 0 ? "decoder/dense_layers_0"
                                        : fmt::format("decoder/moe_layers_{}", facts.layer - 1);
    EXPECT_TRUE(scope.starts_with(want)) << scope << " in layer " << facts.layer;
    EXPECT_NE(facts.site, 0) << scope;
    sites[static_cast<size_t>(facts.layer)].insert(facts.site);
  }
  EXPECT_GT(sites[1].size(), 10u);
  EXPECT_EQ(sites[1], sites[2]);
  for (uint16_t site : sites[0]) EXPECT_EQ(sites[1].count(site), 0u);

  CountOptions merged;
  merged.merge_layers = true;
  std::vector<std::string> groups;
  for (const ScopeFlops& s : count_function(f, merged).by_scope) {
    if (s.scope.find("layers") != std::string::npos) groups.push_back(s.scope);
  }
  EXPECT_EQ(groups, (std::vector<std::string>{"decoder/dense_layers_*", "decoder/moe_layers_*"}));
}

// The same for a tiny llama4-style model (4 layers: chunked RoPE layers and a NoPE layer, dense
// and MoE layers with llama4's top-1 sigmoid router and a shared expert).
TEST(Frontend, Llama4LossAtInitialisationIsLnVocabPlusHalf) {
  ModelAndBatch l = load_model(
      {"model_name=llama4-17b-16e", "override_model_config=true", "base_emb_dim=64",
       "base_num_query_heads=4", "base_num_kv_heads=2", "head_dim=16", "base_mlp_dim=128",
       "base_moe_mlp_dim=32", "base_num_decoder_layers=4", "num_experts=8",
       "interleave_moe_layer_step=2", "chunk_attn_window_size=16", "vocab_size=2048",
       "max_target_length=64", "per_device_batch_size=8", "dtype=float32"});
  double mean = 0;
  for (uint32_t seed : {7u, 8u, 9u, 10u}) mean += loss_at_init(l, seed).first / 4;
  double expected = std::log(2048.0) + 0.5;
  EXPECT_NEAR(mean, expected, 0.1) << "ln V = " << std::log(2048.0);
  std::printf("llama4-style: mean loss at init %.4f, ln V + 1/2 = %.4f\n", mean, expected);
}

// The "within 0.1 of ln V" is the loss of near-uniform predictions. Scaling MaxText's
// logits kernel by s gives logits ~N(0, s^2) and E[loss] = ln V + s^2/2: s = 0 is exactly ln V
// (every logit is 0), s = 0.25 is within 0.1 of it, and s = 1 is MaxText's own initialisation.
// The per-token loss varies with the target's logit (standard deviation s), so the mean over
// N tokens is held to three standard errors, 3 s / sqrt(N).
TEST(Frontend, LossAtInitialisationIsLnVocabPlusHalfTheLogitVariance) {
  ModelAndBatch l =
      load_model({"model_name=llama2-7b", "override_model_config=true", "base_emb_dim=64",
                  "base_num_query_heads=4", "base_num_kv_heads=2", "head_dim=16",
                  "base_mlp_dim=128", "base_num_decoder_layers=2", "vocab_size=2048",
                  "max_target_length=64", "per_device_batch_size=8", "dtype=float32"});
  const double ln_v = std::log(2048.0), tokens = 8 * 64;
  EXPECT_NEAR(loss_at_init(l, 7, 0.0).first, ln_v, 1e-5);
  for (double s : {0.25, 0.5, 1.0}) {
    SCOPED_TRACE(s);
    double loss = loss_at_init(l, 7, s).first;
    EXPECT_NEAR(loss, ln_v + s * s / 2, 3 * s / std::sqrt(tokens));
    if (s <= 0.25) {
      EXPECT_NEAR(loss, ln_v, 0.1);
    }
    std::printf("logits kernel x %.2f: loss %.4f, ln V + s^2/2 = %.4f\n", s, loss,
                ln_v + s * s / 2);
  }
}

TEST(Frontend, RejectsWhatItCannotLower) {
  ModelAndBatch l = load_model(tiny("llama2-7b"));
  l.model.mlp.activations = {"swish2"};
  Expected<ForwardModel> m = lower_forward(l.model, l.batch);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code(), ExitCode::kUsage);
  EXPECT_NE(m.error().message().find("mlp_activations: 'swish2'"), std::string::npos);

  ModelAndBatch g = load_model(tiny("gpt3-52k"));
  g.model.num_kv_heads = 2;
  m = lower_forward(g.model, g.batch);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message().find("gpt3 needs num_kv_heads == num_query_heads"),
            std::string::npos);
}

// Ops carry their decoder layer as a 16-bit index (ir::OpFacts): more layers are refused before
// anything is lowered.
TEST(Frontend, RejectsMoreLayersThanTheIrsLayerIndexHolds) {
  ModelAndBatch l = load_model(tiny("llama2-7b"));
  l.model.num_decoder_layers = 40000;
  Expected<ForwardModel> m = lower_forward(l.model, l.batch);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code(), ExitCode::kUsage);
  EXPECT_NE(m.error().message().find("num_decoder_layers 40000 is more than the IR's layer index "
                                     "holds (32767)"),
            std::string::npos)
      << m.error().message();
}

// The forward's ops carry their layer (layer i's ops, and only those) and the head its region.
TEST(Frontend, LayerOpsCarryTheirLayerAndTheHeadItsRegion) {
  ModelAndBatch l = load_model(tiny("llama2-7b"));
  Expected<ForwardModel> m = lower_forward(l.model, l.batch);
  ASSERT_TRUE(m.ok()) << m.error().message();
  const ir::Function& f = m->module.function(0);
  std::vector<int64_t> per_layer(static_cast<size_t>(l.model.num_decoder_layers), 0);
  int64_t logits = 0;
  for (ir::OpIndex i = 0; i < f.num_ops(); ++i) {
    const ir::OpFacts& facts = f.facts(i);
    EXPECT_EQ(facts.phase, ir::OpPhase::kForward);
    std::string_view scope = f.scope(f.op(i));
    if (facts.in_layer()) {
      ASSERT_LT(facts.layer, l.model.num_decoder_layers);
      EXPECT_TRUE(scope.starts_with(fmt::format("decoder/layers_{}", facts.layer))) << scope;
      ++per_layer[static_cast<size_t>(facts.layer)];
    }
    if (facts.region == ir::OpRegion::kLogits) ++logits;
  }
  for (int64_t n : per_layer) EXPECT_EQ(n, per_layer[0]);  // every layer lowers the same ops
  EXPECT_GT(per_layer[0], 0);
  EXPECT_GT(logits, 0);
}

}  // namespace
}  // namespace precast
