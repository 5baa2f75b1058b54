#include "runtime/checkpoint/CheckpointWriter.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <string_view>
#include <utility>

namespace precast::checkpoint {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The background writer runs at the step's priority by default. A low priority (nice 19) was
// measured on a shared 2-core machine (benchmarks/README.md, issue 17): it made saves yield to
// every other process there too (saves of 1.61 GB took 81-255 s instead of 18-39, the runs 341
// and 739 s instead of 141 and 199), and on a dedicated host it can only move the same CPU work
// to another moment. PRECAST_CHECKPOINT_WRITER_NICE (benchmarks only) sets a nice value for the
// writer thread (setpriority on its thread id changes that thread alone on Linux); a save that
// has not finished when the next is due is waited for either way (CheckpointWriter::save).
// PRECAST_CHECKPOINT_WRITER_SCHED=idle (benchmarks only) asks for the writer thread alone under
// SCHED_IDLE: it then runs only on a core no other thread wants (benchmarks/README.md weighs it).
// PRECAST_CHECKPOINT_COPY=caller (benchmarks only): the snapshot copy stays on the caller's thread
// inside save() even where copy_on_writer(true) asks for the writer's, for paired comparisons.
bool caller_copy_requested() {
  const char* where = std::getenv("PRECAST_CHECKPOINT_COPY");
  return where != nullptr && std::string_view(where) == "caller";
}

bool writer_idle_requested() {
  const char* policy = std::getenv("PRECAST_CHECKPOINT_WRITER_SCHED");
  return policy != nullptr && std::string_view(policy) == "idle";
}

// Sets `thread`'s scheduling policy; false when the system refuses it (an unprivileged
// thread cannot leave SCHED_IDLE: sched(7), RLIMIT_NICE).
bool set_policy(pthread_t thread, int policy) {
  sched_param param{};
  param.sched_priority = 0;
  return ::pthread_setschedparam(thread, policy, &param) == 0;
}

void set_writer_nice() {
  const char* text = std::getenv("PRECAST_CHECKPOINT_WRITER_NICE");
  int nice_value = text == nullptr ? 0 : std::atoi(text);
  if (nice_value <= 0) return;
  ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), nice_value);
}

int64_t state_bytes(const std::vector<TensorView>& state) {
  int64_t total = 0;
  for (const TensorView& t : state) total += tensor_view_bytes(t);
  return total;
}

// Copies the bytes [from, to) of the tensors' concatenation, each tensor's to its offset in
// `snapshot`.
void copy_concatenated_range(const std::vector<TensorView>& state,
                             const std::vector<size_t>& offsets, char* snapshot, size_t from,
                             size_t to) {
  size_t offset = 0;
  for (size_t i = 0; i < state.size(); ++i) {
    const auto n = static_cast<size_t>(tensor_view_bytes(state[i]));
    const size_t begin = std::max(from, offset), end = std::min(to, offset + n);
    if (begin < end) {
      std::memcpy(snapshot + offsets[i] + (begin - offset),
                  static_cast<const char*>(state[i].data) + (begin - offset), end - begin);
    }
    offset += n;
  }
}

// Threads copying an asynchronous save's snapshot: the training thread alone. Two were measured
// only on a loaded shared machine, where the second thread found no free core and the copy took
// longer (benchmarks/README.md); bench_checkpoint_phases prints both for a quiet host to decide.
constexpr int kSnapshotCopyThreads = 1;

}  // namespace

void copy_into_snapshot(const std::vector<TensorView>& state, const std::vector<size_t>& offsets,
                        char* snapshot, int threads) {
  const auto total = static_cast<size_t>(state_bytes(state));
  threads = std::max(1, threads);
  // Below a few MiB a thread's start costs more than it saves.
  if (total < (size_t{8} << 20)) threads = 1;
  std::vector<std::thread> helpers;
  auto boundary = [&](int k) {
    return total / static_cast<size_t>(threads) * static_cast<size_t>(k);
  };
  for (int k = 0; k + 1 < threads; ++k) {
    helpers.emplace_back(copy_concatenated_range, std::cref(state), std::cref(offsets), snapshot,
                         boundary(k), boundary(k + 1));
  }
  copy_concatenated_range(state, offsets, snapshot, boundary(threads - 1), total);
  for (std::thread& t : helpers) t.join();
}

CheckpointWriter::~CheckpointWriter() {
  if (worker_.joinable()) worker_.join();
}

void CheckpointWriter::FreeSnapshot::operator()(char* p) const { std::free(p); }

void CheckpointWriter::reserve_snapshot(size_t bytes, bool touch) {
  if (bytes <= snapshot_capacity_ && snapshot_ != nullptr) return;
  // aligned_alloc wants a multiple of the alignment; at least one block.
  const size_t capacity =
      std::max<size_t>(1, (bytes + kDirectIoAlignment - 1) / kDirectIoAlignment) *
      kDirectIoAlignment;
  snapshot_.reset();
  snapshot_capacity_ = 0;
  char* p = static_cast<char*>(std::aligned_alloc(kDirectIoAlignment, capacity));
  if (p == nullptr) throw std::bad_alloc();  // as std::vector's allocation did
  snapshot_.reset(p);
  snapshot_capacity_ = capacity;
  if (touch) std::memset(p, 0, capacity);
}

Status CheckpointWriter::wait() {
  if (worker_.joinable()) {
    {
      // Someone waits for the save now: a writer under SCHED_IDLE goes back to the step's
      // policy, so that the wait is bounded by its remaining work (where the system allows it;
      // otherwise the wait lasts as long as other threads keep the cores busy).
      std::lock_guard<std::mutex> lock(priority_mutex_);
      waiting_ = true;
      if (writer_idle_ && set_policy(worker_.native_handle(), SCHED_OTHER)) writer_idle_ = false;
    }
    worker_.join();
    std::lock_guard<std::mutex> lock(priority_mutex_);
    waiting_ = false;
    writer_idle_ = false;
  }
  in_flight_step_ = -1;
  std::lock_guard<std::mutex> lock(mutex_);
  if (result_) {
    Error error = std::move(*result_);
    result_.reset();
    return error;
  }
  return Status::success();
}

bool CheckpointWriter::copy_on_writer(bool on) {
  copy_on_writer_ = asynchronous_ && on && !caller_copy_requested();
  return copy_on_writer_;
}

double CheckpointWriter::release_state() {
  std::unique_lock<std::mutex> lock(state_mutex_);
  if (!state_in_use_) return 0;
  auto start = Clock::now();
  state_released_.wait(lock, [this] { return !state_in_use_; });
  const double waited = seconds_since(start);
  lock.unlock();
  std::lock_guard<std::mutex> results(mutex_);
  state_waits_.push_back({in_flight_step_, waited});
  return waited;
}

double CheckpointWriter::prepare(const std::vector<TensorView>& state) {
  if (!asynchronous_) return 0;
  auto start = Clock::now();
  size_t bytes = 0;
  snapshot_offsets(state, &bytes);
  reserve_snapshot(bytes, /*touch=*/true);
  return seconds_since(start);
}

Status CheckpointWriter::finish(std::ostream* log) {
  const int64_t step = in_flight_step_;
  const bool in_flight = worker_.joinable();
  auto start = Clock::now();
  Status status = wait();
  if (in_flight && log != nullptr) {
    *log << fmt::format("waited {:.3f} s at the end of the run for the asynchronous save of step "
                        "{} to finish\n",
                        seconds_since(start), step);
  }
  return status;
}

std::vector<CompletedSave> CheckpointWriter::take_completed() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<CompletedSave> done = std::exchange(completed_, {});
  for (CompletedSave& save : done) {
    for (const auto& [step, waited] : state_waits_) {
      if (step == save.step) save.state_wait_seconds += waited;
    }
    std::erase_if(state_waits_, [&](const auto& w) { return w.first == save.step; });
  }
  return done;
}

Status CheckpointWriter::save(const std::string& root, int64_t step,
                              const CheckpointIdentity& identity,
                              const std::vector<TensorView>& state, int64_t max_to_keep,
                              const std::string& data_position) {
  PRECAST_RETURN_IF_ERROR(wait());  // at most one save in flight
  const int64_t bytes = state_bytes(state);
  if (!asynchronous_) {
    auto start = Clock::now();
    WriteReport report;
    PRECAST_RETURN_IF_ERROR(
        save_checkpoint(root, step, identity, state, max_to_keep, data_position, &report));
    std::lock_guard<std::mutex> lock(mutex_);
    completed_.push_back({step, seconds_since(start), 0, false, 0, bytes, report.direct_bytes});
    return Status::success();
  }
  // The copy: the loop's buffers are free again once it returns.
  in_flight_step_ = step;
  // Each state file's tensors one after another from an aligned offset of the buffer
  // (snapshot_offsets): one aligned range per file for the writer.
  size_t snapshot_bytes = 0;
  const std::vector<size_t> offsets = snapshot_offsets(state, &snapshot_bytes);
  reserve_snapshot(snapshot_bytes, /*touch=*/false);
  std::vector<TensorView> copied;
  copied.reserve(state.size());
  for (size_t i = 0; i < state.size(); ++i) {
    const TensorView& t = state[i];
    copied.push_back({t.name, t.dtype, t.shape, snapshot_.get() + offsets[i]});
  }
  // The copy: on the caller's thread (the loop's buffers are free again once save() returns), or
  // the writer's first task (the loop calls release_state() before it writes them).
  const bool writer_copies = copy_on_writer_;
  double copy_seconds = 0;
  std::vector<TensorView> sources;
  if (writer_copies) {
    sources = state;
    std::lock_guard<std::mutex> lock(state_mutex_);
    state_in_use_ = true;
  } else {
    auto copy_start = Clock::now();
    copy_into_snapshot(state, offsets, snapshot_.get(), kSnapshotCopyThreads);
    copy_seconds = seconds_since(copy_start);
  }
  worker_ = std::thread([this, root, step, identity, max_to_keep, bytes, data_position,
                         copy_seconds, writer_copies, sources = std::move(sources), offsets,
                         views = std::move(copied)]() mutable {
    if (writer_copies) {
      // At the step's priority: the loop may be waiting for it.
      auto copy_start = Clock::now();
      copy_into_snapshot(sources, offsets, snapshot_.get(), kSnapshotCopyThreads);
      copy_seconds = seconds_since(copy_start);
      {
        std::lock_guard<std::mutex> lock(state_mutex_);
        state_in_use_ = false;
      }
      state_released_.notify_all();
    }
    if (writer_idle_requested()) {
      std::lock_guard<std::mutex> lock(priority_mutex_);
      if (!waiting_) writer_idle_ = set_policy(::pthread_self(), SCHED_IDLE);
    }
    set_writer_nice();
    auto start = Clock::now();
    WriteReport report;
    Status status =
        save_checkpoint(root, step, identity, views, max_to_keep, data_position, &report);
    double seconds = seconds_since(start);
    std::lock_guard<std::mutex> lock(mutex_);
    if (!status.ok()) {
      result_ = status.error();
      return;
    }
    completed_.push_back({step, seconds, copy_seconds, writer_copies, 0, bytes, report.direct_bytes});
  });
  return Status::success();
}

}  // namespace precast::checkpoint
