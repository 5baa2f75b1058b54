// Role: how the sampler picks each token from the logits (MaxText's decode keys, its
// inference_utils.sampling): decode_sampling_strategy greedy (argmax), weighted (a draw from
// softmax(logits / temperature)), topk (the same over the decode_sampling_top_k largest),
// nucleus (over the smallest set of largest logits whose probability reaches
// decode_sampling_nucleus_p) or composite (top-k, then nucleus within it, then the draw). The
// draws come from Precast's own generator (splitmix64 from seed 1234, as MaxText's decode.py
// starts from PRNGKey(1234)): the same run samples the same tokens, but not JAX's draws.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/support/Error.h"

namespace precast::runtime {

struct DecodeSettings {
  std::string strategy = "greedy";  // greedy | weighted | nucleus | topk | composite
  int64_t top_k = 0;
  double nucleus_p = -1;
  double temperature = 1;

  // How many of the largest logits a choice reads: 1 (greedy), top_k (topk, composite) or the
  // whole vocabulary (weighted, nucleus).
  int64_t candidates(int64_t vocab) const;
};

// decode_sampling_strategy, decode_sampling_top_k, decode_sampling_nucleus_p,
// decode_sampling_temperature from a resolved config; a missing key keeps its default. Errors
// (exit 2) name the key, its value and the fix: an unknown strategy, top_k <= 0 for topk or
// composite, nucleus_p outside (0, 1] for nucleus or composite, temperature <= 0 for a draw.
Expected<DecodeSettings> decode_settings(const std::map<std::string, std::string>& config);

// One logit of the row and its token id.
struct Candidate {
  double logit = 0;
  uint32_t id = 0;
};

// The largest logits first (the lowest id first among equal ones), one per id; at least one.
// `state` is the generator's state (advanced by one draw unless the strategy is greedy).
uint32_t choose_token(const std::vector<Candidate>& sorted, const DecodeSettings& settings,
                      uint64_t& state);

// The generator's first state (seed 1234).
inline constexpr uint64_t kDecodeSeed = 1234;

}  // namespace precast::runtime
