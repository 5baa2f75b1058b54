// Role: MaxText's load_parameters_path and load_full_state_path: a run that has no checkpoint of
// its own starts from tensors saved elsewhere. The source is a Precast checkpoint step directory
// (verified as a resume is), a checkpoint_dir (its latest committed step), or, for parameters, a
// safetensors file written by any program with this artifact's names. Sources hold global
// tensors; each device copies its own piece (TensorShard), so one file serves every mesh.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "compiler/artifact/Artifact.h"
#include "ir/support/Error.h"

namespace precast::runtime {

// One input of the step to fill: its signature (per-device shape, global sharding) and buffer.
struct StateDestination {
  const artifact::TensorSignature* tensor = nullptr;
  void* data = nullptr;
};

// load_parameters_path: every destination (the parameters) by name from `path`. Tensors of the
// source that are not parameters (optimizer moments of a full checkpoint) are ignored. A
// floating-point source of another precision is converted (rounded to nearest even), and said so
// on `log`. Errors (exit 4) name the source and each missing or misshapen tensor; an unreadable
// or damaged source is exit 4 naming the file.
Status load_parameters(const std::string& path, std::span<const StateDestination> parameters,
                       const std::vector<artifact::MeshAxis>& mesh,
                       std::span<const int64_t> coordinates, std::ostream* log);

// load_full_state_path: parameters and optimizer state (every destination, exact dtypes and
// shapes) from a Precast checkpoint at `path`. Returns the step it holds: the run goes on at the
// next one, as MaxText's restored TrainState does. Errors (exit 4) as above; a safetensors file is
// refused (it records no step).
Expected<int64_t> load_full_state(const std::string& path,
                                  std::span<const StateDestination> state,
                                  const std::vector<artifact::MeshAxis>& mesh,
                                  std::span<const int64_t> coordinates, std::ostream* log);

}  // namespace precast::runtime
