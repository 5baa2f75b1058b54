// CPU legalisation of low-precision contractions: a dot_general, attention or attention_grad
// computing in bf16 or f16 runs in f32 instead — its float operands converted to f32, the op in
// f32, each result rounded back to its dtype — so the CPU backend gives it the runtime's GEMM and
// the f32 attention kernels rather than its element-at-a-time fallback (bf16 and f16 are storage
// formats there; XLA's CPU backend upcasts them the same way). The f32 operand copies are
// buffers of the plan like any other, so the memory report and the runtime's arena include them.
// Numerics: f32 accumulation and one rounding of the f32 result to the original dtype, where the
// reference interpreter rounds its double result once.
//
// Only for the CPU target: TPUs and GPUs contract bf16 natively, so analysis of those targets
// must not see the copies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ir/Module.h"
#include "ir/PassManager.h"
#include "ir/support/Error.h"

namespace precast {

// Rewrites function `index` of `module` (names, axes, scopes, checkpoint names, results and
// donation aliases kept; the rebuilt function verifies). Returns how many ops it widened; with
// none the function is left as it is. Value handles into the old function are invalid after a
// rewrite.
// `value_map`, when given, receives the new value of every old value id.
Expected<int64_t> widen_low_precision_contractions(ir::Module& module, size_t index,
                                                  std::vector<ir::Value>* value_map = nullptr);

// The `widen-contractions` pass (the CPU backend's legalisation): the rewrite above on the
// function named `function`. Changed when it widened an op.
ir::Pass widen_contractions_pass(std::string function = "train_step");

}  // namespace precast
