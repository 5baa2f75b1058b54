// The resolved config as an artifact records it, shared by `precast compile` (which writes it)
// and `precast-run CONFIG` (which compares a config against it, key by key).
#pragma once

#include <vector>

#include "compiler/artifact/Artifact.h"
#include "compiler/config/Config.h"

namespace precast {

// Every key of the resolved config: its printed value and its phase (compile or run).
std::vector<artifact::ConfigEntry> artifact_config(const Config& config);

}  // namespace precast
