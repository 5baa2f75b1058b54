// The training loop of precast-run: links an artifact's object code into the process, allocates
// exactly its buffer plan (arena = plan.arena_bytes; one buffer per step input, donated outputs
// written in place), initialises the parameters from init_weights_seed, feeds MaxText's
// synthetic batch and the run-time scalars (the learning rate from the schedule, the optimizer
// scalars) every step, and logs MaxText's lines. Nothing here reads a config file: the caller
// resolves run-time settings (RunSettings) from the artifact's recorded config and overrides.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "compiler/artifact/Artifact.h"
#include "ir/support/Error.h"
#include "runtime/schedule/Schedule.h"

namespace precast::runtime {

struct RunSettings {
  int64_t steps = 0;
  ScheduleSpec schedule;
  double adam_b1 = 0.9, adam_b2 = 0.95, adam_eps = 1e-8, adam_eps_root = 0,
         adam_weight_decay = 0.1, gradient_clipping_threshold = 1.0;
  uint32_t init_weights_seed = 0;
  uint32_t data_seed = 0;  // the synthetic tokens (MaxText draws them once from PRNGKey(0))
  int num_threads = 0;     // 0 = all cores
  std::string gemm = "openblas";
  std::string metrics_file;  // one JSON line per step; empty = none
  std::string run_name;
  bool abort_on_nan_loss = true, abort_on_inf_loss = true;
};

// The artifact's recorded config (key -> printed value) with `overrides` ("key=value") applied.
// An override of a compile-time key is refused (exit 4: it needs a recompile); an unknown key
// is a usage error naming the closest recorded key.
Expected<std::map<std::string, std::string>> run_config(const artifact::Artifact& artifact,
                                                         const std::vector<std::string>& overrides);
// The settings the loop needs, parsed from that config; errors name the key and value.
Expected<RunSettings> run_settings(const std::map<std::string, std::string>& config);
// Both in one: the artifact's recorded config with `overrides`, parsed.
Expected<RunSettings> run_settings(const artifact::Artifact& artifact,
                                   const std::vector<std::string>& overrides);
// "key=value" for each run-time entry of a resolved config: how a given config's run-time values
// reach an artifact built from another one.
std::vector<std::string> run_time_overrides(const std::vector<artifact::ConfigEntry>& entries);

struct StepMetrics {
  int64_t step = 0;
  double seconds = 0;  // the step's own work: from its start until its loss is known
  double loss = 0, lm_loss = 0, perplexity = 0, z_loss = 0, total_weights = 0, grad_norm = 0,
         raw_grad_norm = 0, param_norm = 0, learning_rate = 0;
};

struct TrainReport {
  int64_t arena_bytes = 0;     // allocated for the temp arena
  int64_t argument_bytes = 0;  // bound as step inputs
  int64_t output_bytes = 0;    // bound as step outputs (donated ones share their input's buffer)
  int64_t alias_bytes = 0;
  double load_seconds = 0;     // object code linked and symbols bound
  double init_seconds = 0;     // parameters initialised
  double logging_seconds = 0;  // formatting and writing log lines and metrics, outside steps
  std::vector<StepMetrics> steps;
  std::vector<std::vector<uint8_t>> final_state;  // the last step's inputs, for tests
  bool aborted = false;  // NaN/Inf loss
};

struct TrainOptions {
  std::ostream* log = nullptr;  // MaxText's lines; null = silent
  bool keep_final_state = false;
};

// Runs settings.steps steps. Errors: a damaged object or an unbound symbol (exit 4), an I/O
// failure on the metrics file (exit 1). A NaN/Inf loss with abort_on_* set ends the loop with
// report.aborted (the caller exits 1, as MaxText does).
Expected<TrainReport> train(const artifact::Artifact& artifact, const RunSettings& settings,
                            const TrainOptions& options = {});

// Bytes of one element of an IR dtype name ("f32", "bf16", ...); 0 when unknown.
int64_t dtype_bytes(const std::string& dtype);

}  // namespace precast::runtime
