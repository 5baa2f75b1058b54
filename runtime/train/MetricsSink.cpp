#include "runtime/train/MetricsSink.h"

#include <fmt/format.h>

#include <cmath>

namespace precast::runtime {

Status LogLineSink::write(const StepMetrics& m) {
  double tflops = m.seconds > 0 ? tflops_ / m.seconds : 0;
  double tokens = m.seconds > 0 ? tokens_ / m.seconds : 0;
  out_ << fmt::format(
      "completed step: {}, seconds: {:.3f}, TFLOP/s/device: {:.3f}, Tokens/s/device: {:.3f}, "
      "total_weights: {}, loss: {:.3f}, lm_loss: {:.3f}, perplexity: {:.3f}\n",
      m.step, m.seconds, tflops, tokens, static_cast<int64_t>(std::llround(m.total_weights)),
      m.loss, m.lm_loss, m.perplexity);
  out_.flush();
  return Status::success();
}

Expected<std::unique_ptr<JsonLinesSink>> JsonLinesSink::open(const std::string& path,
                                                             const std::string& run_name) {
  std::unique_ptr<JsonLinesSink> sink(new JsonLinesSink(path, run_name));
  sink->out_.open(path, std::ios::trunc);
  if (!sink->out_) {
    return Error(ExitCode::kFailure,
                 fmt::format("metrics_file={}: cannot open it for writing", path));
  }
  return sink;
}

Status JsonLinesSink::write(const StepMetrics& m) {
  out_ << fmt::format(
      "{{\"learning/loss\": {}, \"learning/lm_loss\": {}, \"learning/perplexity\": {}, "
      "\"learning/z_loss\": {}, \"learning/total_weights\": {}, \"learning/grad_norm\": {}, "
      "\"learning/raw_grad_norm\": {}, \"learning/param_norm\": {}, "
      "\"learning/current_learning_rate\": {}, \"perf/step_time_seconds\": {}, "
      "\"step\": {:.1f}, \"run_name\": \"{}\"}}\n",
      m.loss, m.lm_loss, m.perplexity, m.z_loss, m.total_weights, m.grad_norm, m.raw_grad_norm,
      m.param_norm, m.learning_rate, m.seconds, static_cast<double>(m.step), run_name_);
  if (!out_) return Error(ExitCode::kFailure, fmt::format("metrics_file={}: write failed", path_));
  return Status::success();
}

}  // namespace precast::runtime
