// The timing both checkpoint benchmarks use for a phase: wall seconds and this thread's CPU
// seconds (getrusage RUSAGE_THREAD: what the phase takes from a step's threads on a busy host),
// the fastest of several runs (a shared machine only ever slows a phase down).
#pragma once

#include <sys/resource.h>

#include <chrono>
#include <functional>

namespace precast::bench {

struct Timing {
  double wall = 1e30;
  double cpu = 0;
};

inline double thread_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
}

// The fastest of `reps` runs of `phase`, each after `before` (untimed).
inline Timing fastest(int reps, const std::function<void()>& before,
                      const std::function<void()>& phase) {
  Timing best;
  for (int r = 0; r < reps; ++r) {
    before();
    double cpu0 = thread_cpu_seconds();
    auto t0 = std::chrono::steady_clock::now();
    phase();
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double cpu = thread_cpu_seconds() - cpu0;
    if (wall < best.wall) best = {wall, cpu};
  }
  return best;
}

inline Timing fastest(int reps, const std::function<void()>& phase) {
  return fastest(reps, [] {}, phase);
}

}  // namespace precast::bench
