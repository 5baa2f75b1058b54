// Role: the start-up lines of a run in MaxText's formats that describe this host and device:
// the CPU line and `Memstats: After params initialized:` with its per-device `Using (GB)` line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace precast::runtime {

// MaxText's print_mem_stats block for one device: "\nMemstats: After params initialized:\n"
// then "\tUsing (GB) {round(used/2^30, 2)} / {round(limit/2^30, 2)} ({used/limit:%}) on
// cpu:{device}\n", the numbers printed as Python prints them (0.01, 1.5, 62.0; the percentage with
// 6 decimals).
std::string memstats_lines(int64_t used_bytes, int64_t limit_bytes, int64_t device);

// Physical memory of this host in bytes (a CPU device's limit); 0 when unknown.
int64_t host_memory_bytes();

// "CPU: <model name from /proc/cpuinfo>, <n> threads for this device"
std::string cpu_line(int threads);

// Python's repr of round(x, 2): the shortest text that reads back, ".0" on whole numbers.
std::string python_round2(double x);

// Python's repr of a list of strings: ['a', 'b'].
std::string python_string_list(const std::vector<std::string>& items);

}  // namespace precast::runtime
