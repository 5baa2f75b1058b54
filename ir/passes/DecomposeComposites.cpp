#include "ir/passes/DecomposeComposites.h"

#include <algorithm>

#include "ir/Builder.h"

namespace precast::ir {
namespace {

bool has_composite(const Function& f) {
  return std::any_of(f.ops().begin(), f.ops().end(),
                     [](const Op& op) { return op_info(op.kind).op_class == OpClass::kComposite; });
}

// Gives the decomposition's results the composite's names and annotations.
void carry_annotations(const Function& source, const Op& op, Builder& b,
                       std::span<const Value> results) {
  Function& f = b.function();
  for (uint32_t r = 0; r < op.num_results; ++r) {
    Value from = source.result(op, r);
    f.set_axes(results[r], source.value_info(from).axes);
    f.set_value_name(results[r], source.value_info(from).name);
    f.set_sharding(results[r], source.value_info(from).sharding);
    OpIndex def = f.defining_op(results[r]);
    if (op.checkpoint != 0 && def != kNoOp) f.mutable_op(def).checkpoint = op.checkpoint;
  }
}

Expected<std::unique_ptr<Function>> rebuild(const Module& module, const Function& source) {
  std::unique_ptr<Function> rebuilt = module.new_function(source.name());
  Builder b(*rebuilt);
  std::vector<Value> map(source.num_values());
  for (Value p : source.params()) {
    map[p.id] = rebuilt->add_param_like(source, p);
  }
  std::vector<Value> operands;
  for (OpIndex i = 0; i < source.num_ops(); ++i) {
    if (!b.ok()) break;  // operands may be invalid from here on
    const Op& op = source.op(i);
    operands.clear();
    for (Value v : source.operands(op)) operands.push_back(map[v.id]);
    std::vector<Value> results;
    const OpInfo& info = op_info(op.kind);
    if (info.decompose) {
      b.set_scope(source.scope(op));
      b.set_facts(op.facts);
      PRECAST_ASSIGN_OR_RETURN(results, info.decompose(b, source.attrs(op), operands));
      carry_annotations(source, op, b, results);
    } else {
      results = b.clone(source, i, operands);
    }
    for (uint32_t r = 0; r < op.num_results; ++r) map[source.result(op, r).id] = results[r];
  }
  if (!b.ok()) return internal_error("decompose-composites: " + b.status().error().message());
  std::vector<Value> results;
  for (Value v : source.results()) results.push_back(map[v.id]);
  rebuilt->set_results(results);
  for (size_t k = 0; k < results.size(); ++k) {
    if (source.result_alias(k) >= 0) rebuilt->set_result_alias(k, source.result_alias(k));
  }
  return rebuilt;
}

}  // namespace

Expected<bool> decompose_composites(Module& module) {
  bool changed = false;
  for (size_t i = 0; i < module.num_functions(); ++i) {
    if (!has_composite(module.function(i))) continue;
    PRECAST_ASSIGN_OR_RETURN(std::unique_ptr<Function> rebuilt,
                             rebuild(module, module.function(i)));
    module.replace_function(i, std::move(rebuilt));
    changed = true;
  }
  return changed;
}

}  // namespace precast::ir
