// llama2 (and mistral, which MaxText lowers with the same layer): pre-norm RMSNorm layers,
// GQA attention with RoPE (sliding window when attention_type=local_sliding), gated MLP.
#include "compiler/frontend/blocks/Blocks.h"
#include "compiler/frontend/families/Family.h"

namespace precast::frontend {

using ir::Value;

Status build_llama2(Context& c) {
  const ModelSpec& s = c.spec();
  ir::Builder& b = c.b();
  int64_t window = s.attention.type == "local_sliding" ? s.attention.sliding_window_size : 0;
  Value x = embed_tokens(c, s.trainable_position_size);
  x = decoder_layers(c, x, [&](Value in, const std::string& p) {
    Value h = b.add(attention(c, rms_norm_block(c, in, p + "pre_self_attention_layer_norm"),
                              {.prefix = p + "self_attention", .window = window}),
                    in);
    return b.add(
        mlp(c, rms_norm_block(c, h, p + "post_self_attention_layer_norm"), {.prefix = p + "mlp"}),
        h);
  });
  return logits_and_loss(c, rms_norm_block(c, x, "decoder.decoder_norm"));
}

int64_t llama2_parameters(const ModelSpec& m) {
  int64_t e = m.emb_dim;
  int64_t per_layer = attention_kernel_parameters(m) + mlp_parameters(m, false) + 2 * e;
  return embedding_and_head_parameters(m, e) + per_layer * m.num_decoder_layers;
}

}  // namespace precast::frontend
