// Byte counts as people read them: binary units (GiB = 2^30 bytes), two decimals.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>

namespace precast {

inline double to_gib(int64_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0);
}

// "512 B", "1.50 KiB", ..., "1.48 TiB".
inline std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.2f} {}", value, units[unit]);
}

}  // namespace precast
