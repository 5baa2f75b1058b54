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

// pred[T,S]: which key positions each query position may see, from causal and window.
Value position_mask(Builder& b, int64_t queries, int64_t keys, bool causal, int64_t window) {
  TensorType positions{DType::kS32, {queries, keys}};
  Value t = b.iota(positions, 0);
  Value s = b.iota(positions, 1);
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

}  // namespace

Expected<std::vector<Value>> decompose_attention(Builder& b, const AttrSet& attrs,
                                                 std::span<const Value> operands) {
  if (operands.size() != 3 && operands.size() != 5) {
    return internal_error("decompose_attention: expects 3 or 5 operands");
  }
  Value q = operands[0], k = operands[1], v = operands[2];
  const std::vector<int64_t> q_dims = b.type(q).dims;
  const std::vector<int64_t> k_dims = b.type(k).dims;
  const int64_t batch = q_dims[0], queries = q_dims[1], heads = q_dims[2], head_dim = q_dims[3];
  const int64_t keys = k_dims[1], kv_heads = k_dims[2], value_dim = b.type(v).dims[3];
  const int64_t group = heads / kv_heads;
  const DType dtype = b.type(q).dtype;

  // Scores [B,K,T,G,S]: query heads grouped under the kv head they share.
  Value grouped_q = b.reshape(q, {batch, queries, kv_heads, group, head_dim});
  Value scores = b.dot_general(grouped_q, k, DotDims{{0, 2}, {0, 2}, {4}, {3}});
  scores = b.mul(scores, b.splat(attrs.real(AttrKey::kScale), scores));
  double softcap = attrs.real(AttrKey::kSoftcap);
  if (softcap > 0.0) {
    Value cap = b.splat(softcap, scores);
    scores = b.mul(cap, b.tanh(b.div(scores, cap)));
  }

  std::vector<int64_t> score_shape = {batch, kv_heads, queries, group, keys};
  Value mask = position_mask(b, queries, keys, attrs.flag(AttrKey::kCausal),
                             attrs.integer(AttrKey::kSlidingWindow));
  if (mask.valid()) mask = b.broadcast_in_dim(mask, score_shape, {2, 4});
  if (operands.size() == 5) {
    Value same = b.broadcast_in_dim(segment_mask(b, operands[3], operands[4]), score_shape, {0, 2, 4});
    mask = mask.valid() ? b.binary(OpKind::kAnd, mask, same) : same;
  }
  if (mask.valid()) scores = b.select(mask, scores, b.splat(attention_mask_value(dtype), scores));

  Value probabilities = softmax_last(b, scores);
  // [B,K,T,G,Dv] -> [B,T,K,G,Dv] -> [B,T,H,Dv]
  Value out = b.dot_general(probabilities, v, DotDims{{0, 1}, {0, 2}, {4}, {1}});
  out = b.transpose(out, {0, 2, 1, 3, 4});
  out = b.reshape(out, {batch, queries, heads, value_dim});
  if (!b.ok()) {
    return internal_error(
        fmt::format("decompose_attention failed: {}", b.status().error().message()));
  }
  return std::vector<Value>{out};
}

}  // namespace precast::ir
