// The `propagate-sharding` pass: every value of the global train step gets the sharding it will
// have on the mesh — its logical axes resolved with logical_axis_rules (flax's rule order), and
// for values without names what their ops make of their operands' (analyze_sharding,
// compiler/analysis/Sharding.h) — written into the IR as annotations (`f32[4096,1024]
// P('fsdp', 'tensor')`), so the dump shows what XLA's sharding propagation would decide and
// spmd-partition reads it from there. Nothing to do on one device.
#pragma once

#include <string>
#include <vector>

#include "compiler/analysis/Sharding.h"
#include "compiler/topology/Mesh.h"
#include "ir/Module.h"
#include "ir/PassManager.h"

namespace precast {

// Writes `analysis` (of `f`) into f's values as sharding annotations.
void annotate_global_shardings(ir::Function& f, const ShardingAnalysis& analysis);

// The shardings read back from f's annotations (what propagate-sharding wrote), one table entry
// per distinct annotation; values without one are replicated. A usage error when f carries none
// at all (propagate-sharding did not run).
Expected<ShardingTable> global_shardings_from_ir(const ir::Function& f);

struct PropagateShardingPassOptions {
  std::vector<AxisRule> rules;
  Mesh mesh;
  std::string function = "train_step";
  ShardingOptions sharding;  // shard_optimizer_over_data
};
ir::Pass propagate_sharding_pass(PropagateShardingPassOptions options);

}  // namespace precast
