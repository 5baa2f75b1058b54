// deepseek's multi-head latent attention (MaxText's attention_mla.MLA, training path): queries
// and keys split into a part without position (nope) and a RoPE part; keys and values come from
// one normalised low-rank latent shared by all heads, the key's RoPE part from a slice of the
// same projection. compiler/frontend/README.md has the math.
#include <cmath>

#include "compiler/frontend/blocks/Blocks.h"

namespace precast::frontend {
namespace {

using ir::Builder;
using ir::Value;

// MaxText's MLA projections draw from a normal: variance_scaling(1, fan_in, "normal").
WeightInfo mla_kernel(std::string name, std::vector<int64_t> dims, std::vector<std::string> axes,
                      int64_t fan_in) {
  return {std::move(name), std::move(dims), std::move(axes), InitKind::kNormal,
          normal_fan_in(fan_in)};
}

// x's last dimension [begin, end).
Value last_slice(Builder& b, Value x, int64_t begin, int64_t end) {
  std::vector<int64_t> dims = b.type(x).dims;
  std::vector<int64_t> start(dims.size(), 0);
  start.back() = begin;
  dims.back() = end;
  return b.slice(x, start, dims);
}

// qk_head_dim^-0.5, times YaRN's (0.1 mscale ln(rope_factor) + 1)^2 when the positions were
// stretched (max_position_embeddings > original_max_position_embeddings).
double mla_softmax_scale(const ModelSpec& s) {
  double scale =
      1.0 / std::sqrt(static_cast<double>(s.mla.qk_nope_head_dim + s.mla.qk_rope_head_dim));
  const YarnSpec& yarn = s.rope.yarn;
  if (yarn.max_position_embeddings > yarn.original_max_position_embeddings) {
    double m = 0.1 * s.mla.mscale * std::log(static_cast<double>(yarn.factor)) + 1.0;
    scale *= m * m;
  }
  return scale;
}

}  // namespace

Value mla_attention(Context& c, Value x, const std::string& prefix) {
  const ModelSpec& s = c.spec();
  const MlaSpec& m = s.mla;
  Builder& b = c.b();
  std::string p = prefix + ".";
  std::string scope_name = Context::scope_of(p);
  Builder::ScopeGuard guard(b, "");
  b.set_scope(scope_name);
  int64_t rows = c.rows(), length = c.length();
  int64_t e = s.emb_dim, h = s.num_query_heads;
  int64_t nope = m.qk_nope_head_dim, rope = m.qk_rope_head_dim, qk = nope + rope;
  int64_t vd = m.v_head_dim, kv_rank = m.kv_lora_rank, q_rank = m.q_lora_rank;

  Value q;
  if (q_rank == 0) {
    q = dense(c, x, mla_kernel(p + "query.kernel", {e, h, qk}, {"embed", "q_heads", "kv"}, e), 1);
  } else {
    Value low =
        dense(c, x, mla_kernel(p + "wq_a.kernel", {e, q_rank}, {"embed", "q_lora_up_proj"}, e), 1);
    b.set_scope(scope_name);
    b.with_checkpoint(low, "query_wa_proj");
    b.set_scope(scope_name + "/q_norm");
    low = rms_norm(c, low, p + "q_norm.scale");
    b.with_checkpoint(low, "mla_q");
    q = dense(c, low,
              mla_kernel(p + "wq_b.kernel", {q_rank, h, qk}, {"q_lora", "q_heads", "kv"}, q_rank),
              1);
  }
  b.set_scope(scope_name);
  Value q_nope = last_slice(b, q, 0, nope);
  Value q_rope = rotary(c, last_slice(b, q, nope, qk), false);
  Value query = b.concatenate(std::vector<Value>{q_nope, q_rope}, 3);
  query = b.mul(query, b.splat(mla_softmax_scale(s), query));

  Value latent = dense(
      c, x, mla_kernel(p + "wkv_a.kernel", {e, kv_rank + rope}, {"embed", "kv_lora_up_proj"}, e),
      1);
  b.set_scope(scope_name);
  b.with_checkpoint(latent, "kv_wa_proj");
  Value main = last_slice(b, latent, 0, kv_rank);
  Value key_rope =
      b.reshape(last_slice(b, latent, kv_rank, kv_rank + rope), {rows, length, 1, rope});
  b.set_scope(scope_name + "/kv_norm");
  main = rms_norm(c, main, p + "kv_norm.scale");
  b.with_checkpoint(main, "mla_kv");
  Value kv = dense(c, main,
                   mla_kernel(p + "wkv_b.kernel", {kv_rank, h, nope + vd},
                              {"kv_lora", "kv_heads", "kv_head_dim"}, kv_rank),
                   1);
  b.set_scope(scope_name);
  key_rope = b.reshape(rotary(c, key_rope, false), {rows, length, rope});
  key_rope = b.broadcast_in_dim(key_rope, {rows, length, h, rope}, {0, 1, 3});
  Value key = b.concatenate(std::vector<Value>{last_slice(b, kv, 0, nope), key_rope}, 3);
  Value value = last_slice(b, kv, nope, nope + vd);
  for (Value* t : {&query, &key, &value}) {
    c.axes(*t, {"activation_kv_batch", "activation_length_attn", "activation_kv_heads",
                "activation_kv_head_dim"});
  }
  b.with_checkpoint(query, "query_proj");
  b.with_checkpoint(key, "key_proj");
  b.with_checkpoint(value, "value_proj");

  ir::AttentionOptions options;
  options.scale = 1.0;
  options.causal = true;
  options.flash = s.attention.kernel.find("flash") != std::string::npos;
  Value context = b.attention(query, key, value, c.batch(2), c.batch(2), options);
  c.axes(context,
         {"activation_batch_attn", "activation_length_attn", "activation_heads", "activation_kv"});
  b.with_checkpoint(context, "context");
  Value out = dense(c, context,
                    mla_kernel(p + "out.kernel", {h, vd, e}, {"heads", "kv", "embed"}, h * vd), 2);
  b.with_checkpoint(out, "out_proj");
  return c.residual_axes(out);
}

}  // namespace precast::frontend
