// Links a relocatable ELF object (from compiler/backend/cpu/ObjectEmitter) into this process
// with LLVM's JITLink and hands out its functions by name. Uses no LLVM optimiser or code
// generator: only the linker, the object reader and the EH-frame registration.
//
// External symbols are bound explicitly from the caller's table. Names missing from it may be
// taken from glibc's libmvec (vector math, `_ZGV*`) and libm (with the libc it depends on, for
// memcpy/memset); anything else left unresolved is an error that lists the names.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ir/support/Error.h"

namespace precast::runtime {

// Name → address of the runtime functions and data the object may reference.
using SymbolTable = std::unordered_map<std::string, const void*>;

struct LoadOptions {
  // Resolve `_ZGV*` names missing from the table from libmvec.so.1.
  bool resolve_from_libmvec = true;
  // Resolve other names missing from the table from libm.so.6 (and the libc it links).
  bool resolve_from_libm = true;
  // Shown in error messages ("<name>: ...").
  std::string object_name = "object";
};

// Linked code and data in this process's memory. Destroying it deregisters the EH frames and
// frees the memory: no function pointer taken from it may be used afterwards.
class LoadedObject {
 public:
  LoadedObject(LoadedObject&&) noexcept;
  LoadedObject& operator=(LoadedObject&&) noexcept;
  ~LoadedObject();

  // The address of a global (non-local) symbol the object defines, or nullptr.
  void* find(std::string_view name) const;
  // As find(), but a missing symbol is an Error (kIncompatible) naming it.
  Expected<void*> lookup(std::string_view name) const;
  // lookup() cast to a function pointer type, e.g. function<void(float*, int64_t)>("add").
  template <typename Signature>
  Expected<Signature*> function(std::string_view name) const {
    Expected<void*> address = lookup(name);
    if (!address.ok()) return address.error();
    return reinterpret_cast<Signature*>(*address);
  }

  // Names of the global symbols the object defines, sorted.
  std::vector<std::string> defined_symbols() const;
  // Bytes of code and data linked (GOT and PLT stubs included), for the memory report.
  size_t linked_bytes() const;

  struct State;  // LLVM-side state, defined in ObjectLoader.cpp
  explicit LoadedObject(std::unique_ptr<State> state);

 private:
  std::unique_ptr<State> state_;
};

// Links `object` (the bytes of an ELF relocatable object for this machine's architecture) into
// this process. Static initialisers (.init_array) are not run: the compiler emits none. A
// malformed or foreign object is an Error with ExitCode::kIncompatible; symbols
// nothing resolves are an Error (kIncompatible) listing every one.
// The LLVM release whose JITLink this loader links (e.g. "19.1.7").
std::string loader_llvm_version();

Expected<LoadedObject> load_object(const char* object, size_t size, const SymbolTable& symbols,
                                   const LoadOptions& options = {});
inline Expected<LoadedObject> load_object(const std::vector<char>& object,
                                          const SymbolTable& symbols,
                                          const LoadOptions& options = {}) {
  return load_object(object.data(), object.size(), symbols, options);
}

}  // namespace precast::runtime
