#include "ir/passes/CommonSubexpressionElimination.h"

#include <unordered_map>

namespace precast::ir {
namespace {

struct KeyHash {
  size_t operator()(const std::vector<uint32_t>& key) const {
    size_t h = key.size();
    for (uint32_t v : key) h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h;
  }
};

// Everything that makes two ops interchangeable, as one integer sequence. A rematerialised op
// (phase recompute) is a deliberate recomputation, like JAX's optimization barrier around
// checkpointed regions: it only merges with recomputed ops of its own place (the same block and
// site: the module instance and the place in the layer its forward op was made at), never with
// the forward op it recomputes.
std::vector<uint32_t> op_key(const Function& f, const Op& op) {
  uint32_t barrier = op.facts.phase == OpPhase::kRecompute
                         ? (uint32_t{op.facts.block} << 16 | op.facts.site) + 1
                         : 0;
  std::vector<uint32_t> key = {static_cast<uint32_t>(op.kind), op.attrs, op.checkpoint,
                               op.num_operands, barrier};
  for (Value v : f.operands(op)) key.push_back(v.id);
  for (uint32_t r = 0; r < op.num_results; ++r) {
    const ValueInfo& info = f.value_info(f.result(op, r));
    key.push_back(info.type);
    key.push_back(info.axes);
    key.push_back(info.sharding);
  }
  return key;
}

bool merge_duplicates(Function& f) {
  std::vector<Value> replacement(f.num_values());
  std::vector<bool> erase(f.num_ops(), false);
  std::unordered_map<std::vector<uint32_t>, OpIndex, KeyHash> first_of;
  bool changed = false;
  for (OpIndex i = 0; i < f.num_ops(); ++i) {
    // Point operands at the surviving copies first, so chains of duplicates collapse in one walk.
    std::span<const Value> operands = f.operands(f.op(i));
    for (uint32_t k = 0; k < operands.size(); ++k) {
      if (replacement[operands[k].id].valid()) f.set_operand(i, k, replacement[operands[k].id]);
    }
    auto [it, inserted] = first_of.emplace(op_key(f, f.op(i)), i);
    if (inserted) continue;
    const Op& kept = f.op(it->second);
    const Op& duplicate = f.op(i);
    for (uint32_t r = 0; r < duplicate.num_results; ++r) {
      replacement[f.result(duplicate, r).id] = f.result(kept, r);
    }
    erase[i] = true;
    changed = true;
  }
  if (!changed) return false;
  f.replace_uses(replacement);
  f.erase_ops(erase);
  return true;
}

}  // namespace

Expected<bool> eliminate_common_subexpressions(Module& module) {
  bool changed = false;
  for (size_t i = 0; i < module.num_functions(); ++i) {
    changed = merge_duplicates(module.function(i)) || changed;
  }
  return changed;
}

}  // namespace precast::ir
