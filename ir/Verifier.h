// The verifier: the rules every module must satisfy before and after every pass. Checks SSA
// (definition before use, unique names), each op against its table row and shape rule, axis
// name lists, and function results. The first violation comes back as an Error naming the op
// as printed (e.g. "m.ir:12: in @f, %5 = dot_general: contract dimension pair 0: ...").
#pragma once

#include <string_view>

#include "ir/Module.h"

namespace precast::ir {

// Errors carry ExitCode::kUsage (the IR is bad input); the pass manager rewraps them as
// internal errors when a pass produced the module.
Status verify_module(const Module& module);
Status verify_function(const Function& function, std::string_view source_name = {});

}  // namespace precast::ir
