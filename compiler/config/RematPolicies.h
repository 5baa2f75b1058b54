// MaxText's remat policies as one table (maxtext-facts §c): what each keeps on the device or
// offloads to the host for the backward pass, and the order `precast fit` and the out-of-memory
// suggestions try them in. Remat (compiler/autodiff), fit, the suggestions and the key registry
// all read this table; nothing else lists policies.
#pragma once

#include <span>
#include <string_view>
#include <vector>

namespace precast {

struct RematPolicyRow {
  std::string_view name;
  // Checkpoint names whose values the backward pass reads from device memory / host memory;
  // every other checkpointed value of a decoder layer is recomputed.
  std::vector<std::string_view> device;
  std::vector<std::string_view> offload;
  // Position in the order fit and the suggestions try (1 = keeps the most, so recomputes the
  // least); 0 = not tried (aliases of a tried policy, `none`, `custom`).
  int search_rank = 0;
  std::string_view summary;
};

// Every policy MaxText knows, `custom` included (its placements come from the per-name keys).
std::span<const RematPolicyRow> remat_policy_table();
const RematPolicyRow* find_remat_policy(std::string_view name);
// The policies with a search rank, from most kept to least kept.
std::vector<std::string_view> remat_policy_search_order();
// "full, none, minimal, ..." for messages and help.
std::string_view remat_policy_names();

// Checkpoint names remat_policy=custom places one by one (each is a config key taking remat,
// device or offload), and the decoder layer's input, which is always kept (device or offload).
inline constexpr std::string_view kRematLayerInput = "decoder_layer_input";
inline constexpr std::string_view kCustomRematNames[] = {
    "context",  "mlpwi",      "mlpwi_0", "mlpwi_1",  "mlpwo",    "query_proj",
    "key_proj", "value_proj", "kv_proj", "qkv_proj", "out_proj", "attention_out"};

}  // namespace precast
