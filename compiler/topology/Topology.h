// Target topologies (configs/topologies.yml): TPU slices from MaxText's table, GPU hosts and
// cpu-N, each with per-device memory, peak FLOP/s and link bandwidths.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ir/support/Error.h"

namespace precast {

struct Topology {
  std::string name;                            // "v5p-128"
  std::string platform;                        // "tpu" | "gpu" | "cpu"
  std::string generation;                      // "v5p", "h100", "cpu"
  std::string topology_name;                   // "v5:4x4x4"
  std::vector<int64_t> physical_shape;         // {4, 4, 4}
  std::vector<int64_t> chips_per_host_bounds;  // {2, 2, 1}
  std::vector<bool> wrap;
  int64_t chips = 0, devices_per_chip = 1, devices_per_slice = 0, chips_per_host = 0,
          hosts_per_slice = 0;
  int64_t memory_bytes_per_device = 0;
  std::map<std::string, double> peak_flops_per_device;  // dtype name -> FLOP/s
  double ici_bytes_per_second_per_device = 0;
  double dcn_bytes_per_second_per_host = 0;
  std::string memory_source, flops_source, bandwidth_source;

  int64_t devices(int64_t num_slices) const { return devices_per_slice * num_slices; }
};

class TopologyTable {
 public:
  // Errors name the file, the line and the entry.
  static Expected<TopologyTable> load(const std::filesystem::path& yml_path);

  // Listed topologies and GPU aliases; `cpu-N` (and `cpu` = cpu-1) is synthesized for any N >= 1.
  Expected<Topology> find(std::string_view name) const;
  const std::vector<Topology>& all() const { return topologies_; }

 private:
  std::vector<Topology> topologies_;
  std::map<std::string, size_t, std::less<>> index_;  // name or alias -> topologies_ position
  Topology cpu_template_;
};

// `precast topologies`: one aligned row per topology.
std::string format_topology_table(const TopologyTable& table);

}  // namespace precast
