// qwen3 (dense): llama2's layer and norm names; attention with GQA, qk-norm (use_qk_norm:
// RMSNorm over head_dim of q and k before RoPE, scales query_norm/key_norm [D]) and queries
// scaled by D^-0.5 after RoPE (MaxText's query_pre_attn_scalar, so the query kernel's
// initialiser is not divided by sqrt(D)); always global attention; tied or untied logits.
#include <cmath>

#include "compiler/frontend/blocks/Blocks.h"
#include "compiler/frontend/families/Family.h"

namespace precast::frontend {

using ir::Value;

Status build_qwen(Context& c, bool qkv_biases) {
  const ModelSpec& s = c.spec();
  ir::Builder& b = c.b();
  double query_scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  Value x = embed_tokens(c, s.trainable_position_size);
  x = decoder_layers(c, x, [&](Value in, const std::string& p) {
    AttentionBlock block{.prefix = p + "self_attention",
                         .qkv_biases = qkv_biases,
                         .qk_norm = s.attention.qk_norm,
                         .query_scale = query_scale};
    Value h =
        b.add(attention(c, rms_norm_block(c, in, p + "pre_self_attention_layer_norm"), block), in);
    return b.add(
        mlp(c, rms_norm_block(c, h, p + "post_self_attention_layer_norm"), {.prefix = p + "mlp"}),
        h);
  });
  return logits_and_loss(c, rms_norm_block(c, x, "decoder.decoder_norm"));
}

Status build_qwen3(Context& c) {
  return build_qwen(c, false);
}

int64_t qwen3_parameters(const ModelSpec& m) {
  int64_t qk_norm_scales = m.attention.qk_norm ? 2 * m.head_dim : 0;  // query_norm, key_norm
  return llama2_parameters(m) + qk_norm_scales * m.num_decoder_layers;
}

}  // namespace precast::frontend
