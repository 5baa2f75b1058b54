// MaxText's own checks on the keys that change per-device memory (shard_optimizer_over_data,
// shard_mode, num_vocab_tiling, the host offloads; param_scan_axis), with MaxText's messages
// where MaxText has one: run while the config is resolved, before any key is derived from them.
#pragma once

#include "compiler/config/Config.h"
#include "ir/support/Error.h"

namespace precast {

Status check_memory_keys(const Config& config);

}  // namespace precast
