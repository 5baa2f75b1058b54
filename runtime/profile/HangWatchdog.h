// Role: collect_stack_trace. A watchdog thread writes every thread's stack to the log when no
// training step completes within stack_trace_interval_seconds (again after each further
// interval), and a handler writes them on a fatal signal (SIGSEGV, SIGABRT, SIGBUS, SIGFPE,
// SIGILL) before the signal takes its default action. Each thread writes its own stack from a
// handler of a real-time signal sent to it alone (tgkill), one thread at a time, with
// backtrace()/backtrace_symbols_fd() straight to the log's file descriptor: nothing in a handler
// allocates or locks.
//
// Test-only hook: PRECAST_TEST_STALL_STEP=N with PRECAST_TEST_STALL_SECONDS=S makes step N
// sleep S seconds before it runs (tests/runtime/hang_diagnostics_test.py), a stalled step.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

#include "ir/support/Error.h"
#include "runtime/profile/StepObserver.h"

namespace precast::runtime {

class HangWatchdog final : public StepObserver {
 public:
  // Installs the handlers and starts the watchdog thread; stacks go to `log_fd`. One watchdog
  // per process: a second start while one runs is an internal error.
  static Expected<std::unique_ptr<HangWatchdog>> start(std::chrono::seconds interval, int log_fd);
  // Stops the thread and restores the previous signal handlers.
  ~HangWatchdog() override;
  HangWatchdog(const HangWatchdog&) = delete;
  HangWatchdog& operator=(const HangWatchdog&) = delete;

  bool step_begin(int64_t step) override;  // never asks for entries
  void step_end(int64_t step) override;    // a completed step: the interval starts again
  void entry_begin(size_t) override {}
  void entry_end(size_t) override {}

 private:
  HangWatchdog(std::chrono::seconds interval, int log_fd);
  void watch();

  const std::chrono::seconds interval_;
  const int log_fd_;
  std::atomic<int64_t> running_step_{-1};
  std::atomic<int64_t> last_progress_ns_;
  int64_t stall_step_ = -1, stall_seconds_ = 0;  // the test-only hook
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

// Writes every thread's stack to `fd`, after a line saying `why`, from the calling thread (which
// must not be one that has the dump signal blocked). Async-signal-safe.
void dump_all_thread_stacks(int fd, const char* why);

}  // namespace precast::runtime
