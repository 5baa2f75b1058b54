#include "compiler/config/ArtifactConfig.h"

#include "compiler/artifact/Compatibility.h"
#include "compiler/config/KeyRegistry.h"
#include "compiler/config/ResolvedConfig.h"

namespace precast {

std::vector<artifact::ConfigEntry> artifact_config(const Config& config) {
  std::vector<artifact::ConfigEntry> out;
  for (const auto& [key, entry] : config.entries()) {
    const KeySpec* spec = find_key(key);
    artifact::ConfigEntry e;
    e.key = key;
    e.value = entry.value.is_string() ? entry.value.as_string() : entry.value.to_python();
    // steps and learning_rate_schedule_steps take each other's value when -1 (MaxText's rule);
    // the runtime resolves that again after run-time overrides, so a derived value is recorded
    // as the -1 it came from: `precast-run step.pcx steps=60` then schedules over 60 steps.
    if (entry.source == ValueSource::kDerived &&
        (key == "steps" || key == "learning_rate_schedule_steps")) {
      e.value = "-1";
    }
    // Derived keys follow from compile-time ones; a key the registry does not know is compared.
    e.phase = spec != nullptr && spec->phase == KeyPhase::kRunTime ? artifact::ConfigPhase::kRun
                                                                   : artifact::ConfigPhase::kCompile;
    out.push_back(std::move(e));
  }
  return out;
}

Expected<std::vector<artifact::ConfigEntry>> require_config_matches_artifact(
    const ConfigRequest& request, const std::filesystem::path& topologies_file,
    const std::filesystem::path& artifact_path, const artifact::Artifact& artifact) {
  PRECAST_ASSIGN_OR_RETURN(ResolvedConfig resolved, resolve_config(request, topologies_file));
  std::vector<artifact::ConfigEntry> given = artifact_config(resolved.config);
  PRECAST_RETURN_IF_ERROR(
      artifact::require_same_compile_time_config(artifact_path, artifact.config, given));
  return given;
}

}  // namespace precast
