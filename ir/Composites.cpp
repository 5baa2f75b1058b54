#include "ir/Composites.h"

#include <fmt/format.h>

#include <limits>

#include "ir/Builder.h"

namespace precast::ir {

double attention_mask_value(DType dtype) {
  double largest = dtype == DType::kF16 ? 65504.0 : std::numeric_limits<float>::max();
  return -0.7 * largest;
}

namespace {

// pred[T,S]: which key positions each query position may see, from causal and window; the
// positions compared are `given` (q_positions, kv_positions) or 0..T-1 and 0..S-1.
Value position_mask(Builder& b, int64_t queries, int64_t keys, bool causal, int64_t window,
                    std::span<const Value> given) {
  if (!causal && window <= 0) return Value{};
  TensorType positions{DType::kS32, {queries, keys}};
  Value t = given.empty() ? b.iota(positions, 0) : b.broadcast_in_dim(given[0], positions.dims, {0});
  Value s = given.empty() ? b.iota(positions, 1) : b.broadcast_in_dim(given[1], positions.dims, {1});
  Value mask;
  if (causal) mask = b.compare(s, t, ComparisonDirection::kLe);
  if (window > 0) {
    Value distance = b.unary(OpKind::kAbs, b.sub(t, s));
    Value near = b.compare(distance, b.constant(static_cast<double>(window), positions),
                           ComparisonDirection::kLt);
    mask = mask.valid() ? b.binary(OpKind::kAnd, mask, near) : near;
  }
  return mask;
}

// pred[B,T,S]: query and key belong to the same packed segment.
Value segment_mask(Builder& b, Value q_segment, Value kv_segment) {
  int64_t batch = b.type(q_segment).dims[0];
  int64_t queries = b.type(q_segment).dims[1];
  int64_t keys = b.type(kv_segment).dims[1];
  std::vector<int64_t> shape = {batch, queries, keys};
  Value q_ids = b.broadcast_in_dim(q_segment, shape, {0, 1});
  Value kv_ids = b.broadcast_in_dim(kv_segment, shape, {0, 2});
  return b.compare(q_ids, kv_ids, ComparisonDirection::kEq);
}

// Softmax over the last dimension of a rank-5 tensor.
Value softmax_last(Builder& b, Value scores) {
  std::vector<int64_t> shape = b.type(scores).dims;
  Value row_max = b.broadcast_in_dim(b.reduce_max(scores, {4}), shape, {0, 1, 2, 3});
  Value weights = b.exp(b.sub(scores, row_max));
  Value row_sum = b.broadcast_in_dim(b.reduce_sum(weights, {4}), shape, {0, 1, 2, 3});
  return b.div(weights, row_sum);
}

// Sizes read off q [B,T,H,D], k [B,S,K,D] and v [B,S,K,Dv].
struct AttentionDims {
  int64_t batch, queries, heads, head_dim, keys, kv_heads, value_dim, group;
  // Scores and weights are [B,K,T,G,S]: query heads grouped under the kv head they share.
  std::vector<int64_t> score_shape() const { return {batch, kv_heads, queries, group, keys}; }
};

AttentionDims attention_dims(const Builder& b, Value q, Value k, Value v) {
  const std::vector<int64_t>& q_dims = b.type(q).dims;
  const std::vector<int64_t>& k_dims = b.type(k).dims;
  AttentionDims d;
  d.batch = q_dims[0];
  d.queries = q_dims[1];
  d.heads = q_dims[2];
  d.head_dim = q_dims[3];
  d.keys = k_dims[1];
  d.kv_heads = k_dims[2];
  d.value_dim = b.type(v).dims[3];
  d.group = d.heads / d.kv_heads;
  return d;
}

// What both directions of attention compute before the weighted sum.
struct AttentionWeights {
  Value grouped_q;      // q as [B,T,K,G,D]
  Value capped;         // tanh(raw / softcap) when softcap > 0; invalid otherwise
  Value visible;        // pred [B,K,T,G,S]; invalid when every pair is visible
  Value scores;         // the masked scores [B,K,T,G,S]
  Value probabilities;  // softmax over S of the masked scores
};

// `masks`: the operands after q, k, v (and out, dout): the segment ids, then the positions when
// the op has `positions`.
AttentionWeights attention_weights(Builder& b, const AttrSet& attrs, const AttentionDims& d,
                                   Value q, Value k, std::span<const Value> masks) {
  std::span<const Value> segments = masks, positions;
  if (attrs.flag(AttrKey::kPositions)) {
    segments = masks.first(masks.size() - 2);
    positions = masks.last(2);
  }
  AttentionWeights w;
  w.grouped_q = b.reshape(q, {d.batch, d.queries, d.kv_heads, d.group, d.head_dim});
  Value scores = b.dot_general(w.grouped_q, k, DotDims{{0, 2}, {0, 2}, {4}, {3}});
  scores = b.mul(scores, b.splat(attrs.real(AttrKey::kScale), scores));
  double softcap = attrs.real(AttrKey::kSoftcap);
  if (softcap > 0.0) {
    Value cap = b.splat(softcap, scores);
    w.capped = b.tanh(b.div(scores, cap));
    scores = b.mul(cap, w.capped);
  }

  std::vector<int64_t> score_shape = d.score_shape();
  Value mask = position_mask(b, d.queries, d.keys, attrs.flag(AttrKey::kCausal),
                             attrs.integer(AttrKey::kSlidingWindow), positions);
  if (mask.valid()) mask = b.broadcast_in_dim(mask, score_shape, {2, 4});
  if (!segments.empty()) {
    Value same =
        b.broadcast_in_dim(segment_mask(b, segments[0], segments[1]), score_shape, {0, 2, 4});
    mask = mask.valid() ? b.binary(OpKind::kAnd, mask, same) : same;
  }
  if (mask.valid()) {
    DType dtype = b.type(q).dtype;
    scores = b.select(mask, scores, b.splat(attention_mask_value(dtype), scores));
  }
  w.visible = mask;
  w.scores = scores;
  w.probabilities = softmax_last(b, scores);
  return w;
}

}  // namespace

Expected<std::vector<Value>> decompose_attention(Builder& b, const AttrSet& attrs,
                                                 std::span<const Value> operands) {
  if (operands.size() < 3 || operands.size() > 7) {
    return internal_error("decompose_attention: expects 3 to 7 operands");
  }
  Value q = operands[0], k = operands[1], v = operands[2];
  const AttentionDims d = attention_dims(b, q, k, v);
  AttentionWeights w = attention_weights(b, attrs, d, q, k, operands.subspan(3));
  // [B,K,T,G,Dv] -> [B,T,K,G,Dv] -> [B,T,H,Dv]
  Value out = b.dot_general(w.probabilities, v, DotDims{{0, 1}, {0, 2}, {4}, {1}});
  out = b.transpose(out, {0, 2, 1, 3, 4});
  out = b.reshape(out, {d.batch, d.queries, d.heads, d.value_dim});
  if (!b.ok()) {
    return internal_error(
        fmt::format("decompose_attention failed: {}", b.status().error().message()));
  }
  return std::vector<Value>{out};
}

Expected<std::vector<Value>> decompose_attention_stats(Builder& b, const AttrSet& attrs,
                                                       std::span<const Value> operands) {
  PRECAST_ASSIGN_OR_RETURN(std::vector<Value> out, decompose_attention(b, attrs, operands));
  Value q = operands[0], k = operands[1], v = operands[2];
  const AttentionDims d = attention_dims(b, q, k, v);
  AttentionWeights w = attention_weights(b, attrs, d, q, k, operands.subspan(3));
  // The row max and the sum of exp(score - max) over S, in the rows' type:
  // [B,K,T,G] -> [B,T,K,G] -> [B,T,H].
  DType row_type = b.type(q).dtype == DType::kF64 ? DType::kF64 : DType::kF32;
  Value scores = b.type(w.scores).dtype == row_type ? w.scores : b.convert(w.scores, row_type);
  std::vector<int64_t> shape = b.type(scores).dims;
  Value row_max = b.reduce_max(scores, {4});
  Value sum = b.reduce_sum(
      b.exp(b.sub(scores, b.broadcast_in_dim(row_max, shape, {0, 1, 2, 3}))), {4});
  auto per_head = [&](Value rows) {
    return b.reshape(b.transpose(rows, {0, 2, 1, 3}), {d.batch, d.queries, d.heads});
  };
  out.push_back(per_head(row_max));
  out.push_back(per_head(sum));
  if (!b.ok()) {
    return internal_error(
        fmt::format("decompose_attention_stats failed: {}", b.status().error().message()));
  }
  return out;
}

Expected<std::vector<Value>> decompose_attention_grad(Builder& b, const AttrSet& attrs,
                                                      std::span<const Value> operands) {
  if (operands.size() < 5 || operands.size() > 9) {
    return internal_error("decompose_attention_grad: expects 5 to 9 operands");
  }
  Value q = operands[0], k = operands[1], v = operands[2], out = operands[3], dout = operands[4];
  const AttentionDims d = attention_dims(b, q, k, v);
  AttentionWeights w = attention_weights(b, attrs, d, q, k, operands.subspan(5));
  Value p = w.probabilities;
  std::vector<int64_t> score_shape = d.score_shape();

  // Delta[B,T,H] = sum_j dout out, laid out like the scores.
  Value delta = b.reduce_sum(b.mul(dout, out), {3});
  delta = b.transpose(b.reshape(delta, {d.batch, d.queries, d.kv_heads, d.group}), {0, 2, 1, 3});
  delta = b.broadcast_in_dim(delta, score_shape, {0, 1, 2, 3});
  Value grouped_dout = b.reshape(dout, {d.batch, d.queries, d.kv_heads, d.group, d.value_dim});
  Value dp = b.dot_general(grouped_dout, v, DotDims{{0, 2}, {0, 2}, {4}, {3}});
  // The gradient of the raw scores scale * q.k: through the soft cap, and none where masked.
  Value draw = b.mul(p, b.sub(dp, delta));
  if (w.capped.valid()) draw = b.mul(draw, b.sub(b.splat(1.0, draw), b.mul(w.capped, w.capped)));
  if (w.visible.valid()) draw = b.select(w.visible, draw, b.splat(0.0, draw));
  const double scale = attrs.real(AttrKey::kScale);

  // dq: [B,K,T,G,D] -> [B,T,K,G,D] -> [B,T,H,D]
  Value dq = b.dot_general(draw, k, DotDims{{0, 1}, {0, 2}, {4}, {1}});
  dq = b.reshape(b.transpose(dq, {0, 2, 1, 3, 4}), {d.batch, d.queries, d.heads, d.head_dim});
  dq = b.mul(dq, b.splat(scale, dq));
  // dk and dv sum over queries and the heads of a group: [B,K,S,*] -> [B,S,K,*]
  Value dk = b.dot_general(draw, w.grouped_q, DotDims{{0, 1}, {0, 2}, {2, 3}, {1, 3}});
  dk = b.transpose(dk, {0, 2, 1, 3});
  dk = b.mul(dk, b.splat(scale, dk));
  Value dv = b.dot_general(p, grouped_dout, DotDims{{0, 1}, {0, 2}, {2, 3}, {1, 3}});
  dv = b.transpose(dv, {0, 2, 1, 3});
  if (!b.ok()) {
    return internal_error(
        fmt::format("decompose_attention_grad failed: {}", b.status().error().message()));
  }
  return std::vector<Value>{dq, dk, dv};
}

}  // namespace precast::ir
