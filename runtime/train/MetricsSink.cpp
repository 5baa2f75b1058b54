#include "runtime/train/MetricsSink.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>

namespace precast::runtime {

Status LogLineSink::write(const StepMetrics& m) {
  double tflops = m.seconds > 0 ? tflops_ / m.seconds : 0;
  double tokens = m.seconds > 0 ? tokens_ / m.seconds : 0;
  out_ << fmt::format(
      "completed step: {}, seconds: {:.3f}, TFLOP/s/device: {:.3f}, Tokens/s/device: {:.3f}, "
      "total_weights: {}, loss: {:.3f}, lm_loss: {:.3f}, perplexity: {:.3f}{}\n",
      m.step, m.seconds, tflops, tokens, static_cast<int64_t>(std::llround(m.total_weights)),
      m.loss, m.lm_loss, m.perplexity,
      moe_ ? fmt::format(", moe_lb_loss: {:.6f}", m.moe_lb_loss.value_or(0.0)) : "");
  out_.flush();
  return Status::success();
}

Status LogLineSink::write_eval(const EvalMetrics& m) {
  out_ << eval_line(m) << "\n";
  out_.flush();
  return Status::success();
}

Scalars eval_scalars(const EvalMetrics& m) {
  Scalars s = {{"eval/avg_loss", m.avg_loss},         {"eval/avg_perplexity", m.avg_perplexity},
               {"eval/total_weights", m.total_weights}, {"eval/avg_z_loss", m.avg_z_loss},
               {"eval/total_loss", m.total_loss},       {"eval/step_time_seconds", m.step_time_seconds}};
  if (m.moe_lb_loss) s.emplace_back("eval/moe_lb_loss", *m.moe_lb_loss);
  if (m.avg_moe_lb_loss) s.emplace_back("eval/avg_moe_lb_loss", *m.avg_moe_lb_loss);
  return s;
}

std::string python_float_text(double v) {
  // A whole number keeps ".0".
  return std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e16 ? fmt::format("{:.1f}", v)
                                                                        : fmt::format("{}", v);
}

std::string eval_line(const EvalMetrics& m) {
  std::string line = fmt::format(
      "Completed eval after train step {}, loss={:.3f}, perplexity={:.3f}, total_weights={}, "
      "avg_z_loss={:.3f}",
      m.step, m.avg_loss, m.avg_perplexity, python_float_text(m.total_weights), m.avg_z_loss);
  if (m.avg_moe_lb_loss) line += fmt::format(", avg_moe_lb_loss={:.3f}", *m.avg_moe_lb_loss);
  return line;
}

namespace {

// A JSON number as Python's json module writes floats (NaN and Infinity included).
std::string json_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return fmt::format("{}", v);
}

// The artifact's model has routed experts: its resolved config says num_experts > 1.
bool routed_experts(const artifact::Artifact& a) {
  for (const artifact::ConfigEntry& e : a.config)
    if (e.key == "num_experts") return std::strtoll(e.value.c_str(), nullptr, 10) > 1;
  return false;
}

}  // namespace

Scalars step_scalars(const StepMetrics& m, const PerfFigures& perf) {
  double tflops_per_sec = m.seconds > 0 ? perf.model_tflops_per_device / m.seconds : 0;
  double tokens_per_sec = m.seconds > 0 ? perf.tokens_per_device / m.seconds : 0;
  Scalars scalars{{"learning/loss", m.loss},
          {"learning/lm_loss", m.lm_loss},
          {"learning/perplexity", m.perplexity},
          {"learning/z_loss", m.z_loss},
          {"learning/total_weights", m.total_weights},
          {"learning/grad_norm", m.grad_norm},
          {"learning/raw_grad_norm", m.raw_grad_norm},
          {"learning/param_norm", m.param_norm},
          {"learning/current_learning_rate", m.learning_rate},
          {"perf/step_time_seconds", m.seconds},
          {"perf/per_device_tflops", perf.model_tflops_per_device},
          {"perf/per_device_tflops_per_sec", tflops_per_sec},
          {"perf/per_device_tokens", perf.tokens_per_device},
          {"perf/per_device_tokens_per_sec", tokens_per_sec},
          {"perf/mfu", perf.peak_tflops > 0 ? tflops_per_sec / perf.peak_tflops : 0},
          {"perf/compute_seconds", m.compute_seconds},
          {"perf/checkpoint_seconds", m.checkpoint_seconds},
          {"perf/eval_seconds", m.eval_seconds},
          {"perf/other_seconds", m.other_seconds}};
  if (m.moe_lb_loss) scalars.insert(scalars.begin() + 4, {"learning/moe_lb_loss", *m.moe_lb_loss});
  return scalars;
}

Expected<std::unique_ptr<JsonLinesSink>> JsonLinesSink::open(const std::string& path,
                                                             const std::string& run_name,
                                                             const PerfFigures& perf) {
  std::unique_ptr<JsonLinesSink> sink(new JsonLinesSink(path, run_name, perf));
  sink->out_.open(path, std::ios::trunc);
  if (!sink->out_) {
    return Error(ExitCode::kFailure,
                 fmt::format("metrics_file={}: cannot open it for writing", path));
  }
  return sink;
}

Status JsonLinesSink::write(const StepMetrics& m) { return write_line(step_scalars(m, perf_), m.step); }

Status JsonLinesSink::write_eval(const EvalMetrics& m) { return write_line(eval_scalars(m), m.step); }

Status JsonLinesSink::write_line(const Scalars& scalars, int64_t step) {
  std::string line = "{";
  for (const auto& [key, value] : scalars) {
    line += fmt::format("\"{}\": {}, ", key, json_number(value));
  }
  line += fmt::format("\"step\": {:.1f}, \"run_name\": \"{}\"}}\n", static_cast<double>(step),
                      run_name_);
  out_ << line;
  out_.flush();
  if (!out_) return Error(ExitCode::kFailure, fmt::format("metrics_file={}: write failed", path_));
  return Status::success();
}

Expected<std::unique_ptr<TensorBoardSink>> TensorBoardSink::open(const std::string& directory,
                                                                 const PerfFigures& perf) {
  PRECAST_ASSIGN_OR_RETURN(std::unique_ptr<EventFileWriter> writer,
                           EventFileWriter::create(directory));
  return std::unique_ptr<TensorBoardSink>(new TensorBoardSink(std::move(writer), perf));
}

Status TensorBoardSink::write(const StepMetrics& m) {
  return writer_->write_scalars(m.step, unix_time_seconds(), step_scalars(m, perf_));
}

Status TensorBoardSink::write_eval(const EvalMetrics& m) {
  return writer_->write_scalars(m.step, unix_time_seconds(), eval_scalars(m));
}

Expected<std::vector<std::unique_ptr<MetricsSink>>> open_step_sinks(
    const artifact::Artifact& a, const RunSettings& settings, std::ostream* log, int64_t device,
    const PerfFigures& perf) {
  std::vector<std::unique_ptr<MetricsSink>> sinks;
  if (log != nullptr) {
    sinks.push_back(
        std::make_unique<LogLineSink>(*log, a.model_tflops_per_device, a.tokens_per_device,
                                      routed_experts(a)));
  }
  if (device == 0) {
    PRECAST_RETURN_IF_ERROR(create_run_directories(settings.outputs));
    if (settings.outputs.save_config) {
      PRECAST_RETURN_IF_ERROR(write_resolved_config(settings.outputs, settings.config));
    }
  }
  if (!settings.metrics_file.empty()) {
    PRECAST_ASSIGN_OR_RETURN(std::unique_ptr<JsonLinesSink> json,
                             JsonLinesSink::open(settings.metrics_file, settings.run_name, perf));
    sinks.push_back(std::move(json));
  }
  if (device == 0 && settings.outputs.enable_tensorboard) {
    PRECAST_ASSIGN_OR_RETURN(std::unique_ptr<TensorBoardSink> events,
                             TensorBoardSink::open(settings.outputs.tensorboard_dir, perf));
    sinks.push_back(std::move(events));
  }
  return sinks;
}

}  // namespace precast::runtime
