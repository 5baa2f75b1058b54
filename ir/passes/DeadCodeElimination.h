// Dead code elimination: erases ops none of whose results reaches a function result.
#pragma once

#include <vector>

#include "ir/Module.h"

namespace precast::ir {

// Precondition: none beyond a verified module (every op is pure, so any unused op may go;
// rng ops are counter-based and have no state to keep). Returns whether any op was erased.
Expected<bool> eliminate_dead_code(Module& module);

// The ops of `f` none of whose results reaches a function result (true = dead), for a pass
// that erases them itself (Function::erase_ops) because it must also renumber values it holds.
std::vector<bool> find_dead_ops(const Function& f);

}  // namespace precast::ir
