#include "compiler/passes/DeviceStep.h"

#include "compiler/passes/WidenContractions.h"

namespace precast {

std::vector<ir::Value> offloaded_values(const ir::Function& f,
                                        const std::set<std::string>& checkpoints) {
  std::vector<ir::Value> out;
  if (checkpoints.empty()) return out;
  auto later_pass = [&f](ir::OpIndex i) { return f.facts(i).phase != ir::OpPhase::kForward; };
  std::vector<bool> read_later(f.num_values(), false);
  for (ir::OpIndex i = 0; i < f.num_ops(); ++i) {
    if (!later_pass(i)) continue;
    for (ir::Value u : f.operands(f.op(i))) read_later[u.id] = true;
  }
  for (ir::OpIndex i = 0; i < f.num_ops(); ++i) {
    const ir::Op& op = f.op(i);
    if (op.num_results != 1 || later_pass(i)) continue;
    if (!op.facts.in_layer()) continue;
    std::string_view checkpoint = f.checkpoint(op);
    if (checkpoint.empty() || !checkpoints.contains(std::string(checkpoint))) continue;
    ir::Value v = f.result(op);
    if (read_later[v.id]) out.push_back(v);
  }
  return out;
}

Expected<DeviceStep> prepare_device_step(ir::Module& module, size_t index, const Mesh& mesh,
                                         const DeviceStepOptions& options) {
  DeviceStep out;
  if (mesh.num_devices > 1) {
    PRECAST_ASSIGN_OR_RETURN(out.partition, partition_spmd_in_place(module, index, options.rules,
                                                                    mesh, options.partition));
    out.partitioned = true;
  }
  if (options.widen_low_precision) {
    PRECAST_ASSIGN_OR_RETURN(out.widened_ops, widen_low_precision_contractions(module, index));
  }
  BufferOptions buffers;
  buffers.stacked_layer_gradients = options.stacked_layer_gradients;
  buffers.host_values = offloaded_values(module.function(index), options.offloaded_checkpoints);
  if (options.schedule) {
    PRECAST_ASSIGN_OR_RETURN(out.schedule, schedule_for_memory(module, index, buffers));
    out.memory.plan = std::move(out.schedule.plan);
  } else {
    out.memory.plan = plan_memory(module.function(index), buffers);
  }
  const ir::Function& step = module.function(index);
  out.memory.collectives = count_collectives(step);
  return out;
}

}  // namespace precast
