// Decompositions of composite ops into primitives. They define what a composite computes: the
// interpreter's direct kernels and any code generator are tested against them.
#pragma once

#include <span>
#include <vector>

#include "ir/Attributes.h"
#include "ir/Types.h"
#include "ir/Value.h"
#include "ir/support/Error.h"

namespace precast::ir {

class Builder;

// Score given to masked (query, key) pairs before the softmax: -0.7 x the largest finite value
// of the dtype (f32's for f64), as MaxText does. Finite, so a fully masked row averages v
// instead of producing NaN.
double attention_mask_value(DType dtype);

// attention(q[B,T,H,D], k[B,S,K,D], v[B,S,K,Dv] [, q_segment[B,T], kv_segment[B,S]]) ->
// [B,T,H,Dv]. Query head h reads kv head h / (H/K). Key s is visible to query t when
// (!causal || s <= t) && (window == 0 || |t - s| < window) && q_segment[t] == kv_segment[s];
// visible or not, the score is scale * q.k, soft-capped when softcap > 0, and masked pairs get
// attention_mask_value. The decomposition materialises the scores whatever `flash` says.
Expected<std::vector<Value>> decompose_attention(Builder& builder, const AttrSet& attrs,
                                                 std::span<const Value> operands);

// attention_grad(q, k, v, out, dout [, q_segment, kv_segment]) -> (dq, dk, dv), typed like q,
// k and v; same attributes as attention, out = attention(q, k, v, ...) and dout its cotangent.
// With p the softmax weights, Delta[t] = sum_j dout[t,j] out[t,j], dp = dout[t].v[s] and
// ds = p (dp - Delta[t]); the gradient of the raw score scale*q.k is
// draw = ds * (1 - tanh(raw/softcap)^2) (softcap > 0) or ds, and 0 for masked pairs, whose score
// is a constant. dq = scale * sum_s draw k, dk = scale * sum draw q and dv = sum p dout, the last
// two summed over queries and the query heads sharing the kv head; masked pairs still feed dv
// through p. The decomposition materialises the scores whatever `flash` says.
Expected<std::vector<Value>> decompose_attention_grad(Builder& builder, const AttrSet& attrs,
                                                      std::span<const Value> operands);

// attention_stats(operands as attention's) -> (out, max, sum): attention's result and, per query
// row and head, the largest masked score and the softmax's denominator sum_s exp(score - max):
// [B,T,H] each, in f64 for f64 operands, else f32. Blocks of keys computed apart combine
// exactly: max = the blocks' largest, sum = sum_j sum_j' exp(max_j - max), out = sum_j
// (sum_j exp(max_j - max) / sum) out_j (ring attention). A fully masked row's max is the mask
// value and its sum the number of keys, so blocks of masked rows still weigh by their sizes.
Expected<std::vector<Value>> decompose_attention_stats(Builder& builder, const AttrSet& attrs,
                                                       std::span<const Value> operands);

}  // namespace precast::ir
