#include "runtime/profile/RunDiagnostics.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

namespace precast::runtime {

Expected<std::unique_ptr<RunDiagnostics>> RunDiagnostics::start(const artifact::Artifact& artifact,
                                                                const ProfileSettings& settings,
                                                                int64_t steps, int rank, int log_fd,
                                                                std::string trace_file) {
  auto d = std::make_unique<RunDiagnostics>();
  if (settings.collect_stack_trace) {
    PRECAST_ASSIGN_OR_RETURN(
        d->watchdog_,
        HangWatchdog::start(std::chrono::seconds(settings.stack_trace_interval_seconds), log_fd));
  }
  if (settings.trace) {
    d->recorder_ = std::make_unique<TraceRecorder>(artifact, settings, steps, rank);
    d->trace_file_ = std::move(trace_file);
  }
  return d;
}

std::vector<StepObserver*> RunDiagnostics::observers() const {
  std::vector<StepObserver*> out;
  if (watchdog_) out.push_back(watchdog_.get());
  if (recorder_) out.push_back(recorder_.get());
  return out;
}

Status RunDiagnostics::finish(std::ostream& log) {
  watchdog_.reset();
  if (!recorder_) return Status::success();
  PRECAST_RETURN_IF_ERROR(recorder_->write(trace_file_));
  log << fmt::format(
             "Wrote the profile trace of {} step(s) ({} program entries each) to {}; `precast "
             "profile summary {}` totals it\n",
             recorder_->recorded_steps(), recorder_->program_entries(), trace_file_, trace_file_)
      << std::flush;
  return Status::success();
}

RunDiagnostics::~RunDiagnostics() {
  watchdog_.reset();  // before its log closes
  if (owned_fd_ >= 0) close(owned_fd_);
}

Expected<std::unique_ptr<RunDiagnostics>> start_run_diagnostics(
    const artifact::Artifact& artifact, const ProfileSettings& settings, int64_t steps, int rank,
    const std::string& base_output_directory, const std::string& run_name) {
  int log_fd = STDOUT_FILENO;
  int owned = -1;
  if (settings.collect_stack_trace && rank != 0) {
    std::filesystem::path log = std::filesystem::path(base_output_directory) / run_name / "logs" /
                                fmt::format("rank-{}.log", rank);
    owned = open(log.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (owned < 0) {
      return Error(ExitCode::kFailure,
                   fmt::format("rank {}: cannot open {} for its stack traces: {}", rank,
                               log.string(), std::strerror(errno)));
    }
    log_fd = owned;
  }
  Expected<std::unique_ptr<RunDiagnostics>> d = RunDiagnostics::start(
      artifact, settings, steps, rank, log_fd, trace_path(base_output_directory, run_name, rank));
  if (!d.ok()) {
    if (owned >= 0) close(owned);
    return d;
  }
  (*d)->owned_fd_ = owned;
  return d;
}

}  // namespace precast::runtime
