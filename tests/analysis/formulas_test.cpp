// MaxText's parameter and FLOP numbers from the formulas, checked against published figures:
// MaxText's own log line for the default model, and the models' published parameter counts.
#include <gtest/gtest.h>

#include "compiler/analysis/ModelFormulas.h"
#include "compiler/config/ModelSpec.h"
#include "tests/support/ConfigTestUtil.h"

namespace precast {
namespace {

using testing::load_model;
using testing::ModelAndBatch;

int64_t parameters_of(const std::string& model_name) {
  return count_parameters(load_model({"model_name=" + model_name}).model);
}

// MaxText's published log for the default model at per_device_batch_size=1,
// max_target_length=2048 (maxtext-facts §d).
TEST(Formulas, DefaultModelMatchesMaxTextLog) {
  ModelAndBatch a = load_model({"per_device_batch_size=1", "max_target_length=2048"}, 32);
  EXPECT_EQ(format_parameter_line(count_parameters(a.model)), "number parameters: 1.104 billion");
  EXPECT_EQ(format_tflops_block(model_flops_per_device(a.model, a.batch)),
            "Per train step:\n Total TFLOPs: 13.59 \n split as 93.93% learnable weight flops and "
            "6.07% attention flops");
}

// Published parameter counts (the models' released checkpoints). MaxText's gemma configs pad the
// vocabulary from 256000 to 256128 rows, which adds 128 * emb_dim embedding parameters.
TEST(Formulas, ParameterCountsMatchPublishedSizes) {
  EXPECT_EQ(parameters_of("llama2-7b"), 6'738'415'616);
  EXPECT_EQ(parameters_of("llama2-13b"), 13'015'864'320);
  EXPECT_EQ(parameters_of("llama2-70b"), 68'976'648'192);
  EXPECT_EQ(parameters_of("llama3-8b"), 8'030'261'248);
  EXPECT_EQ(parameters_of("llama3-70b"), 70'553'706'496);
  EXPECT_EQ(parameters_of("llama3.1-405b"), 405'853'388'800);
  EXPECT_EQ(parameters_of("mistral-7b"), 7'241'732'096);
  EXPECT_EQ(parameters_of("gemma-7b"), 8'537'680'896 + 128 * 3072);
  EXPECT_EQ(parameters_of("gemma-2b"), 2'506'172'416 + 128 * 2048);
  EXPECT_EQ(parameters_of("gemma2-2b"), 2'614'341'888 + 128 * 2304);
  EXPECT_EQ(parameters_of("gemma2-9b"), 9'241'705'984 + 128 * 3584);
  EXPECT_EQ(parameters_of("gemma2-27b"), 27'227'128'320 + 128 * 4608);
}

// Qwen3's published sizes, counted by hand from the released checkpoints' config.json
// (hidden_size E, intermediate_size M, num_hidden_layers L, num_attention_heads H,
// num_key_value_heads K, head_dim D, vocab_size V, tie_word_embeddings): per layer q, k, v and
// o kernels, the gated MLP, two RMSNorm scales and the q_norm / k_norm scales [D]; the
// embedding, an lm_head unless tied, the final norm. Qwen publishes 8,190,735,360 for Qwen3-8B
// and 0.44 B non-embedding parameters for Qwen3-0.6B.
int64_t qwen3_by_hand(int64_t e, int64_t m, int64_t layers, int64_t h, int64_t k, int64_t d,
                      int64_t v, bool tied) {
  int64_t per_layer = e * h * d + 2 * e * k * d + h * d * e + 3 * e * m + 2 * e + 2 * d;
  return per_layer * layers + v * e * (tied ? 1 : 2) + e;
}

TEST(Formulas, Qwen3ParameterCountsMatchPublishedSizes) {
  EXPECT_EQ(qwen3_by_hand(4096, 12288, 36, 32, 8, 128, 151936, false), 8'190'735'360);
  EXPECT_EQ(parameters_of("qwen3-8b"), 8'190'735'360);
  EXPECT_EQ(parameters_of("qwen3-8b-base"), 8'190'735'360);
  int64_t small = qwen3_by_hand(1024, 3072, 28, 16, 8, 128, 151936, true);
  EXPECT_EQ(parameters_of("qwen3-0.6b"), small);
  EXPECT_EQ(format_parameter_line(small - 151936 * 1024 - 1024),
            "number parameters: 0.440 billion");  // non-embedding
  EXPECT_EQ(parameters_of("qwen3-1.7b"), qwen3_by_hand(2048, 6144, 28, 16, 8, 128, 151936, true));
  EXPECT_EQ(parameters_of("qwen3-4b"), qwen3_by_hand(2560, 9728, 36, 32, 8, 128, 151936, true));
  EXPECT_EQ(parameters_of("qwen3-14b"), qwen3_by_hand(5120, 17408, 40, 40, 8, 128, 151936, false));
  EXPECT_EQ(parameters_of("qwen3-32b"), qwen3_by_hand(5120, 25600, 64, 64, 8, 128, 151936, false));
}

// Qwen2.5's published sizes (1.54 B, 7.62 B, 14.7 B), counted the same way from the released
// config.json values plus the q/k/v biases (attention_bias; out has none): 1,543,714,304,
// 7,615,616,512 and 14,770,033,664.
int64_t qwen2_by_hand(int64_t e, int64_t m, int64_t layers, int64_t h, int64_t k, int64_t d,
                      int64_t v, bool tied) {
  int64_t per_layer = e * h * d + 2 * e * k * d + h * d * e + 3 * e * m + 2 * e + (h + 2 * k) * d;
  return per_layer * layers + v * e * (tied ? 1 : 2) + e;
}

TEST(Formulas, Qwen2ParameterCountsMatchPublishedSizes) {
  EXPECT_EQ(qwen2_by_hand(1536, 8960, 28, 12, 2, 128, 151936, true), 1'543'714'304);
  EXPECT_EQ(qwen2_by_hand(3584, 18944, 28, 28, 4, 128, 152064, false), 7'615'616'512);
  EXPECT_EQ(qwen2_by_hand(5120, 13824, 48, 40, 8, 128, 152064, false), 14'770'033'664);
  EXPECT_EQ(parameters_of("qwen2.5-1.5b"), 1'543'714'304);
  EXPECT_EQ(parameters_of("qwen2.5-7b"), 7'615'616'512);
  EXPECT_EQ(parameters_of("qwen2.5-14b"), 14'770'033'664);
  EXPECT_EQ(format_parameter_line(parameters_of("qwen2.5-7b")), "number parameters: 7.616 billion");
}

// Gemma 3's text decoders, counted by hand from the released text_config values: per layer q, k,
// v and o kernels, the gelu-gated MLP, four RMSNorm scales (pre/post attention, pre/post FFW)
// and the q/k norm scales [D]; the embedding (tied logits) and the final norm. The published
// language-model sizes: 3,880,099,328 (gemma3-4b, "3.88 B"), 11,765,788,416 and 27,009,002,240.
int64_t gemma3_by_hand(int64_t e, int64_t m, int64_t layers, int64_t h, int64_t k, int64_t d) {
  int64_t per_layer = e * h * d + 2 * e * k * d + h * d * e + 3 * e * m + 4 * e + 2 * d;
  return per_layer * layers + 262144 * e + e;
}

TEST(Formulas, Gemma3TextDecoderParameterCountsMatchPublishedSizes) {
  EXPECT_EQ(gemma3_by_hand(2560, 10240, 34, 8, 4, 256), 3'880'099'328);
  EXPECT_EQ(gemma3_by_hand(3840, 15360, 48, 16, 8, 256), 11'765'788'416);
  EXPECT_EQ(gemma3_by_hand(5376, 21504, 62, 32, 16, 128), 27'009'002'240);
  EXPECT_EQ(parameters_of("gemma3-4b"), 3'880'099'328);
  EXPECT_EQ(parameters_of("gemma3-12b"), 11'765'788'416);
  EXPECT_EQ(parameters_of("gemma3-27b"), 27'009'002'240);
  EXPECT_EQ(format_parameter_line(parameters_of("gemma3-4b")), "number parameters: 3.880 billion");
}

// OLMo 3, counted by hand from the released config.json values (allenai/Olmo-3-7B-Instruct,
// Olmo-3.1-32B-Instruct): per layer q, k, v and o kernels, the SwiGLU MLP, the post-attention and
// post-MLP norms [E] and the qk-norm scales over all heads, [H*D] and [K*D]; the embedding, an
// untied lm_head (V = 100278) and the final norm. Ai2's model cards give 7.3 B and 32.2 B.
int64_t olmo3_by_hand(int64_t e, int64_t m, int64_t layers, int64_t h, int64_t k) {
  const int64_t d = 128, v = 100278;
  int64_t per_layer = e * h * d + 2 * e * k * d + h * d * e + 3 * e * m + 2 * e + (h + k) * d;
  return per_layer * layers + 2 * v * e + e;
}

TEST(Formulas, Olmo3ParameterCountsMatchPublishedSizes) {
  EXPECT_EQ(olmo3_by_hand(4096, 11008, 32, 32, 32), 7'298'011'136);
  EXPECT_EQ(olmo3_by_hand(5120, 27648, 64, 40, 8), 32'233'522'176);
  EXPECT_EQ(parameters_of("olmo3-7b"), 7'298'011'136);
  EXPECT_EQ(parameters_of("olmo3-7b-pt"), 7'298'011'136);
  EXPECT_EQ(parameters_of("olmo3-32b"), 32'233'522'176);
  EXPECT_EQ(format_parameter_line(parameters_of("olmo3-7b")), "number parameters: 7.298 billion");
  EXPECT_EQ(format_parameter_line(parameters_of("olmo3-32b")), "number parameters: 32.234 billion");
}

// GPT-3 175B by hand: per layer two LayerNorms (scale+bias), fused qkv kernel+bias, output
// kernel+bias, MLP kernels+biases; plus token and learned position embeddings and final norm.
TEST(Formulas, Gpt3ParameterCountByHand) {
  const int64_t e = 12288, h = 96, d = 128, m = 49152, layers = 96, v = 50304, positions = 16384;
  int64_t per_layer =
      4 * e + (e * 3 * h * d + 3 * h * d) + (h * d * e + e) + (e * m + m) + (m * e + e);
  EXPECT_EQ(per_layer, 1'812'099'072);
  EXPECT_EQ(parameters_of("gpt3-175b"), per_layer * layers + v * e + positions * e + 2 * e);
  EXPECT_EQ(format_parameter_line(parameters_of("gpt3-175b")),
            "number parameters: 174.781 billion");
}

TEST(Formulas, GradientAccumulationMultipliesFlopsAndTokens) {
  ModelAndBatch one = load_model({"per_device_batch_size=1", "max_target_length=2048"});
  ModelAndBatch four = load_model(
      {"per_device_batch_size=1", "max_target_length=2048", "gradient_accumulation_steps=4"});
  EXPECT_EQ(model_flops_per_device(four.model, four.batch).total(),
            4 * model_flops_per_device(one.model, one.batch).total());
  EXPECT_DOUBLE_EQ(tokens_per_device(one.batch), 2048);
  EXPECT_DOUBLE_EQ(tokens_per_device(four.batch), 8192);
  ModelAndBatch half = load_model({"per_device_batch_size=0.5", "max_target_length=1024"}, 8);
  EXPECT_DOUBLE_EQ(tokens_per_device(half.batch), 512);
}

// Hand count for llama2-7b at B=1, T=4096: weights 2*B*T*(params in matmuls), x3; attention
// 4*B*T^2*H*D/2 per layer, x3.
TEST(Formulas, Llama2SevenBillionByHand) {
  ModelAndBatch a =
      load_model({"model_name=llama2-7b", "per_device_batch_size=1", "max_target_length=4096"});
  ModelFlops flops = model_flops_per_device(a.model, a.batch);
  const long double t = 4096, e = 4096, m = 11008, v = 32000, layers = 32;
  long double matmul_params = layers * (4 * e * e + 3 * e * m) + e * v;  // unembedding only
  EXPECT_EQ(flops.learnable, 3 * 2 * t * matmul_params);
  EXPECT_EQ(flops.attention, 3 * layers * 4 * t * t * e / 2);
}

}  // namespace
}  // namespace precast
