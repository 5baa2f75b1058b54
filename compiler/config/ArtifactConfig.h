// The resolved config as an artifact records it, shared by `precast compile` (which writes it)
// and `precast-run CONFIG` (which compares a config against it, key by key).
#pragma once

#include <filesystem>
#include <vector>

#include "compiler/artifact/Artifact.h"
#include "compiler/config/Config.h"

namespace precast {

// Every key of the resolved config: its printed value and its phase (compile or run).
std::vector<artifact::ConfigEntry> artifact_config(const Config& config);

// Resolves `request` against `topologies_file` and compares every compile-time key with the
// artifact's recorded config (exit 4 naming each differing key with both values). Returns the
// resolved config's entries, whose run-time values the caller applies to the run.
Expected<std::vector<artifact::ConfigEntry>> require_config_matches_artifact(
    const ConfigRequest& request, const std::filesystem::path& topologies_file,
    const std::filesystem::path& artifact_path, const artifact::Artifact& artifact);

}  // namespace precast
