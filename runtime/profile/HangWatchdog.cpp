#include "runtime/profile/HangWatchdog.h"

#include <execinfo.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace precast::runtime {
namespace {

// Everything below up to the class is called from signal handlers: only system calls,
// atomics and fixed-size buffers.
std::atomic<int> g_log_fd{-1};
std::atomic<int> g_answered{0};  // the thread id whose handler finished writing its stack
std::atomic<bool> g_dumping{false};
std::atomic<bool> g_installed{false};
int g_dump_signal = 0;

constexpr int kFatalSignals[] = {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL};
constexpr const char* kFatalNames[] = {"SIGSEGV", "SIGABRT", "SIGBUS", "SIGFPE", "SIGILL"};
struct sigaction g_previous_fatal[std::size(kFatalSignals)];
struct sigaction g_previous_dump;

constexpr int kMaxThreads = 1024;
constexpr int64_t kAnswerNs = 2'000'000'000;  // how long one thread may take to write its stack

int thread_id() {
  return static_cast<int>(syscall(SYS_gettid));
}

int64_t monotonic_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

void write_text(int fd, const char* text, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, text, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    text += w;
    n -= static_cast<size_t>(w);
  }
}
void write_text(int fd, const char* text) {
  write_text(fd, text, std::strlen(text));
}

void write_number(int fd, int64_t value) {
  char digits[24];
  int n = 0;
  uint64_t v = value < 0 ? 0 - static_cast<uint64_t>(value) : static_cast<uint64_t>(value);
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v > 0);
  if (value < 0) digits[n++] = '-';
  char out[24];
  for (int i = 0; i < n; ++i) out[i] = digits[n - 1 - i];
  write_text(fd, out, static_cast<size_t>(n));
}

void write_own_stack(int fd) {
  void* frames[64];
  int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, fd);
}

// The process's thread ids from /proc/self/task, ascending; the count (at most `capacity`).
int list_threads(int* tids, int capacity) {
  int dir = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return 0;
  int count = 0;
  alignas(8) char buffer[4096];
  for (;;) {
    long bytes = syscall(SYS_getdents64, dir, buffer, sizeof buffer);
    if (bytes <= 0) break;
    for (long offset = 0; offset < bytes;) {
      // struct linux_dirent64: u64 inode, s64 offset, u16 record length, u8 type, name.
      unsigned short length;
      std::memcpy(&length, buffer + offset + 16, sizeof length);
      const char* name = buffer + offset + 19;
      if (name[0] >= '0' && name[0] <= '9' && count < capacity) {
        int tid = 0;
        for (const char* c = name; *c >= '0' && *c <= '9'; ++c) tid = tid * 10 + (*c - '0');
        tids[count++] = tid;
      }
      offset += length;
    }
  }
  close(dir);
  for (int i = 1; i < count; ++i) {  // insertion sort: no library call
    for (int j = i; j > 0 && tids[j - 1] > tids[j]; --j) std::swap(tids[j - 1], tids[j]);
  }
  return count;
}

// /proc/self/task/<tid>/comm into `name` (without its newline).
void thread_name(int tid, char* name, size_t capacity) {
  char path[64] = "/proc/self/task/";
  size_t at = std::strlen(path);
  char digits[16];
  int n = 0;
  for (int v = tid; v > 0; v /= 10) digits[n++] = static_cast<char>('0' + v % 10);
  while (n > 0) path[at++] = digits[--n];
  std::memcpy(path + at, "/comm", 6);
  name[0] = '\0';
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t r = read(fd, name, capacity - 1);
  close(fd);
  if (r < 0) r = 0;
  name[r] = '\0';
  if (r > 0 && name[r - 1] == '\n') name[r - 1] = '\0';
}

void on_dump_signal(int) {
  int saved = errno;
  int fd = g_log_fd.load();
  if (fd >= 0) write_own_stack(fd);
  g_answered.store(thread_id());
  errno = saved;
}

void on_fatal_signal(int signal, siginfo_t*, void*) {
  const char* name = "a fatal signal";
  for (size_t i = 0; i < std::size(kFatalSignals); ++i) {
    if (kFatalSignals[i] == signal) name = kFatalNames[i];
  }
  char why[96] = "fatal signal ";
  std::strncat(why, name, sizeof why - std::strlen(why) - 1);
  int fd = g_log_fd.load();
  if (fd >= 0) dump_all_thread_stacks(fd, why);
  // The default action (terminate, core) once this handler returns: the signal is blocked in
  // its own handler, so the raise stays pending until then.
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  sigaction(signal, &fallback, nullptr);
  raise(signal);
}

}  // namespace

void dump_all_thread_stacks(int fd, const char* why) {
  bool idle = false;
  if (!g_dumping.compare_exchange_strong(idle, true)) return;  // one dump at a time
  int tids[kMaxThreads];
  int count = list_threads(tids, kMaxThreads);
  int self = thread_id();
  write_text(fd, "\nPrecast stack traces: ");
  write_text(fd, why);
  write_text(fd, " (");
  write_number(fd, count);
  write_text(fd, " threads)\n");
  for (int i = 0; i < count; ++i) {
    char name[64];
    thread_name(tids[i], name, sizeof name);
    write_text(fd, "Thread ");
    write_number(fd, tids[i]);
    write_text(fd, " (");
    write_text(fd, name);
    write_text(fd, tids[i] == self ? "), the reporting thread:\n" : "):\n");
    if (tids[i] == self) {
      write_own_stack(fd);
      continue;
    }
    g_answered.store(0);
    if (syscall(SYS_tgkill, getpid(), tids[i], g_dump_signal) != 0) {
      write_text(fd, "  (the thread has exited)\n");
      continue;
    }
    int64_t deadline = monotonic_ns() + kAnswerNs;
    while (g_answered.load() != tids[i] && monotonic_ns() < deadline) {
      timespec pause{0, 1'000'000};
      nanosleep(&pause, nullptr);
    }
    if (g_answered.load() != tids[i]) {
      write_text(fd,
                 "  (no answer within 2 s: the thread blocks the signal or is stuck in the "
                 "kernel)\n");
    }
  }
  write_text(fd, "End of stack traces (");
  write_number(fd, count);
  write_text(fd, " threads)\n");
  g_dumping.store(false);
}

HangWatchdog::HangWatchdog(std::chrono::seconds interval, int log_fd)
    : interval_(interval), log_fd_(log_fd), last_progress_ns_(monotonic_ns()) {
  const char* step = std::getenv("PRECAST_TEST_STALL_STEP");
  const char* seconds = std::getenv("PRECAST_TEST_STALL_SECONDS");
  if (step != nullptr && seconds != nullptr) {
    stall_step_ = std::strtoll(step, nullptr, 10);
    stall_seconds_ = std::strtoll(seconds, nullptr, 10);
  }
}

Expected<std::unique_ptr<HangWatchdog>> HangWatchdog::start(std::chrono::seconds interval,
                                                            int log_fd) {
  bool none = false;
  if (!g_installed.compare_exchange_strong(none, true)) {
    return internal_error("a second hang watchdog was started while one runs");
  }
  // backtrace() loads libgcc's unwinder on its first call, which allocates: call it once here,
  // outside any handler.
  void* warm[4];
  backtrace(warm, 4);
  g_dump_signal = SIGRTMIN + 5;
  g_log_fd.store(log_fd);

  struct sigaction dump {};
  dump.sa_handler = on_dump_signal;
  sigemptyset(&dump.sa_mask);
  dump.sa_flags = SA_RESTART;
  sigaction(g_dump_signal, &dump, &g_previous_dump);
  struct sigaction fatal {};
  fatal.sa_sigaction = on_fatal_signal;
  sigemptyset(&fatal.sa_mask);
  fatal.sa_flags = SA_SIGINFO;
  for (size_t i = 0; i < std::size(kFatalSignals); ++i) {
    sigaction(kFatalSignals[i], &fatal, &g_previous_fatal[i]);
  }
  std::unique_ptr<HangWatchdog> watchdog(new HangWatchdog(interval, log_fd));
  watchdog->thread_ = std::thread([w = watchdog.get()] { w->watch(); });
  return watchdog;
}

HangWatchdog::~HangWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (size_t i = 0; i < std::size(kFatalSignals); ++i) {
    sigaction(kFatalSignals[i], &g_previous_fatal[i], nullptr);
  }
  sigaction(g_dump_signal, &g_previous_dump, nullptr);
  g_log_fd.store(-1);
  g_installed.store(false);
}

bool HangWatchdog::step_begin(int64_t step) {
  running_step_.store(step);
  if (step == stall_step_ && stall_seconds_ > 0) {
    std::this_thread::sleep_for(std::chrono::seconds(stall_seconds_));
  }
  return false;
}

void HangWatchdog::step_end(int64_t /*step*/) {
  last_progress_ns_.store(monotonic_ns());
}

void HangWatchdog::watch() {
  pthread_setname_np(pthread_self(), "precast-watch");
  const int64_t interval_ns = std::chrono::nanoseconds(interval_).count();
  int64_t last_report_ns = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    int64_t since = std::max(last_progress_ns_.load(), last_report_ns);
    int64_t wait_ns = std::max<int64_t>(since + interval_ns - monotonic_ns(), 0);
    // Woken early only to stop; a step's progress moves the deadline, checked on waking.
    wake_.wait_for(lock, std::chrono::nanoseconds(wait_ns) + std::chrono::milliseconds(1),
                   [this] { return stopping_; });
    if (stopping_) break;
    int64_t now = monotonic_ns();
    since = std::max(last_progress_ns_.load(), last_report_ns);
    if (now - since < interval_ns) continue;
    int64_t step = running_step_.load();
    std::string why = fmt::format(
        "no training step completed in {} s (stack_trace_interval_seconds={}; {})",
        (now - last_progress_ns_.load()) / 1'000'000'000, interval_.count(),
        step < 0 ? std::string("before the first step") : fmt::format("step {} running", step));
    lock.unlock();
    dump_all_thread_stacks(log_fd_, why.c_str());
    lock.lock();
    last_report_ns = monotonic_ns();
  }
}

}  // namespace precast::runtime
