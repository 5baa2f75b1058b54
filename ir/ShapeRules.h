// Shape and dtype rules: for every op kind, the result types implied by its operands and
// attributes. The builder uses them to type new ops; the verifier re-runs them and compares.
#pragma once

#include <vector>

#include "ir/Ops.h"

namespace precast::ir {

// Checks the op against its table row (operand count, attribute keys, kinds and required ones)
// and then applies its shape rule. Errors carry only the rule text; callers add which op.
Expected<std::vector<TensorType>> infer_result_types(const OpSignature& op);

// Per-kind rules, referenced from the op table (Ops.cpp). Each assumes the generic checks passed.
namespace shape_rules {
Expected<std::vector<TensorType>> constant(const OpSignature& op);
Expected<std::vector<TensorType>> iota(const OpSignature& op);
Expected<std::vector<TensorType>> rng(const OpSignature& op);
Expected<std::vector<TensorType>> unary(const OpSignature& op);
Expected<std::vector<TensorType>> binary(const OpSignature& op);
Expected<std::vector<TensorType>> compare(const OpSignature& op);
Expected<std::vector<TensorType>> select(const OpSignature& op);
Expected<std::vector<TensorType>> convert(const OpSignature& op);
Expected<std::vector<TensorType>> broadcast_in_dim(const OpSignature& op);
Expected<std::vector<TensorType>> reshape(const OpSignature& op);
Expected<std::vector<TensorType>> transpose(const OpSignature& op);
Expected<std::vector<TensorType>> slice(const OpSignature& op);
Expected<std::vector<TensorType>> concatenate(const OpSignature& op);
Expected<std::vector<TensorType>> pad(const OpSignature& op);
Expected<std::vector<TensorType>> reduce(const OpSignature& op);
Expected<std::vector<TensorType>> dot_general(const OpSignature& op);
Expected<std::vector<TensorType>> take(const OpSignature& op);
// top_k: operand [..., N], 1 <= k <= N; result s32[..., k].
Expected<std::vector<TensorType>> top_k(const OpSignature& op);
Expected<std::vector<TensorType>> scatter_add(const OpSignature& op);
// grouped_dot: lhs [R,N,K], rhs [G,K,M] (one float dtype), ids s32/u32 [R,N]; result [R,N,M].
Expected<std::vector<TensorType>> grouped_dot(const OpSignature& op);
// grouped_dot_weight_grad: lhs [R,N,K], dout [R,N,M] (one float dtype), ids [R,N]; declared
// result [G,K,M] in their dtype.
Expected<std::vector<TensorType>> grouped_dot_weight_grad(const OpSignature& op);
Expected<std::vector<TensorType>> attention(const OpSignature& op);
Expected<std::vector<TensorType>> attention_grad(const OpSignature& op);
Expected<std::vector<TensorType>> attention_stats(const OpSignature& op);
Expected<std::vector<TensorType>> collective(const OpSignature& op);
// ragged_all_to_all: dest s32 [A,B] (each row's destination position in the group). The
// dispatch takes rows x [A,B,F...] and gives [group_size, capacity, F...] (what each position
// sent here, in its row order, zero past its count); `combine` takes that buffer layout
// [group_size, capacity, F...] and gives [A,B,F...] (each row back where dest sent it).
Expected<std::vector<TensorType>> ragged_all_to_all(const OpSignature& op);
}  // namespace shape_rules

}  // namespace precast::ir
