#include "runtime/metrics/PeakProbe.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

#include <fmt/format.h>

#include "runtime/kernels/ThreadPool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace precast::runtime {
namespace {

// Twelve independent accumulator chains: enough to keep two FMA units with a 4-cycle latency
// busy. Each function returns the FLOPs it did and a value the compiler cannot drop.
constexpr int kChains = 12;

struct ProbeResult {
  double flops = 0;
  float sink = 0;
};

#if defined(__x86_64__)
__attribute__((target("avx512f"))) ProbeResult fma_avx512(int64_t iterations) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(0.001f * static_cast<float>(c));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iterations; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  }
  __m512 total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm512_add_ps(total, acc[c]);
  alignas(64) float lanes[16];  // (_mm512_reduce_add_ps trips GCC 12's -Wuninitialized)
  _mm512_store_ps(lanes, total);
  float sum = 0;
  for (float l : lanes) sum += l;
  return {static_cast<double>(iterations) * kChains * 16 * 2, sum};
}

__attribute__((target("avx2,fma"))) ProbeResult fma_avx2(int64_t iterations) {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(0.001f * static_cast<float>(c));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iterations; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  }
  __m256 total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm256_add_ps(total, acc[c]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, total);
  float sum = 0;
  for (float l : lanes) sum += l;
  return {static_cast<double>(iterations) * kChains * 8 * 2, sum};
}
#endif

ProbeResult fma_scalar(int64_t iterations) {
  float acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = 0.001f * static_cast<float>(c);
  for (int64_t i = 0; i < iterations; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * 0.999999f + 1e-7f;
  }
  float sum = 0;
  for (float a : acc) sum += a;
  return {static_cast<double>(iterations) * kChains * 2, sum};
}

ProbeResult run_probe(int64_t iterations) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) return fma_avx512(iterations);
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return fma_avx2(iterations);
#endif
  return fma_scalar(iterations);
}

}  // namespace

double measure_peak_tflops(ThreadPool& pool) {
  const int threads = pool.num_threads();
  std::atomic<double> flops{0};
  std::atomic<float> sink{0};
  auto once = [&](int64_t iterations) {
    flops = 0;
    auto start = std::chrono::steady_clock::now();
    pool.parallel_for(threads, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        ProbeResult r = run_probe(iterations);
        flops.fetch_add(r.flops);
        sink.store(r.sink, std::memory_order_relaxed);
      }
    });
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return seconds > 0 ? flops.load() / seconds : 0.0;
  };
  once(20000);  // wakes the pool's threads and the vector units
  double best = 0;
  for (int repeat = 0; repeat < 3; ++repeat) best = std::max(best, once(400000));
  return best / 1e12;
}

double run_peak_tflops(double cpu_peak_tflops, ThreadPool& pool, std::ostream* log) {
  double peak = cpu_peak_tflops > 0 ? cpu_peak_tflops : measure_peak_tflops(pool);
  if (log != nullptr) {
    *log << fmt::format("Peak float32 rate: {:.3f} TFLOP/s per device ({})\n", peak,
                        cpu_peak_tflops > 0 ? "cpu_peak_tflops" : "FMA probe at start-up");
  }
  return peak;
}

}  // namespace precast::runtime
