// mixtral and qwen3_moe: llama2's (qwen3's) layer with the MLP replaced by routed experts in every
// layer (mixtral's MoeBlock_0, qwen3_moe's moe_block); the routing weights are a softmax over the
// chosen experts' router logits (norm_topk_prob renormalises them).
#include <cmath>

#include "compiler/frontend/blocks/Blocks.h"
#include "compiler/frontend/families/Family.h"

namespace precast::frontend {

using ir::Value;

Status check_mixtral(const ModelSpec& m) {
  PRECAST_RETURN_IF_ERROR(check_moe(m));
  if (m.attention.qk_norm) {
    return usage_error("use_qk_norm=true is not supported yet for decoder_block mixtral");
  }
  return Status::success();
}

Status build_mixtral(Context& c) {
  const ModelSpec& s = c.spec();
  ir::Builder& b = c.b();
  int64_t window = s.attention.type == "local_sliding" ? s.attention.sliding_window_size : 0;
  Value x = embed_tokens(c);
  x = decoder_layers(c, x, [&](Value in, const std::string& p) {
    Value h = b.add(attention(c, rms_norm_block(c, in, p + "pre_self_attention_layer_norm"),
                              {.prefix = p + "self_attention", .window = window}),
                    in);
    return b.add(moe(c, rms_norm_block(c, h, p + "post_self_attention_layer_norm"),
                     {.prefix = p + "MoeBlock_0"}),
                 h);
  });
  return logits_and_loss(c, rms_norm_block(c, x, "decoder.decoder_norm"));
}

Status build_qwen3_moe(Context& c) {
  const ModelSpec& s = c.spec();
  ir::Builder& b = c.b();
  double query_scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  Value x = embed_tokens(c);
  x = decoder_layers(c, x, [&](Value in, const std::string& p) {
    AttentionBlock block{
        .prefix = p + "self_attention", .qk_norm = s.attention.qk_norm, .query_scale = query_scale};
    Value h =
        b.add(attention(c, rms_norm_block(c, in, p + "pre_self_attention_layer_norm"), block), in);
    return b.add(moe(c, rms_norm_block(c, h, p + "post_self_attention_layer_norm"),
                     {.prefix = p + "moe_block"}),
                 h);
  });
  return logits_and_loss(c, rms_norm_block(c, x, "decoder.decoder_norm"));
}

int64_t mixtral_parameters(const ModelSpec& m) {
  int64_t e = m.emb_dim;
  int64_t qk_norm_scales = m.attention.qk_norm ? 2 * m.head_dim : 0;
  int64_t per_layer =
      attention_kernel_parameters(m) + routed_experts_parameters(m) + 2 * e + qk_norm_scales;
  return embedding_and_head_parameters(m, e) + per_layer * m.num_decoder_layers;
}

// MaxText's "MoE other" branch: every layer routed experts, no shared ones.
FlopParts mixtral_flops(const ModelSpec& m, const BatchSpec& batch) {
  FlopTerms f = flop_terms(m, batch);
  long double bt = f.b * f.t, e = static_cast<long double>(m.emb_dim);
  long double acts = static_cast<long double>(m.mlp.activations.size());
  long double width = static_cast<long double>(m.moe.moe_mlp_dim);
  long double gate = 2 * bt * e * static_cast<long double>(m.moe.num_experts);
  long double ffn = 2 * bt * width * e * (acts + 1);
  long double ffn_total =
      (gate + ffn * static_cast<long double>(m.moe.experts_per_token)) * f.layers;
  FlopParts parts;
  parts.learnable = (ffn_total + (f.qkv + f.projection) * f.layers + f.embedding) * 3;
  parts.attention = f.causal_attention * f.layers * 3;
  return parts;
}

}  // namespace precast::frontend
