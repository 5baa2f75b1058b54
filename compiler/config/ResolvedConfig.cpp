#include "compiler/config/ResolvedConfig.h"

#include "compiler/config/DerivedKeys.h"
#include "compiler/topology/CustomMesh.h"

namespace precast {

MeshRequest mesh_request(const Config& config) {
  MeshRequest request;
  request.axes = config.get_string_list("mesh_axes");
  for (const ConfigValue& v : config.get("ici_parallelism").as_list())
    request.ici.push_back(v.as_int());
  for (const ConfigValue& v : config.get("dcn_parallelism").as_list())
    request.dcn.push_back(v.as_int());
  request.num_devices = config.get_int("num_target_devices");
  request.num_slices = config.get_int("num_slices");
  return request;
}

Expected<ResolvedConfig> resolve_config(const ConfigRequest& request,
                                        const std::filesystem::path& topologies_file) {
  PRECAST_ASSIGN_OR_RETURN(Config config, load_config(request));
  PRECAST_ASSIGN_OR_RETURN(TopologyTable table, TopologyTable::load(topologies_file));
  Expected<Topology> topology = table.find(resolved_topology_name(config));
  if (!topology.ok()) {
    const ConfigEntry& entry = config.entry("compile_topology");
    return topology.error().with_context("compile_topology=" + entry.value.to_yaml() + " (" +
                                         entry.origin + ")");
  }
  int64_t slices = resolved_num_slices(config);
  PRECAST_RETURN_IF_ERROR(derive_keys(config, topology->devices(slices)));
  PRECAST_ASSIGN_OR_RETURN(Mesh mesh, build_mesh(mesh_request(config)));
  PRECAST_RETURN_IF_ERROR(apply_custom_mesh(mesh, config.get_string("custom_mesh"),
                                            config.get_bool("allow_split_physical_axes")));
  return ResolvedConfig{std::move(config), std::move(*topology), std::move(mesh)};
}

}  // namespace precast
