#include "compiler/analysis/IrCounts.h"

#include <algorithm>
#include <cctype>
#include <span>
#include <string_view>
#include <unordered_map>

namespace precast {
namespace {

using ir::AttrKey;
using ir::OpKind;

// "layers_12" -> "layers_*", deepseek's "moe_layers_3" -> "moe_layers_*"; "" when the component
// names no decoder layer.
std::string merged_layer_component(std::string_view component) {
  constexpr std::string_view kLayers = "layers_";
  size_t digits_begin = component.find_last_not_of("0123456789") + 1;
  if (digits_begin == component.size()) return "";
  std::string_view prefix = component.substr(0, digits_begin);
  if (!prefix.ends_with(kLayers)) return "";
  return std::string(prefix) + "*";
}

std::string scope_key(std::string_view scope, const CountOptions& options) {
  std::string key;
  int depth = 0;
  size_t begin = 0;
  while (begin <= scope.size() && depth < options.scope_depth && !scope.empty()) {
    size_t end = scope.find('/', begin);
    if (end == std::string_view::npos) end = scope.size();
    std::string_view component = scope.substr(begin, end - begin);
    if (!key.empty()) key += '/';
    std::string merged = options.merge_layers ? merged_layer_component(component) : "";
    key += merged.empty() ? std::string(component) : merged;
    ++depth;
    begin = end + 1;
    if (end == scope.size()) break;
  }
  return key;
}

}  // namespace

long double attention_pairs(int64_t queries, int64_t keys, bool causal, int64_t window) {
  long double t = static_cast<long double>(queries);
  if (!causal) return t * static_cast<long double>(keys);
  long double w = window > 0 ? std::min<long double>(static_cast<long double>(window), t) : t;
  return t * w - w * w / 2;
}

long double dot_general_flops(const ir::Function& function, const ir::Op& op) {
  const ir::TensorType& lhs = function.type(function.operands(op)[0]);
  const ir::TensorType& result = function.type(function.result(op));
  long double flops = 2.0L * static_cast<long double>(result.num_elements());
  for (int64_t d : function.attrs(op).ints(AttrKey::kLhsContract)) {
    flops *= static_cast<long double>(lhs.dims[static_cast<size_t>(d)]);
  }
  return flops;
}

namespace {

struct AttentionShape {
  long double batch, heads, d, dv, queries, keys;
};

AttentionShape attention_shape(const ir::Function& function, const ir::Op& op) {
  std::span<const ir::Value> operands = function.operands(op);
  const ir::TensorType& q = function.type(operands[0]);  // [B,T,H,D]
  const ir::TensorType& k = function.type(operands[1]);  // [B,S,K,D]
  const ir::TensorType& v = function.type(operands[2]);  // [B,S,K,Dv]
  auto ld = [](int64_t x) { return static_cast<long double>(x); };
  return {ld(q.dims[0]), ld(q.dims[2]), ld(q.dims[3]), ld(v.dims[3]), ld(q.dims[1]), ld(k.dims[1])};
}

// The value columns a pad of zeros appended to v (the last dimension's high padding, nothing
// else padded): work on zeros that the model does not do. The attention sinks' backward
// (compiler/autodiff/Autodiff.cpp, attention_stats) carries the log-partition's gradient in one
// such column; MaxText's formula, like the model, has none.
long double zero_value_columns(const ir::Function& function, ir::Value v) {
  if (function.is_param(v)) return 0;
  const ir::Op& pad = function.op(function.defining_op(v));
  if (pad.kind != OpKind::kPad) return 0;
  ir::Value padding = function.operands(pad)[1];
  if (function.is_param(padding)) return 0;
  const ir::Op& value = function.op(function.defining_op(padding));
  std::span<const double> literal = function.attrs(value).reals(AttrKey::kValue);
  if (value.kind != OpKind::kConstant || literal.size() != 1 || literal[0] != 0.0) return 0;
  const ir::AttrSet& attrs = function.attrs(pad);
  std::span<const int64_t> low = attrs.ints(AttrKey::kLow), high = attrs.ints(AttrKey::kHigh),
                           interior = attrs.ints(AttrKey::kInterior);
  auto zero = [](int64_t x) { return x == 0; };
  if (high.empty() || !std::all_of(low.begin(), low.end(), zero) ||
      !std::all_of(interior.begin(), interior.end(), zero) ||
      !std::all_of(high.begin(), high.end() - 1, zero) || high.back() < 0) {
    return 0;
  }
  return static_cast<long double>(high.back());
}

}  // namespace

// The rows a grouped matmul on an expert-parallel buffer (ids received by a ragged_all_to_all,
// SpmdPartition) multiplies on average: as many as this device sent, the rows it holds itself
// (every row goes to one device, so the devices' received rows add up to their sent rows); the
// buffer's other rows are padding a grouped matmul kernel skips. -1 when the ids are not such.
int64_t expected_buffer_rows(const ir::Function& function, ir::Value ids) {
  std::vector<ir::Value> frontier{ids};
  for (int depth = 0; depth < 4 && !frontier.empty(); ++depth) {  // select(compare(ragged))
    std::vector<ir::Value> next;
    for (ir::Value v : frontier) {
      if (function.is_param(v)) continue;
      const ir::Op& def = function.op(function.defining_op(v));
      if (def.kind == OpKind::kRaggedAllToAll && !function.attrs(def).flag(AttrKey::kCombine)) {
        return function.type(function.operands(def)[1]).num_elements();
      }
      for (ir::Value o : function.operands(def)) next.push_back(o);
    }
    frontier = std::move(next);
  }
  return -1;
}

long double grouped_dot_flops(const ir::Function& function, const ir::Op& op) {
  // Each of the R·N rows is one [K] x [K, M] product (the weight gradient's too); on an
  // expert-parallel buffer the rows expected there, not its worst-case padding.
  const ir::TensorType& lhs = function.type(function.operands(op)[0]);
  const ir::TensorType& other = function.type(function.operands(op)[1]);
  long double elements = static_cast<long double>(lhs.num_elements());
  int64_t rows = expected_buffer_rows(function, function.operands(op)[2]);
  if (rows >= 0) elements = static_cast<long double>(rows) * static_cast<long double>(lhs.dims[2]);
  return 2.0L * elements * static_cast<long double>(other.dims.back());
}

long double attention_flops(const ir::Function& function, const ir::Op& op) {
  if (op.kind != OpKind::kAttention && op.kind != OpKind::kAttentionGrad &&
      op.kind != OpKind::kAttentionStats) {
    return 0;
  }
  AttentionShape s = attention_shape(function, op);
  const ir::AttrSet& attrs = function.attrs(op);
  long double pairs =
      attention_pairs(static_cast<int64_t>(s.queries), static_cast<int64_t>(s.keys),
                      attrs.flag(AttrKey::kCausal), attrs.integer(AttrKey::kSlidingWindow));
  if (op.kind != OpKind::kAttentionGrad) return 2.0L * s.batch * s.heads * (s.d + s.dv) * pairs;
  // Model FLOPs: the value columns the model has, not zero columns padded on for the backward.
  long double dv = s.dv - zero_value_columns(function, function.operands(op)[2]);
  return 2.0L * 2.0L * s.batch * s.heads * (s.d + dv) * pairs;
}

long double hardware_flops(const ir::Function& function, const ir::Op& op) {
  switch (op.kind) {
    case OpKind::kDotGeneral:
      return dot_general_flops(function, op);
    case OpKind::kGroupedDot:
    case OpKind::kGroupedDotWeightGrad:
      return grouped_dot_flops(function, op);
    case OpKind::kAttention:
    case OpKind::kAttentionStats: {
      AttentionShape s = attention_shape(function, op);
      return 2.0L * s.batch * s.heads * (s.d + s.dv) * s.queries * s.keys;
    }
    case OpKind::kAttentionGrad: {
      AttentionShape s = attention_shape(function, op);
      return 2.0L * s.batch * s.heads * (3.0L * s.d + 2.0L * s.dv) * s.queries * s.keys;
    }
    case OpKind::kReduceSum:
    case OpKind::kReduceMax:
    case OpKind::kReduceMin:
      return static_cast<long double>(function.type(function.operands(op)[0]).num_elements());
    case OpKind::kConvert:
      return 0;
    default:
      break;
  }
  if (ir::is_elementwise(op.kind)) {
    return static_cast<long double>(function.type(function.result(op)).num_elements());
  }
  return 0;
}

IrCounts count_function(const ir::Function& function, const CountOptions& options) {
  IrCounts counts;
  counts.function = std::string(function.name());
  counts.ops = static_cast<int64_t>(function.num_ops());

  for (ir::Value p : function.params()) {
    const ir::TensorType& type = function.type(p);
    if (ir::is_floating(type.dtype)) {
      ++counts.weight_tensors;
      counts.weight_elements += type.num_elements();
      counts.weight_bytes += type.byte_size();
    } else {
      ++counts.other_inputs;
      counts.other_input_elements += type.num_elements();
    }
  }

  std::vector<int64_t> per_kind(ir::kNumOpKinds, 0);
  std::unordered_map<std::string, size_t> scope_index;
  std::unordered_map<ir::StringId, size_t> scope_id_index;  // cache: raw scope id -> group
  for (const ir::Op& op : function.ops()) {
    ++per_kind[static_cast<size_t>(op.kind)];
    long double dot = 0, attention = 0;
    // Recomputation (remat clones) is hardware work, not model FLOPs.
    if (op.facts.phase != ir::OpPhase::kRecompute) {
      if (op.kind == OpKind::kDotGeneral) dot = dot_general_flops(function, op);
      if (op.kind == OpKind::kGroupedDot || op.kind == OpKind::kGroupedDotWeightGrad)
        dot = grouped_dot_flops(function, op);
      attention = attention_flops(function, op);
    }
    counts.dot_flops += dot;
    counts.attention_flops += attention;
    counts.hardware_flops += hardware_flops(function, op);

    size_t group;
    if (auto cached = scope_id_index.find(op.scope); cached != scope_id_index.end()) {
      group = cached->second;
    } else {
      std::string key = scope_key(function.scope(op), options);
      auto [it, inserted] = scope_index.emplace(key, counts.by_scope.size());
      if (inserted) counts.by_scope.push_back(ScopeFlops{key, 0, 0, 0});
      group = it->second;
      scope_id_index.emplace(op.scope, group);
    }
    ScopeFlops& entry = counts.by_scope[group];
    ++entry.ops;
    entry.dot += dot;
    entry.attention += attention;
  }

  for (int kind = 0; kind < ir::kNumOpKinds; ++kind) {
    if (per_kind[static_cast<size_t>(kind)] == 0) continue;
    counts.ops_by_kind.push_back(OpKindCount{std::string(ir::op_name(static_cast<OpKind>(kind))),
                                             per_kind[static_cast<size_t>(kind)]});
  }
  std::stable_sort(counts.ops_by_kind.begin(), counts.ops_by_kind.end(),
                   [](const OpKindCount& a, const OpKindCount& b) {
                     if (a.ops != b.ops) return a.ops > b.ops;
                     return a.kind < b.kind;
                   });
  return counts;
}

ModelFlops model_flops_of_train_step(const IrCounts& train_step, int64_t ir_rows,
                                     const BatchSpec& batch) {
  long double rows_per_step = static_cast<long double>(batch.per_device_batch_size) *
                              static_cast<long double>(batch.gradient_accumulation_steps);
  ModelFlops flops;
  // Divide before multiplying: every term is a multiple of the row count, so the quotient is
  // exact and the result matches the formula bit for bit.
  flops.learnable = train_step.dot_flops / static_cast<long double>(ir_rows) * rows_per_step;
  flops.attention = train_step.attention_flops / static_cast<long double>(ir_rows) * rows_per_step;
  return flops;
}

ModelFlops model_flops_from_ir(const IrCounts& forward, int64_t ir_rows, const BatchSpec& batch) {
  // The backward pass costs twice the forward: a train step's dots are 3x the forward's.
  ModelFlops flops = model_flops_of_train_step(forward, ir_rows, batch);
  flops.learnable *= 3.0L;
  flops.attention *= 3.0L;
  return flops;
}

}  // namespace precast
