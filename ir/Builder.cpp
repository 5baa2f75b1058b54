#include "ir/Builder.h"

#include <fmt/format.h>

#include <algorithm>

#include "ir/FloatFormats.h"
#include "ir/ShapeRules.h"

namespace precast::ir {

Status Builder::status() const {
  if (error_) return *error_;
  return Status::success();
}

void Builder::fail(std::string message) {
  if (!error_) error_ = usage_error(std::move(message));
}

Builder::ScopeGuard::ScopeGuard(Builder& builder, std::string_view component)
    : builder_(builder), saved_(builder.scope_) {
  std::string_view current = builder.scope();
  std::string scope = current.empty() ? std::string(component)
                                      : fmt::format("{}/{}", current, component);
  builder.set_scope(scope);
}

Value Builder::param(const TensorType& type, std::string_view name,
                     std::initializer_list<std::string_view> axes) {
  Value v = function_->add_param(context().intern_type(type), 0, context().intern_string(name));
  if (axes.size() > 0) with_axes(v, axes);
  return v;
}

void Builder::set_results(std::span<const Value> results) {
  for (Value v : results) {
    if (!v.valid()) {
      fail("builder: a function result is invalid (an earlier op failed)");
      return;
    }
  }
  function_->set_results(results);
}

namespace {

// True when clone() may append op `op` of `source` to `target` with its own attribute and
// result type ids: the same context, the source's attributes, its result types declared and
// operands (defined in `target`) of its operand types.
bool keeps_signature(const Function& target, const Function& source, const Op& op,
                     std::span<const Value> operands, std::span<const TensorType> declared,
                     const AttrSet& attrs) {
  if (&source.context() != &target.context() || &attrs != &source.attrs(op) ||
      operands.size() != op.num_operands || declared.size() != op.num_results) {
    return false;
  }
  std::span<const Value> old_operands = source.operands(op);
  for (size_t k = 0; k < operands.size(); ++k) {
    if (!operands[k].valid() || operands[k].id >= target.num_values() ||
        target.type_id(operands[k]) != source.type_id(old_operands[k])) {
      return false;
    }
  }
  for (uint32_t r = 0; r < op.num_results; ++r) {
    if (declared[r] != source.type(source.result(op, r))) return false;
  }
  return true;
}

}  // namespace

bool Builder::check_operands(OpKind kind, std::span<const Value> operands) {
  for (Value v : operands) {
    if (!v.valid()) return false;  // an earlier failure, already reported
    if (v.id >= function_->num_values()) {
      fail(fmt::format("builder: {} got value %{} which is not defined in function @{}",
                       op_name(kind), v.id, function_->name()));
      return false;
    }
  }
  return true;
}

std::vector<Value> Builder::create(OpKind kind, std::span<const Value> operands,
                                   const AttrSet& attrs, std::span<const TensorType> declared) {
  const OpInfo& info = op_info(kind);
  std::vector<Value> invalid(info.num_results, Value{});
  if (!check_operands(kind, operands)) return invalid;
  AttrSet canonical = attrs;
  drop_zero_optional_attributes(kind, canonical);
  std::vector<const TensorType*> operand_types;
  operand_types.reserve(operands.size());
  for (Value v : operands) operand_types.push_back(&function_->type(v));
  OpSignature signature{kind, operand_types, canonical, declared};
  Expected<std::vector<TensorType>> types = infer_result_types(signature);
  if (!types.ok()) {
    std::string where = scope().empty() ? "" : fmt::format(" in scope \"{}\"", scope());
    fail(fmt::format("builder: {}{}: {}", info.name, where, types.error().message()));
    return invalid;
  }
  std::vector<TypeId> type_ids;
  for (const TensorType& t : *types) type_ids.push_back(context().intern_type(t));
  // A new op of the frontend names its block and place from its scope; an op made for another
  // (set_facts, clone) carries that op's.
  OpFacts facts = facts_;
  if (name_places_) {
    facts.block = facts.phase == OpPhase::kForward ? context().block_of_scope(scope_) : 0;
    facts.site = facts.in_layer() ? context().site_of_scope(scope_, facts.layer) : 0;
  }
  if (context().fact_numbers_exhausted()) {
    fail("builder: more than 65535 blocks or sites in one module (Module.h's OpFacts)");
    return invalid;
  }
  OpIndex index = function_->append_op(kind, operands, type_ids, context().intern_attrs(canonical),
                                       scope_, 0, 0, facts);
  std::vector<Value> results;
  for (uint32_t i = 0; i < info.num_results; ++i) {
    results.push_back(function_->result(function_->op(index), i));
  }
  return results;
}

Value Builder::create_one(OpKind kind, std::span<const Value> operands, const AttrSet& attrs,
                          std::span<const TensorType> declared) {
  return create(kind, operands, attrs, declared)[0];
}

std::vector<Value> Builder::clone(const Function& source, OpIndex index,
                                  std::span<const Value> operands) {
  const Op& op = source.op(index);
  std::vector<TensorType> declared;
  for (uint32_t i = 0; i < op.num_results; ++i) declared.push_back(source.type(source.result(op, i)));
  return clone(source, index, operands, declared, source.attrs(op));
}

std::vector<Value> Builder::clone(const Function& source, OpIndex index,
                                  std::span<const Value> operands,
                                  std::span<const TensorType> declared, const AttrSet& attrs) {
  const Op& op = source.op(index);
  // On the builder's own context the source's interned ids (scope, checkpoint, attributes,
  // types, axis names, value names, shardings) are valid as they are: no lookups by text.
  const bool same_context = &source.context() == &context();
  StringId saved_scope = scope_;
  OpFacts saved_facts = facts_;
  scope_ = same_context ? op.scope : context().intern_string(source.scope(op));
  bool saved_naming = name_places_;
  set_facts(op.facts);  // a copy keeps the source op's facts as they are
  std::vector<Value> results;
  if (keeps_signature(*function_, source, op, operands, declared, attrs)) {
    // Same attributes and operand types as the source op (a verified function's): inference
    // would give the source's result types again.
    std::vector<TypeId> types(op.num_results);
    for (uint32_t r = 0; r < op.num_results; ++r) types[r] = source.type_id(source.result(op, r));
    OpIndex copied = function_->append_op(op.kind, operands, types, op.attrs, scope_, 0, 0, facts_);
    for (uint32_t r = 0; r < op.num_results; ++r) {
      results.push_back(function_->result(function_->op(copied), r));
    }
  } else {
    results = create(op.kind, operands, attrs, declared);
  }
  scope_ = saved_scope;
  facts_ = saved_facts;
  name_places_ = saved_naming;
  if (!results.empty() && !results[0].valid()) return results;
  Op& copy = function_->mutable_op(function_->defining_op(results[0]));
  copy.checkpoint = same_context ? op.checkpoint : context().intern_string(source.checkpoint(op));
  copy.line = op.line;
  for (uint32_t i = 0; i < op.num_results; ++i) {
    Value from = source.result(op, i);
    if (same_context) {
      const ValueInfo& info = source.value_info(from);
      function_->set_axes(results[i], info.axes);
      function_->set_value_name(results[i], info.name);
      function_->set_sharding(results[i], info.sharding);
      continue;
    }
    std::vector<StringId> axes;
    for (StringId s : source.axes(from)) axes.push_back(context().intern_string(source.context().string(s)));
    function_->set_axes(results[i], context().intern_axes(axes));
    function_->set_value_name(results[i], context().intern_string(source.value_name(from)));
    if (source.has_sharding(from)) {
      std::vector<std::vector<StringId>> dims;
      for (const std::vector<StringId>& axes : source.sharding(from)) {
        std::vector<StringId>& copied = dims.emplace_back();
        for (StringId s : axes)
          copied.push_back(context().intern_string(source.context().string(s)));
      }
      function_->set_sharding(results[i], context().intern_sharding(dims));
    }
  }
  return results;
}

Value Builder::constant(double value, const TensorType& type) {
  return constant(std::span<const double>(&value, 1), type);
}

Value Builder::constant(std::span<const double> values, const TensorType& type) {
  std::vector<double> literal(values.begin(), values.end());
  if (is_floating(type.dtype)) {
    for (double& v : literal) v = round_to_dtype(type.dtype, v);
  }
  AttrSet attrs;
  attrs.set_reals(AttrKey::kValue, std::move(literal));
  return create_one(OpKind::kConstant, {}, attrs, std::span<const TensorType>(&type, 1));
}

Value Builder::scalar(double value, DType dtype) { return constant(value, TensorType{dtype, {}}); }

Value Builder::splat(double value, Value like) {
  if (!like.valid()) return Value{};
  TensorType type = function_->type(like);
  return constant(value, type);
}

Value Builder::iota(const TensorType& type, int64_t dimension) {
  AttrSet attrs;
  attrs.set_int(AttrKey::kDimension, dimension);
  return create_one(OpKind::kIota, {}, attrs, std::span<const TensorType>(&type, 1));
}

Value Builder::rng_bits(Value seed, std::vector<int64_t> dims, int64_t stream) {
  TensorType type{DType::kU32, std::move(dims)};
  AttrSet attrs;
  attrs.set_int(AttrKey::kStream, stream);
  return create_one(OpKind::kRngBits, {seed}, attrs, std::span<const TensorType>(&type, 1));
}

Value Builder::rng_uniform(Value seed, const TensorType& type, int64_t stream) {
  AttrSet attrs;
  attrs.set_int(AttrKey::kStream, stream);
  return create_one(OpKind::kRngUniform, {seed}, attrs, std::span<const TensorType>(&type, 1));
}

Value Builder::rng_normal(Value seed, const TensorType& type, int64_t stream) {
  AttrSet attrs;
  attrs.set_int(AttrKey::kStream, stream);
  return create_one(OpKind::kRngNormal, {seed}, attrs, std::span<const TensorType>(&type, 1));
}

Value Builder::rng_truncated_normal(Value seed, const TensorType& type, int64_t stream,
                                   double bound) {
  AttrSet attrs;
  attrs.set_int(AttrKey::kStream, stream);
  attrs.set_real(AttrKey::kTruncate, bound);
  return create_one(OpKind::kRngNormal, {seed}, attrs, std::span<const TensorType>(&type, 1));
}

Value Builder::unary(OpKind kind, Value x) {
  if (op_info(kind).op_class != OpClass::kUnary) {
    fail(fmt::format("builder: {} is not a unary elementwise op", op_name(kind)));
    return Value{};
  }
  return create_one(kind, {x}, AttrSet{});
}

Value Builder::binary(OpKind kind, Value a, Value b) {
  if (op_info(kind).op_class != OpClass::kBinary) {
    fail(fmt::format("builder: {} is not a binary elementwise op", op_name(kind)));
    return Value{};
  }
  return create_one(kind, {a, b}, AttrSet{});
}

Value Builder::compare(Value a, Value b, ComparisonDirection direction) {
  AttrSet attrs;
  attrs.set_direction(direction);
  return create_one(OpKind::kCompare, {a, b}, attrs);
}

Value Builder::select(Value predicate, Value on_true, Value on_false) {
  return create_one(OpKind::kSelect, {predicate, on_true, on_false}, AttrSet{});
}

Value Builder::convert(Value x, DType dtype) {
  if (!x.valid()) return Value{};
  TensorType type{dtype, function_->type(x).dims};
  return create_one(OpKind::kConvert, {x}, AttrSet{}, std::span<const TensorType>(&type, 1));
}

Value Builder::broadcast_in_dim(Value x, std::vector<int64_t> result_dims,
                                std::vector<int64_t> dims) {
  if (!x.valid()) return Value{};
  TensorType type{function_->type(x).dtype, std::move(result_dims)};
  AttrSet attrs;
  attrs.set_ints(AttrKey::kDims, std::move(dims));
  return create_one(OpKind::kBroadcastInDim, {x}, attrs, std::span<const TensorType>(&type, 1));
}

Value Builder::broadcast_to(Value x, std::vector<int64_t> result_dims) {
  if (!x.valid()) return Value{};
  int64_t rank = function_->type(x).rank();
  int64_t offset = static_cast<int64_t>(result_dims.size()) - rank;
  if (offset < 0) {
    fail(fmt::format("builder: broadcast_to: operand {} has more dimensions than the target",
                     to_string(function_->type(x))));
    return Value{};
  }
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < rank; ++i) dims.push_back(offset + i);
  return broadcast_in_dim(x, std::move(result_dims), std::move(dims));
}

Value Builder::reshape(Value x, std::vector<int64_t> dims) {
  if (!x.valid()) return Value{};
  TensorType type{function_->type(x).dtype, std::move(dims)};
  return create_one(OpKind::kReshape, {x}, AttrSet{}, std::span<const TensorType>(&type, 1));
}

Value Builder::transpose(Value x, std::vector<int64_t> permutation) {
  AttrSet attrs;
  attrs.set_ints(AttrKey::kPermutation, std::move(permutation));
  return create_one(OpKind::kTranspose, {x}, attrs);
}

Value Builder::slice(Value x, std::vector<int64_t> start, std::vector<int64_t> limit,
                     std::vector<int64_t> stride) {
  bool unit_stride = std::all_of(stride.begin(), stride.end(), [](int64_t s) { return s == 1; });
  AttrSet attrs;
  attrs.set_ints(AttrKey::kStart, std::move(start));
  attrs.set_ints(AttrKey::kLimit, std::move(limit));
  if (!unit_stride) attrs.set_ints(AttrKey::kStride, std::move(stride));
  return create_one(OpKind::kSlice, {x}, attrs);
}

Value Builder::concatenate(std::span<const Value> parts, int64_t dimension) {
  AttrSet attrs;
  attrs.set_int(AttrKey::kDimension, dimension);
  return create_one(OpKind::kConcatenate, parts, attrs);
}

Value Builder::pad(Value x, Value padding, std::vector<int64_t> low, std::vector<int64_t> high,
                   std::vector<int64_t> interior) {
  bool no_interior =
      std::all_of(interior.begin(), interior.end(), [](int64_t s) { return s == 0; });
  AttrSet attrs;
  attrs.set_ints(AttrKey::kLow, std::move(low));
  attrs.set_ints(AttrKey::kHigh, std::move(high));
  if (!no_interior) attrs.set_ints(AttrKey::kInterior, std::move(interior));
  return create_one(OpKind::kPad, {x, padding}, attrs);
}

Value Builder::reduce(OpKind kind, Value x, std::vector<int64_t> dims) {
  AttrSet attrs;
  attrs.set_ints(AttrKey::kDims, std::move(dims));
  return create_one(kind, {x}, attrs);
}

Value Builder::dot_general(Value lhs, Value rhs, const DotDims& dims,
                           std::optional<DType> result_dtype) {
  AttrSet attrs;
  attrs.set_ints(AttrKey::kLhsBatch, dims.lhs_batch);
  attrs.set_ints(AttrKey::kRhsBatch, dims.rhs_batch);
  attrs.set_ints(AttrKey::kLhsContract, dims.lhs_contract);
  attrs.set_ints(AttrKey::kRhsContract, dims.rhs_contract);
  if (!result_dtype) return create_one(OpKind::kDotGeneral, {lhs, rhs}, attrs);
  // Infer the shape first, then ask for the other element type.
  if (!lhs.valid() || !rhs.valid()) return Value{};
  std::vector<const TensorType*> operand_types = {&function_->type(lhs), &function_->type(rhs)};
  AttrSet canonical = attrs;
  drop_zero_optional_attributes(OpKind::kDotGeneral, canonical);
  Expected<std::vector<TensorType>> inferred =
      infer_result_types(OpSignature{OpKind::kDotGeneral, operand_types, canonical, {}});
  if (!inferred.ok()) return create_one(OpKind::kDotGeneral, {lhs, rhs}, attrs);  // reports it
  TensorType type = (*inferred)[0];
  type.dtype = *result_dtype;
  return create_one(OpKind::kDotGeneral, {lhs, rhs}, attrs, std::span<const TensorType>(&type, 1));
}

Value Builder::take(Value table, Value ids, int64_t axis) {
  AttrSet attrs;
  attrs.set_int(AttrKey::kAxis, axis);
  return create_one(OpKind::kTake, {table, ids}, attrs);
}

AttrSet Builder::group_attrs(const DeviceGroup& group) {
  AttrSet attrs;
  std::vector<int64_t> names;
  for (const std::string& axis : group.mesh_axes)
    names.push_back(function_->context().intern_string(axis));
  attrs.set_ints(AttrKey::kMeshAxes, std::move(names));
  attrs.set_int(AttrKey::kGroupSize, group.size);
  attrs.set_flag(AttrKey::kDcn, group.dcn);
  return attrs;
}

Value Builder::all_gather(Value x, int64_t dimension, const DeviceGroup& group) {
  AttrSet attrs = group_attrs(group);
  attrs.set_int(AttrKey::kDimension, dimension);
  return create_one(OpKind::kAllGather, {x}, attrs);
}

Value Builder::all_reduce(Value x, const DeviceGroup& group, bool max) {
  AttrSet attrs = group_attrs(group);
  attrs.set_flag(AttrKey::kMax, max);
  return create_one(OpKind::kAllReduce, {x}, attrs);
}

Value Builder::reduce_scatter(Value x, int64_t dimension, const DeviceGroup& group) {
  AttrSet attrs = group_attrs(group);
  attrs.set_int(AttrKey::kDimension, dimension);
  return create_one(OpKind::kReduceScatter, {x}, attrs);
}

Value Builder::all_to_all(Value x, int64_t split_dimension, int64_t concat_dimension,
                          const DeviceGroup& group) {
  AttrSet attrs = group_attrs(group);
  attrs.set_int(AttrKey::kSplitDimension, split_dimension);
  attrs.set_int(AttrKey::kDimension, concat_dimension);
  return create_one(OpKind::kAllToAll, {x}, attrs);
}

Value Builder::collective_permute(Value x, int64_t shift, const DeviceGroup& group) {
  AttrSet attrs = group_attrs(group);
  attrs.set_int(AttrKey::kShift, shift);
  return create_one(OpKind::kCollectivePermute, {x}, attrs);
}

Value Builder::ragged_all_to_all(Value x, Value dest, int64_t capacity, bool combine,
                                 const DeviceGroup& group) {
  AttrSet attrs = group_attrs(group);
  attrs.set_int(AttrKey::kCapacity, capacity);
  attrs.set_flag(AttrKey::kCombine, combine);
  return create_one(OpKind::kRaggedAllToAll, {x, dest}, attrs);
}

Value Builder::shard_slice(Value x, int64_t dimension, const DeviceGroup& group) {
  AttrSet attrs = group_attrs(group);
  attrs.erase(AttrKey::kDcn);
  attrs.set_int(AttrKey::kDimension, dimension);
  return create_one(OpKind::kShardSlice, {x}, attrs);
}

Value Builder::top_k(Value x, int64_t k) {
  AttrSet attrs;
  attrs.set_int(AttrKey::kK, k);
  return create_one(OpKind::kTopK, {x}, attrs);
}

Value Builder::grouped_dot(Value lhs, Value rhs, Value ids) {
  return create_one(OpKind::kGroupedDot, {lhs, rhs, ids}, AttrSet{});
}

Value Builder::grouped_dot_weight_grad(Value lhs, Value dout, Value ids, int64_t groups) {
  if (!lhs.valid() || !dout.valid()) return create_one(OpKind::kGroupedDotWeightGrad, {lhs, dout, ids}, AttrSet{});
  const TensorType& l = function_->type(lhs);
  const TensorType& d = function_->type(dout);
  TensorType type{l.dtype, {groups, l.dims.size() == 3 ? l.dims[2] : 0,
                            d.dims.size() == 3 ? d.dims[2] : 0}};
  return create_one(OpKind::kGroupedDotWeightGrad, {lhs, dout, ids}, AttrSet{},
                    std::span<const TensorType>(&type, 1));
}

Value Builder::scatter_add(Value target, Value ids, Value updates, int64_t axis) {
  AttrSet attrs;
  attrs.set_int(AttrKey::kAxis, axis);
  return create_one(OpKind::kScatterAdd, {target, ids, updates}, attrs);
}

namespace {

AttrSet attention_attributes(const AttentionOptions& options) {
  AttrSet attrs;
  attrs.set_real(AttrKey::kScale, options.scale);
  attrs.set_flag(AttrKey::kCausal, options.causal);
  attrs.set_int(AttrKey::kSlidingWindow, options.sliding_window);
  attrs.set_real(AttrKey::kSoftcap, options.softcap);
  attrs.set_flag(AttrKey::kFlash, options.flash);
  attrs.set_flag(AttrKey::kPositions, options.positions);
  return attrs;
}

}  // namespace

Value Builder::attention(Value q, Value k, Value v, const AttentionOptions& options) {
  return create_one(OpKind::kAttention, {q, k, v}, attention_attributes(options));
}

Value Builder::attention(Value q, Value k, Value v, Value q_segment, Value kv_segment,
                         const AttentionOptions& options) {
  return create_one(OpKind::kAttention, {q, k, v, q_segment, kv_segment},
                    attention_attributes(options));
}

std::array<Value, 3> Builder::attention_grad(Value q, Value k, Value v, Value out, Value dout,
                                             const AttentionOptions& options) {
  std::vector<Value> grads = create(OpKind::kAttentionGrad, std::vector<Value>{q, k, v, out, dout},
                                    attention_attributes(options));
  return {grads[0], grads[1], grads[2]};
}

std::array<Value, 3> Builder::attention_grad(Value q, Value k, Value v, Value out, Value dout,
                                             Value q_segment, Value kv_segment,
                                             const AttentionOptions& options) {
  std::vector<Value> grads =
      create(OpKind::kAttentionGrad, std::vector<Value>{q, k, v, out, dout, q_segment, kv_segment},
             attention_attributes(options));
  return {grads[0], grads[1], grads[2]};
}

Value Builder::attention(std::span<const Value> operands, const AttentionOptions& options) {
  return create_one(OpKind::kAttention, operands, attention_attributes(options));
}

std::array<Value, 3> Builder::attention_stats(std::span<const Value> operands,
                                              const AttentionOptions& options) {
  std::vector<Value> r = create(OpKind::kAttentionStats, operands, attention_attributes(options));
  if (r.size() != 3) return {};
  return {r[0], r[1], r[2]};
}

std::array<Value, 3> Builder::attention_grad(std::span<const Value> operands,
                                             const AttentionOptions& options) {
  std::vector<Value> grads = create(OpKind::kAttentionGrad, operands, attention_attributes(options));
  if (grads.size() != 3) return {};
  return {grads[0], grads[1], grads[2]};
}

Value Builder::with_axes(Value v, std::span<const std::string_view> names) {
  if (!v.valid()) return v;
  int64_t rank = function_->type(v).rank();
  if (static_cast<int64_t>(names.size()) != rank) {
    fail(fmt::format("builder: {} axis names given for a value of type {}", names.size(),
                     to_string(function_->type(v))));
    return v;
  }
  std::vector<StringId> ids;
  for (std::string_view n : names) ids.push_back(context().intern_string(n));
  function_->set_axes(v, context().intern_axes(ids));
  return v;
}

Value Builder::with_sharding(Value v, std::span<const std::vector<std::string>> dims) {
  if (!v.valid()) return v;
  std::vector<std::vector<StringId>> ids;
  for (const std::vector<std::string>& axes : dims) {
    std::vector<StringId>& out = ids.emplace_back();
    for (const std::string& a : axes) out.push_back(context().intern_string(a));
  }
  function_->set_sharding(v, context().intern_sharding(ids));
  return v;
}

Value Builder::with_checkpoint(Value v, std::string_view name) {
  if (!v.valid()) return v;
  OpIndex def = function_->defining_op(v);
  if (def == kNoOp) {
    fail(fmt::format("builder: checkpoint name '{}' given to a parameter", name));
    return v;
  }
  function_->mutable_op(def).checkpoint = context().intern_string(name);
  return v;
}

Value Builder::with_name(Value v, std::string_view name) {
  if (v.valid()) function_->set_value_name(v, context().intern_string(name));
  return v;
}

}  // namespace precast::ir
