#include "ir/Interpreter.h"

#include <fmt/format.h>

#include "ir/Builder.h"
#include "ir/FloatFormats.h"
#include "ir/Verifier.h"
#include "ir/interpreter/Kernels.h"

namespace precast::ir {

HostTensor HostTensor::filled(const TensorType& type, double value) {
  return HostTensor{type, std::vector<double>(static_cast<size_t>(type.num_elements()), value)};
}

HostTensor HostTensor::scalar(double value, DType dtype) {
  return HostTensor{TensorType{dtype, {}}, {value}};
}

HostTensor HostTensor::of(const TensorType& type, std::vector<double> values) {
  return HostTensor{type, std::move(values)};
}

namespace {

Status check_arguments(const Function& f, std::span<const HostTensor> arguments) {
  std::span<const Value> params = f.params();
  if (arguments.size() != params.size()) {
    return usage_error(fmt::format("@{} takes {} arguments, got {}", f.name(), params.size(),
                                   arguments.size()));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const TensorType& want = f.type(params[i]);
    const HostTensor& got = arguments[i];
    if (got.type != want) {
      return usage_error(fmt::format("@{} argument {} must be {}, got {}", f.name(), i,
                                     to_string(want), to_string(got.type)));
    }
    if (static_cast<int64_t>(got.values.size()) != want.num_elements()) {
      return usage_error(fmt::format("@{} argument {} has {} values for type {}", f.name(), i,
                                     got.values.size(), to_string(want)));
    }
  }
  return Status::success();
}

void round_in_place(HostTensor& t, bool round_floats) {
  if (is_floating(t.type.dtype) && !round_floats) return;
  for (double& v : t.values) v = round_to_dtype(t.type.dtype, v);
}

Expected<std::vector<HostTensor>> run_decomposition(const Function& f, const Op& op,
                                                    std::span<const HostTensor* const> operands,
                                                    const InterpreterOptions& options) {
  Module scratch;
  Function& g = scratch.add_function("decomposition");
  Builder b(g);
  std::vector<Value> params;
  std::vector<HostTensor> arguments;
  for (const HostTensor* x : operands) {
    params.push_back(b.param(x->type));
    arguments.push_back(*x);
  }
  PRECAST_ASSIGN_OR_RETURN(std::vector<Value> results,
                           op_info(op.kind).decompose(b, f.attrs(op), params));
  b.set_results(results);
  PRECAST_RETURN_IF_ERROR(b.status());
  return interpret(g, arguments, options);
}

Expected<std::vector<HostTensor>> evaluate(const Function& f, const Op& op,
                                           std::span<const HostTensor* const> operands,
                                           const InterpreterOptions& options) {
  const OpInfo& info = op_info(op.kind);
  if (info.op_class == OpClass::kComposite && options.decompose_composites) {
    return run_decomposition(f, op, operands, options);
  }
  kernels::KernelInput in{op.kind, f.attrs(op), operands, f.type(f.result(op))};
  switch (op.kind) {
    case OpKind::kConstant:
    case OpKind::kIota:
    case OpKind::kRngBits:
    case OpKind::kRngUniform:
    case OpKind::kRngNormal:
      return std::vector<HostTensor>{kernels::leaf(in)};
    case OpKind::kBroadcastInDim:
    case OpKind::kReshape:
    case OpKind::kTranspose:
    case OpKind::kSlice:
    case OpKind::kConcatenate:
    case OpKind::kPad:
      return std::vector<HostTensor>{kernels::data_movement(in)};
    case OpKind::kReduceSum:
    case OpKind::kReduceMax:
    case OpKind::kReduceMin:
    case OpKind::kTake:
    case OpKind::kScatterAdd:
      return std::vector<HostTensor>{kernels::reduction(in)};
    case OpKind::kDotGeneral:
      return std::vector<HostTensor>{kernels::dot_general(in)};
    case OpKind::kAttention:
      return std::vector<HostTensor>{kernels::attention(in)};
    case OpKind::kAttentionGrad:
      return kernels::attention_grad(in);
    default:
      break;
  }
  if (is_elementwise(op.kind)) return std::vector<HostTensor>{kernels::elementwise(in)};
  // A composite without a direct kernel runs through its decomposition.
  if (info.decompose) return run_decomposition(f, op, operands, options);
  return internal_error(fmt::format("interpreter: no kernel for {}", info.name));
}

// For each value, the last op reading it, so its storage can be released after that op.
std::vector<OpIndex> last_uses(const Function& f) {
  std::vector<OpIndex> last(f.num_values(), kNoOp);
  for (OpIndex i = 0; i < f.num_ops(); ++i) {
    for (Value v : f.operands(f.op(i))) last[v.id] = i;
  }
  return last;
}

}  // namespace

Expected<std::vector<HostTensor>> interpret(const Function& function,
                                            std::span<const HostTensor> arguments,
                                            const InterpreterOptions& options) {
  PRECAST_RETURN_IF_ERROR(verify_function(function));
  PRECAST_RETURN_IF_ERROR(check_arguments(function, arguments));
  std::vector<HostTensor> env(function.num_values());
  std::vector<bool> is_result(function.num_values(), false);
  for (Value v : function.results()) is_result[v.id] = true;
  for (size_t i = 0; i < arguments.size(); ++i) {
    HostTensor& slot = env[function.params()[i].id];
    slot = arguments[i];
    round_in_place(slot, options.round_to_dtype);
  }
  std::vector<OpIndex> last = last_uses(function);
  std::vector<const HostTensor*> operands;
  for (OpIndex i = 0; i < function.num_ops(); ++i) {
    const Op& op = function.op(i);
    operands.clear();
    for (Value v : function.operands(op)) operands.push_back(&env[v.id]);
    PRECAST_ASSIGN_OR_RETURN(std::vector<HostTensor> results,
                             evaluate(function, op, operands, options));
    for (uint32_t r = 0; r < op.num_results; ++r) {
      HostTensor& slot = env[function.result(op, r).id];
      slot = std::move(results[r]);
      round_in_place(slot, options.round_to_dtype);
    }
    for (Value v : function.operands(op)) {
      if (last[v.id] == i && !is_result[v.id]) env[v.id] = HostTensor{};
    }
  }
  std::vector<HostTensor> results;
  for (Value v : function.results()) results.push_back(env[v.id]);
  return results;
}

Expected<std::vector<HostTensor>> interpret(const Module& module, std::string_view function_name,
                                            std::span<const HostTensor> arguments,
                                            const InterpreterOptions& options) {
  const Function* f = module.find_function(function_name);
  if (!f) return usage_error(fmt::format("no function @{} in the module", function_name));
  return interpret(*f, arguments, options);
}

}  // namespace precast::ir
