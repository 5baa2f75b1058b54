// The FLOPs a Precast MoE train step spends beyond MaxText's formula, for the tests that hold the
// IR's counts against it (ir_counts_test, train_step_test).
#pragma once

#include <cstdint>

#include "compiler/config/Config.h"
#include "compiler/config/ModelSpec.h"

namespace precast::testing {

// With sparse_matmul=true (the default) MoE layers compute only each token's chosen experts
// (grouped matmuls), as MaxText's formula counts: no surplus. With false they compute every
// expert on every token (dense expert matmuls, zero weights for the experts a token did not
// choose), MaxText's formula only the chosen ones: the forward has
// (num_experts - num_experts_per_tok) expert MLPs 2BT*3*E*moe_mlp_dim more per MoE layer (all
// layers but deepseek's first_num_dense_layers), times 3 for a train step.
inline long double dense_expert_surplus(const Config& c, const BatchSpec& batch) {
  int64_t experts = c.get_int("num_experts");
  if (experts <= 1 || c.get_bool("sparse_matmul")) return 0;
  long double moe_layers = static_cast<long double>(
      c.get_int("num_decoder_layers") -
      (c.get_string("decoder_block") == "deepseek" ? c.get_int("first_num_dense_layers") : 0));
  long double bt = static_cast<long double>(batch.per_device_batch_size) *
                   static_cast<long double>(batch.max_target_length) *
                   static_cast<long double>(batch.gradient_accumulation_steps);
  long double unchosen = static_cast<long double>(experts - c.get_int("num_experts_per_tok"));
  return 3 * moe_layers * unchosen * 2 * bt * 3 * static_cast<long double>(c.get_int("emb_dim")) *
         static_cast<long double>(c.get_int("moe_mlp_dim"));
}

}  // namespace precast::testing
