// Scope names ("decoder/layers_3/mlp/wi/backward"): '/'-separated components that say, for
// people reading dumps and reports, where an op comes from. They are names only: what passes and
// analyses ask about an op (its phase, decoder layer, region) are the op's facts (ir::OpFacts in
// Module.h); tools/lint_scope_strings.sh keeps compiler logic off scope strings.
#pragma once

namespace precast::ir {

// Components the compiler appends to a forward op's scope name: its backward ops ("backward")
// and the recomputation of it that remat inserts ("remat").
inline constexpr const char* kBackwardScope = "backward";
inline constexpr const char* kRematScope = "remat";

}  // namespace precast::ir
