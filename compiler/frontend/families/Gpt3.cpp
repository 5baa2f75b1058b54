// gpt3: LayerNorm (1 + scale, bias), fused qkv projection with biases and q / sqrt(D) instead of
// RoPE, a learned position table, MLP with biases that normalises its own input.
#include <fmt/format.h>

#include "compiler/frontend/blocks/Blocks.h"
#include "compiler/frontend/families/Family.h"

namespace precast::frontend {

using ir::Value;

Status check_gpt3(const ModelSpec& m) {
  if (m.num_query_heads != m.num_kv_heads) {
    return usage_error(fmt::format("gpt3 needs num_kv_heads == num_query_heads, got {} and {}",
                                   m.num_kv_heads, m.num_query_heads));
  }
  return Status::success();
}

Status build_gpt3(Context& c) {
  ir::Builder& b = c.b();
  Value x = embed_tokens(c, c.spec().trainable_position_size);
  x = decoder_layers(c, x, [&](Value in, const std::string& p) {
    Value h = b.add(attention(c, layer_norm_block(c, in, p + "pre_self_attention_norm"),
                              {.prefix = p + "self_attention", .fused_qkv = true, .biases = true}),
                    in);
    return b.add(mlp(c, h, {.prefix = p + "mlp", .biases = true, .layer_norm = true}), h);
  });
  return logits_and_loss(c, layer_norm_block(c, x, "decoder.decoder_norm"));
}

int64_t gpt3_parameters(const ModelSpec& m) {
  int64_t e = m.emb_dim, h = m.num_query_heads, d = m.head_dim;
  int64_t attention = e * 3 * h * d + 3 * h * d + h * d * e + e;
  int64_t norms = 2 * (2 * e);  // two LayerNorms, scale and bias each
  int64_t per_layer = attention + mlp_parameters(m, true) + norms;
  return embedding_and_head_parameters(m, 2 * e) + per_layer * m.num_decoder_layers;
}

}  // namespace precast::frontend
