// Derived keys and cross-key validation (MaxText's set_derived_and_validate_values): model
// dimensions from global_parameter_scale, batch sizes, schedule length, output directories.
#pragma once

#include <cstdint>

#include "compiler/config/Config.h"
#include "ir/support/Error.h"

namespace precast {

// Slices of the target: num_slices when set, else compile_topology_num_slices when positive,
// else 1.
int64_t resolved_num_slices(const Config& config);

// The topology name compile_topology names, or "cpu-1" (this host) when it is empty.
std::string resolved_topology_name(const Config& config);

// Computes every derived key given the target's device count and validates the result.
// Errors name the key, its value and the fix (exit code 2).
Status derive_keys(Config& config, int64_t num_target_devices);

// The -1-aware dims of global_parameter_scale (maxtext-facts §a): how many doublings each of
// heads/mlp, emb and layers get.
struct ParameterScale {
  int heads_and_mlp = 0;
  int emb = 0;
  int layers = 0;
};
Expected<ParameterScale> individual_scales(int64_t global_parameter_scale);

}  // namespace precast
