#include "compiler/driver/ArtifactConfig.h"

#include "compiler/config/KeyRegistry.h"

namespace precast {

std::vector<artifact::ConfigEntry> artifact_config(const Config& config) {
  std::vector<artifact::ConfigEntry> out;
  for (const auto& [key, entry] : config.entries()) {
    const KeySpec* spec = find_key(key);
    artifact::ConfigEntry e;
    e.key = key;
    e.value = entry.value.is_string() ? entry.value.as_string() : entry.value.to_python();
    // Derived keys follow from compile-time ones; a key the registry does not know is compared.
    e.phase = spec != nullptr && spec->phase == KeyPhase::kRunTime ? artifact::ConfigPhase::kRun
                                                                   : artifact::ConfigPhase::kCompile;
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace precast
