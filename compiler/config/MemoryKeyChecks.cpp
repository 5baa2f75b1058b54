#include "compiler/config/MemoryKeyChecks.h"

#include <algorithm>
#include <array>
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

}  // namespace

Status check_memory_keys(const Config& config) {
  PRECAST_RETURN_IF_ERROR(check_optimizer_sharding(config));
  PRECAST_RETURN_IF_ERROR(check_shard_mode(config));
  return Status::success();
}

}  // namespace precast
