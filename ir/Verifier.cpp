#include "ir/Verifier.h"

#include <fmt/format.h>

#include <unordered_set>

#include "ir/Printer.h"
#include "ir/ShapeRules.h"
#include "ir/ValueNames.h"

namespace precast::ir {
namespace {

class FunctionVerifier {
 public:
  FunctionVerifier(const Function& function, std::string_view source_name)
      : f_(function), source_(source_name), defined_(function.num_values(), false) {}

  Status run() {
    PRECAST_RETURN_IF_ERROR(check_values());
    for (Value p : f_.params()) defined_[p.id] = true;
    for (OpIndex i = 0; i < f_.num_ops(); ++i) PRECAST_RETURN_IF_ERROR(check_op(i));
    return check_results();
  }

 private:
  // Errors about the function as a whole.
  Error function_error(std::string_view rule) const {
    return usage_error(fmt::format("{}in @{}: {}", source_prefix(0), f_.name(), rule));
  }
  // Errors about one op, spelled as the printer spells it.
  Error op_error(OpIndex i, std::string_view rule) const {
    const Op& op = f_.op(i);
    ValueNames names(f_);
    std::string results;
    for (uint32_t r = 0; r < op.num_results; ++r) {
      if (r > 0) results += ", ";
      names.append(results, f_.result(op, r));
    }
    return usage_error(fmt::format("{}in @{}, {} = {}: {}", source_prefix(op.line), f_.name(),
                                   results, op_name(op.kind), rule));
  }
  std::string source_prefix(uint32_t line) const {
    if (source_.empty()) return "";
    if (line == 0) return fmt::format("{}: ", source_);
    return fmt::format("{}:{}: ", source_, line);
  }
  std::string spell(Value v) const { return ValueNames(f_)(v); }

  Status check_values() {
    std::unordered_set<StringId> names;
    for (uint32_t id = 0; id < f_.num_values(); ++id) {
      Value v{id};
      const ValueInfo& info = f_.value_info(v);
      const TensorType& type = f_.type(v);
      for (int64_t d : type.dims) {
        if (d < 0)
          return function_error(
              fmt::format("value {} has negative dimension in {}", spell(v), to_string(type)));
      }
      if (info.name != 0) {
        std::string_view name = f_.value_name(v);
        if (!is_plain_identifier(name)) {
          return function_error(
              fmt::format("value name '{}' is not an identifier "
                          "([A-Za-z_][A-Za-z0-9_.]*)",
                          name));
        }
        if (!names.insert(info.name).second) {
          return function_error(fmt::format("value name %{} is defined twice", name));
        }
      }
      PRECAST_RETURN_IF_ERROR(check_axes(v));
      if (f_.is_param(v)) {
        std::string rule = sharding_rule(v);
        if (!rule.empty()) return function_error(rule);
      }
    }
    for (size_t i = 0; i < f_.params().size(); ++i) {
      if (f_.param_role(i) >= ParamRole::kCount) {
        return function_error(fmt::format("parameter {} has role {}, which does not exist",
                                          spell(f_.params()[i]),
                                          static_cast<int>(f_.param_role(i))));
      }
    }
    return Status::success();
  }

  // A sharding names one entry per dimension, and each mesh axis (an identifier) at most once;
  // "" when v's sharding (or its absence) is fine.
  std::string sharding_rule(Value v) const {
    if (!f_.has_sharding(v)) return "";
    std::span<const std::vector<StringId>> dims = f_.sharding(v);
    const TensorType& type = f_.type(v);
    if (static_cast<int64_t>(dims.size()) != type.rank()) {
      return fmt::format("value {} has a rank-{} sharding for type {}", spell(v), dims.size(),
                         to_string(type));
    }
    std::unordered_set<StringId> used;
    for (const std::vector<StringId>& axes : dims) {
      for (StringId s : axes) {
        std::string_view name = f_.context().string(s);
        if (!is_plain_identifier(name)) {
          return fmt::format("value {} is sharded over mesh axis '{}', which is not an identifier",
                             spell(v), name);
        }
        if (!used.insert(s).second) {
          return fmt::format("value {} is sharded over mesh axis '{}' twice", spell(v), name);
        }
      }
    }
    return "";
  }

  Status check_facts(OpIndex i) const {
    const OpFacts& facts = f_.op(i).facts;
    if (facts.phase >= OpPhase::kCount) {
      return op_error(i, fmt::format("phase {} does not exist", static_cast<int>(facts.phase)));
    }
    if (facts.region >= OpRegion::kCount) {
      return op_error(i, fmt::format("region {} does not exist", static_cast<int>(facts.region)));
    }
    if (facts.layer < 0 && facts.layer != kNoLayer) {
      return op_error(i, fmt::format("layer index {} is negative", facts.layer));
    }
    if (facts.site != 0 && !facts.in_layer()) {
      return op_error(i, fmt::format("site {} is a place in a decoder layer, and the op has no "
                                     "layer; give it layer=N or drop the site",
                                     facts.site));
    }
    return Status::success();
  }

  Status check_axes(Value v) const {
    std::span<const StringId> axes = f_.axes(v);
    if (axes.empty()) return Status::success();
    const TensorType& type = f_.type(v);
    if (static_cast<int64_t>(axes.size()) != type.rank()) {
      return function_error(fmt::format("value {} has {} axis names for type {}", spell(v),
                                        axes.size(), to_string(type)));
    }
    for (StringId s : axes) {
      std::string_view name = f_.context().string(s);
      if (s != 0 && (!is_plain_identifier(name) || name == "_")) {
        return function_error(
            fmt::format("value {} has axis name '{}', which is not an "
                        "identifier other than '_'",
                        spell(v), name));
      }
    }
    return Status::success();
  }

  Status check_op(OpIndex i) {
    const Op& op = f_.op(i);
    std::span<const Value> operands = f_.operands(op);
    operand_types_.clear();
    for (size_t k = 0; k < operands.size(); ++k) {
      Value v = operands[k];
      if (!v.valid() || v.id >= f_.num_values()) {
        return op_error(i, fmt::format("operand {} is not a value of this function", k));
      }
      if (!defined_[v.id]) {
        return op_error(i,
                        fmt::format("operand {} ({}) is used before its definition", k, spell(v)));
      }
      operand_types_.push_back(&f_.type(v));
    }
    declared_.clear();
    for (uint32_t r = 0; r < op.num_results; ++r) {
      Value v = f_.result(op, r);
      if (v.id >= f_.num_values() || f_.defining_op(v) != i || f_.value_info(v).number != r) {
        return op_error(i, "result bookkeeping is inconsistent (internal)");
      }
      declared_.push_back(f_.type(v));
    }
    if (op.num_results != op_info(op.kind).num_results) {
      return op_error(i, fmt::format("has {} results, expected {}", op.num_results,
                                     op_info(op.kind).num_results));
    }
    Expected<std::vector<TensorType>> inferred =
        infer_result_types(OpSignature{op.kind, operand_types_, f_.attrs(op), declared_});
    if (!inferred.ok()) return op_error(i, inferred.error().message());
    for (uint32_t r = 0; r < op.num_results; ++r) {
      if ((*inferred)[r] != declared_[r]) {
        return op_error(i, fmt::format("result type {} does not match the inferred type {}",
                                       to_string(declared_[r]), to_string((*inferred)[r])));
      }
      defined_[f_.result(op, r).id] = true;
      std::string rule = sharding_rule(f_.result(op, r));
      if (!rule.empty()) return op_error(i, rule);
    }
    return check_facts(i);
  }

  Status check_results() const {
    std::span<const Value> results = f_.results();
    for (size_t k = 0; k < results.size(); ++k) {
      Value v = results[k];
      if (!v.valid() || v.id >= f_.num_values() || !defined_[v.id]) {
        return function_error(fmt::format("result {} is not a defined value", k));
      }
    }
    // Donation: a result reuses a parameter's buffer, so both must have the same type, and no
    // parameter is donated twice.
    std::vector<bool> donated(f_.params().size(), false);
    for (size_t k = 0; k < results.size(); ++k) {
      int32_t alias = f_.result_alias(k);
      if (alias < 0) continue;
      if (static_cast<size_t>(alias) >= f_.params().size()) {
        return function_error(
            fmt::format("result {} aliases parameter {}, which does not exist", k, alias));
      }
      Value param = f_.params()[static_cast<size_t>(alias)];
      if (f_.type_id(param) != f_.type_id(results[k])) {
        return function_error(fmt::format(
            "result {} ({}) aliases parameter {} of another type ({}); a donated buffer must "
            "have the result's type",
            k, to_string(f_.type(results[k])), ValueNames(f_)(param), to_string(f_.type(param))));
      }
      if (donated[static_cast<size_t>(alias)]) {
        return function_error(
            fmt::format("parameter {} is aliased by more than one result", ValueNames(f_)(param)));
      }
      donated[static_cast<size_t>(alias)] = true;
    }
    return Status::success();
  }

  const Function& f_;
  std::string_view source_;
  std::vector<bool> defined_;
  std::vector<const TensorType*> operand_types_;
  std::vector<TensorType> declared_;
};

}  // namespace

Status verify_function(const Function& function, std::string_view source_name) {
  return FunctionVerifier(function, source_name).run();
}

Status verify_module(const Module& module) {
  std::unordered_set<std::string_view> names;
  for (size_t i = 0; i < module.num_functions(); ++i) {
    const Function& f = module.function(i);
    if (f.name().empty()) {
      return usage_error(fmt::format("function {} has an empty name", i));
    }
    if (!names.insert(f.name()).second) {
      return usage_error(fmt::format("function @{} is defined twice", f.name()));
    }
    PRECAST_RETURN_IF_ERROR(verify_function(f, module.source_name()));
  }
  return Status::success();
}

}  // namespace precast::ir
