#include "ir/Module.h"

#include <cassert>
#include <iterator>

namespace precast::ir {

void Function::set_result_alias(size_t k, int32_t param) {
  if (result_aliases_.size() < results_.size()) result_aliases_.resize(results_.size(), -1);
  if (k >= result_aliases_.size()) result_aliases_.resize(k + 1, -1);
  result_aliases_[k] = param;
}

void Function::set_param_role(size_t i, ParamRole role) {
  if (param_roles_.size() <= i) param_roles_.resize(i + 1, ParamRole::kNone);
  param_roles_[i] = role;
}

// The text format's words for the facts and roles, in enum order ("" = not written).
constexpr std::string_view kPhaseNames[] = {"forward", "backward", "recompute"};
constexpr std::string_view kRegionNames[] = {"", "logits", "optimizer"};
constexpr std::string_view kParamRoleNames[] = {"", "optimizer_state"};
static_assert(std::size(kPhaseNames) == static_cast<size_t>(OpPhase::kCount));
static_assert(std::size(kRegionNames) == static_cast<size_t>(OpRegion::kCount));
static_assert(std::size(kParamRoleNames) == static_cast<size_t>(ParamRole::kCount));

std::string_view phase_name(OpPhase phase) {
  return phase < OpPhase::kCount ? kPhaseNames[static_cast<size_t>(phase)] : "";
}

std::string_view region_name(OpRegion region) {
  return region < OpRegion::kCount ? kRegionNames[static_cast<size_t>(region)] : "";
}

std::string_view param_role_name(ParamRole role) {
  return role < ParamRole::kCount ? kParamRoleNames[static_cast<size_t>(role)] : "";
}

Function::Function(Context& context, std::string_view name)
    : context_(&context), name_(context.intern_string(name)) {}

std::vector<std::string_view> Function::axis_names(Value v) const {
  std::vector<std::string_view> names;
  for (StringId s : axes(v)) names.push_back(context_->string(s));
  return names;
}

Value Function::add_param(TypeId type, AxesId axes, StringId name) {
  Value v{static_cast<uint32_t>(values_.size())};
  values_.push_back(ValueInfo{type, axes, name, kNoOp, static_cast<uint32_t>(params_.size()), 0});
  params_.push_back(v);
  return v;
}

Value Function::add_param_like(const Function& source, Value p) {
  assert(source.context_ == context_ && "add_param_like: another context");
  const ValueInfo& info = source.value_info(p);
  Value v = add_param(info.type, info.axes, info.name);
  values_[v.id].sharding = info.sharding;
  if (source.param_role(info.number) != ParamRole::kNone) {
    set_param_role(params_.size() - 1, source.param_role(info.number));
  }
  return v;
}

OpIndex Function::append_op(OpKind kind, std::span<const Value> operands,
                            std::span<const TypeId> result_types, AttrSetId attrs, StringId scope,
                            StringId checkpoint, uint32_t line, OpFacts facts) {
  auto index = static_cast<OpIndex>(ops_.size());
  Op op{};
  op.kind = kind;
  op.num_results = static_cast<uint16_t>(result_types.size());
  op.num_operands = static_cast<uint32_t>(operands.size());
  op.operand_begin = static_cast<uint32_t>(operand_pool_.size());
  op.result_begin = static_cast<uint32_t>(values_.size());
  op.attrs = attrs;
  op.scope = scope;
  op.checkpoint = checkpoint;
  op.line = line;
  op.facts = facts;
  operand_pool_.insert(operand_pool_.end(), operands.begin(), operands.end());
  for (size_t i = 0; i < result_types.size(); ++i) {
    values_.push_back(ValueInfo{result_types[i], 0, 0, index, static_cast<uint32_t>(i), 0});
  }
  ops_.push_back(op);
  return index;
}

void Function::reset_operands(OpIndex i, std::span<const Value> operands) {
  Op& op = ops_[i];
  if (operands.size() > op.num_operands) {
    op.operand_begin = static_cast<uint32_t>(operand_pool_.size());
    operand_pool_.insert(operand_pool_.end(), operands.begin(), operands.end());
  } else {
    std::copy(operands.begin(), operands.end(), operand_pool_.begin() + op.operand_begin);
  }
  op.num_operands = static_cast<uint32_t>(operands.size());
}

void Function::replace_uses(const std::vector<Value>& replacement) {
  auto map = [&](Value& v) {
    if (v.valid() && v.id < replacement.size() && replacement[v.id].valid()) v = replacement[v.id];
  };
  for (Value& v : operand_pool_) map(v);
  for (Value& v : results_) map(v);
}

void Function::erase_ops(const std::vector<bool>& erase) {
  std::vector<Value> renumber(values_.size());
  std::vector<ValueInfo> values;
  std::vector<Op> ops;
  std::vector<Value> pool;
  values.reserve(values_.size());
  ops.reserve(ops_.size());
  pool.reserve(operand_pool_.size());
  auto keep_value = [&](Value old, OpIndex def) {
    renumber[old.id] = Value{static_cast<uint32_t>(values.size())};
    ValueInfo info = values_[old.id];
    info.def = def;
    values.push_back(info);
  };
  for (Value& p : params_) {
    keep_value(p, kNoOp);
    p = renumber[p.id];
  }
  for (OpIndex i = 0; i < ops_.size(); ++i) {
    if (i < erase.size() && erase[i]) continue;
    Op op = ops_[i];
    auto new_index = static_cast<OpIndex>(ops.size());
    uint32_t operand_begin = static_cast<uint32_t>(pool.size());
    for (Value v : operands(ops_[i])) {
      assert(renumber[v.id].valid() && "erase_ops: an erased op's result is still used");
      pool.push_back(renumber[v.id]);
    }
    op.operand_begin = operand_begin;
    op.result_begin = static_cast<uint32_t>(values.size());
    for (uint32_t r = 0; r < op.num_results; ++r)
      keep_value(Value{ops_[i].result_begin + r}, new_index);
    ops.push_back(op);
  }
  for (Value& r : results_) r = renumber[r.id];
  values_ = std::move(values);
  ops_ = std::move(ops);
  operand_pool_ = std::move(pool);
}

Module::Module() : context_(std::make_unique<Context>()) {}

Function& Module::add_function(std::string_view name) {
  functions_.push_back(std::make_unique<Function>(*context_, name));
  return *functions_.back();
}

void Module::replace_function(size_t index, std::unique_ptr<Function> function) {
  assert(&function->context() == context_.get());
  functions_[index] = std::move(function);
}

Function* Module::find_function(std::string_view name) const {
  for (const auto& f : functions_) {
    if (f->name() == name) return f.get();
  }
  return nullptr;
}

}  // namespace precast::ir
