// The IR-level passes under one registry: dce, cse, simplify, decompose-composites.
#pragma once

#include "ir/PassManager.h"

namespace precast::ir {

// Adds this folder's passes to `registry` (compiler passes register theirs the same way).
Status register_ir_passes(PassRegistry& registry);

}  // namespace precast::ir
