// Role: what precast-run starts for a run's profile keys, in one place: the hang watchdog
// (collect_stack_trace) and the trace recorder (profiler=trace), their observers for the
// training loop, and the trace file written at the end.
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "compiler/artifact/Artifact.h"
#include "ir/support/Error.h"
#include "runtime/profile/HangWatchdog.h"
#include "runtime/profile/ProfileSettings.h"
#include "runtime/profile/TraceRecorder.h"

namespace precast::runtime {

class RunDiagnostics {
 public:
  // Starts what `settings` asks for, for a run of `steps` steps on rank `rank` whose log is
  // `log_fd` (stack traces are written there); the trace goes to `trace_file` at finish().
  static Expected<std::unique_ptr<RunDiagnostics>> start(const artifact::Artifact& artifact,
                                                         const ProfileSettings& settings,
                                                         int64_t steps, int rank, int log_fd,
                                                         std::string trace_file);
  // For TrainOptions::observers: the watchdog first (its test-only stall comes before the
  // step's timing), then the recorder.
  std::vector<StepObserver*> observers() const;
  // Writes the trace (atomically) and says so on `log`; stops the watchdog.
  Status finish(std::ostream& log);
  ~RunDiagnostics();

 private:
  friend Expected<std::unique_ptr<RunDiagnostics>> start_run_diagnostics(const artifact::Artifact&,
                                                                         const ProfileSettings&,
                                                                         int64_t, int,
                                                                         const std::string&,
                                                                         const std::string&);
  int owned_fd_ = -1;  // a rank's log, opened for its stack traces
  std::unique_ptr<HangWatchdog> watchdog_;
  std::unique_ptr<TraceRecorder> recorder_;
  std::string trace_file_;
};

// precast-run's: stack traces go to standard output on rank 0 and are appended to
// {base_output_directory}/{run_name}/logs/rank-<r>.log on rank r > 0 (the rank's log); the trace
// to trace_path(base_output_directory, run_name, rank). A log that cannot be opened: exit 1.
Expected<std::unique_ptr<RunDiagnostics>> start_run_diagnostics(
    const artifact::Artifact& artifact, const ProfileSettings& settings, int64_t steps, int rank,
    const std::string& base_output_directory, const std::string& run_name);

}  // namespace precast::runtime
