#include "compiler/frontend/blocks/Blocks.h"

namespace precast::frontend {

using ir::Value;

Value embed_tokens(Context& c, int64_t positions) {
  const ModelSpec& s = c.spec();
  ir::Builder& b = c.b();
  b.set_scope("token_embedder");
  Value table = c.weight({"token_embedder.embedding",
                          {s.vocab_size, s.emb_dim},
                          {"vocab", "embed_vocab"},
                          InitKind::kNormal,
                          1.0});
  Value x = b.take(table, c.batch(0), 0);
  if (positions > 0) {
    b.set_scope("decoder/position_embedder");
    Value position_table = c.weight({"decoder.position_embedder.embedding",
                                     {positions, s.emb_dim},
                                     {"vocab", "embed"},
                                     InitKind::kNormal,
                                     1.0});
    x = b.add(x, b.take(position_table, c.batch(1), 0));
  }
  return c.residual_axes(x);
}

}  // namespace precast::frontend
