#include "compiler/passes/DeviceStep.h"

#include "compiler/passes/WidenContractions.h"
#include "ir/ScopePath.h"

namespace precast {

std::vector<ir::Value> offloaded_values(const ir::Function& f,
                                        const std::set<std::string>& checkpoints) {
  std::vector<ir::Value> out;
  if (checkpoints.empty()) return out;
  auto later_pass = [&f](ir::OpIndex i) {
    std::string_view scope = f.scope(f.op(i));
    return ir::scope_has_component(scope, ir::kBackwardScope) ||
           ir::scope_has_component(scope, ir::kRematScope);
  };
  std::vector<bool> read_later(f.num_values(), false);
  for (ir::OpIndex i = 0; i < f.num_ops(); ++i) {
    if (!later_pass(i)) continue;
    for (ir::Value u : f.operands(f.op(i))) read_later[u.id] = true;
  }
  for (ir::OpIndex i = 0; i < f.num_ops(); ++i) {
    const ir::Op& op = f.op(i);
    if (op.num_results != 1 || later_pass(i)) continue;
    if (ir::decoder_layer_scope(f.scope(op)).empty()) continue;
    std::string_view checkpoint = f.checkpoint(op);
    if (checkpoint.empty() || !checkpoints.contains(std::string(checkpoint))) continue;
    ir::Value v = f.result(op);
    if (read_later[v.id]) out.push_back(v);
  }
  return out;
}

namespace {

// `shardings` restated for a rebuilt function: map[old id] is the new value.
DeviceValueShardings renumbered(const DeviceValueShardings& shardings,
                                const std::vector<ir::Value>& map, size_t num_values) {
  DeviceValueShardings out;
  out.specs.resize(num_values);
  out.known.assign(num_values, false);
  for (size_t id = 0; id < map.size() && id < shardings.specs.size(); ++id) {
    if (!map[id].valid() || !shardings.known[id]) continue;
    out.specs[map[id].id] = shardings.specs[id];
    out.known[map[id].id] = true;
  }
  return out;
}

}  // namespace

Expected<DeviceStep> prepare_device_step(ir::Module& module, size_t index, const Mesh& mesh,
                                         const DeviceStepOptions& options) {
  DeviceStep out;
  DeviceValueShardings shardings;
  if (mesh.num_devices > 1) {
    PRECAST_ASSIGN_OR_RETURN(out.partition,
                             partition_spmd_in_place(module, index, options.rules, mesh,
                                                     options.partition, &shardings));
    out.partitioned = true;
  }
  if (options.widen_low_precision) {
    std::vector<ir::Value> map;
    PRECAST_ASSIGN_OR_RETURN(out.widened_ops,
                             widen_low_precision_contractions(module, index, &map));
    shardings = renumbered(shardings, map, module.function(index).num_values());
  }
  BufferOptions buffers;
  buffers.stacked_layer_gradients = options.stacked_layer_gradients;
  buffers.host_values = offloaded_values(module.function(index), options.offloaded_checkpoints);
  if (options.schedule) {
    PRECAST_ASSIGN_OR_RETURN(out.schedule, schedule_for_memory(module, index, buffers));
    out.memory.plan = std::move(out.schedule.plan);
    shardings = renumbered(shardings, out.schedule.value_map, module.function(index).num_values());
  } else {
    out.memory.plan = plan_memory(module.function(index), buffers);
  }
  const ir::Function& step = module.function(index);
  out.memory.collectives = count_collectives(step);
  out.memory.value_shardings.assign(step.num_values(), "");
  for (size_t id = 0; id < shardings.specs.size(); ++id) {
    if (shardings.known[id]) out.memory.value_shardings[id] = shardings.specs[id].to_string();
  }
  return out;
}

}  // namespace precast
