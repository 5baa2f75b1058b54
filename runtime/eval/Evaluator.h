// Role: evaluation during training (MaxText's eval loop). After train step s with
// eval_interval > 0, s >= eval_start_step and (s - eval_start_step) % eval_interval == 0, the
// artifact's eval_step entry point (forward + loss sums, no update; its parameters are the train
// step's buffers, never a copy) runs over eval_steps batches of the eval set (eval_steps <= 0:
// the whole set once), read from its start each time; the sums of the batches give MaxText's
// eval/ figures (MetricsSink.h's EvalMetrics). The eval set: eval_dataset_path when given (every
// document), else the held-out documents of dataset_path (every 20th, runtime/data/Corpus.h);
// synthetic data evaluates on the synthetic batch (eval_steps <= 0: one batch).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/artifact/Artifact.h"
#include "ir/support/Error.h"
#include "runtime/train/DataSource.h"
#include "runtime/train/MetricsSink.h"
#include "runtime/eval/EvalSettings.h"
#include "runtime/train/StepExecutable.h"

namespace precast::runtime {

// The inputs of an entry point (`entry`, named `entry_name` in messages) bound to the train
// step's buffers: each parameter to `train`'s input of the same name, role, shape and dtype
// (exit 4 when there is none); null for every other input (StepExecutable::allocate_buffers).
Expected<std::vector<void*>> shared_parameters(const artifact::Signature& entry,
                                               const artifact::Artifact& artifact,
                                               const StepExecutable& train,
                                               std::string_view entry_name);

// One eval batch's sums (eval_step's outputs).
struct EvalBatch {
  double xent_sum = 0, z_loss_sum = 0, total_weights = 0, seconds = 0;
  double moe_lb_loss = 0;  // the batch's load-balancing loss (0 without one)
};

// MaxText's running eval line after eval batch `index` (from 0): that batch's seconds and the
// figures of the batches so far, "Completed eval step: 2, seconds: 0.012, running loss=5.984,
// running perplexity=396.880, running total_weights=999.0" (metric_logger.py's
// _log_running_eval_metrics).
std::string running_eval_line(int64_t index, double seconds, double total_loss,
                              double total_weights);

class Evaluator {
 public:
  // Loads `artifact`'s eval_step (exit 4 naming the key to recompile with when it has none),
  // binds its parameters to `train`'s inputs of the same names (exit 4 when a name, shape or
  // dtype differs), allocates the rest and opens the eval set (exit 2 naming eval_dataset_path
  // or dataset_path when it cannot be read or is empty). `shard`: this device's piece of the
  // global eval batch, as DataSource's.
  static Expected<std::unique_ptr<Evaluator>> create(const artifact::Artifact& artifact,
                                                     const StepExecutable& train,
                                                     const EvalSettings& settings,
                                                     const data::DataSettings& data, int64_t vocab,
                                                     const CommunicatorResolver& communicator,
                                                     const std::vector<int64_t>& mesh_coordinates);

  // One evaluation after train step `step` with the current parameters; `batches` (when not
  // null) receives each batch's sums. `log` (when not null) gets MaxText's lines of the eval
  // loop: "Starting eval after train step s" first, then running_eval_line after each batch (the
  // final "Completed eval after train step" line is the caller's, MetricsSink's eval_line).
  Expected<EvalMetrics> evaluate(int64_t step, const RuntimeContext& context,
                                 std::vector<EvalBatch>* batches = nullptr,
                                 std::ostream* log = nullptr);

  // One line for the log on the eval set.
  const std::string& description() const { return description_; }

 private:
  Evaluator() = default;

  std::unique_ptr<artifact::Artifact> view_;  // eval_step as an artifact (StepExecutable's)
  std::unique_ptr<StepExecutable> step_;
  EvalSettings settings_;
  std::unique_ptr<DataSource> data_;
  DatasetBatch* dataset_ = nullptr;  // data_ when it is a dataset (rewound each evaluation)
  BatchArrays batch_{};
  size_t outputs_[3] = {0, 0, 0};  // xent_sum, z_loss_sum, total_weights
  // The model routes to experts (num_experts > 1): the evaluation reports avg_moe_lb_loss, from
  // eval_step's moe_lb_loss output where it has one (load_balance_loss_weight > 0), else 0.
  bool routed_experts_ = false;
  std::optional<size_t> moe_lb_output_;
  std::string description_;
};

}  // namespace precast::runtime
