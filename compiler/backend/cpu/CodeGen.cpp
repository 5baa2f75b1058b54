// The code generator's driver: resolves where every value lives from the plan, emits one entry
// that runs each op's kernel in schedule order and then fills the outputs, verifies the LLVM
// module and hands it to the object emitter.
#include "compiler/backend/cpu/CodeGen.h"

#include <fmt/format.h>

#include <chrono>

#include "compiler/backend/cpu/Emitter.h"
#include "compiler/backend/cpu/Kernels.h"
#include "compiler/backend/cpu/ValueStorage.h"
#include "ir/Printer.h"
#include "ir/ValueNames.h"
#include "ir/Verifier.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"

namespace precast::backend {
namespace {

using ir::OpKind;

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// Ops a single-device CPU step cannot contain.
Status check_supported(const ir::Function& f) {
  ir::ValueNames names(f);
  for (ir::OpIndex i = 0; i < f.num_ops(); ++i) {
    const ir::Op& op = f.op(i);
    if (ir::is_collective(op.kind) || op.kind == OpKind::kShardSlice) {
      ir::Value v = f.result(op);
      return usage_error(fmt::format(
          "@{}: {} = {} ({}) is not supported by the CPU code generator: it runs one device, so "
          "generate code for the unpartitioned step (no SPMD partitioning)",
          f.name(), names(v), ir::op_name(op.kind), ir::to_string(f.type(v))));
    }
    if (op.kind == OpKind::kAttentionStats ||
        ((op.kind == OpKind::kAttention || op.kind == OpKind::kAttentionGrad) &&
         f.attrs(op).flag(ir::AttrKey::kPositions))) {
      ir::Value v = f.result(op);
      return usage_error(fmt::format(
          "@{}: {} = {} (or with positions=true) is not supported by the CPU code generator: only "
          "a partitioned (context-parallel) step has it; generate code for the unpartitioned step",
          f.name(), names(v), ir::op_name(op.kind)));
    }
  }
  return Status::success();
}

// True when no result of the op needs a kernel: fused, empty, or a reshape sharing its
// operand's buffer.
bool needs_no_kernel(const cpu::Emitter& e, const ir::Op& op) {
  const ir::Function& f = e.f();
  for (uint32_t r = 0; r < op.num_results; ++r) {
    const ValueStorage& s = e.storage(f.result(op, r));
    if (s.materialised() && s.kind != StorageKind::kEmpty) {
      if (op.kind == OpKind::kReshape && s == e.storage(f.operands(op)[0])) continue;
      return false;
    }
  }
  return true;
}

// The buffers reading v reads: v's own, or through a fused value its operands', once each.
void collect_reads(const ir::Function& f, const StepStorage& storage, ir::Value v,
                   std::vector<bool>& seen, std::vector<std::pair<ValueStorage, int64_t>>& out) {
  if (seen[v.id]) return;
  seen[v.id] = true;
  const ValueStorage& s = storage.values[v.id];
  if (s.kind == StorageKind::kEmpty) return;
  if (s.materialised()) {
    out.emplace_back(s, f.type(v).byte_size());
    return;
  }
  ir::OpIndex def = f.defining_op(v);
  if (def == ir::kNoOp) return;
  for (ir::Value u : f.operands(f.op(def))) collect_reads(f, storage, u, seen, out);
}

}  // namespace

Expected<CompiledStep> generate_step(const ir::Function& f, const MemoryPlan& plan,
                                     const CodeGenOptions& options) {
  auto start = std::chrono::steady_clock::now();
  PRECAST_RETURN_IF_ERROR(ir::verify_function(f));
  PRECAST_RETURN_IF_ERROR(check_supported(f));
  PRECAST_ASSIGN_OR_RETURN(StepStorage storage, resolve_storage(f, plan));

  llvm::LLVMContext context;
  llvm::Module module(options.entry_name, context);
  cpu::Emitter e(f, storage, module, options);
  cpu::KernelCounts counts;
  e.begin_entry(options.entry_name);
  ir::ValueNames names(f);
  std::vector<ProgramCall> program;
  for (ir::OpIndex i = 0; i < f.num_ops(); ++i) {
    const ir::Op& op = f.op(i);
    if (needs_no_kernel(e, op)) continue;
    ProgramCall call;
    call.symbol = fmt::format("{}_{}_{}", options.entry_name, i, ir::op_name(op.kind));
    call.op = i;
    size_t gemms = counts.gemm_calls;
    e.begin_step(call.symbol);
    cpu::emit_op(e, i, counts);
    e.end_step();
    if (e.error()) {
      return Error(e.error()->code(), fmt::format("@{}: {}: {}", f.name(), ir::print_op(f, names, i),
                                                  e.error()->message()));
    }
    call.kind = counts.gemm_calls > gemms ? ProgramCall::Kind::kGemm
                : op.kind == OpKind::kAttention || op.kind == OpKind::kAttentionGrad
                    ? ProgramCall::Kind::kAttention
                    : ProgramCall::Kind::kKernel;
    std::vector<bool> seen(f.num_values(), false);
    for (ir::Value v : f.operands(op)) collect_reads(f, storage, v, seen, call.reads);
    for (uint32_t r = 0; r < op.num_results; ++r) {
      ir::Value v = f.result(op, r);
      const ValueStorage& s = storage.values[v.id];
      if (s.materialised() && s.kind != StorageKind::kEmpty) {
        call.writes.emplace_back(s, f.type(v).byte_size());
      }
    }
    program.push_back(std::move(call));
  }
  llvm::IRBuilder<>& b = e.b();
  auto* ptr = llvm::PointerType::get(context, 0);
  if (!storage.copies.empty()) {
    ProgramCall call;
    call.kind = ProgramCall::Kind::kCopy;
    call.symbol = options.entry_name + "_result_copies";
    llvm::Function* copies = e.begin_step(call.symbol);
    for (const ResultCopy& copy : storage.copies) {
      llvm::Value* to = b.CreateLoad(
          ptr, b.CreateInBoundsGEP(ptr, copies->getArg(1), b.getInt64(copy.result)));
      cpu::emit_copy(e, to, e.base_pointer(copy.from), copy.bytes);
      call.reads.emplace_back(copy.from, copy.bytes);
      call.writes.emplace_back(ValueStorage{StorageKind::kOutput, static_cast<int64_t>(copy.result)},
                               copy.bytes);
    }
    e.end_step();
    program.push_back(std::move(call));
  }
  b.CreateRetVoid();
  if (e.error()) return Error(e.error()->code(), fmt::format("@{}: {}", f.name(), e.error()->message()));

  std::string problems;
  llvm::raw_string_ostream stream(problems);
  if (llvm::verifyModule(module, &stream)) {
    return internal_error(fmt::format("code generation for @{} produced invalid LLVM IR: {}",
                                      f.name(), stream.str().substr(0, 2000)));
  }
  CompiledStep step;
  step.entry_name = options.entry_name;
  step.program = std::move(program);
  step.temp_bytes = plan.temp_bytes;
  step.num_kernels = e.num_kernels();
  step.num_gemm_calls = counts.gemm_calls;
  step.num_naive_dots = counts.naive_dots;
  if (options.keep_llvm_ir) {
    llvm::raw_string_ostream text(step.llvm_ir);
    module.print(text, nullptr);
  }
  step.generate_ms = ms_since(start);
  auto emit_start = std::chrono::steady_clock::now();
  PRECAST_ASSIGN_OR_RETURN(step.object, emit_object(module, options.target));
  step.emit_ms = ms_since(emit_start);
  return step;
}

}  // namespace precast::backend
