#include "compiler/passes/AssignBuffers.h"

#include <fmt/format.h>

#include <span>

#include "compiler/passes/CollectiveStaging.h"
#include "ir/Printer.h"

namespace precast {
namespace {

// FNV-1a over 64-bit words.
struct Fingerprint {
  uint64_t h = 1469598103934665603ull;
  void add(uint64_t word) {
    for (int i = 0; i < 8; ++i) {
      h ^= (word >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  }
};

// What the plan says of one value, for its op's comment.
std::string placement(const ir::Function& f, const MemoryPlan& plan,
                      const std::vector<int32_t>& buffer_of, ir::Value v) {
  int32_t b = buffer_of[v.id];
  if (b >= 0) {
    const Buffer& buffer = plan.buffers[static_cast<size_t>(b)];
    std::string where = buffer.offset >= 0
                            ? fmt::format("arena[{}, +{})", buffer.offset, buffer.bytes)
                            : fmt::format("output, {} bytes", buffer.bytes);
    return fmt::format("{} live [{}, {}] {}", where, buffer.start, buffer.end,
                       category_name(buffer.category));
  }
  std::span<const ir::Value> results = f.results();
  for (size_t k = 0; k < results.size(); ++k) {
    if (results[k].id == v.id && f.result_alias(k) >= 0) {
      return fmt::format("in place of donated parameter {}", f.result_alias(k));
    }
  }
  return "no buffer (fused into its users, or shares its operand's)";
}

std::string annotated_function(const ir::Function& f, const MemoryPlan& plan) {
  std::vector<int32_t> buffer_of(f.num_values(), -1);
  for (size_t b = 0; b < plan.buffers.size(); ++b) {
    if (!plan.buffers[b].value.valid()) continue;  // a transient (collective staging)
    buffer_of[plan.buffers[b].value.id] = static_cast<int32_t>(b);
  }
  std::string out = fmt::format(
      "// buffer assignment of @{}: argument {} bytes, output {}, alias {}, temp (arena) {}, "
      "peak live {} at op {}, host temp {}\n// {}\n",
      f.name(), plan.argument_bytes, plan.output_bytes, plan.alias_bytes, plan.temp_bytes,
      plan.peak_live_bytes, plan.peak_position, plan.host_temp_bytes, format_memory_line(plan));
  std::string text = ir::print_function(f);
  size_t op = 0, begin = 0;
  bool in_body = false;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + begin, end - begin);
    out += line;
    bool is_op = in_body && op < f.num_ops() && line.rfind("  return", 0) != 0 && line != "}";
    if (is_op) {
      const ir::Op& o = f.op(static_cast<ir::OpIndex>(op));
      out += "  //";
      for (uint32_t r = 0; r < o.num_results; ++r) {
        out += (r ? "; " : " ") + placement(f, plan, buffer_of, f.result(o, r));
      }
      ++op;
    }
    in_body = true;
    out += "\n";
    begin = end + 1;
  }
  return out;
}

}  // namespace

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

BufferOptions buffer_options(const ir::Function& f, const BufferPlanSettings& settings) {
  BufferOptions options;
  options.stacked_layer_gradients = settings.stacked_layer_gradients;
  options.scan_layers_per_block = settings.scan_layers_per_block;
  options.scanned_layers = settings.scanned_layers;
  options.xla = settings.xla;
  options.host_values = offloaded_values(f, settings.offloaded_checkpoints);
  if (settings.collective_staging) {
    for (const CollectiveStaging& staging : collective_staging(f)) {
      options.transients.push_back(
          {static_cast<int32_t>(staging.op), staging.bytes, MemoryCategory::kCollectives});
    }
  }
  return options;
}

uint64_t function_fingerprint(const ir::Function& f) {
  Fingerprint fp;
  fp.add(f.num_values());
  fp.add(f.num_ops());
  for (size_t i = 0; i < f.params().size(); ++i) {
    fp.add(f.type_id(f.params()[i]));
    fp.add(static_cast<uint64_t>(f.param_role(i)));
  }
  for (const ir::Op& op : f.ops()) {
    fp.add(static_cast<uint64_t>(op.kind));
    fp.add(static_cast<uint64_t>(op.facts.phase));
    fp.add(static_cast<uint64_t>(op.facts.region));
    fp.add(static_cast<uint64_t>(static_cast<int64_t>(op.facts.layer)));
    fp.add(op.attrs);
    fp.add(op.scope);
    fp.add(op.checkpoint);
    fp.add(op.result_begin);
    for (uint32_t r = 0; r < op.num_results; ++r) fp.add(f.type_id(f.result(op, r)));
    for (ir::Value v : f.operands(op)) fp.add(v.id);
  }
  for (size_t k = 0; k < f.results().size(); ++k) {
    fp.add(f.results()[k].id);
    fp.add(static_cast<uint64_t>(static_cast<int64_t>(f.result_alias(k))));
  }
  return fp.h;
}

ir::Pass assign_buffers_pass(AssignBuffersPassOptions options) {
  if (!options.cache) options.cache = std::make_shared<PlanCache>();
  std::string summary = fmt::format(
      "plan @{}'s buffers (temp arena offsets, live ranges, donation); dumped as comments",
      options.function);
  auto plan_of = [options](const ir::Module& module) -> const MemoryPlan* {
    const ir::Function* f = module.find_function(options.function);
    if (f == nullptr) return nullptr;
    uint64_t fingerprint = function_fingerprint(*f);
    PlanCache& cache = *options.cache;
    if (!cache.valid || cache.fingerprint != fingerprint) {
      cache.plan = plan_memory(*f, buffer_options(*f, options.settings));
      cache.fingerprint = fingerprint;
      cache.valid = true;
    }
    return &cache.plan;
  };
  return ir::Pass(
      "assign-buffers", std::move(summary),
      [plan_of, function = options.function](ir::Module& module) -> Expected<bool> {
        PRECAST_RETURN_IF_ERROR(ir::function_for_pass(module, "assign-buffers", function));
        plan_of(module);
        return false;
      },
      [plan_of, function = options.function](const ir::Module& module) -> std::string {
        const MemoryPlan* plan = plan_of(module);
        if (plan == nullptr) return ir::print_module(module);
        return buffer_assignment_text(module, function, *plan);
      });
}

std::string buffer_assignment_text(const ir::Module& module, const std::string& function,
                                   const MemoryPlan& plan) {
  std::string out;
  for (size_t i = 0; i < module.num_functions(); ++i) {
    const ir::Function& f = module.function(i);
    if (i > 0) out += "\n";
    out += f.name() == function ? annotated_function(f, plan) : ir::print_function(f);
  }
  return out;
}

}  // namespace precast
