// A config resolved against a target: layered, every key derived, the topology found and the
// device mesh built. Shared by the compiler driver (which analyses and compiles it) and
// precast-run (which compares it with an artifact), so it needs nothing above config/topology.
#pragma once

#include <filesystem>

#include "compiler/config/Config.h"
#include "compiler/topology/Mesh.h"
#include "compiler/topology/Topology.h"

namespace precast {

struct ResolvedConfig {
  Config config;
  Topology topology;
  Mesh mesh;
};

// The mesh the config asks for: mesh_axes, ici/dcn_parallelism, num_target_devices, num_slices.
MeshRequest mesh_request(const Config& config);

// Loads and layers the config, finds the topology (configs/topologies.yml beside the config
// tree), derives every key and builds the mesh.
Expected<ResolvedConfig> resolve_config(const ConfigRequest& request,
                                        const std::filesystem::path& topologies_file);

}  // namespace precast
