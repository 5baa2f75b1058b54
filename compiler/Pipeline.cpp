#include "compiler/Pipeline.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <regex>

#include "compiler/analysis/TpuLayout.h"
#include "compiler/analysis/XlaTempOverhead.h"
#include "compiler/config/RematPolicies.h"
#include "compiler/frontend/Frontend.h"
#include "compiler/passes/AssignBuffers.h"
#include "compiler/passes/PropagateSharding.h"
#include "compiler/passes/Schedule.h"
#include "compiler/passes/SpmdPartition.h"
#include "compiler/passes/WidenContractions.h"
#include "ir/passes/IrPasses.h"

namespace precast {
namespace {

Expected<ir::DType> dtype_of(std::string_view key, const std::string& value) {
  if (value == "float32") return ir::DType::kF32;
  if (value == "bfloat16") return ir::DType::kBF16;
  if (value == "float16") return ir::DType::kF16;
  return usage_error(
      fmt::format("{}='{}' is not supported; use float32, bfloat16 or float16", key, value));
}

// What MaxText's train state and step hold beyond Precast's step, on a TPU (XLA's dumps of
// MaxText 0.2.5's steps, benchmarks/xla_reference): the Flax NNX RNG streams params, dropout and
// aqt, each a key u32[4] and a count u32[], at the decoder and in every decoder block (stacked
// [blocks, 4] and [blocks] when the layers are scanned; gemma2's (local, global) block has one
// set, and so, by the same rule, do gemma3's and olmo3's scanned blocks of 6 and 4 layers and
// gemma3's unscanned remainder block — not yet checked against an XLA dump); the optimizer's step
// (u32[]) and the schedule's count (s32[]) besides Adam's; and eleven scalar metrics where Precast
// returns eight.
XlaStepAccounting xla_step_accounting(const ModelSpec& spec, const Topology& topology,
                                      const std::string& opt_type) {
  constexpr int64_t kStreams = 3;  // params, dropout, aqt
  constexpr int64_t kMaxTextMetrics = 11;
  auto bytes = [](std::vector<int64_t> dims) {
    return tpu_buffer_bytes(ir::TensorType{ir::DType::kU32, std::move(dims)});
  };
  XlaStepAccounting xla;
  xla.enabled = true;
  xla.trailing_constant_params = autodiff::kNumRunTimeScalars;
  frontend::ScanLayout scan = frontend::scan_layout(spec);
  int64_t blocks = spec.scan_layers ? scan.blocks() : spec.num_decoder_layers;
  int64_t scanned_modules = spec.scan_layers && blocks > 0 ? 1 : 0;
  int64_t unscanned_modules =
      spec.scan_layers ? (spec.num_decoder_layers > scan.scanned_layers ? 1 : 0) : blocks;
  int64_t per_layer = scanned_modules * (bytes({blocks, 4}) + bytes({blocks})) +
                      unscanned_modules * (bytes({4}) + bytes({}));
  // optax's adamw chain keeps a count in Adam's state and one in the schedule's; MaxText's
  // adam_pax keeps only its own (Precast's count).
  int64_t counts = opt_type == "adam_pax" ? 0 : 1;
  xla.extra_state_bytes = kStreams * (bytes({4}) + bytes({})) + kStreams * per_layer +
                          bytes({}) /* step */ + counts * bytes({});
  xla.extra_output_bytes =
      (kMaxTextMetrics - static_cast<int64_t>(autodiff::kNumMetrics)) * kTpuMinAllocationBytes;
  // The tuple's address table: 8 bytes an element on v4 and v5e, 4 on v5p, v6e and tpu7x, in
  // granules of 8 (62 elements: 512 and 256 bytes in the dumps; gemma2-2b's 98: 416).
  int64_t modules = scanned_modules + unscanned_modules;
  xla.extra_state_arrays = 2 * kStreams * (1 + modules) + 1 + counts;
  xla.metrics = kMaxTextMetrics;
  xla.pointer_bytes = topology.generation == "v4" || topology.generation == "v5e" ? 8 : 4;
  xla.attention_scores = spec.attention.kernel == "dot_product";
  return xla;
}

BufferPlanSettings plan_settings(const Config& config, const Topology& topology,
                                 const autodiff::RematPolicy& remat, const ModelSpec& spec) {
  BufferPlanSettings settings;
  for (const auto& [name, placement] : remat.names) {
    if (placement == autodiff::Placement::kOffload) settings.offloaded_checkpoints.insert(name);
  }
  settings.stacked_layer_gradients = config.get_bool("scan_layers") && topology.platform != "cpu";
  frontend::ScanLayout scan = frontend::scan_layout(spec);
  settings.scan_layers_per_block = scan.layers_per_block;
  settings.scanned_layers = scan.scanned_layers;
  if (topology.platform == "tpu") {
    settings.xla = xla_step_accounting(spec, topology, config.get_string("opt_type"));
    // On a TPU the plan is of XLA's arena (the output head recomputed in the backward fusions,
    // the kept bf16 weight copies, ...); memory_analysis()'s temp adds the on-chip arenas and
    // the estimated extra to it after the plan (run_pipeline), which --xla-arena leaves out.
    settings.xla.model_arena = true;
  }
  settings.collective_staging = topology.platform == "cpu";
  return settings;
}

// "a,b" or "a+b" -> {a, b}.
std::set<std::string> name_set(const std::string& text) {
  std::set<std::string> out;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find_first_of(",+", begin);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(begin, end - begin);
    if (!item.empty()) out.insert(item);
    begin = end + 1;
  }
  return out;
}

Expected<BufferPlanSettings> settings_from_options(std::string_view pass,
                                                   const ir::PassOptions& options) {
  BufferPlanSettings settings;
  settings.offloaded_checkpoints = name_set(options.get_string("offload", ""));
  PRECAST_ASSIGN_OR_RETURN(settings.stacked_layer_gradients,
                           options.get_bool(pass, "stacked-gradients", false));
  PRECAST_ASSIGN_OR_RETURN(settings.collective_staging,
                           options.get_bool(pass, "collective-staging", false));
  return settings;
}

// The pass's required mesh option, "fsdp:2,tensor:2", over the mesh axes of `defaults` (the
// others 1).
Expected<Mesh> mesh_from_options(std::string_view pass, const ir::PassOptions& options,
                                 const CompilerPassDefaults& defaults) {
  std::optional<std::string> mesh_text = options.get("mesh");
  if (!mesh_text) {
    return usage_error(
        fmt::format("{} needs mesh=AXIS:N,... (e.g. {{mesh=fsdp:2,tensor:2}})", pass));
  }
  const std::string& text = *mesh_text;
  MeshRequest request;
  request.axes = defaults.mesh_axes;
  request.ici.assign(request.axes.size(), 1);
  request.dcn.assign(request.axes.size(), 1);
  int64_t devices = 1;
  for (const std::string& item : name_set(text)) {
    size_t colon = item.find(':');
    std::string axis = item.substr(0, colon);
    auto it = std::find(request.axes.begin(), request.axes.end(), axis);
    int64_t size = 0;
    if (colon != std::string::npos) size = std::atoll(item.c_str() + colon + 1);
    if (it == request.axes.end() || size < 1) {
      return usage_error(fmt::format(
          "pass '{}': mesh item '{}' is not AXIS:SIZE with AXIS one of {} and SIZE >= 1", pass, item,
          fmt::join(request.axes, ", ")));
    }
    request.ici[static_cast<size_t>(it - request.axes.begin())] = size;
    devices *= size;
  }
  request.num_devices = devices;
  return build_mesh(request);
}

}  // namespace

Expected<BufferPlanSettings> buffer_plan_settings(const Config& config, const Topology& topology) {
  PRECAST_ASSIGN_OR_RETURN(ModelSpec spec, model_spec_from_config(config));
  PRECAST_ASSIGN_OR_RETURN(autodiff::RematPolicy remat, remat_policy_from_config(config));
  return plan_settings(config, topology, remat, spec);
}

Expected<autodiff::RematPolicy> remat_policy_from_config(const Config& config) {
  std::map<std::string, std::string> custom;
  const std::string& name = config.get_string("remat_policy");
  if (name == "custom") {
    std::vector<std::string_view> keys(std::begin(kCustomRematNames), std::end(kCustomRematNames));
    keys.push_back(kRematLayerInput);
    for (std::string_view key : keys) {
      if (config.has(std::string(key)))
        custom[std::string(key)] = config.get_string(std::string(key));
    }
  }
  return autodiff::remat_policy(name, custom);
}

Expected<autodiff::TrainStepSpec> train_step_spec(const Config& config, const ModelSpec& spec,
                                                  const BatchSpec& batch,
                                                  const std::vector<frontend::WeightInfo>& weights,
                                                  std::optional<ir::DType> dtype_override) {
  autodiff::TrainStepSpec step;
  PRECAST_ASSIGN_OR_RETURN(step.optimizer,
                           autodiff::optimizer_from_name(config.get_string("opt_type")));
  if (dtype_override) {
    step.mu_dtype = step.grad_dtype = *dtype_override;
  } else {
    std::string mu = spec.mu_dtype.empty() ? spec.weight_dtype : spec.mu_dtype;
    PRECAST_ASSIGN_OR_RETURN(step.mu_dtype, dtype_of("mu_dtype", mu));
    PRECAST_ASSIGN_OR_RETURN(step.grad_dtype, dtype_of("grad_dtype", spec.grad_dtype));
  }
  step.gradient_accumulation_steps = batch.gradient_accumulation_steps;
  std::vector<std::regex> masks;
  for (const std::string& pattern : config.get_string_list("adamw_mask")) {
    try {
      masks.emplace_back(pattern);
    } catch (const std::regex_error& e) {
      return usage_error(
          fmt::format("adamw_mask: '{}' is not a valid regular expression ({}); fix or remove it",
                      pattern, e.what()));
    }
  }
  for (const frontend::WeightInfo& w : weights) {
    std::string path = w.name;
    std::replace(path.begin(), path.end(), '.', '/');
    bool excluded = std::any_of(masks.begin(), masks.end(),
                                [&](const std::regex& r) { return std::regex_search(path, r); });
    step.weight_decay.push_back(!excluded);
  }
  return step;
}

std::vector<std::string> pipeline_stages(const Topology& topology, const PipelineOptions& options) {
  std::vector<std::string> stages = {"lower-forward",      "add-init", "train-step",
                                     autodiff::kRematPass, "simplify", "cse",
                                     "dce",                "propagate-sharding", "spmd-partition"};
  if (topology.platform == "cpu") stages.push_back("widen-contractions");
  if (options.schedule) stages.push_back("schedule");
  stages.push_back("assign-buffers");
  return stages;
}

Expected<TrainProgram> run_pipeline(const Config& config, const Topology& topology,
                                    const Mesh& mesh, const PipelineOptions& options) {
  std::vector<std::string> stages = pipeline_stages(topology, options);
  if (!options.stop_after.empty() &&
      std::find(stages.begin(), stages.end(), options.stop_after) == stages.end()) {
    return usage_error(fmt::format("--stop-after={}: not a stage of this pipeline; its stages: {}",
                                   options.stop_after, fmt::join(stages, ", ")));
  }
  PRECAST_ASSIGN_OR_RETURN(ModelSpec spec, model_spec_from_config(config));
  BatchSpec batch = batch_spec_from_config(config);
  TrainProgram program;
  PRECAST_ASSIGN_OR_RETURN(program.remat, remat_policy_from_config(config));
  PRECAST_ASSIGN_OR_RETURN(std::vector<AxisRule> rules, axis_rules_from_config(config));
  BufferPlanSettings settings = plan_settings(config, topology, program.remat, spec);
  if (options.xla_arena && !settings.xla.enabled) {
    return usage_error(fmt::format(
        "--xla-arena plans XLA's TPU arena; compile_topology={} is a {} target, whose plan is "
        "what its backend allocates: name a TPU topology (e.g. compile_topology=v6e-32) or drop "
        "--xla-arena",
        topology.name, topology.platform));
  }
  auto plans = std::make_shared<PlanCache>();
  int64_t rows = batch.micro_batch_size_to_train_on;

  // The stages, each an ir::Pass. The first three build the module: the frontend's forward (it
  // replaces the empty module), its initializer, the train step.
  std::map<std::string, ir::Pass> by_name;
  auto add = [&by_name](ir::Pass pass) { by_name.emplace(pass.name, std::move(pass)); };
  add(ir::Pass("lower-forward", "the frontend: ModelSpec -> @forward",
               [&](ir::Module& module) -> Expected<bool> {
                 frontend::ForwardOptions forward;
                 forward.dtype_override = options.dtype_override;
                 forward.loss_sums = true;
                 forward.batch_rows = rows;
                 PRECAST_ASSIGN_OR_RETURN(
                     frontend::ForwardModel model,
                     frontend::lower_forward(spec, rows, batch.max_target_length, forward));
                 module = std::move(model.module);
                 program.weights = std::move(model.weights);
                 return true;
               }));
  add(ir::Pass("add-init", "@init: every weight drawn from init_weights_seed",
               [&](ir::Module& module) -> Expected<bool> {
                 frontend::ForwardModel model{std::move(module), program.weights, rows,
                                              batch.max_target_length};
                 Status status = frontend::add_init_function(model);
                 module = std::move(model.module);
                 PRECAST_RETURN_IF_ERROR(status);
                 return true;
               }));
  add(ir::Pass(
      "train-step", "@train_step: forward, backward, loss normalisation, optimizer",
      [&](ir::Module& module) -> Expected<bool> {
        PRECAST_ASSIGN_OR_RETURN(program.step, train_step_spec(config, spec, batch, program.weights,
                                                               options.dtype_override));
        PRECAST_ASSIGN_OR_RETURN(program.layout,
                                 autodiff::add_train_step(module, module.function(0),
                                                          program.weights.size(), program.step));
        return true;
      }));
  add(autodiff::remat_pass(program.remat));
  ir::PassRegistry ir_passes;
  PRECAST_RETURN_IF_ERROR(ir::register_ir_passes(ir_passes));
  for (const char* name : {"simplify", "cse", "dce"}) {
    PRECAST_ASSIGN_OR_RETURN(ir::Pass pass, ir_passes.lookup(name));
    add(std::move(pass));
  }
  PropagateShardingPassOptions propagate{rules, mesh, "train_step", {}};
  propagate.sharding.shard_optimizer_over_data = config.get_bool("shard_optimizer_over_data");
  add(propagate_sharding_pass(std::move(propagate)));
  SpmdPartitionPassOptions partition;
  partition.rules = rules;
  partition.mesh = mesh;
  partition.partition.ring_attention = config.get_string("context_parallel_strategy") == "ring";
  partition.partition.ragged_expert_dispatch = topology.platform != "cpu";
  add(spmd_partition_pass(std::move(partition)));
  add(widen_contractions_pass());
  SchedulePassOptions schedule;
  schedule.settings = settings;
  schedule.cache = plans;
  add(schedule_pass(std::move(schedule)));
  add(assign_buffers_pass({settings, "train_step", plans}));

  ir::PassManagerOptions manager_options;
  manager_options.verify_each = options.verify_each;
  manager_options.dump_dir = options.dump_dir;
  manager_options.dump_after = options.dump_after;
  manager_options.after_each = [&program](const ir::PassTiming& stage,
                                          const ir::Module& module) -> Status {
    if (stage.name != autodiff::kRematPass) return Status::success();
    const ir::Function* step = module.find_function("train_step");
    if (step == nullptr) return internal_error("the remat stage left no @train_step");
    program.global_counts = count_function(*step);
    program.global_step_ops = step->num_ops();
    return Status::success();
  };
  PRECAST_ASSIGN_OR_RETURN(ir::PassManager manager, ir::PassManager::create(manager_options));
  for (const std::string& stage : stages) {
    manager.add(by_name.at(stage));
    if (stage == options.stop_after) break;
  }
  PRECAST_RETURN_IF_ERROR(manager.run(program.module));

  program.stages = manager.timings();
  program.timing_report = manager.timing_report();
  program.layout.function = program.module.find_function("train_step");
  if (program.layout.function != nullptr && plans->valid &&
      plans->fingerprint == function_fingerprint(*program.layout.function) &&
      program.stages.back().name == "assign-buffers") {
    program.plan = std::move(plans->plan);
    if (settings.xla.enabled) {
      // memory_analysis()'s temp: the arena + the on-chip arenas + the estimated extra, which
      // grows with the tokens one device holds per layer (XlaTempOverhead.h).
      int64_t tokens = batch.micro_batch_size_to_train_on * batch.max_target_length /
                       std::max<int64_t>(mesh.num_devices, 1);
      add_xla_temp_overheads(*program.plan, topology.generation, spec.num_decoder_layers, tokens,
                             spec.emb_dim, !options.xla_arena);
    }
  }
  return program;
}

Status register_compiler_passes(ir::PassRegistry& registry, const CompilerPassDefaults& defaults) {
  PRECAST_RETURN_IF_ERROR(registry.add_factory(
      autodiff::kRematPass,
      "{policy=NAME (default full), func=train_step; with policy=custom, query_proj=device|"
      "offload|remat, ...}: recompute what the remat policy does not keep",
      [](const ir::PassOptions& options) -> Expected<ir::Pass> {
        std::vector<std::string_view> known = {"policy", "func", kRematLayerInput};
        known.insert(known.end(), std::begin(kCustomRematNames), std::end(kCustomRematNames));
        PRECAST_RETURN_IF_ERROR(options.check_known(autodiff::kRematPass, known));
        std::map<std::string, std::string> custom;
        for (const auto& [key, value] : options.values()) {
          if (key != "policy" && key != "func") custom[key] = value;
        }
        PRECAST_ASSIGN_OR_RETURN(
            autodiff::RematPolicy policy,
            autodiff::remat_policy(options.get_string("policy", "full"), custom));
        return autodiff::remat_pass(std::move(policy), options.get_string("func", "train_step"));
      }));
  PRECAST_RETURN_IF_ERROR(registry.add_factory(
      "propagate-sharding",
      "{mesh=AXIS:N,... (required), func=train_step}: annotate every value with its sharding on "
      "that mesh (MaxText's default logical_axis_rules)",
      [defaults](const ir::PassOptions& options) -> Expected<ir::Pass> {
        PRECAST_RETURN_IF_ERROR(options.check_known("propagate-sharding", {"mesh", "func"}));
        PropagateShardingPassOptions propagate;
        PRECAST_ASSIGN_OR_RETURN(propagate.mesh,
                                 mesh_from_options("propagate-sharding", options, defaults));
        propagate.rules = defaults.rules;
        propagate.function = options.get_string("func", "train_step");
        return propagate_sharding_pass(std::move(propagate));
      }));
  PRECAST_RETURN_IF_ERROR(registry.add_factory(
      "spmd-partition",
      "{mesh=AXIS:N,... (required), strategy=all_gather|ring, func=train_step}: the per-device "
      "program on that mesh, from propagate-sharding's annotations (or, without them, MaxText's "
      "default logical_axis_rules)",
      [defaults](const ir::PassOptions& options) -> Expected<ir::Pass> {
        PRECAST_RETURN_IF_ERROR(
            options.check_known("spmd-partition", {"mesh", "strategy", "func"}));
        SpmdPartitionPassOptions partition;
        PRECAST_ASSIGN_OR_RETURN(partition.mesh,
                                 mesh_from_options("spmd-partition", options, defaults));
        partition.rules = defaults.rules;
        std::string strategy = options.get_string("strategy", "all_gather");
        if (strategy != "all_gather" && strategy != "ring") {
          return usage_error(
              fmt::format("spmd-partition: strategy='{}' is not all_gather or ring", strategy));
        }
        partition.partition.ring_attention = strategy == "ring";
        partition.function = options.get_string("func", "train_step");
        return spmd_partition_pass(std::move(partition));
      }));
  PRECAST_RETURN_IF_ERROR(registry.add_factory(
      "widen-contractions",
      "{func=train_step}: CPU legalisation, bf16/f16 dot_general and attention in f32",
      [](const ir::PassOptions& options) -> Expected<ir::Pass> {
        PRECAST_RETURN_IF_ERROR(options.check_known("widen-contractions", {"func"}));
        return widen_contractions_pass(options.get_string("func", "train_step"));
      }));
  PRECAST_RETURN_IF_ERROR(registry.add_factory(
      "schedule",
      "{window=N (default 32, 0 = unbounded), offload=NAME+..., stacked-gradients=bool, "
      "collective-staging=bool, func=train_step}: memory-aware order, kept when the temp bytes "
      "drop",
      [](const ir::PassOptions& options) -> Expected<ir::Pass> {
        PRECAST_RETURN_IF_ERROR(options.check_known(
            "schedule", {"window", "offload", "stacked-gradients", "collective-staging", "func"}));
        SchedulePassOptions schedule;
        PRECAST_ASSIGN_OR_RETURN(schedule.settings, settings_from_options("schedule", options));
        PRECAST_ASSIGN_OR_RETURN(int64_t window,
                                 options.get_int("schedule", "window", kDefaultScheduleWindow));
        if (window < 0 || window > UINT32_MAX) {
          return usage_error(fmt::format("pass 'schedule': window={} must be >= 0", window));
        }
        schedule.windows = {static_cast<uint32_t>(window)};
        schedule.function = options.get_string("func", "train_step");
        return schedule_pass(std::move(schedule));
      }));
  PRECAST_RETURN_IF_ERROR(registry.add_factory(
      "assign-buffers",
      "{offload=NAME+..., stacked-gradients=bool, collective-staging=bool, func=train_step}: the "
      "buffer plan, dumped as one comment per op",
      [](const ir::PassOptions& options) -> Expected<ir::Pass> {
        PRECAST_RETURN_IF_ERROR(options.check_known(
            "assign-buffers", {"offload", "stacked-gradients", "collective-staging", "func"}));
        AssignBuffersPassOptions assign;
        PRECAST_ASSIGN_OR_RETURN(assign.settings, settings_from_options("assign-buffers", options));
        assign.function = options.get_string("func", "train_step");
        return assign_buffers_pass(std::move(assign));
      }));
  return Status::success();
}

}  // namespace precast
