// State kept in host memory (MaxText's optimizer_memory_host_offload: the optimizer state's
// shardings take memory kind pinned_host): what XLA's CompiledMemoryStats counts as
// host_argument / host_output / host_alias bytes instead of device (HBM) bytes. The buffer plan
// is made as if everything lived on the device; this moves the offloaded parameters and the
// results donated into them to host memory, so the device total (and the fits verdict) is HBM
// only.
#pragma once

#include <cstdint>
#include <string>

#include "compiler/analysis/BufferAssignment.h"
#include "ir/Module.h"

namespace precast {

struct HostOffloadBytes {
  int64_t argument_bytes = 0;  // offloaded parameters (per device)
  int64_t output_bytes = 0;    // results written back to host memory
  int64_t alias_bytes = 0;     // of those, results donated into an offloaded parameter
  // Device bytes the step adds to stream the state through HBM for the update: train.py
  // device_puts the state before the optimizer; XLA copies each array in when its update runs
  // and out when it is done, so the largest weight's moments are on the device twice (in, out).
  int64_t streaming_temp_bytes = 0;
  bool any() const { return argument_bytes != 0; }
};

// Moves the per-device optimizer state (parameters of role kOptimizerState of `device_step`, the
// partitioned step the plan is of, and the results donated into them) out of `plan`'s argument,
// output and alias bytes, and adds their streaming buffers to its temp bytes. Returns the host
// bytes.
HostOffloadBytes move_optimizer_state_to_host(const ir::Function& device_step, MemoryPlan& plan);

// "Host memory (pinned_host, optimizer_memory_host_offload): argument 1.2 GiB, output 1.2 GiB,
// alias 1.2 GiB; the device streams 0.1 GiB of it through HBM for the update"
std::string format_host_offload_line(const HostOffloadBytes& host);

}  // namespace precast
