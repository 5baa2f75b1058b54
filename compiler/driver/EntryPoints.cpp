#include "compiler/driver/EntryPoints.h"

#include <fmt/format.h>

#include <fstream>
#include <map>
#include <system_error>

#include "compiler/Pipeline.h"
#include "compiler/analysis/Sharding.h"
#include "compiler/artifact/ArtifactText.h"
#include "compiler/driver/Compile.h"
#include "compiler/frontend/Frontend.h"
#include "compiler/passes/AssignBuffers.h"
#include "compiler/passes/PropagateSharding.h"
#include "compiler/passes/Schedule.h"
#include "compiler/passes/SpmdPartition.h"
#include "compiler/passes/WidenContractions.h"
#include "ir/PassManager.h"
#include "ir/Printer.h"
#include "ir/passes/IrPasses.h"

namespace precast {
namespace {

constexpr std::string_view kForward = "forward";

// The frontend's @forward of `rows` rows (loss sums; logits too for sampling), then the train
// step's clean-up, sharding, partition, CPU legalisation, schedule and plan stages on it.
Status lower_and_plan(ir::Module& module, std::vector<frontend::WeightInfo>& weights,
                      const ResolvedConfig& resolved, int64_t rows, bool logits,
                      std::shared_ptr<PlanCache> plans) {
  const Config& config = resolved.config;
  PRECAST_ASSIGN_OR_RETURN(ModelSpec spec, model_spec_from_config(config));
  BatchSpec batch = batch_spec_from_config(config);
  frontend::ForwardOptions forward;
  forward.loss_sums = true;
  forward.return_logits = logits;
  forward.routed_bias_updates = false;
  forward.batch_rows = rows;
  PRECAST_ASSIGN_OR_RETURN(frontend::ForwardModel model,
                           frontend::lower_forward(spec, rows, batch.max_target_length, forward));
  module = std::move(model.module);
  weights = std::move(model.weights);

  PRECAST_ASSIGN_OR_RETURN(std::vector<AxisRule> rules, axis_rules_from_config(config));
  PRECAST_ASSIGN_OR_RETURN(BufferPlanSettings settings,
                           buffer_plan_settings(config, resolved.topology));
  const std::string function(kForward);
  ir::PassRegistry ir_passes;
  PRECAST_RETURN_IF_ERROR(ir::register_ir_passes(ir_passes));
  PRECAST_ASSIGN_OR_RETURN(ir::PassManager manager, ir::PassManager::create({}));
  for (const char* name : {"simplify", "cse", "dce"}) {
    PRECAST_ASSIGN_OR_RETURN(ir::Pass pass, ir_passes.lookup(name));
    manager.add(std::move(pass));
  }
  // No optimizer state here, so shard_optimizer_over_data changes nothing: the weights are
  // sharded as in the train step either way.
  PropagateShardingPassOptions propagate;
  propagate.rules = rules;
  propagate.mesh = resolved.mesh;
  propagate.function = function;
  manager.add(propagate_sharding_pass(std::move(propagate)));
  SpmdPartitionPassOptions partition;
  partition.rules = rules;
  partition.mesh = resolved.mesh;
  partition.partition.ring_attention = config.get_string("context_parallel_strategy") == "ring";
  partition.partition.ragged_expert_dispatch = resolved.topology.platform != "cpu";
  partition.function = function;
  manager.add(spmd_partition_pass(std::move(partition)));
  if (resolved.topology.platform == "cpu") manager.add(widen_contractions_pass(function));
  SchedulePassOptions schedule;
  schedule.settings = settings;
  schedule.function = function;
  schedule.cache = plans;
  manager.add(schedule_pass(std::move(schedule)));
  manager.add(assign_buffers_pass({settings, function, plans}));
  return manager.run(module);
}

artifact::Signature signature_of(const ir::Function& f, size_t num_weights, bool logits) {
  artifact::Signature s;
  for (size_t i = 0; i < f.params().size(); ++i) {
    ir::Value p = f.params()[i];
    s.inputs.push_back(tensor_of(f, p, std::string(f.value_name(p)),
                                 i < num_weights ? "parameter" : "batch"));
  }
  for (size_t k = 0; k < f.results().size(); ++k) {
    // Past the sums: the logits and (MoE with load_balance_loss_weight) moe_lb_loss, by name.
    std::string_view own = f.value_name(f.results()[k]);
    std::string name = k < std::size(kEvalOutputs) ? kEvalOutputs[k]
                       : !own.empty()              ? std::string(own)
                       : logits                    ? "logits"
                                                   : fmt::format("result_{}", k);
    s.outputs.push_back(tensor_of(f, f.results()[k], std::move(name), "metric"));
  }
  return s;
}

}  // namespace

std::vector<std::string_view> requested_entry_points(const Config& config) {
  std::vector<std::string_view> names;
  if (config.has("eval_interval") && config.get_int("eval_interval") > 0) {
    names.push_back(artifact::kEvalStepEntry);
  }
  if (config.has("sample_tokens") && config.get_int("sample_tokens") > 0) {
    names.push_back(artifact::kSampleStepEntry);
  }
  return names;
}

Expected<artifact::EntryPoint> compile_entry_point(std::string_view name,
                                                   const ResolvedConfig& resolved,
                                                   const backend::CodeGenOptions* options) {
  const Config& config = resolved.config;
  const bool sample = name == artifact::kSampleStepEntry;
  // Sampling on several devices: one row per device (the batch dimension divides over whatever
  // axes shard it), every row the same prompt, so each device computes the logits of the row
  // whatever its piece; the runtime takes the argmax over the devices' pieces (Sampler.h).
  int64_t rows =
      sample ? resolved.mesh.num_devices : config.get_int("micro_batch_size_to_eval_on");
  if (rows < 1) {
    return usage_error(fmt::format(
        "eval_per_device_batch_size={} gives {} eval rows on {} devices; give at least one row",
        config.get_float("eval_per_device_batch_size"), rows, resolved.mesh.num_devices));
  }
  ir::Module module;
  std::vector<frontend::WeightInfo> weights;
  auto plans = std::make_shared<PlanCache>();
  PRECAST_RETURN_IF_ERROR(lower_and_plan(module, weights, resolved, rows, sample, plans));
  const ir::Function* f = module.find_function(std::string(kForward));
  if (f == nullptr || !plans->valid || plans->fingerprint != function_fingerprint(*f)) {
    return internal_error(fmt::format("entry point {}: the passes left no planned @forward", name));
  }
  artifact::EntryPoint entry;
  entry.name = std::string(name);
  entry.signature = signature_of(*f, weights.size(), sample);
  entry.plan = plan_of(*f, plans->plan);
  entry.ir_text = ir::print_function(*f);
  if (options != nullptr) {
    PRECAST_ASSIGN_OR_RETURN(backend::CompiledStep compiled,
                             backend::generate_step(*f, plans->plan, *options));
    entry.program = program_of(compiled);
    entry.object_code.assign(compiled.object.begin(), compiled.object.end());
  }
  return entry;
}

backend::CodeGenOptions code_gen_options(const ResolvedConfig& resolved) {
  backend::CodeGenOptions options;
  options.target.triple = resolved.config.get_string("target_triple");
  options.target.cpu = resolved.config.get_string("target_cpu");
  for (size_t i = 0; i < resolved.mesh.axes.size(); ++i) {
    options.mesh.emplace_back(resolved.mesh.axes[i], resolved.mesh.shape[i]);
  }
  return options;
}

Expected<std::vector<DumpedEntryPoint>> dump_entry_points(const ResolvedConfig& resolved,
                                                          const std::filesystem::path& dir) {
  std::vector<DumpedEntryPoint> out;
  const bool cpu = resolved.topology.platform == "cpu";
  const backend::CodeGenOptions options = code_gen_options(resolved);
  for (std::string_view name : requested_entry_points(resolved.config)) {
    PRECAST_ASSIGN_OR_RETURN(artifact::EntryPoint entry,
                             compile_entry_point(name, resolved, cpu ? &options : nullptr));
    DumpedEntryPoint dumped;
    dumped.file = dir / (std::string(name) + ".ir");
    std::string text = entry.ir_text;
    if (!text.empty() && text.back() != '\n') text += '\n';
    // Written whole under a temporary name, then renamed: never a half-written file.
    std::filesystem::path temporary = dumped.file;
    temporary += ".tmp";
    {
      std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
      file << text;
      file.flush();
      if (!file) {
        return Error(ExitCode::kFailure,
                     fmt::format("cannot write {}; check that the dump directory is writable",
                                 temporary.string()));
      }
    }
    std::error_code ec;
    std::filesystem::rename(temporary, dumped.file, ec);
    if (ec) {
      return Error(ExitCode::kFailure, fmt::format("cannot rename {} to {}: {}", temporary.string(),
                                                   dumped.file.string(), ec.message()));
    }
    dumped.line = fmt::format(
        "entry point {}: inputs {}; outputs {}; arena {} bytes; object code {}", name,
        artifact::count_by_role(entry.signature.inputs),
        artifact::count_by_role(entry.signature.outputs),
        artifact::group_digits(entry.plan.arena_bytes),
        cpu ? artifact::group_digits(static_cast<int64_t>(entry.object_code.size())) + " bytes"
            : std::string("none (precast compile generates code for CPU topologies only)"));
    out.push_back(std::move(dumped));
  }
  return out;
}

}  // namespace precast
