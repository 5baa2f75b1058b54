#include "ir/passes/DecomposeComposites.h"

#include <algorithm>

#include "ir/Builder.h"
#include "ir/Rewriter.h"

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

// Function `index` with every composite replaced by its decomposition.
Status rebuild(Module& module, size_t index) {
  Rewriter rewriter(module, index);
  const Function& source = rewriter.source();
  Builder& b = rewriter.builder();
  for (OpIndex i = 0; i < source.num_ops(); ++i) {
    if (!b.ok()) break;  // operands may be invalid from here on
    const Op& op = source.op(i);
    const OpInfo& info = op_info(op.kind);
    if (!info.decompose) {
      rewriter.clone(i);
      continue;
    }
    std::span<const Value> mapped = rewriter.mapped_operands(i);
    std::vector<Value> operands(mapped.begin(), mapped.end());
    b.set_scope(source.scope(op));
    b.set_facts(op.facts);
    PRECAST_ASSIGN_OR_RETURN(std::vector<Value> results,
                             info.decompose(b, source.attrs(op), operands));
    carry_annotations(source, op, b, results);
    for (uint32_t r = 0; r < op.num_results; ++r) rewriter.map(source.result(op, r), results[r]);
  }
  return rewriter.commit("decompose-composites");
}

}  // namespace

Expected<bool> decompose_composites(Module& module) {
  bool changed = false;
  for (size_t i = 0; i < module.num_functions(); ++i) {
    if (!has_composite(module.function(i))) continue;
    PRECAST_RETURN_IF_ERROR(rebuild(module, i));
    changed = true;
  }
  return changed;
}

}  // namespace precast::ir
