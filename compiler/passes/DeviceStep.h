// The program one device runs, and its buffer plan: what `precast analyze` reports and what
// `precast compile` generates code for and `precast-run` allocates (DESIGN invariant 2).
//
// From the lowered train step (after remat and the IR clean-up passes): SPMD partitioning for the
// mesh (per-device shapes, explicit collectives; skipped on one device), the memory-aware
// schedule (kept only when it lowers the arena), then buffer assignment over the per-device
// function; for the CPU target, low-precision contractions widened to f32 before the schedule. Memory, collectives and hardware FLOPs are all read off that one function.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "compiler/analysis/MemoryReport.h"
#include "compiler/analysis/Sharding.h"
#include "compiler/passes/Schedule.h"
#include "compiler/passes/SpmdPartition.h"
#include "ir/Module.h"

namespace precast {

struct DeviceStepOptions {
  std::vector<AxisRule> rules;
  // Checkpoint names a remat policy offloads: their forward values that the backward pass reads
  // live in host memory (Estimated host temp size), not in the device arena.
  std::set<std::string> offloaded_checkpoints;
  // scan_layers on a target that runs MaxText's lax.scan (TPU, GPU): stacked layer gradients
  // are allocated before the backward loop (BufferOptions::stacked_layer_gradients). Off for the
  // CPU target, whose code runs the layers unrolled.
  bool stacked_layer_gradients = false;
  bool schedule = true;
  // The CPU target: bf16/f16 contractions run in f32 (WidenContractions.h).
  bool widen_low_precision = false;
  PartitionOptions partition;  // context_parallel_strategy=ring: ring attention
};

struct DeviceStep {
  PartitionStats partition;
  bool partitioned = false;
  int64_t widened_ops = 0;
  ScheduleResult schedule;
  MemoryReport memory;
};

// Rewrites function `index` of `module` (a train step) into the program one device of `mesh`
// runs, scheduled for memory, and plans its buffers. Value handles into the old function are
// invalid afterwards.
Expected<DeviceStep> prepare_device_step(ir::Module& module, size_t index, const Mesh& mesh,
                                         const DeviceStepOptions& options);

// The forward values of decoder layers whose op carries one of `checkpoints` and that the
// backward pass (or a recomputation) reads: what a remat policy's `offload` keeps on the host.
std::vector<ir::Value> offloaded_values(const ir::Function& f,
                                        const std::set<std::string>& checkpoints);

}  // namespace precast
