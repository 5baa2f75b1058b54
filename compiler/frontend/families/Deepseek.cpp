// deepseek (deepseek2, deepseek3, kimi-k2): pre-norm RMSNorm layers with multi-head latent
// attention (attention_type=mla); the first first_num_dense_layers layers have a dense gated MLP
// (mlp_dim), the others routed experts (DeepSeekMoeBlock_0.MoeBlock_0) plus shared experts
// (DeepSeekMoeBlock_0.shared_experts, one MLP of width shared_experts * moe_mlp_dim).
#include <fmt/format.h>

#include "compiler/frontend/blocks/Blocks.h"
#include "compiler/frontend/families/Family.h"

namespace precast::frontend {

using ir::Value;

Status check_moe(const ModelSpec& m) {
  PRECAST_RETURN_IF_ERROR(check_rotary_with_qk_norm(m));
  const std::vector<std::string>& acts = m.mlp.activations;
  if (acts.size() != 2 || acts[1] != "linear") {
    return usage_error(fmt::format(
        "mlp_activations={} is not supported yet for decoder_block {}: MaxText's experts are "
        "act(x wi_0) * (x wi_1); use two activations, the second linear (e.g. [silu, linear])",
        fmt::join(acts, ","), m.decoder_block));
  }
  return Status::success();
}

Status check_deepseek(const ModelSpec& m) {
  PRECAST_RETURN_IF_ERROR(check_moe(m));
  if (m.attention.qk_norm) {
    return usage_error(
        "use_qk_norm=true is not supported for decoder_block deepseek (MLA has its "
        "own q_norm and kv_norm)");
  }
  if (m.num_query_heads != m.num_kv_heads) {
    return usage_error(fmt::format(
        "MLA needs num_query_heads ({}) == num_kv_heads ({}); set base_num_kv_heads to match",
        m.num_query_heads, m.num_kv_heads));
  }
  const MlaSpec& mla = m.mla;
  for (auto [key, value] : {std::pair{"kv_lora_rank", mla.kv_lora_rank},
                            std::pair{"qk_nope_head_dim", mla.qk_nope_head_dim},
                            std::pair{"qk_rope_head_dim", mla.qk_rope_head_dim},
                            std::pair{"v_head_dim", mla.v_head_dim}}) {
    if (value <= 0) return usage_error(fmt::format("{}={} must be > 0 for MLA", key, value));
  }
  if (mla.qk_rope_head_dim % 2 != 0) {
    return usage_error(fmt::format("qk_rope_head_dim {} must be even for rotary embeddings",
                                   mla.qk_rope_head_dim));
  }
  if (mla.q_lora_rank < 0) {
    return usage_error(
        fmt::format("q_lora_rank={} must be >= 0 (0: no query LoRA)", mla.q_lora_rank));
  }
  return Status::success();
}

namespace {

// MaxText's unscanned deepseek tree numbers the two stacks apart (decoders.py): the dense layers
// `decoder.dense_layers_<i>`, then the MoE layers `decoder.moe_layers_<i - first_num_dense_layers>`
// (scanned: `dense_layers` and `moe_layers`, maxtext-facts §c).
LayerPrefix deepseek_layer_prefix(const ModelSpec& s) {
  int64_t dense = s.moe.first_num_dense_layers;
  return [dense](int64_t i) {
    return i < dense ? fmt::format("decoder.dense_layers_{}.", i)
                     : fmt::format("decoder.moe_layers_{}.", i - dense);
  };
}

}  // namespace

Status build_deepseek(Context& c) {
  const ModelSpec& s = c.spec();
  ir::Builder& b = c.b();
  Value x = embed_tokens(c);
  int64_t layer = 0;
  LayerFunction decoder_layer = [&](Value in, const std::string& p) {
    Value h = b.add(mla_attention(c, rms_norm_block(c, in, p + "pre_self_attention_layer_norm"),
                                  p + "self_attention"),
                    in);
    Value y = rms_norm_block(c, h, p + "post_self_attention_layer_norm");
    Value out;
    if (layer++ < s.moe.first_num_dense_layers) {
      out = mlp(c, y, {.prefix = p + "mlp"});
    } else {
      std::string block = p + "DeepSeekMoeBlock_0";
      out = moe(c, y, {.prefix = block + ".MoeBlock_0", .deepseek_weights = true});
      if (s.moe.shared_experts > 0) {
        out = b.add(out, mlp(c, y,
                             {.prefix = block + ".shared_experts",
                              .width = s.moe.shared_experts * s.moe.moe_mlp_dim}));
      }
    }
    return b.add(out, h);
  };
  x = decoder_layers(c, x, decoder_layer, deepseek_layer_prefix(s));
  return logits_and_loss(c, rms_norm_block(c, x, "decoder.decoder_norm"));
}

// --- Formulas (maxtext-facts §d) -----------------------------------------------------------------

int64_t mla_parameters(const ModelSpec& m) {
  const MlaSpec& a = m.mla;
  int64_t e = m.emb_dim, h = m.num_query_heads;
  int64_t qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
  int64_t query =
      a.q_lora_rank == 0 ? e * h * qk : e * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * h * qk;
  int64_t key_value = e * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank +
                      a.kv_lora_rank * h * (a.qk_nope_head_dim + a.v_head_dim);
  int64_t out = h * a.v_head_dim * e;
  int64_t legacy = 0;
  if (a.legacy_param_count) {
    // MaxText before cf012a2 also built the base Attention's key and value (and, with a query
    // LoRA, query) kernels, unused, in every layer.
    legacy = 2 * e * m.num_kv_heads * m.head_dim;
    if (a.q_lora_rank > 0) legacy += e * h * m.head_dim;
  }
  return query + key_value + out + legacy;
}

int64_t routed_experts_parameters(const ModelSpec& m) {
  const MoeSpec& x = m.moe;
  int64_t gate = m.emb_dim * x.num_experts + (x.routed_bias ? x.num_experts : 0);
  return gate + x.num_experts * 3 * m.emb_dim * x.moe_mlp_dim;  // wi_0, wi_1, wo always
}

int64_t dense_and_moe_decoder_parameters(const ModelSpec& m, int64_t dense, int64_t attention) {
  const MoeSpec& x = m.moe;
  int64_t e = m.emb_dim, moe_layers = m.num_decoder_layers - dense;
  ModelSpec shared = m;
  shared.mlp_dim = x.shared_experts * x.moe_mlp_dim;
  int64_t moe_mlp =
      routed_experts_parameters(m) + (x.shared_experts > 0 ? mlp_parameters(shared, false) : 0);
  int64_t per_layer = attention + 2 * e;
  return embedding_and_head_parameters(m, e) + per_layer * m.num_decoder_layers +
         dense * mlp_parameters(m, false) + moe_layers * moe_mlp;
}

int64_t deepseek_parameters(const ModelSpec& m) {
  return dense_and_moe_decoder_parameters(m, m.moe.first_num_dense_layers, mla_parameters(m));
}

FlopParts deepseek_flops(const ModelSpec& m, const BatchSpec& batch) {
  FlopTerms f = flop_terms(m, batch);
  const MlaSpec& a = m.mla;
  const MoeSpec& x = m.moe;
  long double bt = f.b * f.t, e = static_cast<long double>(m.emb_dim), h = f.h;
  long double nope = static_cast<long double>(a.qk_nope_head_dim);
  long double rope = static_cast<long double>(a.qk_rope_head_dim);
  long double vd = static_cast<long double>(a.v_head_dim), qk = nope + rope;
  long double kv_rank = static_cast<long double>(a.kv_lora_rank);
  long double q_rank = static_cast<long double>(a.q_lora_rank);
  long double query =
      a.q_lora_rank == 0 ? 2 * bt * e * h * qk : 2 * bt * (e * q_rank + q_rank * h * qk);
  long double key_value = 2 * bt * (e * (kv_rank + rope) + kv_rank * h * (nope + vd));
  long double projection = 2 * bt * e * h * vd;
  long double attention = 2 * bt * f.t * h * (qk + vd) / 2;
  // ffn(width) = 2 B T width E (A + 1).
  long double acts = static_cast<long double>(m.mlp.activations.size());
  auto ffn = [&](int64_t width) {
    return 2 * bt * static_cast<long double>(width) * e * (acts + 1);
  };
  long double dense = static_cast<long double>(x.first_num_dense_layers);
  long double moe_layers = f.layers - dense;
  long double gate = 2 * bt * e * static_cast<long double>(x.num_experts);
  long double ffn_total = ffn(m.mlp_dim) * dense +
                          (gate + ffn(x.moe_mlp_dim) * static_cast<long double>(x.shared_experts) +
                           ffn(x.moe_mlp_dim) * static_cast<long double>(x.experts_per_token)) *
                              moe_layers;
  FlopParts parts;
  parts.learnable = (ffn_total + (query + key_value + projection) * f.layers + f.embedding) * 3;
  parts.attention = attention * f.layers * 3;
  return parts;
}

ScanLayout deepseek_scan(const ModelSpec& m) {
  return single_layer_scan(m);
}

}  // namespace precast::frontend
