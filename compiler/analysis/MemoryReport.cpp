#include "compiler/analysis/MemoryReport.h"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>

#include "ir/ScopePath.h"

namespace precast {
namespace {

bool in_backward(std::string_view scope) {
  return ir::scope_has_component(scope, ir::kBackwardScope) ||
         ir::scope_has_component(scope, ir::kRematScope);
}

}  // namespace

Expected<MemoryReport> analyze_memory(const ir::Function& f, std::span<const AxisRule> rules,
                                      const Mesh& mesh, const std::vector<ir::Value>& host_values,
                                      bool scan_layers) {
  MemoryReport report;
  PRECAST_ASSIGN_OR_RETURN(report.sharding, analyze_sharding(f, rules, mesh));

  // Layer blocks: maximal runs of ops in one decoder layer and one direction.
  std::vector<int32_t> block(f.num_ops(), -1);
  std::vector<std::pair<int32_t, int32_t>> bounds;
  std::string_view current;
  bool current_backward = false;
  for (uint32_t i = 0; i < f.num_ops(); ++i) {
    std::string_view scope = f.scope(f.op(i));
    std::string_view layer = ir::decoder_layer_scope(scope);
    bool backward = in_backward(scope);
    if (layer.empty()) {
      current = {};
      continue;
    }
    if (layer != current || backward != current_backward || bounds.empty()) {
      bounds.emplace_back(static_cast<int32_t>(i), static_cast<int32_t>(i));
      current = layer;
      current_backward = backward;
    }
    block[i] = static_cast<int32_t>(bounds.size() - 1);
    bounds.back().second = static_cast<int32_t>(i);
  }

  BufferOptions options;
  options.bytes = [&report](ir::Value v) { return report.sharding.device_bytes[v.id]; };
  options.host_values = host_values;
  options.stacked_layer_gradients = scan_layers;
  options.materialize = report.sharding.collective_outputs;
  std::map<std::pair<int32_t, uint32_t>, size_t> gathered;  // (block, value) -> transient
  for (const Collective& c : report.sharding.collectives) {
    std::string key = fmt::format("{} {}", collective_name(c.kind), c.dcn ? "DCN" : "ICI");
    report.collectives[key].count += 1;
    report.collectives[key].wire_bytes += c.wire_bytes();
    if (c.kind != CollectiveKind::kAllGather) continue;
    int32_t b = block[c.op];
    if (b < 0) {
      options.transients.push_back(
          {static_cast<int32_t>(c.op), c.bytes, MemoryCategory::kCollectives});
      continue;
    }
    auto [it, inserted] =
        gathered.emplace(std::make_pair(b, c.value.id), options.transients.size());
    if (!inserted) continue;
    TransientBuffer t;
    t.position = bounds[static_cast<size_t>(b)].first;
    t.bytes = c.bytes;
    options.transients.push_back(t);
    options.transient_ends.push_back(
        {options.transients.size() - 1, bounds[static_cast<size_t>(b)].second});
  }
  report.plan = plan_memory(f, options);
  return report;
}

std::string format_collectives(const MemoryReport& report) {
  std::string out = "Collectives per device per step:";
  if (report.collectives.empty()) return out + " none (nothing is sharded)\n";
  out += "\n";
  for (const auto& [kind, totals] : report.collectives) {
    out += fmt::format("  {:<22} {:>6} ops  {:>10.3f} GB on the wire\n", kind, totals.count,
                       static_cast<double>(totals.wire_bytes) / 1e9);
  }
  return out;
}

}  // namespace precast
