// Internal to compiler/backend/cpu: emits the kernel(s) computing one op's materialised
// results into their buffers, as calls from the step entry.
#pragma once

#include <cstddef>

#include "compiler/backend/cpu/Emitter.h"

namespace precast::backend::cpu {

struct KernelCounts {
  size_t gemm_calls = 0;
  size_t naive_dots = 0;
};

// Emits op `index` (whose results are not all fused). Errors are recorded in the emitter.
void emit_op(Emitter& e, ir::OpIndex index, KernelCounts& counts);

// memcpy(to, from, bytes) in the entry, skipped at run time when the pointers are equal.
void emit_copy(Emitter& e, llvm::Value* to, llvm::Value* from, int64_t bytes);

}  // namespace precast::backend::cpu
