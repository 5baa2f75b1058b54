// The op set and its table: one row per op kind with its text name, operand/result counts,
// accepted dtypes, attribute schema, shape rule and (composites) decomposition. Adding an op is
// an enum value here, a row in Ops.cpp and a shape rule in ShapeRules.cpp (see ir/README.md).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "ir/Attributes.h"
#include "ir/Types.h"
#include "ir/Value.h"
#include "ir/support/Error.h"

namespace precast::ir {

enum class OpKind : uint16_t {
  // Leaves: no tensor operands except an rng seed.
  kConstant,
  kIota,
  kRngBits,
  kRngUniform,
  kRngNormal,
  // Elementwise, one operand.
  kNeg,
  kAbs,
  kSign,
  kFloor,
  kCeil,
  kRoundNearestEven,
  kExp,
  kExpm1,
  kLog,
  kLog1p,
  kLogistic,
  kTanh,
  kSqrt,
  kRsqrt,
  kSin,
  kCos,
  kErf,
  kNot,
  kIsFinite,
  // Elementwise, two operands of the same type (no implicit broadcasting).
  kAdd,
  kSub,
  kMul,
  kDiv,
  kRem,
  kMax,
  kMin,
  kPow,
  kAtan2,
  kAnd,
  kOr,
  kXor,
  kShiftLeft,
  kShiftRightLogical,
  kCompare,
  kSelect,
  kConvert,
  // Data movement.
  kBroadcastInDim,
  kReshape,
  kTranspose,
  kSlice,
  kConcatenate,
  kPad,
  // Reductions and contractions.
  kReduceSum,
  kReduceMax,
  kReduceMin,
  kDotGeneral,
  kTake,
  kScatterAdd,
  // Selection: the indices of the k largest entries along the last dimension (s32, no gradient;
  // values are read with take or a one-hot mask, which carry it).
  kTopK,
  // Grouped (ragged) matmuls of MoE's sparse_matmul: row n of lhs times the matrix of its group
  // ids[n]; and the weight gradient, each group's rows' outer products summed.
  kGroupedDot,
  kGroupedDotWeightGrad,
  // Per-device modules (after SPMD partitioning): collectives over a group of devices named by
  // mesh axes, and shard_slice, which keeps this device's piece of a replicated value.
  kAllGather,
  kAllReduce,
  kReduceScatter,
  kAllToAll,
  kCollectivePermute,
  // MoE's expert-parallel token exchange (MaxText's ragged_all_to_all): each row goes to the
  // group position its destination names, packed into a static worst-case buffer; `combine`
  // sends the rows back to where they came from.
  kRaggedAllToAll,
  kShardSlice,
  // Composites: kept whole because analysis (FLOPs, memory) needs what they are.
  kAttention,
  kAttentionGrad,   // the backward of attention: (dq, dk, dv)
  kAttentionStats,  // attention and its rows' softmax max and sum: (out, max, sum); ring blocks
  kCount,
};
inline constexpr int kNumOpKinds = static_cast<int>(OpKind::kCount);

enum class OpClass : uint8_t { kLeaf, kUnary, kBinary, kOther, kComposite };

struct AttrSpec {
  AttrKey key;
  bool required;
};

// What a shape rule sees: operand types, attributes, and the result types the op declares
// (from the text, or from the builder for ops whose result type is an input, like reshape).
struct OpSignature {
  OpKind kind;
  std::span<const TensorType* const> operands;
  const AttrSet& attrs;
  std::span<const TensorType> declared;
};

class Builder;
// Returns the result types, or an Error whose message names the rule broken.
using InferFn = Expected<std::vector<TensorType>> (*)(const OpSignature& op);
// Emits primitives computing the composite; returns its results.
using DecomposeFn = Expected<std::vector<Value>> (*)(Builder& builder, const AttrSet& attrs,
                                                    std::span<const Value> operands);

inline constexpr uint8_t kVariadic = 255;

struct OpInfo {
  OpKind kind;
  std::string_view name;
  OpClass op_class;
  uint8_t min_operands;
  uint8_t max_operands;  // kVariadic: any number >= min_operands
  uint8_t num_results;
  // The result type is an input of the op (reshape, convert, iota, ...), not inferred.
  bool declares_result_type;
  // Element types the first operand (elementwise ops) or the result (leaves) may have.
  DTypeSet dtypes;
  std::span<const AttrSpec> attrs;
  InferFn infer;
  DecomposeFn decompose;  // composites only; null otherwise
};

const OpInfo& op_info(OpKind kind);
std::string_view op_name(OpKind kind);
std::optional<OpKind> op_kind_from_name(std::string_view name);
std::vector<std::string> all_op_names();
bool is_elementwise(OpKind kind);
// all_gather, all_reduce, reduce_scatter, all_to_all, collective_permute, ragged_all_to_all
// (not shard_slice).
bool is_collective(OpKind kind);

// Drops optional attributes holding their zero value: the canonical form builder and parser
// both produce, so equal ops get equal attribute ids.
void drop_zero_optional_attributes(OpKind kind, AttrSet& attrs);

}  // namespace precast::ir
