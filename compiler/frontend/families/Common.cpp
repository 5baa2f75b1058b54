#include <fmt/format.h>

#include "compiler/frontend/families/Family.h"

namespace precast::frontend {

using ir::Value;

Value decoder_layers(Context& c, Value x, const LayerFunction& layer,
                     const LayerPrefix& prefix_of) {
  ir::Builder& b = c.b();
  for (int64_t i = 0; i < c.spec().num_decoder_layers; ++i) {
    std::string prefix = prefix_of ? prefix_of(i) : fmt::format("decoder.layers_{}.", i);
    b.set_scope(Context::scope_of(prefix));
    b.set_layer(static_cast<int16_t>(i));
    if (c.function().defining_op(x) != ir::kNoOp) b.with_checkpoint(x, "decoder_layer_input");
    Value out = layer(x, prefix);
    b.set_scope(Context::scope_of(prefix));
    b.set_layer(ir::kNoLayer);
    x = c.residual_axes(out);
  }
  return x;
}

Status check_sliding_window_blocks(const ModelSpec& m, std::string_view family, int64_t pattern,
                                   std::string_view blocks) {
  if (m.attention.sliding_window_size <= 0) {
    return usage_error(
        fmt::format("sliding_window_size {} must be positive for {}'s sliding-window layers",
                    m.attention.sliding_window_size, family));
  }
  if (m.inhomogeneous_layer_cycle_interval != pattern) {
    return usage_error(fmt::format(
        "inhomogeneous_layer_cycle_interval={} is not supported yet for decoder_block {}: its "
        "blocks are MaxText's pattern of {}; set inhomogeneous_layer_cycle_interval={}",
        m.inhomogeneous_layer_cycle_interval, family, blocks, pattern));
  }
  if (m.scan_layers && m.num_decoder_layers % pattern != 0) {
    return usage_error(fmt::format(
        "num_decoder_layers {} must be a multiple of inhomogeneous_layer_cycle_interval {} for {} "
        "with scan_layers=true (MaxText scans whole blocks only); change "
        "base_num_decoder_layers or set scan_layers=false",
        m.num_decoder_layers, pattern, family));
  }
  return Status::success();
}

Status check_rotary_with_qk_norm(const ModelSpec& spec) {
  if (spec.head_dim % 2 != 0) {
    return usage_error(
        fmt::format("head_dim {} must be even for rotary embeddings", spec.head_dim));
  }
  for (auto [key, set] :
       {std::pair{"attention_bias", spec.attention.bias}, std::pair{"mlp_bias", spec.mlp.bias}}) {
    if (set) {
      return usage_error(fmt::format("{}=true is not supported yet for decoder_block {}", key,
                                     spec.decoder_block));
    }
  }
  return Status::success();
}

Status check_rotary(const ModelSpec& spec) {
  PRECAST_RETURN_IF_ERROR(check_rotary_with_qk_norm(spec));
  if (spec.attention.qk_norm) {
    return usage_error(fmt::format("use_qk_norm=true is not supported yet for decoder_block {}",
                                   spec.decoder_block));
  }
  return Status::success();
}

int64_t attention_kernel_parameters(const ModelSpec& m) {
  int64_t e = m.emb_dim, h = m.num_query_heads, k = m.num_kv_heads, d = m.head_dim;
  return e * h * d + 2 * e * k * d + h * d * e;
}

int64_t mlp_parameters(const ModelSpec& m, bool biases) {
  int64_t a = static_cast<int64_t>(m.mlp.activations.size()), e = m.emb_dim, f = m.mlp_dim;
  int64_t params = a * e * f + f * e;
  if (biases) params += a * f + e;
  return params;
}

int64_t embedding_and_head_parameters(const ModelSpec& m, int64_t final_norm) {
  int64_t e = m.emb_dim, v = m.vocab_size;
  int64_t params = v * e;                        // token embedding
  if (!m.logits_via_embedding) params += e * v;  // separate logits_dense
  if (m.trainable_position_size > 0) params += m.trainable_position_size * e;
  return params + final_norm;
}

FlopTerms flop_terms(const ModelSpec& m, const BatchSpec& batch) {
  FlopTerms f;
  f.b = batch.per_device_batch_size;
  f.t = static_cast<long double>(batch.max_target_length);
  long double bt = f.b * f.t;
  long double e = static_cast<long double>(m.emb_dim);
  f.h = static_cast<long double>(m.num_query_heads);
  long double k = static_cast<long double>(m.num_kv_heads);
  f.d = static_cast<long double>(m.head_dim);
  f.layers = static_cast<long double>(m.num_decoder_layers);
  long double v = static_cast<long double>(m.vocab_size);
  long double a = static_cast<long double>(m.mlp.activations.size());
  long double mlp = static_cast<long double>(m.mlp_dim);
  f.ffn = 2 * bt * mlp * e * a + 2 * bt * mlp * e;
  f.qkv = 2 * bt * e * (f.h + 2 * k) * f.d;
  f.projection = 2 * bt * e * f.h * f.d;
  f.embedding = 2 * bt * e * v;  // unembedding only; lookups are free
  f.causal_attention = 4 * f.b * f.t * f.t * f.h * f.d / 2;
  return f;
}

ScanLayout single_layer_scan(const ModelSpec& m) {
  return {.layers_per_block = 1, .scanned_layers = m.num_decoder_layers};
}

FlopParts default_flops(const ModelSpec& m, const BatchSpec& batch) {
  FlopTerms f = flop_terms(m, batch);
  FlopParts parts;
  parts.learnable = (f.ffn * f.layers + (f.qkv + f.projection) * f.layers + f.embedding) * 3;
  parts.attention = f.causal_attention * f.layers * 3;
  return parts;
}

}  // namespace precast::frontend
