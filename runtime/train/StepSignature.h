// Role: binds what the runtime feeds and reads (the batch arrays, the run-time scalars, the
// metrics, the training state) to the step's inputs and outputs by their signature names, never
// by position. The names are the contract between `precast compile` and the runtime.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <vector>

#include "compiler/artifact/Artifact.h"
#include "ir/support/Error.h"

namespace precast::runtime {

// Inputs with role "batch": MaxText's six arrays of one batch.
inline constexpr std::array<const char*, 6> kBatchNames = {
    "inputs", "inputs_position", "inputs_segmentation",
    "targets", "targets_position", "targets_segmentation"};
// Inputs with role "scalar": what the run-time settings give every step.
inline constexpr std::array<const char*, 7> kScalarNames = {
    "learning_rate", "adam_b1", "adam_b2", "adam_eps", "adam_eps_root", "adam_weight_decay",
    "gradient_clipping_threshold"};
// Outputs with role "metric", in the order StepMetrics and the log lines use.
inline constexpr std::array<const char*, 8> kMetricNames = {
    "loss", "lm_loss", "perplexity", "z_loss", "total_weights", "grad_norm", "raw_grad_norm",
    "param_norm"};

// Positions in Signature::inputs / outputs, found by name.
struct StepBinding {
  std::array<size_t, kBatchNames.size()> batch{};     // input per kBatchNames entry
  std::array<size_t, kScalarNames.size()> scalars{};  // input per kScalarNames entry
  std::array<size_t, kMetricNames.size()> metrics{};  // output per kMetricNames entry
  std::vector<size_t> parameters;                     // inputs with role "parameter"
  // The optional metric "moe_lb_loss" (MoE with load_balance_loss_weight > 0), if present.
  std::optional<size_t> moe_lb_loss;
};

// Each batch, scalar and metric name bound exactly once (moe_lb_loss at most once); each state output (role "parameter" or
// "optimizer_state") names a state input and is written in place of it (donated). A missing,
// repeated or unknown name, or an unknown role, is an Error (exit 4, artifact mismatch) naming
// it.
Expected<StepBinding> bind_signature(const artifact::Signature& signature);

}  // namespace precast::runtime
