// The per-device memory and communication report of a train step: the buffer plan of the program
// one device runs (after SPMD partitioning, compiler/passes/DeviceStep.h) and the collectives it
// executes, as `precast analyze` prints them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/analysis/BufferAssignment.h"
#include "compiler/analysis/HostOffload.h"
#include "ir/Module.h"

namespace precast {

struct CollectiveTotals {
  int64_t count = 0;
  int64_t bytes = 0;       // per device per step: the full (gathered / unreduced) buffers
  int64_t wire_bytes = 0;  // per device per step: what one device sends (ring algorithms)
};

struct MemoryReport {
  MemoryPlan plan;  // of the per-device function, whose values carry their shardings
  // "all-gather ICI", "reduce-scatter DCN", "collective-permute ICI", ...
  std::map<std::string, CollectiveTotals> collectives;
  // State in host memory (optimizer_memory_host_offload), not counted in `plan`'s device bytes.
  HostOffloadBytes host;
};

// The collectives of a per-device function, by kind and network (the `dcn` attribute). Wire
// bytes per device with ring algorithms over a group of g: all-gather (g-1)/g of its result,
// reduce-scatter and all-to-all (g-1)/g of their operand, all-reduce twice that, and a
// collective-permute its whole operand (one send).
std::map<std::string, CollectiveTotals> count_collectives(const ir::Function& device_step);

std::string format_collectives(const MemoryReport& report);

}  // namespace precast
