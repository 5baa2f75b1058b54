// Internal to compiler/backend/cpu: emits the kernel(s) computing one op's materialised
// results into their buffers, as calls from the step entry.
#pragma once

#include <cstddef>
#include <string>

#include "compiler/backend/cpu/Emitter.h"

namespace precast::backend::cpu {

struct KernelCounts {
  size_t gemm_calls = 0;
  size_t naive_dots = 0;
};

// Emits op `index` (whose results are not all fused). Errors are recorded in the emitter.
void emit_op(Emitter& e, ir::OpIndex index, KernelCounts& counts);

// Collective op `index`'s send staging buffer (at `staging`) filled from its operand as the
// group's pieces one after another: for reduce_scatter and all_to_all, piece g is the operand's
// g-th slab along the split dimension; for the other kinds the operand as it is.
void emit_pack(Emitter& e, ir::OpIndex index, const ValueStorage& staging, const std::string& name);
// Collective op `index`'s result filled from its receive staging buffer, which holds the
// group's pieces one after another: piece g becomes the result's g-th slab along the
// concatenation dimension (all_gather's dimension, all_to_all's concat dimension).
void emit_unpack(Emitter& e, ir::OpIndex index, const ValueStorage& staging,
                 const std::string& name);
// A collective over a group of one device: its result is its operand.
void emit_identity(Emitter& e, ir::OpIndex index, const std::string& name);

// memcpy(to, from, bytes) in the entry, skipped at run time when the pointers are equal.
void emit_copy(Emitter& e, llvm::Value* to, llvm::Value* from, int64_t bytes);

}  // namespace precast::backend::cpu
