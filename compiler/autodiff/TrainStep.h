// The training step as one IR function: (params, optimizer state, batch, run-time scalars) ->
// (params', optimizer state', metrics). Forward and backward of every micro-batch, MaxText's
// loss normalisation, global-norm clipping and the optimizer update live in the IR, so memory
// analysis, remat and sharding see all of it; hyperparameters are inputs, so changing them never
// needs a recompile (DESIGN.md, "Compile time versus run time").
//
// Signature of the function "train_step" (W weights; state as the optimizer has it):
//   params:  W weights (forward's names and types)
//            adamw / adam_pax: W first moments "mu.<name>" (mu_dtype), W second moments
//            "nu.<name>" (weight type), "count" s32[] (updates applied so far); sgd: none
//            the 6 batch arrays, s32[G * rows, T] (micro-batch i = rows i, i+G, i+2G, ...)
//            run-time scalars f32[]: learning_rate, adam_b1, adam_b2, adam_eps, adam_eps_root,
//            adam_weight_decay, gradient_clipping_threshold (<= 0 disables clipping)
//   results: W new weights, the new optimizer state (same order), then the metrics f32[]:
//            loss, lm_loss, perplexity, z_loss, total_weights, grad_norm (after clipping),
//            raw_grad_norm, param_norm (of the new weights), and moe_lb_loss when the forward
//            has it (loss = lm_loss + moe_lb_loss)
// Result i < num_state_results aliases parameter i: params and state are donated.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "ir/Module.h"

namespace precast::autodiff {

enum class OptimizerKind { kAdamW, kAdamPax, kSgd };

struct TrainStepSpec {
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  ir::DType mu_dtype = ir::DType::kF32;
  // Gradients are cast to this after differentiation (MaxText's grad_dtype); accumulation and
  // the optimizer read them in this type.
  ir::DType grad_dtype = ir::DType::kF32;
  int64_t gradient_accumulation_steps = 1;
  // Per weight: AdamW applies decoupled weight decay (false where adamw_mask matches).
  std::vector<bool> weight_decay;
};

// Names of the run-time scalar inputs, in parameter order.
inline constexpr const char* kRunTimeScalars[] = {"learning_rate",
                                                  "adam_b1",
                                                  "adam_b2",
                                                  "adam_eps",
                                                  "adam_eps_root",
                                                  "adam_weight_decay",
                                                  "gradient_clipping_threshold"};
inline constexpr size_t kNumRunTimeScalars = 7;

inline constexpr const char* kMetricNames[] = {"loss",          "lm_loss",       "perplexity",
                                               "z_loss",        "total_weights", "grad_norm",
                                               "raw_grad_norm", "param_norm"};
inline constexpr size_t kNumMetrics = 8;
// A ninth metric, after param_norm, when the forward returns a result named "moe_lb_loss" (MoE
// with load_balance_loss_weight > 0): the mean over micro-batches of MaxText's load-balancing loss,
// which `loss` includes and `lm_loss` does not.
inline constexpr const char* kMoeLbLossMetric = "moe_lb_loss";
// A forward result named "routed_bias_update.<weight>" (deepseek's routed_bias_update_rate) is
// added to that weight after the optimizer's update, summed over the micro-batches (MaxText sums
// its sown moe_bias_updates over gradient accumulation); it takes no gradient.
inline constexpr std::string_view kRoutedBiasUpdatePrefix = "routed_bias_update.";

struct TrainStepLayout {
  ir::Function* function = nullptr;
  size_t num_weights = 0;
  size_t num_state = 0;  // weights + optimizer state: the donated prefix of params and results
  size_t first_batch_param = 0;
  size_t first_scalar_param = 0;
  size_t first_metric_result = 0;
  size_t num_metrics = kNumMetrics;  // kNumMetrics, + 1 with moe_lb_loss
  int64_t rows_per_step = 0;  // G * micro-batch rows
};

// Builds "train_step" into `module` from `forward`, a function
// (weights..., inputs, inputs_position, inputs_segmentation, targets, targets_position,
// targets_segmentation) -> (xent_sum, z_loss_sum, total_weights, ...) over one micro-batch
// (the frontend's ForwardOptions::loss_sums), whose first `num_weights` parameters are the
// weights. Loss normalisation as MaxText: without accumulation loss = xent_sum /
// (total_weights + 1e-8) and the gradient is that of the loss; with G > 1 micro-batches the
// unnormalised gradients are summed and divided by the total real-token count, and
// loss = sum xent / max(total, 1). A forward result named "moe_lb_loss" gets cotangent 1 in every
// micro-batch (MaxText differentiates xent_sum / (weights + EPS) + lb without accumulation and
// xent_sum + lb per micro-batch with it, dividing the summed gradients by the total), and adds
// its mean over the micro-batches to the loss.
Expected<TrainStepLayout> add_train_step(ir::Module& module, const ir::Function& forward,
                                         size_t num_weights, const TrainStepSpec& spec);

// Parses opt_type ("adamw", "adam_pax", "sgd").
Expected<OptimizerKind> optimizer_from_name(const std::string& name);

}  // namespace precast::autodiff
