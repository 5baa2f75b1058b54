#include "compiler/driver/TrainProgram.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <regex>

namespace precast {
namespace {

Expected<ir::DType> dtype_of(std::string_view key, const std::string& value) {
  if (value == "float32") return ir::DType::kF32;
  if (value == "bfloat16") return ir::DType::kBF16;
  if (value == "float16") return ir::DType::kF16;
  return usage_error(
      fmt::format("{}='{}' is not supported; use float32, bfloat16 or float16", key, value));
}

}  // namespace

Expected<autodiff::TrainStepSpec> train_step_spec(const Config& config, const ModelSpec& spec,
                                                  const BatchSpec& batch,
                                                  const std::vector<frontend::WeightInfo>& weights,
                                                  const TrainProgramOptions& options) {
  autodiff::TrainStepSpec step;
  PRECAST_ASSIGN_OR_RETURN(step.optimizer,
                           autodiff::optimizer_from_name(config.get_string("opt_type")));
  if (options.dtype_override) {
    step.mu_dtype = step.grad_dtype = *options.dtype_override;
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

Expected<autodiff::RematPolicy> remat_policy_from_config(const Config& config) {
  std::map<std::string, std::string> custom;
  const std::string& name = config.get_string("remat_policy");
  if (name == "custom") {
    for (const char* key :
         {"decoder_layer_input", "context", "mlpwi", "mlpwi_0", "mlpwi_1", "mlpwo", "query_proj",
          "key_proj", "value_proj", "kv_proj", "qkv_proj", "out_proj", "attention_out"}) {
      if (config.has(key)) custom[key] = config.get_string(key);
    }
  }
  Expected<autodiff::RematPolicy> policy = autodiff::remat_policy(name, custom);
  if (!policy.ok()) return policy.error();
  return policy;
}

Expected<TrainProgram> lower_train_program(const Config& config, const ModelSpec& spec,
                                           const BatchSpec& batch,
                                           const TrainProgramOptions& options) {
  frontend::ForwardOptions forward;
  forward.dtype_override = options.dtype_override;
  forward.loss_sums = true;
  forward.batch_rows = batch.micro_batch_size_to_train_on;
  PRECAST_ASSIGN_OR_RETURN(frontend::ForwardModel model,
                           frontend::lower_forward(spec, batch.micro_batch_size_to_train_on,
                                                   batch.max_target_length, forward));
  PRECAST_ASSIGN_OR_RETURN(autodiff::TrainStepSpec step,
                           train_step_spec(config, spec, batch, model.weights, options));
  PRECAST_RETURN_IF_ERROR(frontend::add_init_function(model));
  PRECAST_ASSIGN_OR_RETURN(
      autodiff::TrainStepLayout layout,
      autodiff::add_train_step(model.module, model.module.function(0), model.weights.size(), step));
  PRECAST_ASSIGN_OR_RETURN(autodiff::RematPolicy remat, remat_policy_from_config(config));
  autodiff::RematResult remat_result;
  if (options.apply_remat) {
    size_t index = model.module.num_functions() - 1;
    PRECAST_ASSIGN_OR_RETURN(remat_result, autodiff::apply_remat(model.module, index, remat));
    layout.function = &model.module.function(index);
  }
  return TrainProgram{std::move(model), layout, std::move(step), std::move(remat),
                      std::move(remat_result)};
}

}  // namespace precast
