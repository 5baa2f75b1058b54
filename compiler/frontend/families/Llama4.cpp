// llama4 (MaxText's Llama4DecoderLayer, text only): llama2's pre-norm layer —
// pre_self_attention_layer_norm, self_attention, post_self_attention_layer_norm, then an MLP —
// where layer i (0-based) is
//   * a NoPE layer when (i + 1) % nope_layer_interval == 0: no rotary embedding, global causal
//     attention, queries scaled by temperature tuning (temperature_tuning); the other layers
//     have RoPE (llama3.1's scaling), the L2 qk-norm (use_qk_norm) and attend causally within
//     chunks of chunk_attn_window_size tokens;
//   * a MoE layer when (i + 1) % interleave_moe_layer_step == 0 (Llama4MoEBlock_0: routed experts
//     with llama4's top-1 sigmoid router, MoeBlock_0, plus the shared experts, shared_experts),
//     else a dense gated MLP of width mlp_dim (mlp).
// Queries are scaled by D^-0.5 after RoPE and the qk-norm (query_pre_attn_scalar). MaxText scans
// blocks of inhomogeneous_layer_cycle_interval layers (Llama4ScannableBlock).
#include <fmt/format.h>

#include <cmath>

#include "compiler/frontend/blocks/Blocks.h"
#include "compiler/frontend/families/Family.h"

namespace precast::frontend {
namespace {

using ir::Value;

bool is_nope_layer(const ModelSpec& m, int64_t index) {
  return (index + 1) % m.llama4.nope_layer_interval == 0;
}

bool is_moe_layer(const ModelSpec& m, int64_t index) {
  return (index + 1) % m.llama4.interleave_moe_layer_step == 0;
}

int64_t moe_layers(const ModelSpec& m) {
  return m.num_decoder_layers / m.llama4.interleave_moe_layer_step;
}

}  // namespace

Status check_llama4(const ModelSpec& m) {
  PRECAST_RETURN_IF_ERROR(check_moe(m));
  // ModelSpec's check_llama4_keys holds MaxText's own checks; these are what the layer pattern
  // needs. MaxText's scanned block picks a layer's kind by its index within the block, so the
  // block must hold whole NoPE and MoE periods for the kinds to follow the layer index.
  const Llama4Spec& l = m.llama4;
  int64_t cycle = m.inhomogeneous_layer_cycle_interval;
  if (m.scan_layers && (cycle < 1 || cycle % l.nope_layer_interval != 0 ||
                        cycle % l.interleave_moe_layer_step != 0)) {
    return usage_error(fmt::format(
        "inhomogeneous_layer_cycle_interval={} is not supported yet for decoder_block llama4 "
        "with scan_layers=true: MaxText's scanned block picks the NoPE and MoE layers by their "
        "index within the block, so it must be a multiple of nope_layer_interval ({}) and "
        "interleave_moe_layer_step ({}); the llama4 model files set 4",
        cycle, l.nope_layer_interval, l.interleave_moe_layer_step));
  }
  if (m.scan_layers && m.num_decoder_layers % cycle != 0) {
    return usage_error(fmt::format(
        "num_decoder_layers {} must be a multiple of inhomogeneous_layer_cycle_interval {} for "
        "llama4 with scan_layers=true (MaxText scans whole blocks only); change "
        "base_num_decoder_layers or set scan_layers=false",
        m.num_decoder_layers, cycle));
  }
  return Status::success();
}

Status build_llama4(Context& c) {
  const ModelSpec& s = c.spec();
  ir::Builder& b = c.b();
  double query_scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  int64_t index = 0;
  Value x = embed_tokens(c);
  x = decoder_layers(c, x, [&](Value in, const std::string& p) {
    int64_t i = index++;
    bool nope = is_nope_layer(s, i);
    AttentionBlock block{.prefix = p + "self_attention",
                         .query_scale = query_scale,
                         .chunk = nope ? 0 : s.llama4.chunk_attn_window_size,
                         .no_rope = nope,
                         .l2_qk_norm = s.attention.qk_norm && !nope,
                         .temperature_tuning = s.llama4.temperature_tuning && nope};
    Value h =
        b.add(in, attention(c, rms_norm_block(c, in, p + "pre_self_attention_layer_norm"), block));
    Value y = rms_norm_block(c, h, p + "post_self_attention_layer_norm");
    Value out;
    if (is_moe_layer(s, i)) {
      std::string moe_block = p + "Llama4MoEBlock_0";
      out = moe(c, y, {.prefix = moe_block + ".MoeBlock_0", .llama4_router = true});
      if (s.moe.shared_experts > 0) {
        out = b.add(out, mlp(c, y,
                             {.prefix = moe_block + ".shared_experts",
                              .width = s.moe.shared_experts * s.moe.moe_mlp_dim}));
      }
    } else {
      out = mlp(c, y, {.prefix = p + "mlp"});
    }
    return b.add(out, h);
  });
  return logits_and_loss(c, rms_norm_block(c, x, "decoder.decoder_norm"));
}

// MaxText's Llama4ScannableBlock: blocks of inhomogeneous_layer_cycle_interval layers
// (check_llama4 requires whole blocks when scanned).
ScanLayout llama4_scan(const ModelSpec& m) {
  if (m.num_decoder_layers % m.inhomogeneous_layer_cycle_interval != 0) {
    return single_layer_scan(m);
  }
  return {.layers_per_block = m.inhomogeneous_layer_cycle_interval,
          .scanned_layers = m.num_decoder_layers};
}

// maxtext-facts §d: per layer the four attention kernels (the L2 qk-norm has no scale) and two
// norms [E]; L // interleave_moe_layer_step MoE layers with the router E·X, the experts' wi_0,
// wi_1, wo and the shared experts' MLP of width shared_experts·moe_mlp_dim; the other layers a
// dense MLP of width mlp_dim; then the embedding, the untied logits and the final norm.
int64_t llama4_parameters(const ModelSpec& m) {
  return dense_and_moe_decoder_parameters(m, m.num_decoder_layers - moe_layers(m),
                                          attention_kernel_parameters(m));
}

// maxtext-facts §d, MaxText's llama4 branch: the weights as deepseek's routed-and-shared count
// (dense layers L - L // step with mlp_dim, MoE layers L // step with the router, the shared
// experts and num_experts_per_tok experts); attention over global = L // nope_layer_interval
// full causal layers and the others chunked: 4B((T // C)·C² + (T % C)²)HD each, halved.
FlopParts llama4_flops(const ModelSpec& m, const BatchSpec& batch) {
  FlopTerms f = flop_terms(m, batch);
  const MoeSpec& x = m.moe;
  long double bt = f.b * f.t, e = static_cast<long double>(m.emb_dim);
  long double acts = static_cast<long double>(m.mlp.activations.size());
  auto ffn = [&](int64_t width) {
    return 2 * bt * static_cast<long double>(width) * e * (acts + 1);
  };
  long double moe = static_cast<long double>(moe_layers(m));
  long double dense = f.layers - moe;
  long double gate = 2 * bt * e * static_cast<long double>(x.num_experts);
  long double ffn_total = ffn(m.mlp_dim) * dense +
                          (gate + ffn(x.moe_mlp_dim) * static_cast<long double>(x.shared_experts) +
                           ffn(x.moe_mlp_dim) * static_cast<long double>(x.experts_per_token)) *
                              moe;
  FlopParts parts;
  parts.learnable = (ffn_total + (f.qkv + f.projection) * f.layers + f.embedding) * 3;
  int64_t length = batch.max_target_length, chunk = m.llama4.chunk_attn_window_size;
  long double chunk_len = static_cast<long double>(chunk);
  long double whole = static_cast<long double>(length / chunk);
  long double rest = static_cast<long double>(length % chunk);
  long double chunked = 4 * f.b * (whole * chunk_len * chunk_len + rest * rest) * f.h * f.d;
  long double global =
      static_cast<long double>(m.num_decoder_layers / m.llama4.nope_layer_interval);
  long double full = 4 * f.b * f.t * f.t * f.h * f.d;
  parts.attention = (global * full + (f.layers - global) * chunked) / 2 * 3;
  return parts;
}

}  // namespace precast::frontend
