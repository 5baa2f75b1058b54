// Where each value of a function lives while the generated step runs, read off its MemoryPlan:
// a parameter's buffer, an output buffer, an arena offset, the buffer of the value a reshape
// shares, or nowhere (a fused value computed inside its users). No LLVM here.
#pragma once

#include <cstdint>
#include <vector>

#include "compiler/analysis/BufferAssignment.h"
#include "ir/Module.h"
#include "ir/support/Error.h"

namespace precast::backend {

enum class StorageKind : uint8_t {
  kFused,     // no buffer: computed inside each user (elementwise, broadcast, reshape, constant)
  kArgument,  // args[index]
  kOutput,    // outputs[index]
  kArena,     // arena + index
  kEmpty,     // zero bytes: any pointer will do, nothing is read or written
};

struct ValueStorage {
  StorageKind kind = StorageKind::kFused;
  int64_t index = 0;  // parameter number, result number or arena offset

  bool materialised() const { return kind != StorageKind::kFused; }
  friend bool operator==(const ValueStorage&, const ValueStorage&) = default;
};

// What the entry does after the last kernel so that outputs[k] holds result k.
struct ResultCopy {
  size_t result = 0;   // k
  ValueStorage from;   // copied into outputs[k] (skipped at run time when it is outputs[k])
  int64_t bytes = 0;
};

struct StepStorage {
  std::vector<ValueStorage> values;  // by value id
  std::vector<ResultCopy> copies;
};

// Reconstructs the plan's placement (see BufferAssignment.cpp): temp buffers at their offsets;
// output buffers in outputs[k] for the first result k returning the value; a result aliasing a
// donated parameter written in place into args[p] when the plan gives it no buffer, else
// copied there from its temp at the end; reshapes without a buffer of their own share their
// operand's. Errors (internal) when the plan does not fit the function.
Expected<StepStorage> resolve_storage(const ir::Function& function, const MemoryPlan& plan);

}  // namespace precast::backend
