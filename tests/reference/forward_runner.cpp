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

struct RunnerOptions {
  fs::path out_dir;
  ir::DType dtype = ir::DType::kF64;
  uint32_t seed = 1234;
  ConfigRequest config;
};

Expected<RunnerOptions> parse_command_line(int argc, char** argv) {
  RunnerOptions options;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    bool has_value = i + 1 < argc;
    if (arg == "--dtype" && has_value) {
      PRECAST_ASSIGN_OR_RETURN(options.dtype, reference::parse_dtype_flag(argv[++i]));
    } else if (arg == "--seed" && has_value) {
      PRECAST_ASSIGN_OR_RETURN(options.seed,
                               reference::parse_unsigned_flag<uint32_t>("--seed", argv[++i]));
    } else if (arg.starts_with("--")) {
      return usage_error(fmt::format("unknown flag '{}'", arg));
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.size() < 2) return usage_error("OUT_DIR and CONFIG.yml are required");
  options.out_dir = positional[0];
  options.config.config_file = positional[1];
  options.config.overrides.assign(positional.begin() + 2, positional.end());
  options.config.first_override_position = 1;
  options.config.read_environment = false;  // the test's arguments are the whole config
  return options;
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
  const char* result_names[] = {"loss", "z_loss", "total_weights", "logits"};
  if (results.size() != std::size(result_names)) {
    return internal_error(fmt::format("forward returned {} results, expected 4", results.size()));
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
  precast::Expected<precast::RunnerOptions> options = precast::parse_command_line(argc, argv);
  if (!options.ok()) {
    std::cerr << "forward_runner: error: " << options.error().message() << "\n"
              << precast::kUsage << "\n";
    return options.error().exit_code();
  }
  precast::Status status = precast::run(*options);
  if (!status.ok()) {
    std::cerr << "forward_runner: error: " << status.error().message() << "\n";
    return status.error().exit_code();
  }
  return 0;
}
