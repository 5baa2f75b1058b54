#include "compiler/passes/PropagateSharding.h"

#include <fmt/format.h>

#include <functional>
#include <numeric>

namespace precast {

void annotate_global_shardings(ir::Function& f, const ShardingAnalysis& analysis) {
  ir::Context& context = f.context();
  std::vector<std::vector<ir::StringId>> dims;
  for (uint32_t id = 0; id < f.num_values() && id < analysis.specs.size(); ++id) {
    dims.clear();
    for (const std::vector<std::string>& axes : analysis.specs[id].dims) {
      std::vector<ir::StringId>& ids = dims.emplace_back();
      for (const std::string& axis : axes) ids.push_back(context.intern_string(axis));
    }
    f.set_sharding(ir::Value{id}, context.intern_sharding(dims));
  }
}

Expected<ShardingAnalysis> global_shardings_from_ir(const ir::Function& f, const Mesh& mesh) {
  ShardingAnalysis analysis;
  analysis.specs.resize(f.num_values());
  analysis.device_bytes.assign(f.num_values(), 0);
  bool any = false;
  for (uint32_t id = 0; id < f.num_values(); ++id) {
    ir::Value v{id};
    const ir::TensorType& type = f.type(v);
    ShardingSpec& spec = analysis.specs[id];
    spec.dims.resize(static_cast<size_t>(type.rank()));
    if (f.has_sharding(v)) {
      any = true;
      std::span<const std::vector<ir::StringId>> dims = f.sharding(v);
      for (size_t d = 0; d < dims.size() && d < spec.dims.size(); ++d) {
        for (ir::StringId axis : dims[d]) spec.dims[d].emplace_back(f.context().string(axis));
      }
    }
    std::vector<int64_t> local = per_device_dims(type.dims, spec, mesh);
    analysis.device_bytes[id] =
        std::accumulate(local.begin(), local.end(), int64_t{1}, std::multiplies<int64_t>()) *
        ir::bytes_per_element(type.dtype);
  }
  if (!any) {
    return usage_error(fmt::format(
        "@{} carries no sharding annotations: run propagate-sharding before spmd-partition",
        f.name()));
  }
  return analysis;
}

ir::Pass propagate_sharding_pass(PropagateShardingPassOptions options) {
  std::string summary = fmt::format(
      "annotate @{}'s values with their sharding on the mesh {} (logical_axis_rules, then "
      "what each op makes of its operands')",
      options.function, options.mesh.shape_string());
  return ir::Pass("propagate-sharding", std::move(summary),
                  [options = std::move(options)](ir::Module& module) -> Expected<bool> {
                    PRECAST_ASSIGN_OR_RETURN(
                        size_t i,
                        ir::function_for_pass(module, "propagate-sharding", options.function));
                    if (options.mesh.num_devices <= 1) return false;
                    ir::Function& f = module.function(i);
                    PRECAST_ASSIGN_OR_RETURN(ShardingAnalysis analysis,
                                             analyze_sharding(f, options.rules, options.mesh));
                    annotate_global_shardings(f, analysis);
                    return true;
                  });
}

}  // namespace precast
