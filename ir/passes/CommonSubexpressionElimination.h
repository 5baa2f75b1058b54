// Common subexpression elimination: an op equal to an earlier one (same kind, operands,
// attributes, result types, axis names and checkpoint name) is replaced by it and erased.
#pragma once

#include "ir/Module.h"

namespace precast::ir {

// Precondition: a verified module. Axis names and checkpoint names are part of an op's
// identity, so merging never drops a sharding annotation or a remat save point; scopes are
// not (the first op's scope is kept). Returns whether any op was merged.
Expected<bool> eliminate_common_subexpressions(Module& module);

}  // namespace precast::ir
