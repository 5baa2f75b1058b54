#include "compiler/passes/PropagateSharding.h"

#include <fmt/format.h>

#include <map>
#include <unordered_map>
#include <utility>

namespace precast {

void annotate_global_shardings(ir::Function& f, const ShardingAnalysis& analysis) {
  // A few mesh axis names and a few hundred distinct shardings over tens of thousands of values:
  // intern each axis name once and look each spec up before building its ids.
  ir::Context& context = f.context();
  std::unordered_map<std::string, ir::StringId> axis_ids;
  struct SpecHash {
    size_t operator()(const std::vector<std::vector<std::string>>& spec) const {
      size_t h = spec.size();
      for (const std::vector<std::string>& axes : spec) {
        h = h * 31 + axes.size();
        for (const std::string& axis : axes) h = h * 1000003 ^ std::hash<std::string>()(axis);
      }
      return h;
    }
  };
  std::unordered_map<std::vector<std::vector<std::string>>, ir::ShardingId, SpecHash> sharding_ids;
  std::vector<std::vector<ir::StringId>> dims;
  for (uint32_t id = 0; id < f.num_values() && id < analysis.specs.size(); ++id) {
    const std::vector<std::vector<std::string>>& spec = analysis.specs[id].dims;
    auto known = sharding_ids.find(spec);
    if (known == sharding_ids.end()) {
      dims.clear();
      for (const std::vector<std::string>& axes : spec) {
        std::vector<ir::StringId>& ids = dims.emplace_back();
        for (const std::string& axis : axes) {
          auto [it, inserted] = axis_ids.try_emplace(axis, 0);
          if (inserted) it->second = context.intern_string(axis);
          ids.push_back(it->second);
        }
      }
      known = sharding_ids.emplace(spec, context.intern_sharding(dims)).first;
    }
    f.set_sharding(ir::Value{id}, known->second);
  }
}

Expected<ShardingTable> global_shardings_from_ir(const ir::Function& f) {
  ShardingTable table;
  table.of_value.assign(f.num_values(), 0);
  // Entry (annotation, rank) -> table index; annotation 0 (none) is replicated at that rank.
  std::map<std::pair<ir::ShardingId, int64_t>, uint32_t> entries;
  bool any = false;
  for (uint32_t id = 0; id < f.num_values(); ++id) {
    ir::Value v{id};
    ir::ShardingId sharding = f.value_info(v).sharding;
    any |= sharding != 0;
    int64_t rank = f.type(v).rank();
    auto [it, inserted] = entries.try_emplace({sharding, rank}, 0);
    if (inserted) {
      it->second = static_cast<uint32_t>(table.specs.size());
      ShardingSpec& spec = table.specs.emplace_back();
      if (sharding != 0) {
        for (const std::vector<ir::StringId>& axes : f.sharding(v)) {
          std::vector<std::string>& names = spec.dims.emplace_back();
          for (ir::StringId axis : axes) names.emplace_back(f.context().string(axis));
        }
      }
      spec.dims.resize(static_cast<size_t>(rank));
    }
    table.of_value[id] = it->second;
  }
  if (!any) {
    return usage_error(fmt::format(
        "@{} carries no sharding annotations: run propagate-sharding before spmd-partition",
        f.name()));
  }
  return table;
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
                                             analyze_sharding(f, options.rules, options.mesh, options.sharding));
                    annotate_global_shardings(f, analysis);
                    return true;
                  });
}

}  // namespace precast
