// gemma3 (text decoder): a 5:1 pattern of sliding-window (local) and global layers — layer i is
// global when i % 6 == 5 —, each layer gemma2's half-layer without suffixes (pre/post-attention
// and pre/post-FFW norms); attention always with qk-norm (MaxText hard-codes use_qk_norm=True)
// and queries scaled after RoPE by query_pre_attn_scalar; local layers rotate with
// local_rope_max_timescale and no linear scaling, global ones with rope_max_timescale stretched
// by rope_linear_scaling_factor.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "compiler/frontend/blocks/Blocks.h"
#include "compiler/frontend/families/Family.h"

namespace precast::frontend {
namespace {

using ir::Value;

// MaxText's GEMMA3_ATTENTION_PATTERN: five local layers, then one global.
constexpr int64_t kPatternLength = 6;
bool is_global_layer(int64_t index) {
  return index % kPatternLength == kPatternLength - 1;
}

// MaxText's get_query_pre_attn_scalar: head_dim^-0.5, except gemma3-27b's (E / H)^-0.5.
double query_pre_attn_scalar(const ModelSpec& s) {
  int64_t depth =
      s.model_name.starts_with("gemma3-27b") ? s.emb_dim / s.num_query_heads : s.head_dim;
  return 1.0 / std::sqrt(static_cast<double>(depth));
}

}  // namespace

Status check_gemma3(const ModelSpec& m) {
  PRECAST_RETURN_IF_ERROR(check_rotary_with_qk_norm(m));
  if (m.attention.sliding_window_size <= 0) {
    return usage_error(
        fmt::format("sliding_window_size {} must be positive for gemma3's local layers",
                    m.attention.sliding_window_size));
  }
  return Status::success();
}

Status build_gemma3(Context& c) {
  const ModelSpec& s = c.spec();
  ir::Builder& b = c.b();
  double query_scale = query_pre_attn_scalar(s);
  int64_t index = 0;
  Value x = embed_tokens(c, s.trainable_position_size);
  x = decoder_layers(c, x, [&](Value in, const std::string& p) {
    int64_t window = is_global_layer(index++) ? 0 : s.attention.sliding_window_size;
    AttentionBlock block{.prefix = p + "self_attention",
                         .window = window,
                         .qk_norm = true,
                         .local_rope_unscaled = true,
                         .query_scale = query_scale};
    Value a = attention(c, rms_norm_block(c, in, p + "pre_self_attention_norm"), block);
    if (s.use_post_attn_norm) a = rms_norm_block(c, a, p + "post_self_attention_norm");
    Value h = b.add(a, in);
    Value m = mlp(c, rms_norm_block(c, h, p + "pre_ffw_norm"), {.prefix = p + "mlp"});
    if (s.use_post_ffw_norm) m = rms_norm_block(c, m, p + "post_ffw_norm");
    return b.add(m, h);
  });
  return logits_and_loss(c, rms_norm_block(c, x, "decoder.decoder_norm"));
}

int64_t gemma3_parameters(const ModelSpec& m) {
  int64_t post_norms = ((m.use_post_attn_norm ? 1 : 0) + (m.use_post_ffw_norm ? 1 : 0)) * m.emb_dim;
  int64_t qk_norm_scales = 2 * m.head_dim;
  return llama2_parameters(m) + (post_norms + qk_norm_scales) * m.num_decoder_layers;
}

// MaxText's _apply_gemma3_scanned_blocks: L // 6 blocks of the whole pattern scanned, the
// L % 6 layers after them one unscanned block (layers_remainder).
ScanLayout gemma3_scan(const ModelSpec& m) {
  return {.layers_per_block = kPatternLength,
          .scanned_layers = m.num_decoder_layers / kPatternLength * kPatternLength};
}

// maxtext-facts §d, gemma3 branch: L // 6 global layers, the rest attend within
// W = min(sliding_window_size, T).
FlopParts gemma3_flops(const ModelSpec& m, const BatchSpec& batch) {
  FlopTerms f = flop_terms(m, batch);
  long double global = static_cast<long double>(m.num_decoder_layers / kPatternLength);
  long double local = f.layers - global;
  long double w =
      std::min<long double>(static_cast<long double>(m.attention.sliding_window_size), f.t);
  FlopParts parts = default_flops(m, batch);
  parts.attention = (global * 2 * f.b * f.t * f.t * f.h * f.d +
                     local * 4 * f.b * (f.t * w - w * w / 2) * f.h * f.d) *
                    3;
  return parts;
}

}  // namespace precast::frontend
