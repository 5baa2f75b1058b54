// Reverse-mode differentiation over the IR. The forward function is inlined into the function
// being built (so a train step holds forward, backward and update in one function, and
// gradient accumulation inlines it once per micro-batch), then a vector-Jacobian product rule
// per op, in reverse order, accumulates cotangents into the requested parameters. Every
// floating-point op has a rule except attention_grad (no second derivatives); integer and
// predicate values carry no gradient. compiler/autodiff/README.md lists the rules.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ir/Builder.h"
#include "ir/Module.h"
#include "ir/ScopePath.h"

namespace precast::autodiff {

// Appended to a forward op's scope to name the ops of its backward pass:
// "decoder/layers_3/mlp/wi" -> "decoder/layers_3/mlp/wi/backward". Memory and FLOP reports
// grouped by scope prefix put a layer's backward beside its forward.
using ir::kBackwardScope;

struct VjpResult {
  std::vector<ir::Value> results;    // the forward's results, in the built function
  std::vector<ir::Value> gradients;  // one per `wrt` parameter, typed like it
};

// Inlines `forward` into `builder`'s function on `arguments` (one per forward parameter) and
// appends the backward pass for the cotangents of its results (`result_cotangents`, one per
// result; an invalid Value is a zero cotangent). Returns the forward results and the gradient of
// sum_i <cotangent_i, result_i> with respect to each parameter listed in `wrt` (indices into the
// forward's parameters; each must be floating point). A parameter the results do not depend on
// gets a zero constant. Fails on an op without a rule, naming it.
Expected<VjpResult> inline_vjp(ir::Builder& builder, const ir::Function& forward,
                               std::span<const ir::Value> arguments,
                               std::span<const ir::Value> result_cotangents,
                               std::span<const size_t> wrt);

// Inlines `forward` without differentiating it; returns its results.
Expected<std::vector<ir::Value>> inline_call(ir::Builder& builder, const ir::Function& forward,
                                             std::span<const ir::Value> arguments);

// A new function `name`(forward's parameters) -> (forward's results..., d result[output] /
// d parameter for each of `wrt`), seeded with cotangent 1 on the scalar result `output`. Added
// to `module`, which must be the forward's module.
Expected<ir::Function*> add_gradient_function(ir::Module& module, const ir::Function& forward,
                                              size_t output, std::span<const size_t> wrt,
                                              const std::string& name);

}  // namespace precast::autodiff
