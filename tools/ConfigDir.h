// Where the command-line tools find configs/: $PRECAST_CONFIG_DIR, else the source tree they were
// built from (PRECAST_SOURCE_DIR, set by CMake on each tool).
#pragma once

#include <cstdlib>
#include <filesystem>

namespace precast {

inline std::filesystem::path config_dir() {
  if (const char* dir = std::getenv("PRECAST_CONFIG_DIR"); dir != nullptr && *dir != '\0') {
    return dir;
  }
  return std::filesystem::path(PRECAST_SOURCE_DIR) / "configs";
}

}  // namespace precast
