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

}  // namespace precast
