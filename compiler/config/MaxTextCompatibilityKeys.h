// The MaxText keys Precast accepts for compatibility but does not implement: each is either
// "accepted; no effect on the plan" or "not supported yet" (refused unless left at its default).
// KeyRegistry.cpp merges them into the one registry; nothing else includes this header.
#pragma once

#include <span>

#include "compiler/config/KeyRegistry.h"

namespace precast {

std::span<const KeySpec> maxtext_compatibility_keys();

}  // namespace precast
