// Rematerialization: MaxText's remat policies over the train step. Every decoder layer is a
// checkpointed region (jax.checkpoint with a policy): its input (checkpoint name
// decoder_layer_input) and the intermediates the policy names are kept for the backward pass;
// everything else the layer's backward needs is recomputed, by cloning the forward ops right
// before that layer's backward block. Values outside the layers (embedding, final norm, logits,
// loss) are always kept, as in MaxText. Clones carry the forward op's scope + "/remat" and count
// in hardware FLOPs only.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/Module.h"
#include "ir/PassManager.h"
#include "ir/ScopePath.h"

namespace precast::autodiff {

using ir::kRematScope;

enum class Placement { kRemat, kDevice, kOffload };

struct RematPolicy {
  std::string name;
  // Checkpoint name -> placement; names not listed are recomputed.
  std::map<std::string, Placement> names;
};

// MaxText's remat_policy values (maxtext-facts §c): full, none, "" (recompute everything but the
// layer input), minimal, minimal_with_context (and minimal_flash),
// save_dot_with_context_except_mlp, save_dot_except_mlpwi, save_dot_except_mlp, save_qkv_proj,
// save_out_proj, qkv_proj_offloaded, minimal_offloaded, and custom, whose per-name placements come
// from `custom` (checkpoint name -> "remat" | "device" | "offload", the config keys of the same
// names). An unknown policy is a usage error listing the known ones.
Expected<RematPolicy> remat_policy(const std::string& name,
                                   const std::map<std::string, std::string>& custom = {});

struct RematResult {
  size_t recomputed_ops = 0;
  // Forward values kept in host memory (offloaded), in the rewritten function.
  std::vector<ir::Value> offloaded;
  // Forward values kept on the device for the backward pass, in the rewritten function.
  std::vector<ir::Value> saved;
};

// Rewrites function `index` of `module` (a train step or any function built by inline_vjp) under
// `policy`. Parameters, results and donation are unchanged; the numbers it computes are bitwise
// the same.
Expected<RematResult> apply_remat(ir::Module& module, size_t index, const RematPolicy& policy);

// The pass's name in pipelines and dumps (NN-remat.ir).
inline constexpr const char* kRematPass = "remat";

// The `remat` pass: apply_remat on the function named `function`. Changed when it recomputes
// anything.
ir::Pass remat_pass(RematPolicy policy, std::string function = "train_step");

}  // namespace precast::autodiff
