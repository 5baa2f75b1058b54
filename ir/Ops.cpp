#include "ir/Ops.h"

#include <algorithm>
#include <array>
#include <string>
#include <unordered_map>

#include "ir/Composites.h"
#include "ir/ShapeRules.h"

namespace precast::ir {
namespace {

namespace rules = shape_rules;

constexpr AttrSpec kConstantAttrs[] = {{AttrKey::kValue, true}};
constexpr AttrSpec kDimensionAttrs[] = {{AttrKey::kDimension, true}};
constexpr AttrSpec kRngAttrs[] = {{AttrKey::kStream, false}};
constexpr AttrSpec kRngNormalAttrs[] = {{AttrKey::kStream, false}, {AttrKey::kTruncate, false}};
constexpr AttrSpec kCompareAttrs[] = {{AttrKey::kDirection, true}};
constexpr AttrSpec kDimsAttrs[] = {{AttrKey::kDims, true}};
constexpr AttrSpec kTransposeAttrs[] = {{AttrKey::kPermutation, true}};
constexpr AttrSpec kSliceAttrs[] = {
    {AttrKey::kStart, true}, {AttrKey::kLimit, true}, {AttrKey::kStride, false}};
constexpr AttrSpec kPadAttrs[] = {
    {AttrKey::kLow, true}, {AttrKey::kHigh, true}, {AttrKey::kInterior, false}};
constexpr AttrSpec kDotAttrs[] = {{AttrKey::kLhsBatch, false},
                                  {AttrKey::kRhsBatch, false},
                                  {AttrKey::kLhsContract, true},
                                  {AttrKey::kRhsContract, true}};
constexpr AttrSpec kAxisAttrs[] = {{AttrKey::kAxis, true}};
constexpr AttrSpec kTopKAttrs[] = {{AttrKey::kK, true}};
constexpr AttrSpec kAttentionAttrs[] = {{AttrKey::kScale, true},
                                        {AttrKey::kCausal, false},
                                        {AttrKey::kSlidingWindow, false},
                                        {AttrKey::kSoftcap, false},
                                        {AttrKey::kFlash, false},
                                        {AttrKey::kPositions, false}};

constexpr AttrSpec kGatherAttrs[] = {{AttrKey::kDimension, true},
                                     {AttrKey::kMeshAxes, true},
                                     {AttrKey::kGroupSize, true},
                                     {AttrKey::kDcn, false}};
constexpr AttrSpec kAllReduceAttrs[] = {{AttrKey::kMeshAxes, true},
                                        {AttrKey::kGroupSize, true},
                                        {AttrKey::kDcn, false},
                                        {AttrKey::kMax, false}};
constexpr AttrSpec kAllToAllAttrs[] = {{AttrKey::kDimension, true},
                                       {AttrKey::kSplitDimension, true},
                                       {AttrKey::kMeshAxes, true},
                                       {AttrKey::kGroupSize, true},
                                       {AttrKey::kDcn, false}};
constexpr AttrSpec kPermuteAttrs[] = {{AttrKey::kMeshAxes, true},
                                      {AttrKey::kGroupSize, true},
                                      {AttrKey::kShift, true},
                                      {AttrKey::kDcn, false}};
constexpr AttrSpec kRaggedAllToAllAttrs[] = {{AttrKey::kCapacity, true},
                                             {AttrKey::kMeshAxes, true},
                                             {AttrKey::kGroupSize, true},
                                             {AttrKey::kDcn, false},
                                             {AttrKey::kCombine, false}};
constexpr AttrSpec kShardSliceAttrs[] = {
    {AttrKey::kDimension, true}, {AttrKey::kMeshAxes, true}, {AttrKey::kGroupSize, true}};

constexpr std::span<const AttrSpec> none() { return {}; }

constexpr DTypeSet kFloat = kFloatTypes;
constexpr DTypeSet kNumeric = kNumericTypes;
constexpr DTypeSet kSignedNumeric = kFloatTypes | DTypeSet{DType::kS32};
constexpr DTypeSet kLogical = kLogicalTypes;
constexpr DTypeSet kInteger = kIntegerTypes;
constexpr DTypeSet kAll = kAllTypes;

constexpr OpInfo leaf(OpKind kind, std::string_view name, DTypeSet dtypes, uint8_t operands,
                      std::span<const AttrSpec> attrs, InferFn infer) {
  return {kind, name, OpClass::kLeaf, operands, operands, 1, true, dtypes, attrs, infer, nullptr};
}
constexpr OpInfo unary(OpKind kind, std::string_view name, DTypeSet dtypes) {
  return {kind, name, OpClass::kUnary, 1, 1, 1, false, dtypes, none(), rules::unary, nullptr};
}
constexpr OpInfo binary(OpKind kind, std::string_view name, DTypeSet dtypes) {
  return {kind, name, OpClass::kBinary, 2, 2, 1, false, dtypes, none(), rules::binary, nullptr};
}
constexpr OpInfo other(OpKind kind, std::string_view name, uint8_t min_operands,
                       uint8_t max_operands, bool declares_result_type, DTypeSet dtypes,
                       std::span<const AttrSpec> attrs, InferFn infer) {
  return {kind,  name,  OpClass::kOther, min_operands, max_operands, 1, declares_result_type,
          dtypes, attrs, infer,          nullptr};
}

// Rows are in OpKind order; the static_assert below holds that.
constexpr std::array<OpInfo, kNumOpKinds> kOpTable = {{
    leaf(OpKind::kConstant, "constant", kAll, 0, kConstantAttrs, rules::constant),
    leaf(OpKind::kIota, "iota", kNumeric, 0, kDimensionAttrs, rules::iota),
    leaf(OpKind::kRngBits, "rng_bits", DTypeSet{DType::kU32}, 1, kRngAttrs, rules::rng),
    leaf(OpKind::kRngUniform, "rng_uniform", kFloat, 1, kRngAttrs, rules::rng),
    leaf(OpKind::kRngNormal, "rng_normal", kFloat, 1, kRngNormalAttrs, rules::rng),

    unary(OpKind::kNeg, "neg", kSignedNumeric),
    unary(OpKind::kAbs, "abs", kSignedNumeric),
    unary(OpKind::kSign, "sign", kSignedNumeric),
    unary(OpKind::kFloor, "floor", kFloat),
    unary(OpKind::kCeil, "ceil", kFloat),
    unary(OpKind::kRoundNearestEven, "round_nearest_even", kFloat),
    unary(OpKind::kExp, "exp", kFloat),
    unary(OpKind::kExpm1, "expm1", kFloat),
    unary(OpKind::kLog, "log", kFloat),
    unary(OpKind::kLog1p, "log1p", kFloat),
    unary(OpKind::kLogistic, "logistic", kFloat),
    unary(OpKind::kTanh, "tanh", kFloat),
    unary(OpKind::kSqrt, "sqrt", kFloat),
    unary(OpKind::kRsqrt, "rsqrt", kFloat),
    unary(OpKind::kSin, "sin", kFloat),
    unary(OpKind::kCos, "cos", kFloat),
    unary(OpKind::kErf, "erf", kFloat),
    unary(OpKind::kNot, "not", kLogical),
    unary(OpKind::kIsFinite, "is_finite", kFloat),

    binary(OpKind::kAdd, "add", kNumeric),
    binary(OpKind::kSub, "sub", kNumeric),
    binary(OpKind::kMul, "mul", kNumeric),
    binary(OpKind::kDiv, "div", kNumeric),
    binary(OpKind::kRem, "rem", kNumeric),
    binary(OpKind::kMax, "max", kNumeric),
    binary(OpKind::kMin, "min", kNumeric),
    binary(OpKind::kPow, "pow", kFloat),
    binary(OpKind::kAtan2, "atan2", kFloat),
    binary(OpKind::kAnd, "and", kLogical),
    binary(OpKind::kOr, "or", kLogical),
    binary(OpKind::kXor, "xor", kLogical),
    binary(OpKind::kShiftLeft, "shift_left", kInteger),
    binary(OpKind::kShiftRightLogical, "shift_right_logical", kInteger),
    other(OpKind::kCompare, "compare", 2, 2, false, kAll, kCompareAttrs, rules::compare),
    other(OpKind::kSelect, "select", 3, 3, false, kAll, none(), rules::select),
    other(OpKind::kConvert, "convert", 1, 1, true, kAll, none(), rules::convert),

    other(OpKind::kBroadcastInDim, "broadcast_in_dim", 1, 1, true, kAll, kDimsAttrs,
          rules::broadcast_in_dim),
    other(OpKind::kReshape, "reshape", 1, 1, true, kAll, none(), rules::reshape),
    other(OpKind::kTranspose, "transpose", 1, 1, false, kAll, kTransposeAttrs, rules::transpose),
    other(OpKind::kSlice, "slice", 1, 1, false, kAll, kSliceAttrs, rules::slice),
    other(OpKind::kConcatenate, "concatenate", 1, kVariadic, false, kAll, kDimensionAttrs,
          rules::concatenate),
    other(OpKind::kPad, "pad", 2, 2, false, kAll, kPadAttrs, rules::pad),

    other(OpKind::kReduceSum, "reduce_sum", 1, 1, false, kNumeric, kDimsAttrs, rules::reduce),
    other(OpKind::kReduceMax, "reduce_max", 1, 1, false, kNumeric, kDimsAttrs, rules::reduce),
    other(OpKind::kReduceMin, "reduce_min", 1, 1, false, kNumeric, kDimsAttrs, rules::reduce),
    other(OpKind::kDotGeneral, "dot_general", 2, 2, false, kNumeric, kDotAttrs,
          rules::dot_general),
    other(OpKind::kTake, "take", 2, 2, false, kAll, kAxisAttrs, rules::take),
    other(OpKind::kScatterAdd, "scatter_add", 3, 3, false, kNumeric, kAxisAttrs,
          rules::scatter_add),
    other(OpKind::kTopK, "top_k", 1, 1, false, kNumeric, kTopKAttrs, rules::top_k),
    other(OpKind::kGroupedDot, "grouped_dot", 3, 3, false, kFloat, none(), rules::grouped_dot),
    other(OpKind::kGroupedDotWeightGrad, "grouped_dot_weight_grad", 3, 3, true, kFloat, none(),
          rules::grouped_dot_weight_grad),

    other(OpKind::kAllGather, "all_gather", 1, 1, false, kAll, kGatherAttrs, rules::collective),
    other(OpKind::kAllReduce, "all_reduce", 1, 1, false, kNumeric, kAllReduceAttrs,
          rules::collective),
    other(OpKind::kReduceScatter, "reduce_scatter", 1, 1, false, kNumeric, kGatherAttrs,
          rules::collective),
    other(OpKind::kAllToAll, "all_to_all", 1, 1, false, kAll, kAllToAllAttrs, rules::collective),
    other(OpKind::kCollectivePermute, "collective_permute", 1, 1, false, kAll, kPermuteAttrs,
          rules::collective),
    other(OpKind::kRaggedAllToAll, "ragged_all_to_all", 2, 2, false, kAll, kRaggedAllToAllAttrs,
          rules::ragged_all_to_all),
    other(OpKind::kShardSlice, "shard_slice", 1, 1, false, kAll, kShardSliceAttrs,
          rules::collective),

    {OpKind::kAttention, "attention", OpClass::kComposite, 3, 7, 1, false, kFloat,
     kAttentionAttrs, rules::attention, decompose_attention},
    {OpKind::kAttentionGrad, "attention_grad", OpClass::kComposite, 5, 9, 3, false, kFloat,
     kAttentionAttrs, rules::attention_grad, decompose_attention_grad},
    {OpKind::kAttentionStats, "attention_stats", OpClass::kComposite, 3, 7, 3, false, kFloat,
     kAttentionAttrs, rules::attention_stats, decompose_attention_stats},
}};

constexpr bool table_in_kind_order() {
  for (int i = 0; i < kNumOpKinds; ++i) {
    if (static_cast<int>(kOpTable[i].kind) != i) return false;
  }
  return true;
}
static_assert(table_in_kind_order(), "kOpTable rows must follow OpKind order");

}  // namespace

const OpInfo& op_info(OpKind kind) { return kOpTable[static_cast<size_t>(kind)]; }

std::string_view op_name(OpKind kind) { return op_info(kind).name; }

std::optional<OpKind> op_kind_from_name(std::string_view name) {
  // The parser asks once per op; a hash map keeps 100k-op modules fast.
  static const std::unordered_map<std::string_view, OpKind> kByName = [] {
    std::unordered_map<std::string_view, OpKind> map;
    for (const OpInfo& info : kOpTable) map.emplace(info.name, info.kind);
    return map;
  }();
  auto it = kByName.find(name);
  if (it == kByName.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> all_op_names() {
  std::vector<std::string> names;
  for (const OpInfo& info : kOpTable) names.emplace_back(info.name);
  return names;
}

bool is_elementwise(OpKind kind) {
  OpClass c = op_info(kind).op_class;
  return c == OpClass::kUnary || c == OpClass::kBinary || kind == OpKind::kCompare ||
         kind == OpKind::kSelect || kind == OpKind::kConvert;
}

bool is_collective(OpKind kind) {
  return kind == OpKind::kAllGather || kind == OpKind::kAllReduce ||
         kind == OpKind::kReduceScatter || kind == OpKind::kAllToAll ||
         kind == OpKind::kCollectivePermute || kind == OpKind::kRaggedAllToAll;
}

void drop_zero_optional_attributes(OpKind kind, AttrSet& attrs) {
  for (const AttrSpec& spec : op_info(kind).attrs) {
    if (spec.required) continue;
    const std::vector<Attribute>& entries = attrs.entries();
    auto it = std::find_if(entries.begin(), entries.end(),
                           [&](const Attribute& a) { return a.key == spec.key; });
    if (it != entries.end() && AttrSet::is_zero(*it)) attrs.erase(spec.key);
  }
}

}  // namespace precast::ir
