#include "compiler/driver/Dump.h"

#include <fmt/format.h>

#include <optional>
#include <regex>
#include <system_error>

#include "compiler/driver/Analyze.h"
#include "compiler/driver/TrainProgram.h"
#include "compiler/analysis/BufferAssignment.h"
#include "compiler/analysis/Sharding.h"
#include "compiler/frontend/Frontend.h"
#include "compiler/passes/Schedule.h"
#include "compiler/passes/SpmdPartition.h"
#include "ir/Printer.h"
#include "ir/passes/IrPasses.h"

namespace precast {

namespace {

std::optional<size_t> train_step_index(const ir::Module& module) {
  for (size_t i = 0; i < module.num_functions(); ++i) {
    if (module.function(i).name() == "train_step") return i;
  }
  return std::nullopt;
}

// What the plan says of one value, for its op's comment.
std::string placement(const ir::Function& f, const MemoryPlan& plan,
                      const std::vector<int32_t>& buffer_of, ir::Value v) {
  int32_t b = buffer_of[v.id];
  if (b >= 0) {
    const Buffer& buffer = plan.buffers[static_cast<size_t>(b)];
    std::string where = buffer.offset >= 0 ? fmt::format("arena[{}, +{})", buffer.offset, buffer.bytes)
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

}  // namespace

std::string buffer_assignment_text(const ir::Module& module) {
  std::string out;
  for (size_t i = 0; i < module.num_functions(); ++i) {
    const ir::Function& f = module.function(i);
    MemoryPlan plan = plan_memory(f);
    std::vector<int32_t> buffer_of(f.num_values(), -1);
    for (size_t b = 0; b < plan.buffers.size(); ++b) {
      buffer_of[plan.buffers[b].value.id] = static_cast<int32_t>(b);
    }
    if (i > 0) out += "\n";
    out += fmt::format(
        "// buffer assignment of @{}: argument {} bytes, output {}, alias {}, temp (arena) {}, "
        "peak live {} at op {}\n// {}\n",
        f.name(), plan.argument_bytes, plan.output_bytes, plan.alias_bytes, plan.temp_bytes,
        plan.peak_live_bytes, plan.peak_position, format_memory_line(plan));
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
  }
  return out;
}

Expected<ir::PassRegistry> dump_pass_registry(const DumpPassContext& context) {
  ir::PassRegistry registry;
  PRECAST_RETURN_IF_ERROR(ir::register_ir_passes(registry));
  PRECAST_RETURN_IF_ERROR(registry.add(ir::Pass{
      "schedule",
      "reorder @train_step to lower its buffer plan's peak (kept only when temp bytes drop)",
      [](ir::Module& module) -> Expected<bool> {
        std::optional<size_t> index = train_step_index(module);
        if (!index) return false;
        PRECAST_ASSIGN_OR_RETURN(ScheduleResult result, schedule_for_memory(module, *index));
        return result.changed;
      },
      nullptr}));
  if (context.config != nullptr && context.mesh != nullptr) {
    PRECAST_ASSIGN_OR_RETURN(std::vector<AxisRule> rules, axis_rules_from_config(*context.config));
    Mesh mesh = *context.mesh;
    PartitionOptions partition;
    partition.ring_attention = context.config->get_string("context_parallel_strategy") == "ring";
    PRECAST_RETURN_IF_ERROR(registry.add(ir::Pass{
        "spmd-partition",
        "partition @train_step for the mesh: per-device shapes and explicit collectives",
        [rules, mesh, partition](ir::Module& module) -> Expected<bool> {
          std::optional<size_t> index = train_step_index(module);
          if (!index) return usage_error("spmd-partition needs @train_step in the module");
          PRECAST_RETURN_IF_ERROR(partition_spmd_in_place(module, *index, rules, mesh, partition));
          return mesh.num_devices > 1;
        },
        nullptr}));
    PRECAST_RETURN_IF_ERROR(registry.add(ir::Pass{
        "assign-buffers",
        "plan every function's buffers (dumped as comments: offset, bytes, live range)",
        [](ir::Module&) -> Expected<bool> { return false; }, buffer_assignment_text}));
  }
  if (context.remat != nullptr) {
    autodiff::RematPolicy policy = *context.remat;
    PRECAST_RETURN_IF_ERROR(registry.add(ir::Pass{
        "remat", "apply the config's remat_policy to @train_step (recompute clones, offload)",
        [policy](ir::Module& module) -> Expected<bool> {
          for (size_t i = 0; i < module.num_functions(); ++i) {
            if (module.function(i).name() != "train_step") continue;
            PRECAST_ASSIGN_OR_RETURN(autodiff::RematResult result,
                                     autodiff::apply_remat(module, i, policy));
            return result.recomputed_ops > 0;
          }
          return false;
        },
        nullptr}));
  }
  return registry;
}

Expected<DumpResult> dump_ir(const DumpRequest& request,
                             const std::filesystem::path& topologies_file) {
  if (request.dump_dir.empty()) {
    return usage_error("--dump-ir DIR is required: the directory the IR stages are written to");
  }
  PRECAST_ASSIGN_OR_RETURN(ResolvedConfig resolved,
                           resolve_config(request.config, topologies_file));
  PRECAST_ASSIGN_OR_RETURN(ModelSpec spec, model_spec_from_config(resolved.config));
  BatchSpec batch = batch_spec_from_config(resolved.config);
  // Remat runs as a stage of the pipeline so the dump shows the step before and after it.
  TrainProgramOptions lowering;
  lowering.apply_remat = false;
  PRECAST_ASSIGN_OR_RETURN(TrainProgram program,
                           lower_train_program(resolved.config, spec, batch, lowering));
  frontend::ForwardModel& model = program.model;

  std::error_code ec;
  std::filesystem::create_directories(request.dump_dir, ec);
  if (ec) {
    return Error(ExitCode::kFailure, fmt::format("cannot create the dump directory '{}': {}",
                                                 request.dump_dir, ec.message()));
  }
  ir::PassManagerOptions options;
  options.verify_each = request.verify_each;
  options.dump_dir = request.dump_dir;
  options.dump_after = request.dump_after;
  PRECAST_ASSIGN_OR_RETURN(ir::PassManager manager, ir::PassManager::create(options));
  DumpPassContext context{&program.remat, &resolved.config, &resolved.mesh};
  PRECAST_ASSIGN_OR_RETURN(ir::PassRegistry registry, dump_pass_registry(context));
  PRECAST_RETURN_IF_ERROR(manager.add_pipeline(registry, request.pipeline));
  PRECAST_RETURN_IF_ERROR(manager.run(model.module));

  DumpResult result;
  result.timings = manager.timings();
  result.timing_report = manager.timing_report();
  result.num_ops = model.module.function(0).num_ops();
  // The stages this run wrote (an earlier run's files in the same directory are not listed).
  std::filesystem::path dir(request.dump_dir);
  result.files.push_back(dir / "00-input.ir");
  std::regex filter(request.dump_after.empty() ? std::string(".") : request.dump_after);
  for (size_t i = 0; i < result.timings.size(); ++i) {
    const std::string& name = result.timings[i].name;
    if (std::regex_search(name, filter)) {
      result.files.push_back(dir / fmt::format("{:02}-{}.ir", i + 1, name));
    }
  }
  return result;
}

}  // namespace precast
