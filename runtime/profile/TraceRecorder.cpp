#include "runtime/profile/TraceRecorder.h"

#include <fmt/format.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <system_error>

#include "runtime/checkpoint/DurableFile.h"
#include "runtime/checkpoint/JsonValue.h"

namespace precast::runtime {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int current_tid() {
  return static_cast<int>(syscall(SYS_gettid));
}

// Nanoseconds as the microseconds the format counts in, exactly: "1234.567".
std::string micros(int64_t ns) {
  return fmt::format("{}.{:03}", ns / 1000, ns % 1000);
}

std::string entry_name(const artifact::Step& step) {
  std::string op = step.op.empty() ? std::string(artifact::step_kind_name(step.kind)) : step.op;
  return step.scope.empty() ? op : op + " " + step.scope;
}

}  // namespace

TraceRecorder::TraceRecorder(const artifact::Artifact& artifact, const ProfileSettings& settings,
                             int64_t steps, int rank)
    : artifact_(&artifact), settings_(settings), steps_(steps), rank_(rank) {}

bool TraceRecorder::step_begin(int64_t step) {
  if (!started_) {
    started_ = true;
    window_ = profile_window(settings_, step, steps_);
    auto profiled = static_cast<size_t>(window_.end - window_.begin);
    events_.reserve(profiled * (artifact_->program.size() + 1));
  }
  recording_ = window_.contains(step);
  if (!recording_) return false;
  step_ = step;
  tid_ = current_tid();  // the step's entries run on the thread that runs the step
  step_begin_ns_ = now_ns();
  return true;
}

void TraceRecorder::step_end(int64_t step) {
  if (!recording_) return;
  events_.push_back({step, -1, step_begin_ns_, now_ns(), tid_});
  ++recorded_steps_;
  recording_ = false;
}

void TraceRecorder::entry_begin(size_t /*index*/) {
  entry_begin_ns_ = now_ns();
}

void TraceRecorder::entry_end(size_t index) {
  int64_t end = now_ns();
  events_.push_back({step_, static_cast<int64_t>(index), entry_begin_ns_, end, tid_});
}

std::string TraceRecorder::json() const {
  using checkpoint::json_quote;
  std::string out = "{\"traceEvents\": [\n";
  out += fmt::format(
      "{{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": {}, \"args\": {{\"name\": "
      "\"rank {}\"}}}}",
      rank_, rank_);
  std::vector<int> named;
  for (const Event& e : events_) {
    bool seen = false;
    for (int t : named) seen = seen || t == e.tid;
    if (seen) continue;
    named.push_back(e.tid);
    out += fmt::format(
        ",\n{{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": {}, \"tid\": {}, \"args\": "
        "{{\"name\": \"{}\"}}}}",
        rank_, e.tid, named.size() == 1 ? "step program" : fmt::format("thread {}", e.tid));
  }
  for (const Event& e : events_) {
    std::string head =
        fmt::format(",\n{{\"ph\": \"X\", \"pid\": {}, \"tid\": {}, \"ts\": {}, \"dur\": {}, ",
                    rank_, e.tid, micros(e.begin_ns), micros(e.end_ns - e.begin_ns));
    if (e.entry < 0) {
      out += head + fmt::format(
                        "\"name\": \"step {}\", \"cat\": \"step\", \"args\": {{\"step\": "
                        "{}}}}}",
                        e.step, e.step);
      continue;
    }
    const artifact::Step& step = artifact_->program[static_cast<size_t>(e.entry)];
    std::string op = step.op.empty() ? std::string(artifact::step_kind_name(step.kind)) : step.op;
    out += head + fmt::format(
                      "\"name\": {}, \"cat\": \"{}\", \"args\": {{\"op\": {}, \"scope\": {}, "
                      "\"entry\": {}, \"step\": {}, \"symbol\": {}}}}}",
                      json_quote(entry_name(step)), artifact::step_kind_name(step.kind),
                      json_quote(op), json_quote(step.scope), e.entry, e.step,
                      json_quote(step.symbol));
  }
  out += fmt::format(
      "\n],\n\"displayTimeUnit\": \"ms\",\n\"otherData\": {{\"producer\": \"precast-run "
      "profiler=trace\", \"rank\": {}, \"program_entries\": {}, \"first_step\": {}, "
      "\"profiled_steps\": {}}}}}\n",
      rank_, artifact_->program.size(), window_.begin, recorded_steps_);
  return out;
}

Status TraceRecorder::write(const std::string& path) const {
  namespace fs = std::filesystem;
  fs::path target(path);
  fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return Error(ExitCode::kFailure, fmt::format("cannot create {} for the profile trace: {}",
                                                 dir.string(), ec.message()));
  }
  static std::atomic<int> counter{0};
  fs::path temp = dir / fmt::format(".{}.tmp.{}.{}", target.filename().string(), getpid(),
                                    counter.fetch_add(1));
  std::string text = json();
  Status written = checkpoint::write_file_durably(temp.string(), {{text.data(), text.size()}});
  if (!written.ok()) {
    fs::remove(temp, ec);
    return written;
  }
  fs::rename(temp, target, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(temp, ignored);
    return Error(ExitCode::kFailure, fmt::format("cannot rename {} to {}: {}", temp.string(),
                                                 target.string(), ec.message()));
  }
  return checkpoint::sync_directory(dir.string());
}

std::string trace_path(const std::string& base_output_directory, const std::string& run_name,
                       int rank) {
  std::string base = base_output_directory.empty() ? "./maxtext_output" : base_output_directory;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  return fmt::format("{}/{}/profile/trace-rank{}.json", base, run_name, rank);
}

}  // namespace precast::runtime
