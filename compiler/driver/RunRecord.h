// What `precast compare` knows about one training run, read from a Precast run directory, a
// metrics file (MaxText's metrics_file JSON lines) or a MaxText log (its own printed lines).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ir/support/Error.h"

namespace precast {

// One train step; a figure the source did not record is absent.
struct StepRecord {
  int64_t step = 0;
  std::optional<double> loss, seconds, tflops_per_second, tokens_per_second;
};

struct RunRecord {
  std::string source;             // the path given on the command line
  std::string description;        // what was read, e.g. "log train.log" or "metrics metrics/m.txt"
  std::vector<StepRecord> steps;  // sorted by step, one record per step (the last one read)
  std::optional<double> parameters_billion;   // `number parameters: X billion`
  std::optional<double> tflops_per_step;      // ` Total TFLOPs: X ` (per device)
  std::optional<int64_t> num_devices;         // `Num_devices: N, shape ...`
  std::optional<double> memory_used_percent;  // the largest `Using (GB) u / l (p%)` figure
  std::optional<double> estimated_memory_gb;  // `Total estimated memory size: X GB, ...`
  std::vector<std::pair<std::string, std::string>> versions;  // (component, version), in order
  std::optional<std::map<std::string, std::string>> config;   // config.yml or `Config param`
};

// Reads PATH: a directory is a Precast run directory ({base_output_directory}/{run_name}/:
// its metrics under metrics/ or a metrics.jsonl/metrics.txt beside config.yml, and its log
// *.log if one is there); a file whose first non-blank line is a JSON object is a metrics
// file; any other file is read as a MaxText log. Errors (exit 2) name the file and line.
Expected<RunRecord> read_run(const std::string& path);

// Parses a MaxText log's lines (`text` read from `name`, named in errors).
Expected<RunRecord> parse_maxtext_log(const std::string& text, const std::string& name);

// Parses MaxText metrics_file JSON lines: learning/loss, perf/step_time_seconds,
// perf/per_device_tflops_per_sec (or perf/per_device_tflops / step time),
// perf/per_device_tokens_per_sec (or perf/per_device_tokens / step time), step.
Expected<std::vector<StepRecord>> parse_metrics_lines(const std::string& text,
                                                      const std::string& name);

}  // namespace precast
