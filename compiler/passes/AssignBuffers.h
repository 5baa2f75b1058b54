// The `assign-buffers` pass: the buffer plan of the program one device runs (plan_memory,
// compiler/analysis/BufferAssignment.h) under the target's settings — the plan `precast analyze`
// reports, `precast compile` generates code for and `precast-run` allocates (DESIGN invariant
// 2). It changes nothing in the module; its dump is the module with one comment per op (arena
// offset, bytes, live range, category), which parses back as the same module.
//
// Precondition: the function is in its final order (after the memory-aware schedule): the plan's
// live ranges are positions in that order.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "compiler/analysis/BufferAssignment.h"
#include "ir/Module.h"
#include "ir/PassManager.h"

namespace precast {

// What a plan depends on besides the function.
struct BufferPlanSettings {
  // Checkpoint names a remat policy offloads: their forward values that the backward pass reads
  // live in host memory (Estimated host temp size), not in the device arena.
  std::set<std::string> offloaded_checkpoints;
  // scan_layers on a target that runs MaxText's lax.scan (TPU, GPU): stacked layer gradients are
  // allocated before the backward loop (BufferOptions::stacked_layer_gradients). Off for the
  // CPU target, whose code runs the layers unrolled.
  bool stacked_layer_gradients = false;
  // The scan's blocks (BufferOptions::scan_layers_per_block, scanned_layers).
  int64_t scan_layers_per_block = 1;
  int64_t scanned_layers = std::numeric_limits<int64_t>::max();
  // A TPU target: count as XLA's memory_analysis() counts MaxText's step (BufferOptions::xla).
  XlaStepAccounting xla;
  // The CPU code generator's staging buffers around collectives on a non-major dimension
  // (CollectiveStaging.h), planned as transient buffers of the collective's step. On for the CPU
  // target, whose runtime moves rank-major pieces; off for targets only analysed.
  bool collective_staging = false;
};

// The plan_memory options of `f` under `settings`.
BufferOptions buffer_options(const ir::Function& f, const BufferPlanSettings& settings);

// The forward values of decoder layers whose op carries one of `checkpoints` and that the
// backward pass (or a recomputation) reads: what a remat policy's `offload` keeps on the host.
std::vector<ir::Value> offloaded_values(const ir::Function& f,
                                        const std::set<std::string>& checkpoints);

// A hash of everything plan_memory reads of a function (ops in order with their facts, operands,
// types, attributes, scopes, checkpoint names, parameters and their roles, results, donation):
// equal fingerprints, equal plans under the same settings.
uint64_t function_fingerprint(const ir::Function& f);

// The last plan made of a function, shared by the passes of one pipeline run: the schedule
// plans the order it keeps, and assign-buffers takes that plan instead of planning again when
// the function's fingerprint is unchanged since.
struct PlanCache {
  bool valid = false;
  uint64_t fingerprint = 0;
  MemoryPlan plan;
};

struct AssignBuffersPassOptions {
  BufferPlanSettings settings;
  std::string function = "train_step";
  // Receives the plan (and may supply it, see PlanCache); made by the pass when null.
  std::shared_ptr<PlanCache> cache;
};
ir::Pass assign_buffers_pass(AssignBuffersPassOptions options);

// The module with function `function`'s buffer plan `plan` as comments: a header line with the
// byte totals and MaxText's memory line, then one comment per op. Other functions print plain.
std::string buffer_assignment_text(const ir::Module& module, const std::string& function,
                                   const MemoryPlan& plan);

}  // namespace precast
