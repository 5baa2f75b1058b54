// Role: what the runtime knows about its MPI job before (or without) starting MPI: whether
// mpirun started this process, with how many ranks, and whether that fits the artifact. No MPI
// here, so precast-run checks it without linking MPI.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "compiler/artifact/Artifact.h"
#include "ir/support/Error.h"

namespace precast::runtime {

// The world size mpirun started this process in (Open MPI's OMPI_COMM_WORLD_SIZE), or nullopt
// when it was started without mpirun (or the variable is not a positive integer).
std::optional<int64_t> launched_world_size();

// Under mpirun with `world_size` ranks: success when it equals the artifact's device count,
// else an Error (exit 4) naming both counts and the mpirun command that fits.
Status check_world_size(const std::string& artifact_path, const artifact::CompatibilityKey& key,
                        int64_t world_size);

}  // namespace precast::runtime
