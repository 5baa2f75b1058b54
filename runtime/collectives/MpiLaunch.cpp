#include "runtime/collectives/MpiLaunch.h"

#include <fmt/format.h>

#include <cstdlib>

namespace precast::runtime {

std::optional<int64_t> launched_world_size() {
  const char* value = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (value == nullptr || *value == '\0') return std::nullopt;
  char* end = nullptr;
  long long size = std::strtoll(value, &end, 10);
  if (*end != '\0' || size < 1) return std::nullopt;
  return static_cast<int64_t>(size);
}

Status check_world_size(const std::string& artifact_path, const artifact::CompatibilityKey& key,
                        int64_t world_size) {
  if (world_size == key.num_devices) return Status::success();
  std::string fix =
      fmt::format("start it with `mpirun -np {} precast-run {}`", key.num_devices, artifact_path);
  if (key.num_devices == 1) fix += " or without mpirun";
  return Error(ExitCode::kIncompatible,
               fmt::format("{} is compiled for {} device{} (topology {}) but mpirun started {} "
                           "rank{} (OMPI_COMM_WORLD_SIZE); one rank runs one device: {}, or "
                           "compile it for {} devices",
                           artifact_path, key.num_devices, key.num_devices == 1 ? "" : "s",
                           key.topology_name.empty() ? "unnamed" : key.topology_name, world_size,
                           world_size == 1 ? "" : "s", fix, world_size));
}

}  // namespace precast::runtime
