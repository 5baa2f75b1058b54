// Role: runs one typed collective step of an artifact's program (artifact::Collective) through
// a Communicator: its group checked against the communicator's, its byte count turned into
// element counts, the call dispatched by kind.
#pragma once

#include <cstdint>
#include <vector>

#include "compiler/artifact/Artifact.h"
#include "ir/support/Error.h"
#include "runtime/collectives/Communicator.h"

namespace precast::runtime {

// The number of devices one group of the collective spans: the size of its replica groups when
// given, else the product of its mesh axes' sizes in `mesh`. An unknown axis or unequal groups
// are an Error (exit 4) naming them.
Expected<int64_t> collective_group_size(const artifact::Collective& collective,
                                        const std::vector<artifact::MeshAxis>& mesh);

// Whether `comm` can run it: a known dtype, a whole number of elements that the group splits
// where the kind splits, and a group the size of the communicator's. Errors (exit 4) name the
// collective.
Status check_collective(const artifact::Collective& collective,
                        const std::vector<artifact::MeshAxis>& mesh, const Communicator& comm);

// Runs it from `operand` (collective.bytes) into `result`. Precondition: check_collective.
Status run_collective(const artifact::Collective& collective, const void* operand, void* result,
                      Communicator& comm);

}  // namespace precast::runtime
