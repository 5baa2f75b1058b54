// gemma: llama2's layer with gemma's norm names; attention is always global.
#include "compiler/frontend/blocks/Blocks.h"
#include "compiler/frontend/families/Family.h"

namespace precast::frontend {

using ir::Value;

Status build_gemma(Context& c) {
  ir::Builder& b = c.b();
  Value x = embed_tokens(c, c.spec().trainable_position_size);
  x = decoder_layers(c, x, [&](Value in, const std::string& p) {
    Value h = b.add(attention(c, rms_norm_block(c, in, p + "pre_self_attention_norm"),
                              {.prefix = p + "self_attention"}),
                    in);
    return b.add(mlp(c, rms_norm_block(c, h, p + "pre_ffw_norm"), {.prefix = p + "mlp"}), h);
  });
  return logits_and_loss(c, rms_norm_block(c, x, "decoder.decoder_norm"));
}

int64_t gemma_parameters(const ModelSpec& m) {
  return llama2_parameters(m);
}

}  // namespace precast::frontend
