#include "compiler/analysis/ModelFormulas.h"

#include <fmt/format.h>

#include "compiler/frontend/families/Family.h"

namespace precast {

// Each family states its formulas next to its builder (compiler/frontend/families/).
int64_t count_parameters(const ModelSpec& m) {
  return frontend::family_hooks(m.family).count_parameters(m);
}

ModelFlops model_flops_per_device(const ModelSpec& m, const BatchSpec& batch) {
  frontend::FlopParts parts = frontend::family_hooks(m.family).flops(m, batch);
  ModelFlops flops;
  flops.learnable = parts.learnable;
  flops.attention = parts.attention;
  long double accumulation = static_cast<long double>(batch.gradient_accumulation_steps);
  flops.learnable *= accumulation;
  flops.attention *= accumulation;
  return flops;
}

double tokens_per_device(const BatchSpec& batch) {
  return static_cast<double>(batch.max_target_length) * batch.per_device_batch_size *
         static_cast<double>(batch.gradient_accumulation_steps);
}

std::string format_parameter_line(int64_t parameters) {
  return fmt::format("number parameters: {:.3f} billion", static_cast<double>(parameters) / 1e9);
}

std::string format_tflops_block(const ModelFlops& flops) {
  double total = flops.total_tflops();
  return fmt::format(
      "Per train step:\n Total TFLOPs: {:.2f} \n split as {:.2f}% learnable weight flops and "
      "{:.2f}% attention flops",
      total, 100.0 * flops.learnable_tflops() / total, 100.0 * flops.attention_tflops() / total);
}

}  // namespace precast
