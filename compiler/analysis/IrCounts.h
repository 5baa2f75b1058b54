// Counts read off an IR function: ops by kind, the weights it takes, and the FLOPs of its
// contractions by MaxText's conventions, in total and by scope. Model FLOPs computed here from
// the forward graph must equal model_flops_per_device (ModelFormulas.h) for every supported
// model: the formula is the specification, the IR is what we compile, and a mismatch means one
// of them is wrong.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/analysis/ModelFormulas.h"
#include "ir/Module.h"

namespace precast {

// Number of (query, key) pairs MaxText counts for an attention of T queries over S keys:
// T*S without a causal mask; causally, "halving" generalised to a window W = min(window, T)
// (window 0 = none): T*W - W^2/2, which is T^2/2 for plain causal attention and gemma2's local
// term T*W - W^2/2. Exact (halves are representable).
long double attention_pairs(int64_t queries, int64_t keys, bool causal, int64_t window);

// 2 * |result| * prod(contracting dims): one multiply and one add per term.
long double dot_general_flops(const ir::Function& function, const ir::Op& op);
// grouped_dot and its weight gradient: 2 * R * N * K * M (one [K] x [K, M] product per row).
long double grouped_dot_flops(const ir::Function& function, const ir::Op& op);

// The two products of an attention op (q.k and p.v), 2*B*H*(D + Dv) per counted pair; the
// masks, softmax and soft cap are not counted (MaxText does not either). For attention_grad,
// MaxText's convention for the backward: twice the forward (dp = dout.v, dv, dq, dk), with Dv
// the model's value width: value columns a zero pad appended to v (the attention sinks' backward
// carries its log-partition gradient in one) are not model FLOPs; hardware_flops counts them.
long double attention_flops(const ir::Function& function, const ir::Op& op);

// What an op really executes: dot_general as above; attention over every (query, key) pair,
// masked ones included, 2*B*H*(D + Dv) per pair, and attention_grad 2*B*H*(3D + 2Dv) per pair
// (it recomputes q.k); one FLOP per element for elementwise arithmetic (result elements) and
// reductions (operand elements); data movement, converts, constants and rng are free.
long double hardware_flops(const ir::Function& function, const ir::Op& op);

struct OpKindCount {
  std::string kind;  // the op's text name
  int64_t ops = 0;
};

struct ScopeFlops {
  std::string scope;  // a prefix of the ops' scope paths, "" for ops without one
  int64_t ops = 0;
  long double dot = 0;
  long double attention = 0;
  long double total() const { return dot + attention; }
};

struct CountOptions {
  // Scope components kept when grouping FLOPs: 2 gives "decoder/layers_3".
  int scope_depth = 2;
  // Groups decoder/layers_0, layers_1, ... as decoder/layers_* (deepseek: dense_layers_*,
  // moe_layers_*).
  bool merge_layers = false;
};

struct IrCounts {
  std::string function;
  int64_t ops = 0;
  std::vector<OpKindCount> ops_by_kind;  // most frequent first, then by name
  // Floating-point parameters are weights (and, in a train step, optimizer state); integer
  // parameters are the batch and seeds.
  int64_t weight_tensors = 0;
  int64_t weight_elements = 0;
  int64_t weight_bytes = 0;
  int64_t other_inputs = 0;
  int64_t other_input_elements = 0;
  long double dot_flops = 0;
  long double attention_flops = 0;   // forward and backward, MaxText's conventions
  long double hardware_flops = 0;    // what the IR executes (see hardware_flops above)
  std::vector<ScopeFlops> by_scope;  // in order of first appearance
  long double total_flops() const { return dot_flops + attention_flops; }
};

IrCounts count_function(const ir::Function& function, const CountOptions& options = {});

// MaxText's per-device model FLOPs of one optimizer step from the counts of a forward function
// run on `ir_rows` rows: everything scales linearly with rows, the backward pass costs twice the
// forward (x3), and a device trains per_device_batch_size x gradient_accumulation_steps rows per
// step. Dot FLOPs are the learnable part, attention FLOPs the attention part.
ModelFlops model_flops_from_ir(const IrCounts& forward, int64_t ir_rows, const BatchSpec& batch);

// The same from a train step over `ir_rows` rows (all micro-batches): its dots and attention ops
// already hold the backward pass, so no x3.
ModelFlops model_flops_of_train_step(const IrCounts& train_step, int64_t ir_rows,
                                     const BatchSpec& batch);

}  // namespace precast
