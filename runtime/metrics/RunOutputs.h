// Role: where a run's outputs go, MaxText's layout under {base_output_directory}/{run_name}/:
// metrics/ (the JSON-lines metrics file by default), tensorboard/ (event files), checkpoints/,
// logs/ (one log per MPI rank other than 0) and config.yml (the resolved config, when
// save_config_to_gcs is set: Precast writes it locally). Parsed from a run's resolved config.
#pragma once

#include <map>
#include <string>

#include "ir/support/Error.h"

namespace precast::runtime {

struct RunOutputs {
  std::string run_directory;    // {base}/{run_name}/
  std::string metrics_dir;      // {run_directory}metrics/
  std::string tensorboard_dir;  // {run_directory}tensorboard/
  std::string logs_dir;         // {run_directory}logs/
  std::string config_file;      // {run_directory}config.yml
  bool enable_tensorboard = true;
  bool save_config = false;    // save_config_to_gcs
  double cpu_peak_tflops = 0;  // 0: measured at start-up (PeakProbe.h)
};

// The layout for `run_name` under `base_output_directory` (empty: ./maxtext_output), with the
// enable_tensorboard, save_config_to_gcs and cpu_peak_tflops keys of `config` (a key the
// artifact's config lacks keeps its default); metrics_dir= and tensorboard_dir= entries of
// `explicit_dirs` win over the derivation. Errors name the key and value.
Expected<RunOutputs> run_outputs(const std::map<std::string, std::string>& config,
                                 const std::string& base_output_directory,
                                 const std::string& run_name,
                                 const std::map<std::string, std::string>& explicit_dirs = {});

// The default metrics_file: {metrics_dir}metrics.jsonl.
std::string default_metrics_file(const RunOutputs& outputs);

// Creates the run directory and its metrics/, logs/ (and tensorboard/ when enabled). Errors
// (exit 1) name the directory.
Status create_run_directories(const RunOutputs& outputs);

// Writes `config` as YAML (`key: value` per key, sorted) to outputs.config_file: a temporary
// name, fsync, rename. Errors (exit 1) name the file.
Status write_resolved_config(const RunOutputs& outputs,
                             const std::map<std::string, std::string>& config);

}  // namespace precast::runtime
