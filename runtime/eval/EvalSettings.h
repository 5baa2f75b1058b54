// Role: the run-time evaluation keys (MaxText's eval loop, runtime/eval/Evaluator.h): when to
// evaluate, on how many batches, from which data, and when to stop training.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "ir/support/Error.h"
#include "runtime/eval/Decoding.h"

namespace precast::runtime {

// eval_interval, eval_steps, eval_start_step, eval_dataset_path, target_eval_loss,
// sample_tokens, sample_prompt, decode_sampling_*.
struct EvalSettings {
  int64_t interval = -1;  // <= 0: no evaluation
  int64_t steps = -1;     // batches per evaluation; <= 0: the whole eval set
  int64_t start_step = 0;
  std::string dataset_path;  // empty: the held-out documents of dataset_path
  double target_loss = 0;    // > 0: training stops once an evaluation's avg_loss is <= it
  // sample_tokens > 0: after training, a greedy sample of up to that many tokens after
  // sample_prompt (runtime/eval/Sampler.h).
  int64_t sample_tokens = 0;
  std::string sample_prompt;
  DecodeSettings decode;  // decode_sampling_* (greedy unless set)

  bool due(int64_t step) const {
    return interval > 0 && step >= start_step && (step - start_step) % interval == 0;
  }
};

// From a resolved config; a key the config lacks keeps its default. Errors (exit 2) name the key.
Expected<EvalSettings> eval_settings(const std::map<std::string, std::string>& config);

}  // namespace precast::runtime
