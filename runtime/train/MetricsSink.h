// Role: where each step's metrics go. MetricsSink is the interface; LogLineSink writes
// MaxText's `completed step: ...` line, JsonLinesSink one JSON object per step (MaxText's
// metrics_file layout).
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <ostream>
#include <string>

#include "ir/support/Error.h"

namespace precast::runtime {

struct StepMetrics {
  int64_t step = 0;
  double seconds = 0;  // the step's own work: from its start until its loss is known
  double loss = 0, lm_loss = 0, perplexity = 0, z_loss = 0, total_weights = 0, grad_norm = 0,
         raw_grad_norm = 0, param_norm = 0, learning_rate = 0;
};

class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  // Records one step; an I/O failure is an Error (exit 1) that ends the run.
  virtual Status write(const StepMetrics& m) = 0;
};

// MaxText's per-step log line, with TFLOP/s and tokens/s from one step's per-device figures.
class LogLineSink final : public MetricsSink {
 public:
  LogLineSink(std::ostream& out, double model_tflops_per_device, double tokens_per_device)
      : out_(out), tflops_(model_tflops_per_device), tokens_(tokens_per_device) {}
  Status write(const StepMetrics& m) override;

 private:
  std::ostream& out_;
  double tflops_, tokens_;
};

// metrics_file: one JSON line per step, the file truncated when opened.
class JsonLinesSink final : public MetricsSink {
 public:
  // Opens `path` for writing; failure is an Error (exit 1) naming metrics_file.
  static Expected<std::unique_ptr<JsonLinesSink>> open(const std::string& path,
                                                       const std::string& run_name);
  Status write(const StepMetrics& m) override;

 private:
  JsonLinesSink(std::string path, std::string run_name)
      : path_(std::move(path)), run_name_(std::move(run_name)) {}
  std::string path_, run_name_;
  std::ofstream out_;
};

}  // namespace precast::runtime
