// Helpers shared by the IR unit tests: parse-or-fail, one-op evaluation, a module holding every
// op kind, and tensor comparison.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "ir/Builder.h"
#include "ir/Interpreter.h"
#include "ir/Module.h"

namespace precast::ir::testing {

// Parses text; a parse error fails the current test and yields an empty module.
Module parse_or_fail(std::string_view text);

// The verifier's message for text that parses, or "" when it verifies.
std::string verify_message(std::string_view text);

// The parser's message, or "" when the text parses.
std::string parse_message(std::string_view text);

HostTensor tensor(DType dtype, std::vector<int64_t> dims, std::vector<double> values);
inline HostTensor f32(std::vector<int64_t> dims, std::vector<double> values) {
  return tensor(DType::kF32, std::move(dims), std::move(values));
}
inline HostTensor f64(std::vector<int64_t> dims, std::vector<double> values) {
  return tensor(DType::kF64, std::move(dims), std::move(values));
}
inline HostTensor s32(std::vector<int64_t> dims, std::vector<double> values) {
  return tensor(DType::kS32, std::move(dims), std::move(values));
}

// Evaluates one op written as text ("add %a, %b : f32[3]"); arguments are %a, %b, %c, ...
HostTensor eval_op(std::string_view op_text, const std::vector<HostTensor>& arguments,
                   const InterpreterOptions& options = {});

// Deterministic pseudo-random values in [-1, 1).
std::vector<double> pseudo_random(size_t count, uint32_t seed);

// Max |a - b| over two equally shaped tensors (fails the test if shapes differ).
double max_abs_difference(const HostTensor& a, const HostTensor& b);

// A module whose function @every_op uses every OpKind at least once.
Module every_op_module();

// Appends attention's masking parameters to `operands`: with `segments`, q_segment s32[B,T] and
// kv_segment s32[B,S]; with `positions`, q_positions s32[T] and kv_positions s32[S].
inline void add_attention_mask_params(Builder& b, int64_t batch, int64_t queries, int64_t keys,
                                      bool segments, bool positions,
                                      std::vector<Value>& operands) {
  if (segments) {
    operands.push_back(b.param({DType::kS32, {batch, queries}}, "q_segment"));
    operands.push_back(b.param({DType::kS32, {batch, keys}}, "kv_segment"));
  }
  if (positions) {
    operands.push_back(b.param({DType::kS32, {queries}}, "q_positions"));
    operands.push_back(b.param({DType::kS32, {keys}}, "kv_positions"));
  }
}

}  // namespace precast::ir::testing
