// Mixture-of-experts and MLA families (deepseek, mixtral, qwen3_moe): parameter counts and model
// FLOPs against MaxText's published log for deepseek2-16b and the models' published sizes, each
// counted here by hand from the released checkpoints' dimensions (not through ModelFormulas).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "compiler/analysis/IrCounts.h"
#include "compiler/analysis/ModelFormulas.h"
#include "compiler/config/ModelSpec.h"
#include "compiler/frontend/Frontend.h"
#include "tests/support/ConfigTestUtil.h"

namespace precast {
namespace {

using testing::load_model;
using testing::ModelAndBatch;

int64_t parameters_of(std::vector<std::string> overrides) {
  return count_parameters(load_model(std::move(overrides)).model);
}

// MaxText's logging guide: deepseek2-16b, per_device_batch_size=24, max_target_length=2048 on
// v5p-8 (4 devices): 764.67 TFLOPs split 94.54% / 5.46%; 15.933 billion parameters in that
// (pre-September-2025) log, 15.706 billion from MaxText HEAD (maxtext-facts §d).
TEST(MoeFormulas, Deepseek2SixteenBMatchesMaxTextLog) {
  ModelAndBatch a = load_model(
      {"model_name=deepseek2-16b", "per_device_batch_size=24", "max_target_length=2048"}, 4);
  EXPECT_EQ(format_tflops_block(model_flops_per_device(a.model, a.batch)),
            "Per train step:\n Total TFLOPs: 764.67 \n split as 94.54% learnable weight flops and "
            "5.46% attention flops");
  EXPECT_EQ(format_parameter_line(count_parameters(a.model)), "number parameters: 15.706 billion");
  EXPECT_EQ(format_parameter_line(
                parameters_of({"model_name=deepseek2-16b", "mla_legacy_param_count=true"})),
            "number parameters: 15.933 billion");
}

// deepseek by hand: embedding and lm_head V*E, final norm E; per layer two norms, MLA (query or
// wq_a + q_norm + wq_b; wkv_a [E, kv_rank + rope]; kv_norm; wkv_b [kv_rank, H, nope + v]; out
// [H, v, E]); the first `dense` layers a gated MLP 3*E*M, the others the router E*X (+X bias),
// X experts 3*E*Mm and the shared experts 3*E*(S*Mm).
struct Deepseek {
  int64_t e, h, m, moe_m, layers, dense, v, experts, shared, q_rank, kv_rank;
  bool bias;
  int64_t count() const {
    const int64_t nope = 128, rope = 64, vd = 128;
    int64_t query =
        q_rank == 0 ? e * h * (nope + rope) : e * q_rank + q_rank + q_rank * h * (nope + rope);
    int64_t mla = query + e * (kv_rank + rope) + kv_rank + kv_rank * h * (nope + vd) + h * vd * e;
    int64_t moe =
        e * experts + (bias ? experts : 0) + experts * 3 * e * moe_m + 3 * e * shared * moe_m;
    return 2 * v * e + e + layers * (mla + 2 * e) + dense * 3 * e * m + (layers - dense) * moe;
  }
};

TEST(MoeFormulas, DeepseekParameterCountsMatchPublishedSizes) {
  // DeepSeek-V2-Lite 15.7 B, DeepSeek-V2 235.7 B, DeepSeek-V3 671 B (main model, without MTP),
  // Kimi K2 1.026 T.
  Deepseek v2_lite{2048, 16, 10944, 1408, 27, 1, 102400, 64, 2, 0, 512, false};
  Deepseek v2{5120, 128, 12288, 1536, 60, 1, 102400, 160, 2, 1536, 512, false};
  Deepseek v3{7168, 128, 18432, 2048, 61, 3, 129280, 256, 1, 1536, 512, true};
  Deepseek kimi{7168, 64, 18432, 2048, 61, 1, 163840, 384, 1, 1536, 512, true};
  EXPECT_EQ(v2_lite.count(), 15'706'484'224);
  EXPECT_EQ(v3.count(), 671'026'419'200);
  EXPECT_EQ(parameters_of({"model_name=deepseek2-16b"}), v2_lite.count());
  EXPECT_EQ(parameters_of({"model_name=deepseek2-236b"}), v2.count());
  EXPECT_EQ(parameters_of({"model_name=deepseek3-671b"}), v3.count());
  EXPECT_EQ(parameters_of({"model_name=kimi-k2-1t"}), kimi.count());
  // The legacy count adds the unused key and value kernels [E, K, 128] of every layer, and the
  // query kernel [E, H, 128] where a query LoRA is used.
  EXPECT_EQ(parameters_of({"model_name=deepseek2-16b", "mla_legacy_param_count=true"}),
            v2_lite.count() + int64_t{27} * 2 * 2048 * 16 * 128);
  EXPECT_EQ(parameters_of({"model_name=deepseek2-16b", "mla_legacy_param_count=true"}),
            15'932'976'640);
  EXPECT_EQ(parameters_of({"model_name=deepseek3-671b", "mla_legacy_param_count=true"}),
            v3.count() + int64_t{61} * 3 * 7168 * 128 * 128);
}

// mixtral and qwen3_moe by hand: per layer q, k, v, o kernels, two norms, (qwen3: q_norm and
// k_norm [D]), the router E*X and X experts 3*E*Mm; embedding, lm_head, final norm. Published:
// Mixtral-8x7B 46,702,792,704, Mixtral-8x22B 140.6 B, Qwen3-30B-A3B 30.5 B, Qwen3-Coder-480B.
int64_t routed_by_hand(int64_t e, int64_t h, int64_t k, int64_t moe_m, int64_t experts,
                       int64_t layers, int64_t v, bool qk_norm) {
  const int64_t d = 128;
  int64_t per_layer = e * h * d + 2 * e * k * d + h * d * e + 2 * e + (qk_norm ? 2 * d : 0) +
                      e * experts + experts * 3 * e * moe_m;
  return layers * per_layer + 2 * v * e + e;
}

TEST(MoeFormulas, MixtralAndQwen3MoeParameterCountsMatchPublishedSizes) {
  EXPECT_EQ(routed_by_hand(4096, 32, 8, 14336, 8, 32, 32000, false), 46'702'792'704);
  EXPECT_EQ(parameters_of({"model_name=mixtral-8x7b"}), 46'702'792'704);
  EXPECT_EQ(format_parameter_line(parameters_of({"model_name=mixtral-8x7b"})),
            "number parameters: 46.703 billion");
  EXPECT_EQ(parameters_of({"model_name=mixtral-8x22b"}),
            routed_by_hand(6144, 48, 8, 16384, 8, 56, 32768, false));
  EXPECT_EQ(routed_by_hand(2048, 32, 4, 768, 128, 48, 151936, true), 30'532'122'624);
  EXPECT_EQ(parameters_of({"model_name=qwen3-30b-a3b"}), 30'532'122'624);
  EXPECT_EQ(parameters_of({"model_name=qwen3-30b-a3b-base"}), 30'532'122'624);
  EXPECT_EQ(parameters_of({"model_name=qwen3-480b-a35b"}),
            routed_by_hand(6144, 96, 8, 2560, 160, 62, 151936, true));
}

// FLOPs by hand for mixtral-8x7b at B=1, T=2048: per layer the router 2BTEX, the chosen experts
// k * 2BT * 3 * E * Mm, attention q/k/v/o 2BTE(2H + 2K)D; unembedding 2BTEV; x3. Attention
// 4BT^2HD/2 per layer, x3.
TEST(MoeFormulas, MixtralFlopsByHand) {
  ModelAndBatch a =
      load_model({"model_name=mixtral-8x7b", "per_device_batch_size=1", "max_target_length=2048"});
  ModelFlops flops = model_flops_per_device(a.model, a.batch);
  const long double t = 2048, e = 4096, h = 32, k = 8, d = 128, mm = 14336, x = 8, top = 2;
  const long double layers = 32, v = 32000;
  long double per_layer =
      2 * t * e * x + top * 2 * t * 3 * e * mm + 2 * t * e * (2 * h + 2 * k) * d;
  EXPECT_EQ(flops.learnable, 3 * (layers * per_layer + 2 * t * e * v));
  EXPECT_EQ(flops.attention, 3 * layers * 4 * t * t * h * d / 2);
}

// deepseek2-16b at B=1, T=8192: MLA q 2BT*E*H*192, kv 2BT(E*576 + 512*H*256), out 2BT*E*H*128;
// attention 2BT*T*H*(192 + 128)/2; one dense MLP layer, 26 MoE layers of the router, 2 shared and
// 6 routed experts.
TEST(MoeFormulas, Deepseek2FlopsByHandAt8192) {
  ModelAndBatch a =
      load_model({"model_name=deepseek2-16b", "per_device_batch_size=1", "max_target_length=8192"});
  ModelFlops flops = model_flops_per_device(a.model, a.batch);
  const long double t = 8192, e = 2048, h = 16, m = 10944, mm = 1408, x = 64, v = 102400;
  long double mla = 2 * t * e * h * 192 + 2 * t * (e * 576 + 512 * h * 256) + 2 * t * e * h * 128;
  long double ffn = 2 * t * 3 * e * m + 26 * (2 * t * e * x + (2 + 6) * 2 * t * 3 * e * mm);
  EXPECT_EQ(flops.learnable, 3 * (27 * mla + ffn + 2 * t * e * v));
  EXPECT_EQ(flops.attention, 3 * 27 * 2 * t * t * h * (192 + 128) / 2);
}

// Every shipped deepseek, mixtral and qwen3_moe config at per_device_batch_size=1 and lengths
// 2048 and 8192 (issue 20): the parameters counted by hand above from the model files' numbers,
// and MaxText's FLOP formulas (maxtext-facts §d) written out here — ffn(w) = 2BT·w·E·3 (two
// input kernels and one output); deepseek: MLA's q (2BT·E·H·192, or through the query LoRA
// 2BT(E·Q + Q·H·192)), kv 2BT(E(C + 64) + C·H·256), out 2BT·E·H·128 and attention
// 2BT·T·H·320/2 per layer, the dense layers ffn(M), the MoE layers the router 2BT·E·X, the shared
// and the chosen experts ffn(Mm) each; mixtral and qwen3_moe: q/k/v/out 2BT·E(2H + 2K)·128, every
// layer the router and the chosen experts, attention 4BT²·H·128/2; the unembedding 2BT·E·V;
// everything times 3. The forward IR holds the same weights and, with the grouped experts
// (sparse_matmul, the default), the same FLOPs.
struct ShippedMoe {
  const char* name;
  int64_t e, h, k, m, moe_m, layers, dense, v, experts, chosen, shared, q_rank, kv_rank;
  bool routed_bias, qk_norm, mla;
};

TEST(MoeFormulas, EveryShippedMoeConfigEqualsTheFormulasAtTwoLengths) {
  const std::vector<ShippedMoe> models = {
      {"deepseek2-16b", 2048, 16, 16, 10944, 1408, 27, 1, 102400, 64, 6, 2, 0, 512, false, false,
       true},
      {"deepseek2-236b", 5120, 128, 128, 12288, 1536, 60, 1, 102400, 160, 6, 2, 1536, 512, false,
       false, true},
      {"deepseek3-671b", 7168, 128, 128, 18432, 2048, 61, 3, 129280, 256, 8, 1, 1536, 512, true,
       false, true},
      {"deepseek3-test", 512, 128, 128, 18432, 512, 61, 3, 129280, 256, 8, 1, 1536, 512, true,
       false, true},
      {"deepseek3-tiny", 64, 4, 4, 64, 64, 61, 3, 129280, 16, 8, 1, 32, 16, true, false, true},
      {"kimi-k2-1t", 7168, 64, 64, 18432, 2048, 61, 1, 163840, 384, 8, 1, 1536, 512, true, false,
       true},
      {"mixtral-8x7b", 4096, 32, 8, 14336, 14336, 32, 0, 32000, 8, 2, 0, 0, 0, false, false, false},
      {"mixtral-8x22b", 6144, 48, 8, 16384, 16384, 56, 0, 32768, 8, 2, 0, 0, 0, false, false,
       false},
      {"qwen3-30b-a3b", 2048, 32, 4, 768, 768, 48, 0, 151936, 128, 8, 0, 0, 0, false, true, false},
      {"qwen3-30b-a3b-base", 2048, 32, 4, 768, 768, 48, 0, 151936, 128, 8, 0, 0, 0, false, true,
       false},
      {"qwen3-235b-a22b", 4096, 64, 4, 1536, 1536, 94, 0, 151936, 128, 8, 0, 0, 0, false, true,
       false},
      {"qwen3-480b-a35b", 6144, 96, 8, 2560, 2560, 62, 0, 151936, 160, 8, 0, 0, 0, false, true,
       false},
  };
  // Every shipped config of the three families is in the table.
  int shipped = 0;
  for (const std::string& name : testing::shipped_models()) {
    ModelAndBatch a = load_model({"model_name=" + name});
    DecoderFamily f = a.model.family;
    shipped += f == DecoderFamily::kDeepseek || f == DecoderFamily::kMixtral ||
               f == DecoderFamily::kQwen3Moe;
  }
  EXPECT_EQ(shipped, static_cast<int>(models.size()));

  for (const ShippedMoe& c : models) {
    int64_t parameters =
        c.mla ? Deepseek{c.e, c.h,       c.m,      c.moe_m,  c.layers,  c.dense,
                         c.v, c.experts, c.shared, c.q_rank, c.kv_rank, c.routed_bias}
                    .count()
              : routed_by_hand(c.e, c.h, c.k, c.moe_m, c.experts, c.layers, c.v, c.qk_norm);
    for (int64_t length : {2048, 8192}) {
      SCOPED_TRACE(std::string(c.name) + " max_target_length=" + std::to_string(length));
      ModelAndBatch a = load_model({std::string("model_name=") + c.name, "per_device_batch_size=1",
                                    "max_target_length=" + std::to_string(length)},
                                   4);
      EXPECT_EQ(count_parameters(a.model), parameters);

      const long double t = static_cast<long double>(length), e = c.e, h = c.h, k = c.k;
      auto ffn = [&](long double width) { return 2 * t * width * e * 3; };
      long double gate = 2 * t * e * static_cast<long double>(c.experts);
      long double chosen = static_cast<long double>(c.chosen);
      long double layers = static_cast<long double>(c.layers);
      long double learnable = 0, attention = 0;
      if (c.mla) {
        long double q_rank = c.q_rank, kv_rank = c.kv_rank;
        long double query =
            c.q_rank == 0 ? 2 * t * e * h * 192 : 2 * t * (e * q_rank + q_rank * h * 192);
        long double kv = 2 * t * (e * (kv_rank + 64) + kv_rank * h * 256);
        long double out = 2 * t * e * h * 128;
        long double dense = static_cast<long double>(c.dense);
        long double ffn_total = ffn(static_cast<long double>(c.m)) * dense +
                                (gate + (static_cast<long double>(c.shared) + chosen) *
                                            ffn(static_cast<long double>(c.moe_m))) *
                                    (layers - dense);
        learnable = (ffn_total + (query + kv + out) * layers + 2 * t * e * c.v) * 3;
        attention = 2 * t * t * h * 320 / 2 * layers * 3;
      } else {
        long double ffn_total = (gate + chosen * ffn(static_cast<long double>(c.moe_m))) * layers;
        long double qkv_out = 2 * t * e * (2 * h + 2 * k) * 128;
        learnable = (ffn_total + qkv_out * layers + 2 * t * e * c.v) * 3;
        attention = 4 * t * t * h * 128 / 2 * layers * 3;
      }
      ModelFlops formula = model_flops_per_device(a.model, a.batch);
      EXPECT_EQ(formula.learnable, learnable);
      EXPECT_EQ(formula.attention, attention);

      Expected<frontend::ForwardModel> forward = frontend::lower_forward(a.model, a.batch);
      ASSERT_TRUE(forward.ok()) << forward.error().message();
      IrCounts counts = count_function(forward->module.function(0));
      EXPECT_EQ(counts.weight_elements, parameters);
      ModelFlops from_ir = model_flops_from_ir(counts, forward->batch_rows, a.batch);
      EXPECT_EQ(from_ir.learnable, learnable);
      EXPECT_EQ(from_ir.attention, attention);
    }
  }
}

}  // namespace
}  // namespace precast
