// The runtime's fixed-size thread pool. Compiled kernels split their outer loops over it through
// precast_parallel_for; the GEMM entry point splits its work over it too.
//
// Determinism is a product invariant (DESIGN.md, invariant 5): how [0, n) is cut into chunks
// depends only on n and the pool's thread count, never on timing, so a work item always runs
// the same arithmetic. Which thread runs a chunk may vary from call to call; what the chunk
// computes does not.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace precast {

// Half-open index range [begin, end).
struct ChunkRange {
  int64_t begin = 0;
  int64_t end = 0;
};

// Number of chunks parallel_for cuts [0, n) into with `num_threads` threads: min(n, num_threads),
// 0 when n <= 0.
int64_t chunk_count(int64_t n, int num_threads);

// Chunk `index` of [0, n): contiguous, in order, sizes differing by at most one (the first
// n % chunks chunks are one longer). Precondition: 0 <= index < chunk_count(n, num_threads).
ChunkRange chunk_range(int64_t n, int num_threads, int64_t index);

// The cores this process may run on (its CPU affinity mask), at least 1.
int default_thread_count();

// Signature of a loop body as generated code passes it: runs indices [begin, end).
using ParallelBody = void (*)(void* ctx, int64_t begin, int64_t end);

class ThreadPool {
 public:
  // How long a waiting thread polls before it blocks in the kernel (a futex): long enough to
  // catch the next loop of a step without a system call, short enough not to hold a shared
  // core for long after the last one.
  static constexpr std::chrono::microseconds kDefaultSpin{50};

  // Starts num_threads - 1 workers; the thread calling parallel_for is the last participant.
  // num_threads <= 0 means default_thread_count().
  explicit ThreadPool(int num_threads = 0, std::chrono::microseconds spin = kDefaultSpin);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Runs body(ctx, begin, end) once for each chunk_range(n, num_threads(), i) and returns when
  // all have finished. Idle participants claim the next chunk, so the caller (which runs chunks
  // too) never waits for a worker that has not woken up. A call from inside any pool's body runs
  // its chunks one after another on the calling thread (same chunks, no deadlock); calls from
  // several outside threads at once take turns. The body must not throw.
  void parallel_for(int64_t n, ParallelBody body, void* ctx);

  // Same, for any callable fn(int64_t begin, int64_t end).
  template <typename Fn>
  void parallel_for(int64_t n, Fn&& fn) {
    auto trampoline = [](void* ctx, int64_t begin, int64_t end) {
      (*static_cast<std::remove_reference_t<Fn>*>(ctx))(begin, end);
    };
    parallel_for(n, trampoline, const_cast<void*>(static_cast<const void*>(&fn)));
  }

  // True while the calling thread runs a chunk of some pool's parallel_for.
  static bool in_parallel_region();

 private:
  void worker_loop();
  // Claims and runs chunks of the current job until none is left.
  void run_chunks();
  void run_inline(int64_t n, ParallelBody body, void* ctx) const;

  const int num_threads_;
  const std::chrono::microseconds spin_;
  std::vector<std::thread> workers_;
  std::mutex submit_mutex_;  // one job at a time from outside threads

  // The current job; written by the submitting thread before it publishes job_epoch_.
  ParallelBody body_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_ = 0;
  int64_t num_chunks_ = 0;
  std::atomic<int64_t> next_chunk_{0};

  // Epoch of the newest job (workers wait for it to change) and of the newest closed one. A
  // worker joins a job by incrementing active_workers_ and then checking that the job is not
  // closed; the submitter closes the job once every chunk is claimed and waits for
  // active_workers_ to reach zero, so no worker still reads the job when the next one is written.
  std::atomic<uint32_t> job_epoch_{0};
  std::atomic<uint32_t> closed_epoch_{0};
  std::atomic<uint32_t> active_workers_{0};
  std::atomic<bool> stopping_{false};
};

}  // namespace precast

// C ABI for generated code: `context` is the step's const precast::RuntimeContext*
// (RuntimeContext.h); its pool splits [0, n). A null context or pool runs body(ctx, 0, n) on the
// calling thread (one thread, one chunk).
extern "C" void precast_parallel_for(const void* context, int64_t n,
                                     void (*body)(void* ctx, int64_t begin, int64_t end),
                                     void* ctx);
