// gpt_oss (MaxText's GptOssDecoderLayer): llama2's pre-norm layer — pre_self_attention_layer_norm,
// attention (GptOssAttention), post_self_attention_layer_norm, routed experts (GptOssMlp) — with
// biases on q, k, v and out (attention_bias), a learned sink logit per query head in every softmax
// (attention_sink), queries scaled by D^-0.5 after RoPE (query_pre_attn_scalar), expert biases on
// wi_0, wi_1 and wo (mlp_bias) and the clamped gated activation (mlp_activations_limit). MaxText's
// GPT_OSS_ATTENTION_PATTERN: layer i attends within sliding_window_size when i is even and
// globally when odd; it scans blocks of inhomogeneous_layer_cycle_interval (2) layers.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "compiler/frontend/blocks/Blocks.h"
#include "compiler/frontend/families/Family.h"

namespace precast::frontend {
namespace {

using ir::Value;

// MaxText's GPT_OSS_ATTENTION_PATTERN: one sliding-window layer, then one global.
constexpr int64_t kPatternLength = 2;
bool is_global_layer(int64_t index) {
  return index % kPatternLength == kPatternLength - 1;
}

}  // namespace

Status check_gpt_oss(const ModelSpec& m) {
  // check_moe refuses the biases, which gpt_oss lowers: check it without them.
  ModelSpec without_biases = m;
  without_biases.attention.bias = false;
  without_biases.mlp.bias = false;
  PRECAST_RETURN_IF_ERROR(check_moe(without_biases));
  if (m.attention.qk_norm) {
    return usage_error("use_qk_norm=true is not supported yet for decoder_block gpt_oss");
  }
  return check_sliding_window_blocks(m, "gpt_oss", kPatternLength,
                                     "1 sliding-window layer and 1 global layer");
}

Status build_gpt_oss(Context& c) {
  const ModelSpec& s = c.spec();
  ir::Builder& b = c.b();
  double query_scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  int64_t index = 0;
  Value x = embed_tokens(c);
  x = decoder_layers(c, x, [&](Value in, const std::string& p) {
    int64_t window = is_global_layer(index++) ? 0 : s.attention.sliding_window_size;
    AttentionBlock block{.prefix = p + "GptOssAttention",
                         .window = window,
                         .qkv_biases = s.attention.bias,
                         .query_scale = query_scale,
                         .out_bias = s.attention.bias,
                         .sink = s.attention.sink};
    Value h =
        b.add(in, attention(c, rms_norm_block(c, in, p + "pre_self_attention_layer_norm"), block));
    Value m = moe(c, rms_norm_block(c, h, p + "post_self_attention_layer_norm"),
                  {.prefix = p + "GptOssMlp", .gate_axis = "embed"});
    return b.add(m, h);
  });
  return logits_and_loss(c, rms_norm_block(c, x, "decoder.decoder_norm"));
}

// MaxText's GptOssScannableBlock: blocks of inhomogeneous_layer_cycle_interval (2) layers, every
// layer scanned (check_gpt_oss requires whole blocks).
ScanLayout gpt_oss_scan(const ModelSpec& m) {
  return {.layers_per_block = m.inhomogeneous_layer_cycle_interval,
          .scanned_layers = m.num_decoder_layers};
}

// maxtext-facts §d: mixtral's layer (four attention kernels, two norms [E], the router and the
// experts) plus the q/k/v biases [H*D], [K*D], [K*D], the out bias [E], the sinks [H] and the
// expert biases [X, Mm] twice and [X, E].
int64_t gpt_oss_parameters(const ModelSpec& m) {
  int64_t e = m.emb_dim, h = m.num_query_heads, k = m.num_kv_heads, d = m.head_dim;
  int64_t experts = m.moe.num_experts, width = m.moe.moe_mlp_dim;
  int64_t attention_biases = m.attention.bias ? (h + 2 * k) * d + e : 0;
  int64_t sinks = m.attention.sink ? h : 0;
  int64_t expert_biases = m.mlp.bias ? experts * (2 * width + e) : 0;
  int64_t per_layer = attention_kernel_parameters(m) + routed_experts_parameters(m) + 2 * e +
                      attention_biases + sinks + expert_biases;
  return embedding_and_head_parameters(m, e) + per_layer * m.num_decoder_layers;
}

// maxtext-facts §d: learnable as mixtral's ("MoE other"); attention by the gpt_oss branch —
// L // 2 global layers over T, the others within W = min(sliding_window_size, T).
FlopParts gpt_oss_flops(const ModelSpec& m, const BatchSpec& batch) {
  FlopTerms f = flop_terms(m, batch);
  long double global = static_cast<long double>(m.num_decoder_layers / kPatternLength);
  long double local = f.layers - global;
  long double w =
      std::min<long double>(static_cast<long double>(m.attention.sliding_window_size), f.t);
  FlopParts parts = mixtral_flops(m, batch);
  parts.attention = (global * 2 * f.b * f.t * f.t * f.h * f.d +
                     local * 4 * f.b * (f.t * w - w * w / 2) * f.h * f.d) *
                    3;
  return parts;
}

}  // namespace precast::frontend
