#include "ir/passes/DeadCodeElimination.h"

#include <algorithm>

namespace precast::ir {

// Walks ops backwards from the results; returns which ops to erase.
std::vector<bool> find_dead_ops(const Function& f) {
  std::vector<bool> live_value(f.num_values(), false);
  for (Value v : f.results()) live_value[v.id] = true;
  std::vector<bool> dead(f.num_ops(), true);
  for (OpIndex i = static_cast<OpIndex>(f.num_ops()); i-- > 0;) {
    const Op& op = f.op(i);
    bool live = false;
    for (uint32_t r = 0; r < op.num_results; ++r) live = live || live_value[f.result(op, r).id];
    if (!live) continue;
    dead[i] = false;
    for (Value v : f.operands(op)) live_value[v.id] = true;
  }
  return dead;
}

Expected<bool> eliminate_dead_code(Module& module) {
  bool changed = false;
  for (size_t i = 0; i < module.num_functions(); ++i) {
    Function& f = module.function(i);
    std::vector<bool> dead = find_dead_ops(f);
    if (std::find(dead.begin(), dead.end(), true) == dead.end()) continue;
    f.erase_ops(dead);
    changed = true;
  }
  return changed;
}

}  // namespace precast::ir
