// Frontend: lowers a ModelSpec to an IR forward function with MaxText's weights, logical axes,
// scope paths and checkpoint names, and builds the matching initializer. compiler/frontend/
// README.md is the contract: every weight's name, shape and axes, the batch, the function
// signature and the math of each decoder family.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compiler/config/ModelSpec.h"
#include "ir/Module.h"
#include "ir/support/Error.h"

namespace precast::frontend {

// The six int32 [rows, length] batch arrays MaxText feeds a training step, in parameter order.
inline constexpr const char* kBatchNames[] = {
    "inputs",  "inputs_position",  "inputs_segmentation",
    "targets", "targets_position", "targets_segmentation"};
inline constexpr int kNumBatchArrays = 6;

enum class InitKind {
  kOnes,             // norm scales
  kZeros,            // biases, gpt3 LayerNorm scales (applied as 1 + scale)
  kNormal,           // N(0, 1) x stddev: embeddings, attention kernels
  kTruncatedNormal,  // N(0, 1) truncated to [-2, 2], x stddev: the MLP and logits kernels
};

// MaxText's variance_scaling(1, fan_in, "truncated_normal") draws from [-2, 2] and divides by
// this, the standard deviation of N(0, 1) truncated there, so the variance is still 1/fan_in.
inline constexpr double kTruncatedNormalStddev = 0.87962566103423978;
inline constexpr double kTruncationBound = 2.0;

struct WeightInfo {
  std::string name;               // "decoder.layers_0.self_attention.query.kernel"
  std::vector<int64_t> dims;      // MaxText's shape (unscanned)
  std::vector<std::string> axes;  // MaxText's logical axes, one per dim
  InitKind init = InitKind::kZeros;
  double stddev = 0;  // kNormal
};

struct ForwardOptions {
  // Rows in the batch; 0 = the config's micro_batch_size_to_train_on.
  int64_t batch_rows = 0;
  // Replaces both `dtype` and `weight_dtype` (f64 for reference checks); unset = the config's.
  std::optional<ir::DType> dtype_override;
  // Appends the logits [rows, length, vocab] (f32, or the override) to the results.
  bool return_logits = false;
  // Returns the unnormalised sums (xent_sum, z_loss_sum) in place of (loss, z_loss): what the
  // train step accumulates over micro-batches before dividing by the total real-token count.
  bool loss_sums = false;
  // With routed_bias_update_rate > 0 (deepseek): appends each MoE layer's routing-bias update,
  // named "routed_bias_update.<its gate.bias weight>", which the train step adds to that weight
  // after the optimizer (an eval or forward entry point has no use for them).
  bool routed_bias_updates = true;
};

struct ForwardModel {
  ir::Module module;                // one function, "forward" (see README for its signature)
  std::vector<WeightInfo> weights;  // in parameter order; the batch arrays follow
  int64_t batch_rows = 0;
  int64_t length = 0;
};

// How MaxText's scan (scan_layers=true) groups the decoder layers: the first `scanned_layers`
// run as one lax.scan over blocks of `layers_per_block` layers, each layer of a block with weights
// of its own stacked over the blocks; the layers after them run unscanned (gemma3's remainder).
// Every family but gemma3 and olmo3 scans single layers.
struct ScanLayout {
  int64_t layers_per_block = 1;
  int64_t scanned_layers = 0;
  int64_t blocks() const { return scanned_layers / layers_per_block; }
};
ScanLayout scan_layout(const ModelSpec& spec);

// Fails (kUsage) on what the config asks for that the frontend cannot lower, naming the key.
Expected<ForwardModel> lower_forward(const ModelSpec& spec, int64_t batch_rows, int64_t length,
                                     const ForwardOptions& options = {});
// batch_rows and length from the BatchSpec (micro batch rows, max_target_length).
Expected<ForwardModel> lower_forward(const ModelSpec& spec, const BatchSpec& batch,
                                     const ForwardOptions& options = {});

// Adds function "init": (seed: u32[]) -> (every weight of `model`, in parameter order), drawing
// each from its InitKind with a per-weight random stream, so the same seed gives the same bits.
Status add_init_function(ForwardModel& model);

}  // namespace precast::frontend
