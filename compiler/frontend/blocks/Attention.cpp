#include <array>
#include <cmath>

#include "compiler/frontend/blocks/Blocks.h"

namespace precast::frontend {
namespace {

using ir::Builder;
using ir::DType;
using ir::TensorType;
using ir::Value;

// MaxText's attention kernels draw from a normal: variance_scaling(1, fan_in, "normal").
WeightInfo attention_kernel(std::string name, std::vector<int64_t> dims,
                            std::vector<std::string> axes, int64_t fan_in) {
  return {std::move(name), std::move(dims), std::move(axes), InitKind::kNormal,
          normal_fan_in(fan_in)};
}

// MaxText's attention sinks (compute_local_attention): each query head's logit sinks[h] joins the
// softmax's denominator as one more key with a zero value, so with lse = max + log(sum) the
// rows' log-partition over the real keys, out = attention(q, k, v) * sigmoid(lse - sinks[h]).
// attention_stats gives out, max and sum; the product runs in the statistics dtype.
Value attention_with_sinks(Context& c, Value q, Value k, Value v, const std::string& p,
                           const ir::AttentionOptions& options) {
  Builder& b = c.b();
  int64_t h = c.spec().num_query_heads;
  Value sinks = c.weight({p + "sinks", {h}, {""}, InitKind::kZeros});
  b.set_scope(Context::scope_of(p));
  std::array<Value, 5> operands{q, k, v, c.batch(2), c.batch(2)};
  auto [out, max, sum] = b.attention_stats(operands, options);
  Value lse = b.add(max, b.log(sum));  // [R, T, H]
  DType stat = b.type(lse).dtype;
  Value sink = b.broadcast_in_dim(b.convert(sinks, stat), b.type(lse).dims, {2});
  Value kept = b.logistic(b.sub(lse, sink));
  std::vector<int64_t> dims = b.type(out).dims;
  Value scale = b.broadcast_in_dim(b.convert(kept, b.type(out).dtype), dims, {0, 1, 2});
  return b.mul(out, scale);
}

// llama4's L2Norm (MaxText's, no scale): x * rsqrt(mean(x^2 over D) + eps), the statistics in
// the stat dtype as the RMSNorms'.
Value l2_norm(Context& c, Value x) {
  Builder& b = c.b();
  std::vector<int64_t> dims = b.type(x).dims;
  int64_t last = static_cast<int64_t>(dims.size()) - 1;
  std::vector<int64_t> leading(dims.begin(), dims.end() - 1), leading_axes;
  for (int64_t i = 0; i < last; ++i) leading_axes.push_back(i);
  Value xf = b.type(x).dtype == c.stat() ? x : b.convert(x, c.stat());
  Value mean2 = b.div(b.reduce_sum(b.mul(xf, xf), {last}),
                      b.constant(static_cast<double>(dims.back()), TensorType{c.stat(), leading}));
  Value inv = b.rsqrt(b.add(mean2, b.splat(c.spec().normalization_layer_epsilon, mean2)));
  Value y = b.mul(xf, b.broadcast_in_dim(inv, dims, leading_axes));
  return c.stat() == c.act() ? y : b.convert(y, c.act());
}

// llama4's temperature tuning on its NoPE layers (MaxText's attn_scales, computed in `dtype` as
// MaxText does): 0.1 * log(floor((position + 1) / 8192) + 1) + 1 per token, broadcast to q's
// [R, T, H, D]. It is 1 below position 8191.
Value temperature_scale(Context& c, const std::vector<int64_t>& q_dims) {
  Builder& b = c.b();
  Value position = b.convert(c.batch(1), c.act());  // inputs_position [R, T]
  Value scaled = b.div(b.add(position, b.splat(1.0, position)), b.splat(8192.0, position));
  Value tuned = b.log(b.add(b.unary(ir::OpKind::kFloor, scaled), b.splat(1.0, position)));
  Value scale = b.add(b.mul(tuned, b.splat(0.1, tuned)), b.splat(1.0, tuned));
  return b.broadcast_in_dim(scale, q_dims, {0, 1});
}

// llama4's chunked attention as a segment mask: token t's id becomes segment[t] * n + t // chunk
// (n = the number of chunks), so two tokens share an id exactly when they share the segment and
// the chunk; with the causal mask each token sees the earlier tokens of its chunk (MaxText's
// ChunkedCausalMask over the sequence index).
Value chunk_segments(Context& c, int64_t chunk) {
  Builder& b = c.b();
  Value segment = c.batch(2);  // inputs_segmentation s32 [R, T]
  std::vector<int64_t> dims = b.type(segment).dims;
  int64_t chunks = (dims[1] + chunk - 1) / chunk;
  Value index = b.iota(TensorType{ir::DType::kS32, dims}, 1);
  Value chunk_id = b.div(index, b.splat(static_cast<double>(chunk), index));
  return b.add(b.mul(segment, b.splat(static_cast<double>(chunks), segment)), chunk_id);
}

}  // namespace

Value attention(Context& c, Value x, const AttentionBlock& block) {
  const ModelSpec& s = c.spec();
  Builder& b = c.b();
  std::string p = block.prefix + ".";
  std::string scope_name = Context::scope_of(p);
  Builder::ScopeGuard guard(b, "");
  b.set_scope(scope_name);
  int64_t rows = c.rows(), length = c.length();
  int64_t e = s.emb_dim, h = s.num_query_heads, k_heads = s.num_kv_heads, d = s.head_dim;
  Value q, k, v;
  if (block.fused_qkv) {
    WeightInfo bias;
    if (block.biases) bias = {p + "qkv_proj.bias", {3, h, d}, {"qkv", "heads", "kv"}};
    Value qkv = dense(
        c, x,
        attention_kernel(p + "qkv_proj.kernel", {e, 3, h, d}, {"embed", "qkv", "heads", "kv"}, e),
        1, bias);  // [R, T, 3, H, D]
    b.set_scope(scope_name);
    b.with_checkpoint(qkv, "qkv_proj");
    std::vector<int64_t> part_dims{rows, length, h, d};
    auto part = [&](int64_t i) {
      return b.reshape(b.slice(qkv, {0, 0, i, 0, 0}, {rows, length, i + 1, h, d}), part_dims);
    };
    q = b.div(part(0),
              b.constant(std::sqrt(static_cast<double>(d)), TensorType{c.act(), part_dims}));
    k = part(1);
    v = part(2);
  } else {
    // MaxText folds the attention's 1/sqrt(D) into the query's initialiser, except when the
    // queries are normalised (qk-norm) or scaled explicitly (query_scale, its
    // query_pre_attn_scalar).
    WeightInfo query =
        attention_kernel(p + "query.kernel", {e, h, d}, {"embed", "q_heads", "kv"}, e);
    if (!block.qk_norm && block.query_scale == 1) {
      query.stddev /= std::sqrt(static_cast<double>(d));
    }
    // A bias has its kernel's output shape and axes (MaxText's DenseGeneral), initialised to 0.
    auto bias = [&](const char* name, int64_t heads, std::vector<std::string> axes) {
      if (!block.qkv_biases) return WeightInfo{};
      return WeightInfo{p + name + ".bias", {heads, d}, std::move(axes)};
    };
    q = dense(c, x, query, 1, bias("query", h, {"q_heads", "kv"}));
    k = dense(c, x,
              attention_kernel(p + "key.kernel", {e, k_heads, d},
                               {"embed", "kv_heads", "kv_head_dim"}, e),
              1, bias("key", k_heads, {"kv_heads", "kv_head_dim"}));
    v = dense(c, x,
              attention_kernel(p + "value.kernel", {e, k_heads, d},
                               {"embed", "kv_heads", "kv_head_dim"}, e),
              1, bias("value", k_heads, {"kv_heads", "kv_head_dim"}));
    if (block.qk_norm) {
      for (auto [t, name] : {std::pair{&q, "query_norm"}, std::pair{&k, "key_norm"}}) {
        b.set_scope(scope_name + "/" + name);
        if (block.qk_norm_all_heads) {
          // olmo3 (MaxText's GlobalRMSNorm): one RMSNorm over the flattened [N * D] heads.
          std::vector<int64_t> dims = b.type(*t).dims;
          Value flat = b.reshape(*t, {dims[0], dims[1], dims[2] * dims[3]});
          *t = b.reshape(rms_norm(c, flat, p + name + ".scale"), dims);
        } else {
          *t = rms_norm(c, *t, p + name + ".scale");
        }
      }
    }
    b.set_scope(scope_name);
    if (!block.no_rope) {
      q = rotary(c, q, block.window > 0, !block.local_rope_unscaled);
      k = rotary(c, k, block.window > 0, !block.local_rope_unscaled);
    }
    if (block.l2_qk_norm) {
      q = l2_norm(c, q);
      k = l2_norm(c, k);
    }
    if (block.query_scale != 1) q = b.mul(q, b.splat(block.query_scale, q));
    if (block.temperature_tuning) q = b.mul(q, temperature_scale(c, b.type(q).dims));
  }
  for (Value* t : {&q, &k, &v}) {
    c.axes(*t, {"activation_kv_batch", "activation_length_attn", "activation_kv_heads",
                "activation_kv_head_dim"});
  }
  b.with_checkpoint(q, "query_proj");
  b.with_checkpoint(k, "key_proj");
  b.with_checkpoint(v, "value_proj");

  ir::AttentionOptions options;
  options.scale = 1.0;
  options.causal = true;
  options.sliding_window = block.window;
  options.softcap = s.attention.logits_soft_cap.value_or(0.0);
  options.flash = s.attention.kernel.find("flash") != std::string::npos;
  Value segments = block.chunk > 0 ? chunk_segments(c, block.chunk) : c.batch(2);
  Value context = block.sink ? attention_with_sinks(c, q, k, v, p, options)
                             : b.attention(q, k, v, segments, segments, options);
  c.axes(context,
         {"activation_batch_attn", "activation_length_attn", "activation_heads", "activation_kv"});
  b.with_checkpoint(context, "context");
  WeightInfo out_bias;
  if (block.biases || block.out_bias) out_bias = {p + "out.bias", {e}, {"embed"}};
  Value out = dense(c, context,
                    attention_kernel(p + "out.kernel", {h, d, e}, {"heads", "kv", "embed"}, h * d),
                    2, out_bias);
  b.with_checkpoint(out, "out_proj");
  return c.residual_axes(out);
}

}  // namespace precast::frontend
