// Dead code elimination: erases ops none of whose results reaches a function result.
#pragma once

#include "ir/Module.h"

namespace precast::ir {

// Precondition: none beyond a verified module (every op is pure, so any unused op may go;
// rng ops are counter-based and have no state to keep). Returns whether any op was erased.
Expected<bool> eliminate_dead_code(Module& module);

}  // namespace precast::ir
