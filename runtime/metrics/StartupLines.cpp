#include "runtime/metrics/StartupLines.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <fstream>

namespace precast::runtime {

std::string python_round2(double x) {
  double rounded = std::round(x * 100.0) / 100.0;
  std::string text = fmt::format("{}", rounded);
  if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
  return text;
}

std::string python_string_list(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", '" : "'") + items[i] + "'";
  return out + "]";
}

std::string memstats_lines(int64_t used_bytes, int64_t limit_bytes, int64_t device) {
  const double gib = 1024.0 * 1024.0 * 1024.0;
  double fraction =
      limit_bytes > 0 ? static_cast<double>(used_bytes) / static_cast<double>(limit_bytes) : 0;
  return fmt::format(
      "\nMemstats: After params initialized:\n\tUsing (GB) {} / {} ({:.6f}%) on cpu:{}\n",
      python_round2(static_cast<double>(used_bytes) / gib),
      python_round2(static_cast<double>(limit_bytes) / gib), fraction * 100.0, device);
}

int64_t host_memory_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<int64_t>(pages) * static_cast<int64_t>(page_size);
}

std::string cpu_line(int threads) {
  std::string model = "unknown";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) model = line.substr(line.find_first_not_of(' ', colon + 1));
      break;
    }
  }
  return fmt::format("CPU: {}, {} threads for this device", model, threads);
}

}  // namespace precast::runtime
