#include "compiler/passes/WidenContractions.h"

#include <vector>

#include "ir/Builder.h"
#include "ir/Rewriter.h"

namespace precast {
namespace {

using ir::DType;
using ir::Function;
using ir::Op;
using ir::OpIndex;
using ir::OpKind;
using ir::Value;

bool low_precision(DType dtype) { return dtype == DType::kBF16 || dtype == DType::kF16; }

bool widens(const Function& f, const Op& op) {
  if (op.kind != OpKind::kDotGeneral && op.kind != OpKind::kAttention &&
      op.kind != OpKind::kAttentionGrad && op.kind != OpKind::kAttentionStats &&
      op.kind != OpKind::kGroupedDot && op.kind != OpKind::kGroupedDotWeightGrad) {
    return false;
  }
  for (uint32_t r = 0; r < op.num_results; ++r) {
    if (low_precision(f.type(f.result(op, r)).dtype)) return true;
  }
  return false;
}

}  // namespace

Expected<int64_t> widen_low_precision_contractions(ir::Module& module, size_t index,
                                                  std::vector<Value>* value_map) {
  const Function& f = module.function(index);
  int64_t widened = 0;
  for (const Op& op : f.ops()) widened += widens(f, op);
  if (widened == 0) {
    if (value_map != nullptr) {
      value_map->clear();
      for (uint32_t id = 0; id < f.num_values(); ++id) value_map->push_back(Value{id});
    }
    return widened;
  }

  ir::Rewriter rewriter(module, index);
  ir::Builder& b = rewriter.builder();
  Function& out = rewriter.target();
  for (OpIndex i = 0; i < f.num_ops(); ++i) {
    const Op& op = f.op(i);
    if (!widens(f, op)) {
      rewriter.clone(i);
      continue;
    }
    b.set_scope(f.scope(op));
    b.set_facts(op.facts);
    std::span<const Value> mapped = rewriter.mapped_operands(i);
    std::vector<Value> operands(mapped.begin(), mapped.end());
    for (Value& v : operands) {
      if (low_precision(out.type(v).dtype)) v = b.convert(v, DType::kF32);
    }
    std::vector<ir::TensorType> declared;
    for (uint32_t r = 0; r < op.num_results; ++r) {
      ir::TensorType t = f.type(f.result(op, r));
      if (low_precision(t.dtype)) t.dtype = DType::kF32;
      declared.push_back(t);
    }
    std::vector<Value> results = b.clone(f, i, operands, declared, f.attrs(op));
    for (uint32_t r = 0; r < op.num_results && r < results.size(); ++r) {
      Value original = f.result(op, r);
      Value v = results[r];
      if (low_precision(f.type(original).dtype)) {
        // The rounded value takes the original's name, axes and sharding; the f32 one goes
        // unnamed.
        Value back = b.convert(v, f.type(original).dtype);
        out.set_value_name(back, out.value_info(v).name);
        out.set_axes(back, out.value_info(v).axes);
        out.set_sharding(back, out.value_info(v).sharding);
        out.set_value_name(v, 0);
        out.set_sharding(v, 0);
        v = back;
      }
      rewriter.map(original, v);
    }
  }
  std::vector<Value> map = rewriter.value_map();
  PRECAST_RETURN_IF_ERROR(rewriter.commit("widen-contractions"));
  if (value_map != nullptr) *value_map = std::move(map);
  return widened;
}

ir::Pass widen_contractions_pass(std::string function) {
  return ir::Pass("widen-contractions",
                  "CPU legalisation: bf16/f16 dot_general and attention run in f32, rounded back",
                  [function](ir::Module& module) -> Expected<bool> {
                    PRECAST_ASSIGN_OR_RETURN(
                        size_t i, ir::function_for_pass(module, "widen-contractions", function));
                    PRECAST_ASSIGN_OR_RETURN(int64_t widened,
                                             widen_low_precision_contractions(module, i));
                    return widened > 0;
                  });
}

}  // namespace precast
