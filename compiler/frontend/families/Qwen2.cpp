// qwen2 (qwen2.5): qwen3's layer (MaxText's qwen2.py passes the same use_qk_norm and
// query_pre_attn_scalar D^-0.5) with attention_bias putting biases on the query, key and value
// projections — not on out.
#include <fmt/format.h>

#include "compiler/frontend/families/Family.h"

namespace precast::frontend {

Status check_qwen2(const ModelSpec& m) {
  if (m.head_dim % 2 != 0) {
    return usage_error(fmt::format("head_dim {} must be even for rotary embeddings", m.head_dim));
  }
  if (m.mlp.bias) return usage_error("mlp_bias=true is not supported yet for decoder_block qwen2");
  return Status::success();
}

Status build_qwen2(Context& c) {
  return build_qwen(c, c.spec().attention.bias);
}

int64_t qwen2_parameters(const ModelSpec& m) {
  int64_t biases = m.attention.bias ? (m.num_query_heads + 2 * m.num_kv_heads) * m.head_dim : 0;
  return qwen3_parameters(m) + biases * m.num_decoder_layers;
}

}  // namespace precast::frontend
