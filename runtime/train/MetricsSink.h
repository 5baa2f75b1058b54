// Role: where each step's metrics go. MetricsSink is the interface; LogLineSink writes
// MaxText's `completed step: ...` line, JsonLinesSink one JSON object per step (MaxText's
// metrics_file layout), TensorBoardSink the same scalars as TensorBoard events.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "compiler/artifact/Artifact.h"
#include "ir/support/Error.h"
#include "runtime/metrics/EventFileWriter.h"
#include "runtime/train/RunSettings.h"

namespace precast::runtime {

struct StepMetrics {
  int64_t step = 0;
  // From the moment the previous step's loss was known (the loop's start for its first step)
  // to the moment this one's is (runtime/metrics/StepClock.h), and its breakdown.
  double seconds = 0;
  double compute_seconds = 0, checkpoint_seconds = 0, eval_seconds = 0, other_seconds = 0;
  double loss = 0, lm_loss = 0, perplexity = 0, z_loss = 0, total_weights = 0, grad_norm = 0,
         raw_grad_norm = 0, param_norm = 0, learning_rate = 0;
  std::optional<double> moe_lb_loss;  // when the step computes MaxText's load-balancing loss
};

// One evaluation's figures (runtime/eval/Evaluator.h), MaxText's eval/ keys: after train step
// `step`, over `batches` eval batches, avg_loss = Σ xent_sum / (Σ total_weights + 1e-8),
// avg_perplexity = exp(avg_loss), avg_z_loss the mean of the batches' z_loss_sum / weights,
// step_time_seconds the mean seconds of one eval batch. A model with routed experts also has
// moe_lb_loss (the sum of the batches' load-balancing losses; 0 without that loss) and
// avg_moe_lb_loss (that sum over the batch count), as MaxText's eval/ keys.
struct EvalMetrics {
  int64_t step = 0;
  int64_t batches = 0;
  double total_loss = 0, total_weights = 0, avg_loss = 0, avg_perplexity = 0, avg_z_loss = 0,
         step_time_seconds = 0;
  std::optional<double> moe_lb_loss, avg_moe_lb_loss;  // num_experts > 1 only
};

// MaxText's eval scalars, in the metrics file's order: eval/avg_loss, eval/avg_perplexity,
// eval/total_weights, eval/avg_z_loss, eval/total_loss, eval/step_time_seconds, then with routed
// experts eval/moe_lb_loss and eval/avg_moe_lb_loss.
Scalars eval_scalars(const EvalMetrics& m);

// MaxText's line: "Completed eval after train step {s}, loss={:.3f}, perplexity={:.3f},
// total_weights={}, avg_z_loss={:.3f}" (total_weights as Python prints a float: 1234.0), and
// ", avg_moe_lb_loss={:.3f}" after it with routed experts.
std::string eval_line(const EvalMetrics& m);

// Python's str() of a float, as MaxText's f-strings print one with no format: 1234.0, 0.5.
std::string python_float_text(double v);

// A device's figures per step and its peak, for the perf/ scalars.
struct PerfFigures {
  double model_tflops_per_device = 0;
  double tokens_per_device = 0;
  double peak_tflops = 0;  // the device's peak TFLOP/s (perf/mfu's denominator); 0: unknown
};

// The scalars of one step, named and ordered as in the metrics file: MaxText's learning/ and
// perf/ keys, then perf/mfu (a fraction of peak_tflops) and the step-time breakdown.
Scalars step_scalars(const StepMetrics& m, const PerfFigures& perf);

class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  // Records one step; an I/O failure is an Error (exit 1) that ends the run.
  virtual Status write(const StepMetrics& m) = 0;
  // Records one evaluation (the log line, a JSON line, TensorBoard scalars at its step).
  virtual Status write_eval(const EvalMetrics& /*m*/) { return Status::success(); }
};

// MaxText's per-step log line, with TFLOP/s and tokens/s from one step's per-device figures.
class LogLineSink final : public MetricsSink {
 public:
  // `moe`: the model has routed experts (num_experts > 1): the line ends with MaxText's
  // "moe_lb_loss: {:.6f}" (0 without the load-balancing loss).
  LogLineSink(std::ostream& out, double model_tflops_per_device, double tokens_per_device,
              bool moe = false)
      : out_(out), tflops_(model_tflops_per_device), tokens_(tokens_per_device), moe_(moe) {}
  Status write(const StepMetrics& m) override;
  Status write_eval(const EvalMetrics& m) override;

 private:
  std::ostream& out_;
  double tflops_, tokens_;
  bool moe_;
};

// metrics_file: one JSON line per step, the file truncated when opened.
class JsonLinesSink final : public MetricsSink {
 public:
  // Opens `path` for writing; failure is an Error (exit 1) naming metrics_file.
  static Expected<std::unique_ptr<JsonLinesSink>> open(const std::string& path,
                                                       const std::string& run_name,
                                                       const PerfFigures& perf = {});
  Status write(const StepMetrics& m) override;
  Status write_eval(const EvalMetrics& m) override;

 private:
  Status write_line(const Scalars& scalars, int64_t step);
  JsonLinesSink(std::string path, std::string run_name, const PerfFigures& perf)
      : path_(std::move(path)), run_name_(std::move(run_name)), perf_(perf) {}
  std::string path_, run_name_;
  PerfFigures perf_;
  std::ofstream out_;
};

// enable_tensorboard: the same scalars as the metrics file, one event per step, in an event file
// of `directory` (EventFileWriter.h).
class TensorBoardSink final : public MetricsSink {
 public:
  static Expected<std::unique_ptr<TensorBoardSink>> open(const std::string& directory,
                                                         const PerfFigures& perf);
  Status write(const StepMetrics& m) override;
  Status write_eval(const EvalMetrics& m) override;

 private:
  TensorBoardSink(std::unique_ptr<EventFileWriter> writer, const PerfFigures& perf)
      : writer_(std::move(writer)), perf_(perf) {}
  std::unique_ptr<EventFileWriter> writer_;
  PerfFigures perf_;
};

// The sinks of a run's steps: the log line (given a log), metrics_file (when set), and on device
// 0 the TensorBoard events (enable_tensorboard). Device 0 first creates the run's output
// directories and writes config.yml (save_config_to_gcs).
Expected<std::vector<std::unique_ptr<MetricsSink>>> open_step_sinks(
    const artifact::Artifact& a, const RunSettings& settings, std::ostream* log, int64_t device,
    const PerfFigures& perf);

}  // namespace precast::runtime
