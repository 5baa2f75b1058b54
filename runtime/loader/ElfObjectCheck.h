// Structural checks on a relocatable ELF object before JITLink reads it. JITLink trusts much of
// its input in release builds (a relocation offset past its section is written to blindly), so
// a damaged object must be caught here to be an error rather than a crash.
#pragma once

#include <cstddef>
#include <string>

#include "ir/support/Error.h"

namespace precast::runtime {

// Checks that `object` is a 64-bit little-endian ELF relocatable object for this machine's
// architecture, that every section lies inside it, that symbol and string references are in
// range, and that every relocation (with the bytes its fixup reads or writes) lies inside its
// section. Errors are ExitCode::kIncompatible, prefixed with `object_name`.
Status check_elf_object(const char* object, size_t size, const std::string& object_name);

}  // namespace precast::runtime
