// Turns an LLVM module into a relocatable ELF object for a chosen CPU target: sets the triple and
// data layout, runs LLVM's O3 pipeline (loop and SLP vectorisation on) and emits PIC code with
// the small code model into memory. The runtime links the object with ObjectLoader.
//
// Only the X86 and AArch64 targets are built in. LLVM headers stay out of this header so that
// callers which only emit (the driver) do not pay for them.
#pragma once

#include <string>
#include <vector>

#include "ir/support/Error.h"

namespace llvm {
class Module;
}

namespace precast::backend {

// What to generate code for. Empty fields mean "this machine".
struct TargetSpec {
  // An LLVM target triple ("x86_64-linux-gnu", "aarch64-linux-gnu"); empty: the host process's.
  std::string triple;
  // An LLVM CPU name ("x86-64-v3", "neoverse-v1"), or "host". Empty: "host" when the triple is
  // the host's, "generic" otherwise.
  std::string cpu;
  // Extra "+feature,-feature" list. Ignored (replaced by the host's full list) when the CPU
  // resolves to the host CPU.
  std::string features;
  // Map vectorisable math calls (expf, logf, ...) to glibc's libmvec (x86-64 Linux only).
  bool use_libmvec = true;
};

// The exact triple/CPU/feature strings handed to LLVM. Part of an artifact's compatibility key:
// the same strings give the same code.
struct ResolvedTarget {
  std::string triple;    // normalised, e.g. "x86_64-pc-linux-gnu"
  std::string cpu;       // never "host"
  std::string features;  // sorted "+a,+b,-c" list, may be empty
  bool is_host = false;  // the CPU and features were read from this machine
};

// Resolves and validates `spec`. An unknown triple, CPU or feature is a usage error naming it.
Expected<ResolvedTarget> resolve_target(const TargetSpec& spec);

// The feature list string actually used for `spec` (resolve_target(spec)->features).
Expected<std::string> target_features(const TargetSpec& spec);

// Optimises `module` in place (triple and data layout are overwritten) and returns the bytes of a
// relocatable ELF object. Precondition: `module` passes llvm::verifyModule (a module that does
// not is an internal error). Declarations (runtime-provided symbols) lose dso_local, so that the
// loader may bind them anywhere in the address space.
Expected<std::vector<char>> emit_object(llvm::Module& module, const TargetSpec& spec = {});

// The LLVM version the code generator was built with, e.g. "19.1.7".
std::string llvm_version();

}  // namespace precast::backend
