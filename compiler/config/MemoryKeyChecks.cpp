#include "compiler/config/MemoryKeyChecks.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <string_view>

namespace precast {
namespace {

std::string describe(const Config& config, std::string_view key) {
  const ConfigEntry& entry = config.entry(key);
  std::string out = std::string(key) + "=" + entry.value.to_yaml();
  if (entry.source != ValueSource::kDefault) out += " (" + entry.origin + ")";
  return out;
}

// pyconfig's validate_optimizer_sharding_over_data: ZeRO-1 shards Adam's moments.
Status check_optimizer_sharding(const Config& config) {
  if (!config.get_bool("shard_optimizer_over_data")) return Status::success();
  const std::string& opt_type = config.get_string("opt_type");
  if (opt_type == "adamw" || opt_type == "adam_pax") return Status::success();
  return usage_error(describe(config, "shard_optimizer_over_data") + ", " +
                     describe(config, "opt_type") + ": Optimizer type " + opt_type +
                     " is not supported for optimizer sharding. Please use an optimizer from this "
                     "list: ('adamw', 'adam_pax').");
}

// types.py: explicit sharding is implemented for a few decoder blocks only.
Status check_shard_mode(const Config& config) {
  if (config.get_string("shard_mode") != "explicit") return Status::success();
  constexpr std::array<std::string_view, 4> kSupported = {"simple", "simple_mlp", "llama2",
                                                          "deepseek"};
  const std::string& decoder = config.get_string("decoder_block");
  if (std::find(kSupported.begin(), kSupported.end(), decoder) != kSupported.end()) {
    return Status::success();
  }
  return usage_error(describe(config, "shard_mode") + ", " + describe(config, "decoder_block") +
                     ": Decoder '" + decoder +
                     "' is not supported with 'explicit' sharding. Supported options are: "
                     "['simple', 'simple_mlp', 'llama2', 'deepseek']. Set shard_mode=auto.");
}

// types.py's check, and what Precast's tiling (slices of the sequence) needs.
Status check_vocab_tiling(const Config& config) {
  int64_t tiles = config.get_int("num_vocab_tiling");
  if (tiles <= 1) return Status::success();
  double per_device = config.get_float("per_device_batch_size");
  int64_t length = config.get_int("max_target_length");
  double tokens = per_device * static_cast<double>(length);
  if (per_device > 0 && std::fmod(tokens, static_cast<double>(tiles)) != 0) {
    return usage_error(describe(config, "num_vocab_tiling") + ", " +
                       describe(config, "per_device_batch_size") + ", " +
                       describe(config, "max_target_length") +
                       ": Per device batch size times sequence length should be divisible by the "
                       "number of vocab tiles.");
  }
  if (length % tiles != 0) {
    return usage_error(describe(config, "num_vocab_tiling") + ", " +
                       describe(config, "max_target_length") +
                       ": num_vocab_tiling that does not divide max_target_length is not "
                       "supported yet (Precast tiles the sequence). Choose a divisor of "
                       "max_target_length.");
  }
  for (std::string_view key :
       {"ici_context_parallelism", "dcn_context_parallelism", "ici_context_usp_ulysses_parallelism",
        "dcn_context_usp_ulysses_parallelism"}) {
    if (config.get_int(key) == 1) continue;
    return usage_error(describe(config, "num_vocab_tiling") + ", " + describe(config, key) +
                       ": num_vocab_tiling is not supported yet with context parallelism "
                       "(Precast tiles the sequence, which context parallelism splits). Set "
                       "num_vocab_tiling=1 or " +
                       std::string(key) + "=1.");
  }
  return Status::success();
}

// param_scan_axis places the `layers` axis of scanned parameters: before (0) or after (1) a
// weight's first dimension; flax's scan takes any axis of the stacked array, but a norm scale
// stacks to two dimensions, so only 0 and 1 serve every weight.
Status check_param_scan_axis(const Config& config) {
  int64_t axis = config.get_int("param_scan_axis");
  if (axis == 0 || axis == 1) return Status::success();
  return usage_error(describe(config, "param_scan_axis") +
                     ": the stacked layers axis must be 0 or 1 (a scanned norm scale has two "
                     "dimensions). Set param_scan_axis=1 (MaxText's default) or 0.");
}

}  // namespace

Status check_memory_keys(const Config& config) {
  PRECAST_RETURN_IF_ERROR(check_param_scan_axis(config));
  PRECAST_RETURN_IF_ERROR(check_optimizer_sharding(config));
  PRECAST_RETURN_IF_ERROR(check_shard_mode(config));
  PRECAST_RETURN_IF_ERROR(check_vocab_tiling(config));
  return Status::success();
}

}  // namespace precast
