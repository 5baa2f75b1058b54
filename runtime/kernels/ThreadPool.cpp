// The thread pool: static chunking, dynamic claiming, spin-then-block waiting.
#include "runtime/kernels/ThreadPool.h"

#include <sched.h>

#include <algorithm>

#include "runtime/kernels/RuntimeContext.h"

namespace precast {
namespace {

// Set while the thread runs chunks of a parallel_for; a nested parallel_for then runs inline.
thread_local bool tls_in_parallel_region = false;

class ParallelRegionScope {
 public:
  ParallelRegionScope() : previous_(tls_in_parallel_region) { tls_in_parallel_region = true; }
  ~ParallelRegionScope() { tls_in_parallel_region = previous_; }
  ParallelRegionScope(const ParallelRegionScope&) = delete;
  ParallelRegionScope& operator=(const ParallelRegionScope&) = delete;

 private:
  bool previous_;
};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// Epochs wrap around; `epoch` is closed when it is not newer than `closed`.
bool epoch_closed(uint32_t closed, uint32_t epoch) {
  return static_cast<int32_t>(closed - epoch) >= 0;
}

// Returns the value of `word` once it differs from `old`: polls for `spin`, then blocks (a
// futex on Linux).
uint32_t wait_for_change(const std::atomic<uint32_t>& word, uint32_t old,
                         std::chrono::microseconds spin) {
  if (spin.count() > 0) {
    // The clock is read only every 64 polls (the first read after them): most waits end sooner.
    std::chrono::steady_clock::time_point deadline;
    for (uint32_t i = 1;; ++i) {
      uint32_t value = word.load(std::memory_order_acquire);
      if (value != old) return value;
      cpu_relax();
      if (i % 64 != 0) continue;
      auto now = std::chrono::steady_clock::now();
      if (i == 64) deadline = now + spin;
      if (now >= deadline) break;
    }
  }
  while (true) {
    word.wait(old, std::memory_order_acquire);
    uint32_t value = word.load(std::memory_order_acquire);
    if (value != old) return value;
  }
}

}  // namespace

int64_t chunk_count(int64_t n, int num_threads) {
  if (n <= 0) return 0;
  return std::min<int64_t>(n, std::max(num_threads, 1));
}

ChunkRange chunk_range(int64_t n, int num_threads, int64_t index) {
  int64_t chunks = chunk_count(n, num_threads);
  int64_t base = n / chunks;
  int64_t extra = n % chunks;
  int64_t begin = index * base + std::min(index, extra);
  return {begin, begin + base + (index < extra ? 1 : 0)};
}

int default_thread_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(CPU_COUNT(&set), 1);
  return std::max(static_cast<int>(std::thread::hardware_concurrency()), 1);
}

ThreadPool::ThreadPool(int num_threads, std::chrono::microseconds spin)
    : num_threads_(num_threads > 0 ? num_threads : default_thread_count()), spin_(spin) {
  workers_.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  stopping_.store(true, std::memory_order_relaxed);
  job_epoch_.fetch_add(1, std::memory_order_release);
  job_epoch_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

bool ThreadPool::in_parallel_region() {
  return tls_in_parallel_region;
}

void ThreadPool::run_inline(int64_t n, ParallelBody body, void* ctx) const {
  ParallelRegionScope region;
  int64_t chunks = chunk_count(n, num_threads_);
  for (int64_t i = 0; i < chunks; ++i) {
    ChunkRange range = chunk_range(n, num_threads_, i);
    body(ctx, range.begin, range.end);
  }
}

void ThreadPool::run_chunks() {
  ParallelRegionScope region;
  while (true) {
    int64_t index = next_chunk_.fetch_add(1, std::memory_order_relaxed);
    if (index >= num_chunks_) return;
    ChunkRange range = chunk_range(n_, num_threads_, index);
    body_(ctx_, range.begin, range.end);
  }
}

void ThreadPool::parallel_for(int64_t n, ParallelBody body, void* ctx) {
  if (n <= 0) return;
  // Nested or single-chunk work runs on this thread, chunk by chunk, with the same boundaries.
  if (num_threads_ == 1 || n == 1 || tls_in_parallel_region) {
    run_inline(n, body, ctx);
    return;
  }
  std::lock_guard<std::mutex> lock(submit_mutex_);
  body_ = body;
  ctx_ = ctx;
  n_ = n;
  num_chunks_ = chunk_count(n, num_threads_);
  next_chunk_.store(0, std::memory_order_relaxed);
  uint32_t epoch = job_epoch_.load(std::memory_order_relaxed) + 1;
  job_epoch_.store(epoch, std::memory_order_release);
  job_epoch_.notify_all();  // no system call unless a worker sleeps

  run_chunks();

  // Every chunk is claimed: close the job, then wait for the workers inside it to leave.
  closed_epoch_.store(epoch, std::memory_order_seq_cst);
  uint32_t active = active_workers_.load(std::memory_order_seq_cst);
  while (active != 0) active = wait_for_change(active_workers_, active, spin_);
}

void ThreadPool::worker_loop() {
  // Epoch 0 is "no job yet": a job or the destructor may come before this thread starts.
  uint32_t seen = 0;
  while (true) {
    uint32_t epoch = wait_for_change(job_epoch_, seen, spin_);
    if (stopping_.load(std::memory_order_relaxed)) return;
    seen = epoch;
    // Join, then make sure the job was still open when we joined (see ThreadPool.h).
    active_workers_.fetch_add(1, std::memory_order_seq_cst);
    if (!epoch_closed(closed_epoch_.load(std::memory_order_seq_cst), epoch)) run_chunks();
    if (active_workers_.fetch_sub(1, std::memory_order_seq_cst) == 1) {
      active_workers_.notify_one();
    }
  }
}

}  // namespace precast

extern "C" void precast_parallel_for(const void* context, int64_t n,
                                     void (*body)(void* ctx, int64_t begin, int64_t end),
                                     void* ctx) {
  precast::ThreadPool* pool =
      context != nullptr ? static_cast<const precast::RuntimeContext*>(context)->pool : nullptr;
  if (pool == nullptr) {
    if (n > 0) body(ctx, 0, n);
    return;
  }
  pool->parallel_for(n, body, ctx);
}
