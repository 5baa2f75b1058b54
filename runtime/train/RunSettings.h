// Role: the run-time settings of a run (steps, schedule, optimizer scalars, seeds, threads,
// outputs), parsed from the artifact's recorded config with key=value overrides. Nothing here
// reads a config file: changing a run-time key never needs a recompile.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/artifact/Artifact.h"
#include "ir/support/Error.h"
#include "runtime/profile/ProfileSettings.h"
#include "runtime/metrics/RunOutputs.h"
#include "runtime/data/DataSettings.h"
#include "runtime/eval/EvalSettings.h"
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
  double collective_timeout_seconds = 600;  // MPI ranks: how long a collective may wait
  std::string gemm = "auto";  // resolve_gemm_impl (runtime/kernels/Gemm.h)
  std::string metrics_file;  // one JSON line per step; given empty: outputs' metrics/metrics.jsonl
  std::string run_name;
  std::string base_output_directory;  // ranks other than 0 log to <it>/<run_name>/logs/
  bool abort_on_nan_loss = true, abort_on_inf_loss = true;
  // Checkpoints (runtime/checkpoint/Checkpoint.h): saved after every step s with
  // s % checkpoint_period == 0 (and after the last step when save_checkpoint_on_completion) into
  // checkpoint_dir = {base_output_directory}/{run_name}/checkpoints/ (or a checkpoint_dir=
  // override given to the artifact alone); a run resumes from the
  // latest committed one there. max_num_checkpoints_to_keep 0 keeps all.
  bool enable_checkpointing = false;
  int64_t checkpoint_period = 10000;
  int64_t max_num_checkpoints_to_keep = 0;
  bool save_checkpoint_on_completion = true;
  // Write checkpoints on a background thread after copying the state (CheckpointWriter.h).
  bool async_checkpointing = true;
  std::string checkpoint_dir;
  // A run with no checkpoint of its own starts from one of these (LoadState.h): parameters only
  // (optimizer state fresh, step 0), or the full state and its step. At most one is set.
  std::string load_parameters_path;
  std::string load_full_state_path;
  // profiler, profiler_steps, skip_first_n_steps_for_profiler, collect_stack_trace,
  // stack_trace_interval_seconds (runtime/profile/ProfileSettings.h).
  ProfileSettings profile;
  // The run's output layout, TensorBoard and config.yml switches, MFU peak
  // (runtime/metrics/RunOutputs.h), and the resolved config config.yml holds.
  RunOutputs outputs;
  std::map<std::string, std::string> config;
  data::DataSettings data;  // dataset_type, dataset_path, packing, shuffling, num_epoch
  EvalSettings eval;        // eval_interval, eval_steps, ... (runtime/eval/EvalSettings.h)
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

}  // namespace precast::runtime
