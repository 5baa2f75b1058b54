#include "compiler/analysis/ModelFormulas.h"

#include <fmt/format.h>

#include <algorithm>

namespace precast {
namespace {

int64_t num_activations(const ModelSpec& m) {
  return static_cast<int64_t>(m.mlp_activations.size());
}

// One decoder layer's attention parameters.
int64_t attention_parameters(const ModelSpec& m) {
  int64_t e = m.emb_dim, h = m.num_query_heads, k = m.num_kv_heads, d = m.head_dim;
  if (m.family == DecoderFamily::kGpt3) {
    // Fused (embed, qkv, heads, kv) kernel with bias, output kernel with bias.
    return e * 3 * h * d + 3 * h * d + h * d * e + e;
  }
  // Query, key, value and output kernels; fusing q/k/v changes the layout, not the count.
  int64_t params = e * h * d + 2 * e * k * d + h * d * e;
  if (m.attention_bias) params += (h + 2 * k) * d;
  return params;
}

// One decoder layer's MLP parameters: one input kernel per activation plus the output kernel.
int64_t mlp_parameters(const ModelSpec& m) {
  int64_t a = num_activations(m), e = m.emb_dim, f = m.mlp_dim;
  int64_t params = a * e * f + f * e;
  if (m.mlp_bias || m.family == DecoderFamily::kGpt3) params += a * f + e;
  return params;
}

// Norm parameters of one decoder layer (gemma2: of one local or global half).
int64_t layer_norm_parameters(const ModelSpec& m) {
  int64_t e = m.emb_dim;
  switch (m.family) {
    case DecoderFamily::kGpt3:
      return 2 * (2 * e);  // two LayerNorms, scale and bias each
    case DecoderFamily::kGemma2:
      return (2 + (m.use_post_attn_norm ? 1 : 0) + (m.use_post_ffw_norm ? 1 : 0)) * e;
    default:
      return 2 * e;  // pre-attention and pre-MLP RMSNorm scales
  }
}

// Number of decoder layers in the module tree: gemma2 allocates a local and a global layer per
// configured layer.
int64_t allocated_layers(const ModelSpec& m) {
  return m.family == DecoderFamily::kGemma2 ? 2 * m.num_decoder_layers : m.num_decoder_layers;
}

long double ffn_flops(const ModelSpec& m, long double bt) {
  long double a = static_cast<long double>(num_activations(m));
  long double mlp = static_cast<long double>(m.mlp_dim), e = static_cast<long double>(m.emb_dim);
  return 2 * bt * mlp * e * a + 2 * bt * mlp * e;
}

}  // namespace

int64_t count_parameters(const ModelSpec& m) {
  int64_t e = m.emb_dim, v = m.vocab_size;
  int64_t params = v * e;                                  // token embedding
  if (!m.logits_via_embedding) params += e * v;            // separate logits_dense
  params += m.family == DecoderFamily::kGpt3 ? 2 * e : e;  // decoder_norm
  if (m.trainable_position_size > 0) params += m.trainable_position_size * e;
  int64_t per_layer = attention_parameters(m) + mlp_parameters(m) + layer_norm_parameters(m);
  return params + per_layer * allocated_layers(m);
}

ModelFlops model_flops_per_device(const ModelSpec& m, const BatchSpec& batch) {
  long double b = batch.per_device_batch_size;
  long double t = static_cast<long double>(batch.max_target_length);
  long double bt = b * t;
  long double e = static_cast<long double>(m.emb_dim),
              h = static_cast<long double>(m.num_query_heads);
  long double k = static_cast<long double>(m.num_kv_heads),
              d = static_cast<long double>(m.head_dim);
  long double layers = static_cast<long double>(m.num_decoder_layers);
  long double v = static_cast<long double>(m.vocab_size);

  long double ffn = ffn_flops(m, bt);
  long double qkv = 2 * bt * e * (h + 2 * k) * d;
  long double projection = 2 * bt * e * h * d;
  long double embedding = 2 * bt * e * v;  // unembedding only; lookups are free
  long double causal_attention = 4 * b * t * t * h * d / 2;

  ModelFlops flops;
  if (m.family == DecoderFamily::kGemma2) {
    // Each configured layer is a (local, global) pair; local attention sees a window W.
    long double w = std::min<long double>(static_cast<long double>(m.sliding_window_size), t);
    flops.attention = (2 * b * t * t * h * d + 4 * b * (t * w - w * w / 2) * h * d) * layers * 3;
    flops.learnable = ((ffn + qkv + projection) * layers * 2 + embedding) * 3;
  } else {
    flops.learnable = (ffn * layers + (qkv + projection) * layers + embedding) * 3;
    flops.attention = causal_attention * layers * 3;
  }
  long double accumulation = static_cast<long double>(batch.gradient_accumulation_steps);
  flops.learnable *= accumulation;
  flops.attention *= accumulation;
  return flops;
}

double tokens_per_device(const BatchSpec& batch) {
  return static_cast<double>(batch.max_target_length) * batch.per_device_batch_size *
         static_cast<double>(batch.gradient_accumulation_steps);
}

std::string format_parameter_line(int64_t parameters) {
  return fmt::format("number parameters: {:.3f} billion", static_cast<double>(parameters) / 1e9);
}

std::string format_tflops_block(const ModelFlops& flops) {
  double total = flops.total_tflops();
  return fmt::format(
      "Per train step:\n Total TFLOPs: {:.2f} \n split as {:.2f}% learnable weight flops and "
      "{:.2f}% attention flops",
      total, 100.0 * flops.learnable_tflops() / total, 100.0 * flops.attention_tflops() / total);
}

}  // namespace precast
