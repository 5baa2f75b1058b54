// Role: precast-run's training loop, llm.c style: next batch → step → metrics → log, over an
// artifact's step. The pieces live beside it: RunSettings (run-time keys), StepSignature (names
// bound to inputs and outputs), StepExecutable (object code, buffers, step calls), StateInit
// (parameters from init_weights_seed), DataSource (the batch), MetricsSink (log lines, JSON
// lines). Nothing here reads a config file: the caller resolves RunSettings from the artifact's
// recorded config and overrides.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string_view>
#include <vector>

#include "compiler/artifact/Artifact.h"
#include "ir/support/Error.h"
#include "runtime/eval/Sampler.h"
#include "runtime/train/MetricsSink.h"
#include "runtime/train/RunSettings.h"
#include "runtime/train/StepExecutable.h"
#include "runtime/train/TensorElements.h"

namespace precast::runtime {

struct TrainReport {
  int64_t arena_bytes = 0;     // allocated for the temp arena
  int64_t argument_bytes = 0;  // bound as step inputs
  int64_t output_bytes = 0;    // bound as step outputs (donated ones share their input's buffer)
  int64_t alias_bytes = 0;
  double load_seconds = 0;     // object code linked and symbols bound
  double init_seconds = 0;     // buffers allocated, parameters initialised, first batch written
  double logging_seconds = 0;  // formatting and writing log lines and metrics (inside steps)
  double peak_tflops = 0;      // perf/mfu's denominator: cpu_peak_tflops or the FMA probe
  std::vector<StepMetrics> steps;
  std::vector<EvalMetrics> evals;  // every evaluation, in order (eval_interval)
  std::optional<SampleResult> sample;  // sample_tokens > 0: the greedy sample after training
  std::vector<std::vector<uint8_t>> final_state;  // the last step's inputs, for tests
  bool aborted = false;  // NaN/Inf loss
};

struct TrainOptions {
  std::ostream* log = nullptr;  // MaxText's lines; null = silent
  bool keep_final_state = false;
  // One device of several (an MPI rank): the group communicator of each collective step, and
  // this device's coordinates along the artifact's mesh axes (its parameters and batch are its
  // pieces of the global ones). Null and empty: one process, device 0, a group of one.
  CommunicatorResolver communicator;
  std::vector<int64_t> mesh_coordinates;
  // This device's number (its MPI rank): the Memstats line's cpu:<device>. Device 0 alone
  // creates the run's output directories, writes config.yml and the TensorBoard events.
  int64_t device = 0;
  // Called before each step with its number (MpiWorld::set_step, for timeout messages).
  std::function<void(int64_t)> step_started;
  // Told of every step before and after it runs, in order (runtime/profile/StepObserver.h: the
  // hang watchdog, the profiler); the last that asks for a step's program entries gets them.
  std::vector<StepObserver*> observers;
  // Told of long work before the steps (restoring a checkpoint): stage, done, total (0: no
  // items); an empty stage when it is over. Null: nothing is told.
  std::function<void(std::string_view stage, int64_t done, int64_t total)> progress;
  // Several ranks' checkpoints: this rank (whose piece it saves and restores), every rank's mesh
  // coordinates (recorded beside the pieces) and a barrier over all ranks (pieces written, then
  // rank 0 commits).
  int64_t rank = 0;
  std::vector<std::vector<int64_t>> all_mesh_coordinates;
  std::function<Status()> barrier;
};

// Runs settings.steps steps. Errors: a signature whose names do not bind (StepSignature.h), a
// damaged object or an unbound symbol (exit 4), an I/O failure on the metrics file (exit 1). A
// NaN/Inf loss with abort_on_* set ends the loop with report.aborted (the caller exits 1, as
// MaxText does).
Expected<TrainReport> train(const artifact::Artifact& artifact, const RunSettings& settings,
                            const TrainOptions& options = {});

}  // namespace precast::runtime
