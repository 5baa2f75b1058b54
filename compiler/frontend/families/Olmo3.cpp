// olmo3 (MaxText's Olmo3DecoderLayer): no pre-norms — the attention and the MLP read the residual
// stream as it is and their outputs are normalised before they are added back
// (post_self_attention_layer_norm, post_mlp_layer_norm); attention with qk-norm over all heads
// at once (MaxText's GlobalRMSNorm: scales [H*D] and [K*D]), queries scaled by D^-0.5 after
// RoPE, and MaxText's OLMO3_ATTENTION_PATTERN: layer i is global when i % 4 == 3, the others
// attend within sliding_window_size. One rotary embedding (rope_type, YaRN for olmo3-7b/32b)
// for every layer, as MaxText and Hugging Face apply it. MaxText scans blocks of
// inhomogeneous_layer_cycle_interval (4) layers; Precast requires the block to be the pattern.
#include <fmt/format.h>

#include <cmath>

#include "compiler/frontend/blocks/Blocks.h"
#include "compiler/frontend/families/Family.h"

namespace precast::frontend {
namespace {

using ir::Value;

// MaxText's OLMO3_ATTENTION_PATTERN: three sliding-window layers, then one global.
constexpr int64_t kPatternLength = 4;
bool is_global_layer(int64_t index) {
  return index % kPatternLength == kPatternLength - 1;
}

}  // namespace

Status check_olmo3(const ModelSpec& m) {
  PRECAST_RETURN_IF_ERROR(check_rotary_with_qk_norm(m));
  // MaxText picks a layer's attention type by its index within the scanned block when the layers
  // are scanned and by its index in the stack when not; the two agree only for blocks of 4.
  return check_sliding_window_blocks(m, "olmo3", kPatternLength,
                                     "3 sliding-window layers and 1 global layer");
}

Status build_olmo3(Context& c) {
  const ModelSpec& s = c.spec();
  ir::Builder& b = c.b();
  double query_scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  int64_t index = 0;
  Value x = embed_tokens(c, s.trainable_position_size);
  x = decoder_layers(c, x, [&](Value in, const std::string& p) {
    int64_t window = is_global_layer(index++) ? 0 : s.attention.sliding_window_size;
    AttentionBlock block{.prefix = p + "attention",
                         .window = window,
                         .qk_norm = s.attention.qk_norm,
                         .qk_norm_all_heads = true,
                         .query_scale = query_scale};
    Value a = rms_norm_block(c, attention(c, in, block), p + "post_self_attention_layer_norm");
    Value h = b.add(in, a);
    Value m = rms_norm_block(c, mlp(c, h, {.prefix = p + "mlp"}), p + "post_mlp_layer_norm");
    return b.add(m, h);
  });
  return logits_and_loss(c, rms_norm_block(c, x, "decoder.decoder_norm"));
}

// MaxText's Olmo3ScannableBlock: blocks of inhomogeneous_layer_cycle_interval (4) layers, every
// layer scanned (check_olmo3 requires whole blocks).
ScanLayout olmo3_scan(const ModelSpec& m) {
  return {.layers_per_block = m.inhomogeneous_layer_cycle_interval,
          .scanned_layers = m.num_decoder_layers};
}

// maxtext-facts §d: the default formula's weights plus two post norms [E] per layer and the
// qk-norm scales over all heads, [H*D] and [K*D] (use_qk_norm).
int64_t olmo3_parameters(const ModelSpec& m) {
  int64_t qk_norm_scales =
      m.attention.qk_norm ? (m.num_query_heads + m.num_kv_heads) * m.head_dim : 0;
  int64_t per_layer =
      attention_kernel_parameters(m) + mlp_parameters(m, false) + 2 * m.emb_dim + qk_norm_scales;
  return per_layer * m.num_decoder_layers + embedding_and_head_parameters(m, m.emb_dim);
}

}  // namespace precast::frontend
