// Role: the CPU's peak float32 rate, measured at start-up by a short FMA probe (a few ms) on every
// thread of the run's pool: the denominator of perf/mfu when cpu_peak_tflops is not given.
#pragma once

#include <ostream>

namespace precast {
class ThreadPool;
}

namespace precast::runtime {

// TFLOP/s of independent float32 fused multiply-adds (2 FLOPs each) in the widest vectors this
// CPU has (AVX-512, AVX2 + FMA, else scalar), all of the pool's threads at once; the best of a few
// repetitions after a warm-up. Takes a few milliseconds.
double measure_peak_tflops(ThreadPool& pool);

// A run's peak: `cpu_peak_tflops` when > 0, else measure_peak_tflops(pool). With a log, prints
// "Peak float32 rate: X TFLOP/s per device (cpu_peak_tflops | FMA probe at start-up)".
double run_peak_tflops(double cpu_peak_tflops, ThreadPool& pool, std::ostream* log);

}  // namespace precast::runtime
