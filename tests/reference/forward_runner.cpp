// forward_runner: the Precast half of the PyTorch reference suite (tests/reference/). Lowers a
// config's forward function, draws the weights with the frontend's "init" function and perturbs
// them, builds a packed batch, runs "forward" in the reference interpreter and writes every
// weight (as used, and as "init" drew it: init.<name>), batch array and result (out.<name>) as
// .npy, with manifest.txt and config.txt (the model's hyperparameters, read from the ModelSpec)
// for torch_reference.py.
//
// Usage: forward_runner OUT_DIR [--dtype f32|f64] [--seed N] CONFIG.yml [key=value ...]
#include <fmt/format.h>

#include <cstdint>
#include <filesystem>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include "compiler/config/ModelSpec.h"
#include "compiler/driver/Analyze.h"
#include "compiler/frontend/Frontend.h"
#include "ir/Interpreter.h"
#include "tests/reference/RunnerSupport.h"

namespace fs = std::filesystem;

namespace precast {
namespace {

using reference::OutputDirectory;

constexpr const char* kUsage =
    "usage: forward_runner OUT_DIR [--dtype f32|f64] [--seed N] CONFIG.yml [key=value ...]";

using RunnerOptions = reference::RunnerArguments;

Expected<RunnerOptions> parse_command_line(int argc, char** argv) {
  return reference::parse_runner_arguments(argc, argv, /*takes_steps=*/false);
}

Status run(const RunnerOptions& options) {
  fs::path topologies = options.config.config_file.parent_path() / "topologies.yml";
  PRECAST_ASSIGN_OR_RETURN(ResolvedConfig resolved, resolve_config(options.config, topologies));
  PRECAST_ASSIGN_OR_RETURN(ModelSpec spec, model_spec_from_config(resolved.config));
  BatchSpec batch_spec = batch_spec_from_config(resolved.config);
  int64_t rows = batch_spec.micro_batch_size_to_train_on;
  int64_t length = batch_spec.max_target_length;
  if (length < 8) {
    return usage_error(
        fmt::format("max_target_length {} is too short for a packed row (>= 8)", length));
  }

  frontend::ForwardOptions forward_options;
  forward_options.dtype_override = options.dtype;
  forward_options.return_logits = true;
  PRECAST_ASSIGN_OR_RETURN(frontend::ForwardModel model,
                           frontend::lower_forward(spec, rows, length, forward_options));
  PRECAST_RETURN_IF_ERROR(frontend::add_init_function(model));

  ir::HostTensor seed = ir::HostTensor::scalar(options.seed, ir::DType::kU32);
  PRECAST_ASSIGN_OR_RETURN(std::vector<ir::HostTensor> weights,
                           ir::interpret(model.module, "init", std::span(&seed, 1)));
  if (weights.size() != model.weights.size()) {
    return internal_error(fmt::format("init returned {} weights, the model declares {}",
                                      weights.size(), model.weights.size()));
  }
  std::vector<ir::HostTensor> initial = weights;
  reference::perturb(weights, options.seed);
  std::vector<ir::HostTensor> batch =
      reference::packed_batch(rows, length, spec.vocab_size, options.seed);

  std::vector<ir::HostTensor> arguments = weights;
  arguments.insert(arguments.end(), batch.begin(), batch.end());
  PRECAST_ASSIGN_OR_RETURN(std::vector<ir::HostTensor> results,
                           ir::interpret(model.module, "forward", arguments));
  // moe_lb_loss follows with load_balance_loss_weight > 0.
  const char* result_names[] = {"loss", "z_loss", "total_weights", "logits", "moe_lb_loss"};
  size_t expected = spec.moe.load_balance_loss_weight > 0 ? 5 : 4;
  if (results.size() != expected) {
    return internal_error(
        fmt::format("forward returned {} results, expected {}", results.size(), expected));
  }

  OutputDirectory out(options.out_dir);
  PRECAST_RETURN_IF_ERROR(out.create());
  for (size_t i = 0; i < weights.size(); ++i) {
    PRECAST_RETURN_IF_ERROR(out.emit(model.weights[i].name, weights[i]));
    PRECAST_RETURN_IF_ERROR(out.emit("init." + model.weights[i].name, initial[i]));
  }
  for (int i = 0; i < frontend::kNumBatchArrays; ++i) {
    PRECAST_RETURN_IF_ERROR(out.emit(frontend::kBatchNames[i], batch[static_cast<size_t>(i)]));
  }
  for (size_t i = 0; i < results.size(); ++i) {
    PRECAST_RETURN_IF_ERROR(out.emit(std::string("out.") + result_names[i], results[i]));
  }
  PRECAST_RETURN_IF_ERROR(out.write_text(
      "config.txt", reference::model_description(spec, options.dtype, rows, length)));
  // Last: its presence says the directory is complete.
  return out.finish();
}

}  // namespace
}  // namespace precast

int main(int argc, char** argv) {
  return precast::reference::runner_main("forward_runner", precast::kUsage, argc, argv,
                                         precast::parse_command_line, precast::run);
}
