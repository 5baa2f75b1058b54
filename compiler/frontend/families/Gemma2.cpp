// gemma2: each configured layer is a (local, global) pair of half-layers, suffixed _local and
// _global; the local half attends within sliding_window_size; optional post-attention and
// post-FFW norms.
#include <fmt/format.h>

#include <algorithm>

#include "compiler/frontend/blocks/Blocks.h"
#include "compiler/frontend/families/Family.h"

namespace precast::frontend {
namespace {

using ir::Value;

Value half_layer(Context& c, Value x, const std::string& p, const std::string& s, int64_t window) {
  ir::Builder& b = c.b();
  const ModelSpec& spec = c.spec();
  Value a = attention(c, rms_norm_block(c, x, p + "pre_self_attention_norm" + s),
                      {.prefix = p + "self_attention" + s, .window = window});
  if (spec.use_post_attn_norm) a = rms_norm_block(c, a, p + "post_self_attention_norm" + s);
  Value h = b.add(a, x);
  Value m = mlp(c, rms_norm_block(c, h, p + "pre_ffw_norm" + s), {.prefix = p + "mlp" + s});
  if (spec.use_post_ffw_norm) m = rms_norm_block(c, m, p + "post_ffw_norm" + s);
  return b.add(m, h);
}

}  // namespace

Status check_gemma2(const ModelSpec& m) {
  PRECAST_RETURN_IF_ERROR(check_rotary(m));
  if (m.attention.sliding_window_size <= 0) {
    return usage_error(fmt::format("sliding_window_size {} must be positive for gemma2",
                                   m.attention.sliding_window_size));
  }
  return Status::success();
}

Status build_gemma2(Context& c) {
  Value x = embed_tokens(c, c.spec().trainable_position_size);
  x = decoder_layers(c, x, [&](Value in, const std::string& p) {
    Value out = half_layer(c, in, p, "_local", c.spec().attention.sliding_window_size);
    c.b().set_scope(Context::scope_of(p));
    return half_layer(c, out, p, "_global", 0);
  });
  return logits_and_loss(c, rms_norm_block(c, x, "decoder.decoder_norm"));
}

int64_t gemma2_parameters(const ModelSpec& m) {
  int64_t e = m.emb_dim;
  int64_t norms = (2 + (m.use_post_attn_norm ? 1 : 0) + (m.use_post_ffw_norm ? 1 : 0)) * e;
  int64_t per_half = attention_kernel_parameters(m) + mlp_parameters(m, false) + norms;
  return embedding_and_head_parameters(m, e) + per_half * 2 * m.num_decoder_layers;
}

// L counts (local, global) pairs; the local half sees a window W = min(sliding_window_size, T).
FlopParts gemma2_flops(const ModelSpec& m, const BatchSpec& batch) {
  FlopTerms f = flop_terms(m, batch);
  long double w =
      std::min<long double>(static_cast<long double>(m.attention.sliding_window_size), f.t);
  FlopParts parts;
  parts.attention =
      (2 * f.b * f.t * f.t * f.h * f.d + 4 * f.b * (f.t * w - w * w / 2) * f.h * f.d) * f.layers *
      3;
  parts.learnable = ((f.ffn + f.qkv + f.projection) * f.layers * 2 + f.embedding) * 3;
  return parts;
}

}  // namespace precast::frontend
