// The compiled program of a config: the frontend's forward (loss sums), the weight initializer
// and the train step, in one module, with the train-step settings read from the config
// (opt_type, mu_dtype, grad_dtype, gradient_accumulation_steps, adamw_mask).
#pragma once

#include <optional>

#include "compiler/autodiff/Remat.h"
#include "compiler/autodiff/TrainStep.h"
#include "compiler/config/Config.h"
#include "compiler/config/ModelSpec.h"
#include "compiler/frontend/Frontend.h"

namespace precast {

struct TrainProgram {
  frontend::ForwardModel model;  // module functions: forward, init, train_step
  autodiff::TrainStepLayout layout;
  autodiff::TrainStepSpec step;
  autodiff::RematPolicy remat;
  autodiff::RematResult remat_result;
};

struct TrainProgramOptions {
  // Replaces dtype, weight_dtype, mu_dtype and grad_dtype (f64 for reference checks).
  std::optional<ir::DType> dtype_override;
  // Applies the config's remat_policy to the train step (off: keep every forward value).
  bool apply_remat = true;
};

// remat_policy, with the custom placements (context, mlpwo, ..., decoder_layer_input) when it is
// custom.
Expected<autodiff::RematPolicy> remat_policy_from_config(const Config& config);

// opt_type, mu_dtype, grad_dtype, gradient_accumulation_steps and adamw_mask (regexes searched in
// each weight's '/'-joined path, e.g. "decoder/layers_0/pre_self_attention_layer_norm/scale";
// a match turns weight decay off for that weight).
Expected<autodiff::TrainStepSpec> train_step_spec(const Config& config, const ModelSpec& spec,
                                                  const BatchSpec& batch,
                                                  const std::vector<frontend::WeightInfo>& weights,
                                                  const TrainProgramOptions& options = {});

Expected<TrainProgram> lower_train_program(const Config& config, const ModelSpec& spec,
                                           const BatchSpec& batch,
                                           const TrainProgramOptions& options = {});

}  // namespace precast
