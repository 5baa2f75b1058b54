// Memory-aware scheduling: reorders a function's ops (any topological order of its data flow is
// correct; the IR has no side effects) so that the buffers buffer assignment gives them overlap
// less, which lowers the temp arena. Like XLA's list scheduler it repeatedly runs the ready op
// that frees the most bytes net of what it allocates, ties in the original order; unlike it, an
// op may only move a bounded distance (a window) from its original place, because a train step's
// program order already encodes its phases: an unbounded list scheduler runs the recomputation
// of rematerialised layers in the forward pass (it allocates least), which multiplies the peak.
//
// Precondition: the function verifies. The entry point, schedule_for_memory, keeps the original
// order unless a schedule's plan_memory temp bytes are strictly lower, so it never raises them.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "compiler/analysis/BufferAssignment.h"
#include "compiler/passes/AssignBuffers.h"
#include "ir/Module.h"
#include "ir/PassManager.h"

namespace precast {

// Measured on llama2, gemma2 and gpt3 train steps (tests/passes/schedule_test.cpp): windows of
// 24 to 64 ops give the same temp bytes; 8 or 16 find less, 128 or more raise the peak.
inline constexpr uint32_t kDefaultScheduleWindow = 32;

struct ScheduleOptions {
  // value_buffers(f, buffer options): the buffer each value is stored in; an invalid Value for a
  // value fused into its users (no buffer: reading it reads its operands' buffers, and where its
  // op sits does not matter, so it is placed just before its first reader). Empty: every value
  // is a buffer of its own.
  std::vector<ir::Value> buffers;
  // An op competes only once every op more than `window` places before it in the original order
  // has run. 0: unbounded (XLA's list scheduler).
  uint32_t window = kDefaultScheduleWindow;
};

// A topological order of f's ops (op indices, each once; every op after the ops defining its
// operands) chosen to lower the peak of live bytes, where bytes(v) is the size of v's buffer
// (0: costs nothing, e.g. a parameter or a host value). Deterministic (no pointer-keyed
// decisions). O(R log ops), R the buffer reads of all ops followed through fused values as
// plan_memory's liveness follows them (about the operand count). Results are never freed. A
// result donated to a parameter (set_result_alias) that the original order writes in place
// stays after the parameter's other readers, and costs nothing.
std::vector<ir::OpIndex> memory_aware_order(const ir::Function& f,
                                            const std::function<int64_t(ir::Value)>& bytes,
                                            const ScheduleOptions& options = {});

// Rebuilds function `function_index` with its ops in `order` (Module::new_function + Builder::
// clone), keeping parameters, names, axes, scopes, checkpoint names, results and donation
// aliases; the rebuilt function verifies. Returns whether the order differs from the current
// one (the identity order leaves the module untouched). `value_map`, when given, receives the
// new value of every old value id: values are renumbered, so Value handles and Function
// pointers held outside are invalid afterwards. An order that is not a topological permutation
// of the ops is a usage error.
Expected<bool> apply_schedule(ir::Module& m, size_t function_index,
                              const std::vector<ir::OpIndex>& order,
                              std::vector<ir::Value>* value_map = nullptr);

struct ScheduleResult {
  bool changed = false;
  int64_t temp_bytes_before = 0;
  int64_t temp_bytes_after = 0;  // equal to before when the original order was kept
  int64_t peak_live_bytes_before = 0;
  int64_t peak_live_bytes_after = 0;
  int64_t window = -1;  // the window of the order kept; -1: the original order
  // New value of every old value id (the identity when unchanged): remap held Values with it.
  std::vector<ir::Value> value_map;
  // plan_memory of the function as it stands afterwards (with the options restated for it).
  MemoryPlan plan;
};

// Schedules function `function_index` for memory: for each window, orders the ops with
// memory_aware_order (sizes and fusion from `options`, host values free), plans the order with
// plan_memory(options) restated for the new order (values remapped; transient positions moved
// with their ops) and keeps the order with the fewest temp bytes — the original unless one is
// strictly lower. Cost: one plan_memory of the original plus, per window, one order, one
// rebuild and one plan_memory.
Expected<ScheduleResult> schedule_for_memory(
    ir::Module& m, size_t function_index, const BufferOptions& options = {},
    std::span<const uint32_t> windows = std::span<const uint32_t>(&kDefaultScheduleWindow, 1));

// The `schedule` pass: schedule_for_memory on the function named `function`, with the buffer
// options of `settings` (the same assign-buffers plans with). The plan of the order it keeps goes
// into `cache`, which assign-buffers reuses while the function stays unchanged. Changed when
// it reordered the function.
struct SchedulePassOptions {
  BufferPlanSettings settings;
  std::vector<uint32_t> windows = {kDefaultScheduleWindow};
  std::string function = "train_step";
  std::shared_ptr<PlanCache> cache;
};
ir::Pass schedule_pass(SchedulePassOptions options);

}  // namespace precast
