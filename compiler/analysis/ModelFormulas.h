// MaxText's formula-level numbers for a model: parameter count (what the modules allocate) and
// per-device model FLOPs per training step (maxtext-facts §d). The IR-level counts of later
// stages are checked against these.
#pragma once

#include <cstdint>
#include <string>

#include "compiler/config/ModelSpec.h"

namespace precast {

// Every trainable parameter the model allocates (embeddings, kernels, norms, biases).
int64_t count_parameters(const ModelSpec& model);

// Model FLOPs of one training step on one device: forward + backward (x3), MaxText conventions
// (causal halving, unembedding only, gradient accumulation multiplies).
struct ModelFlops {
  long double learnable = 0;  // weight matmuls incl. unembedding
  long double attention = 0;  // q.k and p.v products
  long double total() const { return learnable + attention; }
  double total_tflops() const { return static_cast<double>(total() / 1e12L); }
  double learnable_tflops() const { return static_cast<double>(learnable / 1e12L); }
  double attention_tflops() const { return static_cast<double>(attention / 1e12L); }
};
ModelFlops model_flops_per_device(const ModelSpec& model, const BatchSpec& batch);

// max_target_length * per_device_batch_size * gradient_accumulation_steps.
double tokens_per_device(const BatchSpec& batch);

// "number parameters: 1.104 billion"
std::string format_parameter_line(int64_t parameters);
// MaxText's block, leading spaces and trailing space included:
// "Per train step:\n Total TFLOPs: 13.59 \n split as 93.93% learnable weight flops and 6.07%
// attention flops"
std::string format_tflops_block(const ModelFlops& flops);

}  // namespace precast
