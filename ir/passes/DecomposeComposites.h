// Replaces composite ops (attention, ...) by the primitives their op-table decomposition emits.
#pragma once

#include "ir/Module.h"

namespace precast::ir {

// Precondition: a verified module. The primitives inherit the composite's scope; its result
// keeps the composite's axis names, value name and checkpoint name. Functions are rebuilt, so
// Value handles into them are invalidated. Returns whether any composite was found.
Expected<bool> decompose_composites(Module& module);

}  // namespace precast::ir
