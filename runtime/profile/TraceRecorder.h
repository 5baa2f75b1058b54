// Role: profiler=trace. Records, for each step of the profile window, the step's start and end
// and each program entry's (kernel, GEMM, attention kernel, collective, copies), then writes them
// as a Chrome trace (Trace Event Format JSON: chrome://tracing and Perfetto open it): one
// complete event ("ph":"X") per entry, named by its IR op and scope, and one per step, with the
// rank as pid and the thread that ran it as tid.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/artifact/Artifact.h"
#include "ir/support/Error.h"
#include "runtime/profile/ProfileSettings.h"
#include "runtime/profile/StepObserver.h"

namespace precast::runtime {

class TraceRecorder final : public StepObserver {
 public:
  // Records the profile window of a run of steps [first, `steps`) of `artifact`'s program (which
  // must outlive the recorder) for rank `rank`, where `first` is the first step it is told of
  // (the run's first, after a resume). Memory for the window's events is reserved then, so
  // recording allocates nothing.
  TraceRecorder(const artifact::Artifact& artifact, const ProfileSettings& settings, int64_t steps,
                int rank);

  bool step_begin(int64_t step) override;
  void step_end(int64_t step) override;
  void entry_begin(size_t index) override;
  void entry_end(size_t index) override;

  // Steps recorded so far (begun and ended inside the window).
  int64_t recorded_steps() const { return recorded_steps_; }
  size_t program_entries() const { return artifact_->program.size(); }
  // The trace as Chrome's JSON object format: {"traceEvents": [...], "displayTimeUnit": "ms",
  // "otherData": {...}}. Times are microseconds of the monotonic clock, to the nanosecond.
  std::string json() const;
  // Writes json() to `path` (its directory created): a temporary name, fsync, rename, directory
  // fsync. I/O errors (exit 1) name the file.
  Status write(const std::string& path) const;

 private:
  struct Event {
    int64_t step;
    int64_t entry;  // -1: the step itself
    int64_t begin_ns, end_ns;
    int tid;
  };
  const artifact::Artifact* artifact_;
  ProfileSettings settings_;
  int64_t steps_;
  bool started_ = false;
  ProfileWindow window_;
  int rank_;
  bool recording_ = false;
  int64_t step_ = 0;
  int tid_ = 0;
  int64_t step_begin_ns_ = 0, entry_begin_ns_ = 0;
  int64_t recorded_steps_ = 0;
  std::vector<Event> events_;
};

// {base_output_directory}/{run_name}/profile/trace-rank<r>.json
std::string trace_path(const std::string& base_output_directory, const std::string& run_name,
                       int rank);

}  // namespace precast::runtime
