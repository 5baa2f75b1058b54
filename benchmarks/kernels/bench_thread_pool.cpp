// Cost of an empty parallel_for: back to back (workers still polling) and after the workers have
// gone to sleep (a futex wake per call). Prints a Markdown table of the median ns per call.
// Usage: bench_thread_pool [--calls N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "runtime/kernels/RuntimeContext.h"
#include "runtime/kernels/ThreadPool.h"

namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

void empty_body(void*, int64_t, int64_t) {}

// ns per call of `calls` back-to-back empty parallel_for over n = threads items.
double back_to_back_ns(precast::ThreadPool& pool, int calls) {
  auto start = std::chrono::steady_clock::now();
  precast::RuntimeContext context{precast::GemmImpl::kOpenBlas, &pool, {}};
  for (int i = 0; i < calls; ++i)
    precast_parallel_for(&context, pool.num_threads(), empty_body, nullptr);
  auto elapsed = std::chrono::steady_clock::now() - start;
  return std::chrono::duration<double, std::nano>(elapsed).count() / calls;
}

// ns of one empty parallel_for whose workers are asleep (called after a pause).
double after_sleep_ns(precast::ThreadPool& pool, int calls) {
  std::vector<double> samples;
  precast::RuntimeContext context{precast::GemmImpl::kOpenBlas, &pool, {}};
  for (int i = 0; i < calls; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    auto start = std::chrono::steady_clock::now();
    precast_parallel_for(&context, pool.num_threads(), empty_body, nullptr);
    auto elapsed = std::chrono::steady_clock::now() - start;
    samples.push_back(std::chrono::duration<double, std::nano>(elapsed).count());
  }
  return median(samples);
}

}  // namespace

int main(int argc, char** argv) {
  int calls = 200000;
  if (argc == 3 && std::strcmp(argv[1], "--calls") == 0) {
    calls = std::atoi(argv[2]);
  } else if (argc != 1 || calls <= 0) {
    std::fprintf(stderr, "usage: bench_thread_pool [--calls N]\n");
    return 2;
  }
  std::printf("| threads | spin µs | back-to-back ns/call | after sleep ns/call |\n");
  std::printf("|---|---|---|---|\n");
  for (int threads : {1, 2}) {
    for (std::chrono::microseconds spin :
         {precast::ThreadPool::kDefaultSpin, std::chrono::microseconds(0)}) {
      precast::ThreadPool pool(threads, spin);
      back_to_back_ns(pool, calls / 10);  // warm up
      std::vector<double> runs;
      for (int run = 0; run < 5; ++run) runs.push_back(back_to_back_ns(pool, calls / 5));
      std::printf("| %d | %lld | %.0f | %.0f |\n", threads, static_cast<long long>(spin.count()),
                  median(runs), after_sleep_ns(pool, 200));
    }
  }
  return 0;
}
