// Internal to the interpreter: the per-op kernels, grouped by file. Each computes in double
// and leaves rounding to the dtype to the driver (Interpreter.cpp); integer kernels return
// already-wrapped values.
#pragma once

#include <span>
#include <vector>

#include "ir/Interpreter.h"

namespace precast::ir::kernels {

struct KernelInput {
  OpKind kind;
  const AttrSet& attrs;
  std::span<const HostTensor* const> operands;
  const TensorType& result;  // the op's (first) result type
};

// Elementwise.cpp
HostTensor leaf(const KernelInput& in);         // constant, iota, rng_*
HostTensor elementwise(const KernelInput& in);  // unary, binary, compare, select, convert

// Structural.cpp
HostTensor data_movement(const KernelInput& in);  // broadcast_in_dim ... pad
HostTensor reduction(const KernelInput& in);      // reduce_*, take, scatter_add, top_k, grouped_dot*
// values permuted so that result dimension i is operand dimension permutation[i].
std::vector<double> transpose_values(const HostTensor& x, std::span<const int64_t> permutation);

// Linalg.cpp (Eigen)
HostTensor dot_general(const KernelInput& in);
HostTensor attention(const KernelInput& in);
std::vector<HostTensor> attention_stats(const KernelInput& in);  // {out, max, sum}
std::vector<HostTensor> attention_grad(const KernelInput& in);  // {dq, dk, dv}

}  // namespace precast::ir::kernels
