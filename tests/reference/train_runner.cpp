// train_runner: the Precast half of the suite's train-step check (tests/reference/). Lowers a
// config's train program (compiler/Pipeline.h, up to its remat stage), draws the weights like
// forward_runner ("init", then the perturbation), starts from a zero optimizer state, and runs "train_step" in the
// reference interpreter for N steps, one packed batch per step (seed + step, so step 0's batch is
// forward_runner's). Writes the starting weights (<name>), every step's batch
// (step<k>.<batch name>), the metrics of every step (out.metrics, [N, 8] in kMetricNames order),
// the final weights and optimizer state (final.<name>, final.mu.<name>, final.nu.<name>,
// final.count), config.txt (the ModelSpec plus the train settings) and manifest.txt, for
// torch_train_reference.py.
//
// The run-time scalars are the config's keys (learning_rate, adam_b1, adam_b2, adam_eps,
// adam_eps_root, adam_weight_decay, gradient_clipping_threshold), rounded to f32 as the step
// takes them; learning_rate is used as a constant (no warmup or decay schedule).
//
// Usage: train_runner OUT_DIR [--dtype f32|f64] [--seed N] [--steps N] CONFIG.yml [key=value ...]
#include <fmt/format.h>

#include <cstdint>
#include <filesystem>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include "compiler/autodiff/TrainStep.h"
#include "compiler/config/ModelSpec.h"
#include "compiler/driver/Analyze.h"
#include "compiler/Pipeline.h"
#include "compiler/frontend/Frontend.h"
#include "ir/Interpreter.h"
#include "tests/reference/RunnerSupport.h"

namespace fs = std::filesystem;

namespace precast {
namespace {

using reference::OutputDirectory;

constexpr const char* kUsage =
    "usage: train_runner OUT_DIR [--dtype f32|f64] [--seed N] [--steps N] CONFIG.yml "
    "[key=value ...]";

using RunnerOptions = reference::RunnerArguments;

Expected<RunnerOptions> parse_command_line(int argc, char** argv) {
  return reference::parse_runner_arguments(argc, argv, /*takes_steps=*/true);
}

std::string_view optimizer_name(autodiff::OptimizerKind kind) {
  switch (kind) {
    case autodiff::OptimizerKind::kAdamW:
      return "adamw";
    case autodiff::OptimizerKind::kAdamPax:
      return "adam_pax";
    case autodiff::OptimizerKind::kSgd:
      return "sgd";
  }
  return "unknown";
}

// The train settings torch_train_reference.py needs, appended to the model's description. The
// scalars are written as the f32 values the step receives, so an f64 reference uses them exactly.
std::string train_description(const TrainProgram& program, const std::vector<double>& scalars,
                              uint32_t steps) {
  std::string out;
  out += fmt::format("optimizer {}\n", optimizer_name(program.step.optimizer));
  out += fmt::format("gradient_accumulation_steps {}\n", program.step.gradient_accumulation_steps);
  out += fmt::format("rows_per_step {}\n", program.layout.rows_per_step);
  out += fmt::format("steps {}\n", steps);
  out += fmt::format("mu_dtype {}\n", ir::dtype_name(program.step.mu_dtype));
  for (size_t i = 0; i < autodiff::kNumRunTimeScalars; ++i)
    out += fmt::format("{} {:.17g}\n", autodiff::kRunTimeScalars[i], scalars[i]);
  std::string metrics, undecayed;
  for (size_t m = 0; m < program.layout.num_metrics; ++m) {
    if (!metrics.empty()) metrics += ",";
    metrics += m < autodiff::kNumMetrics ? autodiff::kMetricNames[m] : autodiff::kMoeLbLossMetric;
  }
  for (size_t i = 0; i < program.weights.size(); ++i) {
    bool decays = program.step.weight_decay.empty() || program.step.weight_decay[i];
    if (decays) continue;
    if (!undecayed.empty()) undecayed += ",";
    undecayed += program.weights[i].name;
  }
  out += fmt::format("metrics {}\n", metrics);
  out += fmt::format("weights_without_decay {}\n", undecayed);
  return out;
}

Status run(const RunnerOptions& options) {
  fs::path topologies = options.config.config_file.parent_path() / "topologies.yml";
  PRECAST_ASSIGN_OR_RETURN(ResolvedConfig resolved, resolve_config(options.config, topologies));
  const Config& config = resolved.config;
  PRECAST_ASSIGN_OR_RETURN(ModelSpec spec, model_spec_from_config(config));
  BatchSpec batch_spec = batch_spec_from_config(config);
  int64_t length = batch_spec.max_target_length;
  if (length < 8) {
    return usage_error(
        fmt::format("max_target_length {} is too short for a packed row (>= 8)", length));
  }
  PipelineOptions program_options;
  program_options.dtype_override = options.dtype;
  program_options.stop_after = "remat";
  PRECAST_ASSIGN_OR_RETURN(TrainProgram program,
                           run_pipeline(config, resolved.topology, resolved.mesh, program_options));
  const autodiff::TrainStepLayout& layout = program.layout;
  const ir::Function& step = *layout.function;

  ir::HostTensor seed = ir::HostTensor::scalar(options.seed, ir::DType::kU32);
  PRECAST_ASSIGN_OR_RETURN(std::vector<ir::HostTensor> weights,
                           ir::interpret(program.module, "init", std::span(&seed, 1)));
  if (weights.size() != layout.num_weights) {
    return internal_error(fmt::format("init returned {} weights, the train step takes {}",
                                      weights.size(), layout.num_weights));
  }
  reference::perturb(weights, options.seed);
  const std::vector<ir::HostTensor> initial = weights;

  // The state the step carries: the weights, then zero moments and count (adam) or nothing.
  std::vector<ir::HostTensor> state = weights;
  for (size_t i = layout.num_weights; i < layout.num_state; ++i)
    state.push_back(ir::HostTensor::filled(step.type(step.params()[i]), 0.0));

  std::vector<double> scalars;
  std::vector<ir::HostTensor> scalar_arguments;
  for (const char* key : autodiff::kRunTimeScalars) {
    scalars.push_back(reference::round_to(ir::DType::kF32, config.get_float(key)));
    scalar_arguments.push_back(ir::HostTensor::scalar(scalars.back(), ir::DType::kF32));
  }

  std::vector<std::vector<ir::HostTensor>> batches;
  std::vector<double> metric_values;
  for (uint32_t k = 0; k < options.steps; ++k) {
    batches.push_back(
        reference::packed_batch(layout.rows_per_step, length, spec.vocab_size, options.seed + k));
    std::vector<ir::HostTensor> arguments = state;
    arguments.insert(arguments.end(), batches.back().begin(), batches.back().end());
    arguments.insert(arguments.end(), scalar_arguments.begin(), scalar_arguments.end());
    PRECAST_ASSIGN_OR_RETURN(std::vector<ir::HostTensor> results, ir::interpret(step, arguments));
    if (results.size() != layout.first_metric_result + layout.num_metrics) {
      return internal_error(fmt::format("train_step returned {} results, expected {}",
                                        results.size(),
                                        layout.first_metric_result + layout.num_metrics));
    }
    state.assign(results.begin(), results.begin() + static_cast<std::ptrdiff_t>(layout.num_state));
    std::vector<double> metrics;
    for (size_t m = 0; m < layout.num_metrics; ++m)
      metrics.push_back(results[layout.first_metric_result + m].values.at(0));
    metric_values.insert(metric_values.end(), metrics.begin(), metrics.end());
    // loss, raw_grad_norm and grad_norm: enough to see where the clipping threshold sits.
    std::cout << fmt::format("step {}: loss {:.6f} raw_grad_norm {:.6f} grad_norm {:.6f}\n", k,
                             metrics[0], metrics[6], metrics[5]);
  }

  OutputDirectory out(options.out_dir);
  PRECAST_RETURN_IF_ERROR(out.create());
  for (size_t i = 0; i < layout.num_weights; ++i)
    PRECAST_RETURN_IF_ERROR(out.emit(program.weights[i].name, initial[i]));
  for (uint32_t k = 0; k < options.steps; ++k) {
    for (int i = 0; i < frontend::kNumBatchArrays; ++i) {
      PRECAST_RETURN_IF_ERROR(out.emit(fmt::format("step{}.{}", k, frontend::kBatchNames[i]),
                                       batches[k][static_cast<size_t>(i)]));
    }
  }
  ir::DType metric_dtype = step.type(step.results()[layout.first_metric_result]).dtype;
  ir::TensorType metric_type{
      metric_dtype,
      {static_cast<int64_t>(options.steps), static_cast<int64_t>(layout.num_metrics)}};
  PRECAST_RETURN_IF_ERROR(
      out.emit("out.metrics", ir::HostTensor::of(metric_type, std::move(metric_values))));
  for (size_t i = 0; i < layout.num_state; ++i) {
    std::string name(step.value_name(step.params()[i]));
    PRECAST_RETURN_IF_ERROR(out.emit("final." + name, state[i]));
  }
  std::string description = reference::model_description(
      spec, options.dtype, batch_spec.micro_batch_size_to_train_on, length);
  description += train_description(program, scalars, options.steps);
  PRECAST_RETURN_IF_ERROR(out.write_text("config.txt", description));
  // Last: its presence says the directory is complete.
  return out.finish();
}

}  // namespace
}  // namespace precast

int main(int argc, char** argv) {
  return precast::reference::runner_main("train_runner", precast::kUsage, argc, argv,
                                         precast::parse_command_line, precast::run);
}
