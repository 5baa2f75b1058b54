#include "compiler/analysis/HostOffload.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace precast {

HostOffloadBytes move_optimizer_state_to_host(const ir::Function& device_step, MemoryPlan& plan) {
  HostOffloadBytes host;
  auto state = static_cast<size_t>(MemoryCategory::kOptimizerState);
  if (state >= plan.argument_by_category.size()) return host;
  // The plan's own bytes of the state (a TPU's tiled layouts, scanned layers' stacked arrays).
  host.argument_bytes = plan.argument_by_category[state];
  if (!host.any()) return host;
  std::span<const ir::Value> params = device_step.params();
  std::vector<bool> offloaded(params.size(), false);
  // Adam's parameters: the weights, then mu per weight, then nu per weight, then the count.
  std::vector<int64_t> moments;
  for (size_t k = 0; k < params.size(); ++k) {
    if (device_step.param_role(k) != ir::ParamRole::kOptimizerState) continue;
    offloaded[k] = true;
    moments.push_back(device_step.type(params[k]).byte_size());
  }
  // The new state is written back to host memory: into the donated parameter's buffer (the same
  // bytes), or, where the plan gave a result a buffer of its own, into that.
  std::vector<int64_t> own_buffer(device_step.num_values(), -1);
  for (const Buffer& b : plan.buffers) {
    if (b.output) own_buffer[b.value.id] = b.bytes;
  }
  host.output_bytes = host.argument_bytes;
  host.alias_bytes = host.argument_bytes;
  std::span<const ir::Value> results = device_step.results();
  for (size_t k = 0; k < results.size(); ++k) {
    int32_t p = device_step.result_alias(k);
    if (p < 0 || !offloaded[static_cast<size_t>(p)] || own_buffer[results[k].id] < 0) continue;
    host.alias_bytes -= own_buffer[results[k].id];
  }
  // mu_i and nu_i of one weight: moments[i] and moments[i + n] (the count, last, is a scalar).
  size_t n = moments.size() / 2;
  int64_t largest = 0;
  for (size_t i = 0; i < n; ++i) largest = std::max(largest, moments[i] + moments[i + n]);
  host.streaming_temp_bytes = 2 * largest;

  plan.argument_bytes -= host.argument_bytes;
  plan.argument_by_category[state] = 0;
  plan.output_bytes -= host.output_bytes;
  plan.alias_bytes -= host.alias_bytes;
  plan.temp_bytes += host.streaming_temp_bytes;
  return host;
}

std::string format_host_offload_line(const HostOffloadBytes& host) {
  auto gib = [](int64_t bytes) { return static_cast<double>(bytes) / (1LL << 30); };
  return fmt::format(
      "Host memory (pinned_host, optimizer_memory_host_offload): argument {:.2f} GiB, output "
      "{:.2f} GiB, alias {:.2f} GiB (not in the device total); the update streams {:.2f} GiB of "
      "it through HBM (in the temp size)",
      gib(host.argument_bytes), gib(host.output_bytes), gib(host.alias_bytes),
      gib(host.streaming_temp_bytes));
}

}  // namespace precast
