// The per-device memory and communication report of a train step on a mesh: sharding analysis,
// then the buffer plan over per-device sizes with the collectives' buffers, as `precast analyze`
// prints it.
#pragma once

#include <map>
#include <span>
#include <string>
#include <vector>

#include "compiler/analysis/BufferAssignment.h"
#include "compiler/analysis/Sharding.h"

namespace precast {

struct CollectiveTotals {
  int64_t count = 0;
  int64_t wire_bytes = 0;  // per device per step
};

struct MemoryReport {
  ShardingAnalysis sharding;
  MemoryPlan plan;
  // "all-gather ICI", "reduce-scatter DCN", ...
  std::map<std::string, CollectiveTotals> collectives;
};

// Gathered weights live for the layer block that uses them (a scan iteration's forward, or its
// backward with the recomputation), as MaxText's scanned layers gather a layer's weights once per
// iteration; unreduced partial sums live at their dot.
Expected<MemoryReport> analyze_memory(const ir::Function& train_step,
                                      std::span<const AxisRule> rules, const Mesh& mesh,
                                      const std::vector<ir::Value>& host_values = {},
                                      bool scan_layers = false);

std::string format_collectives(const MemoryReport& report);

}  // namespace precast
