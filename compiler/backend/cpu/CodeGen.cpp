// The code generator's driver: resolves where every value lives from the plan, emits one entry
// that runs each op's kernel in schedule order and then fills the outputs, verifies the LLVM
// module and hands it to the object emitter.
#include "compiler/backend/cpu/CodeGen.h"

#include <fmt/format.h>

#include <chrono>
#include <map>
#include <optional>

#include "compiler/backend/cpu/Emitter.h"
#include "compiler/backend/cpu/Kernels.h"
#include "compiler/backend/cpu/ValueStorage.h"
#include "compiler/passes/CollectiveStaging.h"
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

// Where the plan put each collective's staging buffers: its transient buffers at the op's
// position, send before receive (the order buffer_options adds them; the schedule, which may
// have planned this order, carries them along with their ops).
struct Staging {
  std::optional<ValueStorage> send, receive;
};

Expected<std::map<ir::OpIndex, Staging>> find_staging(const ir::Function& f,
                                                      const MemoryPlan& plan) {
  std::vector<CollectiveStaging> needed = collective_staging(f);
  std::map<int32_t, std::vector<const Buffer*>> transients;  // by position, in plan order
  size_t num_transients = 0;
  for (const Buffer& b : plan.buffers) {
    if (b.value.valid()) continue;
    transients[b.start].push_back(&b);
    ++num_transients;
  }
  std::map<ir::OpIndex, Staging> out;
  if (needed.empty() && num_transients == 0) return out;
  if (num_transients != needed.size()) {
    return internal_error(fmt::format(
        "@{}: its collectives need {} staging buffers but the plan has {} transient buffers; plan "
        "it with buffer_options(f, settings) where settings.collective_staging is true",
        f.name(), needed.size(), num_transients));
  }
  std::map<int32_t, size_t> taken;
  for (const CollectiveStaging& staging : needed) {
    auto position = static_cast<int32_t>(staging.op);
    size_t k = taken[position]++;
    const std::vector<const Buffer*>& here = transients[position];
    const Buffer* b = k < here.size() ? here[k] : nullptr;
    if (b == nullptr || b->bytes != staging.bytes || b->offset < 0) {
      return internal_error(fmt::format(
          "@{}: the plan has no transient buffer of {} bytes at op {} for its collective's {} "
          "staging buffer; plan it with buffer_options(f, settings) where "
          "settings.collective_staging is true",
          f.name(), staging.bytes, staging.op,
          staging.role == StagingRole::kSend ? "send" : "receive"));
    }
    ValueStorage at{StorageKind::kArena, b->offset};
    Staging& s = out[staging.op];
    (staging.role == StagingRole::kSend ? s.send : s.receive) = at;
  }
  return out;
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

CollectiveCall collective_call(const ir::Function& f, const ir::Op& op, int64_t bytes) {
  const ir::AttrSet& attrs = f.attrs(op);
  CollectiveCall c;
  c.kind = op.kind;
  c.max = attrs.flag(ir::AttrKey::kMax);
  for (int64_t id : attrs.ints(ir::AttrKey::kMeshAxes)) {
    c.mesh_axes.emplace_back(f.context().string(static_cast<ir::StringId>(id)));
  }
  c.group_size = attrs.integer(ir::AttrKey::kGroupSize);
  c.shift = attrs.integer(ir::AttrKey::kShift);
  if (op.kind == ir::OpKind::kAllToAll) {
    c.dimensions = {attrs.integer(ir::AttrKey::kSplitDimension),
                    attrs.integer(ir::AttrKey::kDimension)};
  } else if (op.kind == ir::OpKind::kAllGather || op.kind == ir::OpKind::kReduceScatter) {
    c.dimensions = {attrs.integer(ir::AttrKey::kDimension)};
  }
  c.dtype = f.type(f.operands(op)[0]).dtype;
  c.bytes = bytes;
  return c;
}

Expected<CompiledStep> generate_step(const ir::Function& f, const MemoryPlan& plan,
                                     const CodeGenOptions& options) {
  auto start = std::chrono::steady_clock::now();
  PRECAST_RETURN_IF_ERROR(ir::verify_function(f));
  PRECAST_ASSIGN_OR_RETURN(StepStorage storage, resolve_storage(f, plan));

  PRECAST_ASSIGN_OR_RETURN(auto staging, find_staging(f, plan));

  llvm::LLVMContext context;
  llvm::Module module(options.entry_name, context);
  cpu::Emitter e(f, storage, module, options);
  cpu::KernelCounts counts;
  e.begin_entry(options.entry_name);
  ir::ValueNames names(f);
  std::vector<ProgramCall> program;
  bool has_collective = false;
  auto fail_at = [&](ir::OpIndex i) {
    return Error(e.error()->code(), fmt::format("@{}: {}: {}", f.name(), ir::print_op(f, names, i),
                                                e.error()->message()));
  };
  for (ir::OpIndex i = 0; i < f.num_ops(); ++i) {
    const ir::Op& op = f.op(i);
    if (options.progress) options.progress("generating LLVM kernels, ops", i + 1, f.num_ops());
    if (op.kind == ir::OpKind::kRaggedAllToAll) {
      return usage_error(fmt::format(
          "@{}: sparse_matmul=true with expert parallelism (ici_expert_parallelism x "
          "dcn_expert_parallelism = {}) is not supported yet by the cpu backend: its ragged "
          "all-to-all (the MoE tokens' dispatch to their experts' devices) has no runtime "
          "collective; set sparse_matmul=false (dense dispatch, all-to-all over expert) or "
          "expert parallelism 1",
          f.name(), f.attrs(op).integer(ir::AttrKey::kGroupSize)));
    }
    if (needs_no_kernel(e, op)) continue;
    if (ir::is_collective(op.kind) && f.attrs(op).integer(ir::AttrKey::kGroupSize) > 1) {
      // [pack kernel] → the communicator's call → [unpack kernel].
      ir::Value x = f.operands(op)[0], v = f.result(op);
      int64_t in_bytes = f.type(x).byte_size(), out_bytes = f.type(v).byte_size();
      if (in_bytes == 0) continue;
      const Staging& around = staging[i];
      ValueStorage send = storage.values[x.id];
      if (around.send) {
        ProgramCall pack;
        pack.symbol = fmt::format("{}_{}_{}_pack", options.entry_name, i, ir::op_name(op.kind));
        pack.op = i;
        pack.op_name = fmt::format("{}_pack", ir::op_name(op.kind));
        pack.scope = f.scope(op);
        e.begin_step(pack.symbol);
        cpu::emit_pack(e, i, *around.send,
                       fmt::format("precast_k{}_{}_pack", i, ir::op_name(op.kind)));
        e.end_step();
        if (e.error()) return fail_at(i);
        std::vector<bool> seen(f.num_values(), false);
        collect_reads(f, storage, x, seen, pack.reads);
        pack.writes.emplace_back(*around.send, in_bytes);
        program.push_back(std::move(pack));
        send = *around.send;
      }
      ValueStorage receive = around.receive ? *around.receive : storage.values[v.id];
      if (!send.materialised() || send.kind == StorageKind::kEmpty ||
          (send == receive && op.kind != OpKind::kAllReduce)) {
        return internal_error(fmt::format(
            "@{}: {}: the plan gives the collective no send buffer of its own (operand {}, "
            "result {}); plan it with collective staging",
            f.name(), ir::print_op(f, names, i), names(x), names(v)));
      }
      ProgramCall call;
      call.kind = ProgramCall::Kind::kCollective;
      call.op = i;
      call.op_name = ir::op_name(op.kind);
      call.scope = f.scope(op);
      call.reads.emplace_back(send, in_bytes);
      call.writes.emplace_back(receive, out_bytes);
      call.collective = collective_call(f, op, in_bytes);
      program.push_back(std::move(call));
      has_collective = true;
      if (around.receive) {
        ProgramCall unpack;
        unpack.symbol = fmt::format("{}_{}_{}_unpack", options.entry_name, i, ir::op_name(op.kind));
        unpack.op = i;
        unpack.op_name = fmt::format("{}_unpack", ir::op_name(op.kind));
        unpack.scope = f.scope(op);
        e.begin_step(unpack.symbol);
        cpu::emit_unpack(e, i, *around.receive,
                         fmt::format("precast_k{}_{}_unpack", i, ir::op_name(op.kind)));
        e.end_step();
        if (e.error()) return fail_at(i);
        unpack.reads.emplace_back(*around.receive, out_bytes);
        unpack.writes.emplace_back(storage.values[v.id], out_bytes);
        program.push_back(std::move(unpack));
      }
      continue;
    }
    ProgramCall call;
    call.symbol = fmt::format("{}_{}_{}", options.entry_name, i, ir::op_name(op.kind));
    call.op = i;
    call.op_name = ir::op_name(op.kind);
    call.scope = f.scope(op);
    size_t gemms = counts.gemm_calls;
    e.begin_step(call.symbol);
    cpu::emit_op(e, i, counts);
    e.end_step();
    if (e.error()) return fail_at(i);
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
    call.op_name = "result_copies";
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
  // The entry cannot run a collective: a program with one has no entry (CodeGen.h).
  if (has_collective) module.getFunction(options.entry_name)->eraseFromParent();

  std::string problems;
  llvm::raw_string_ostream stream(problems);
  if (llvm::verifyModule(module, &stream)) {
    return internal_error(fmt::format("code generation for @{} produced invalid LLVM IR: {}",
                                      f.name(), stream.str().substr(0, 2000)));
  }
  CompiledStep step;
  step.entry_name = options.entry_name;
  step.has_entry = !has_collective;
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
  if (options.progress) {
    options.progress(fmt::format("LLVM O3 and object code for {} kernels", step.num_kernels), 0, 0);
  }
  auto emit_start = std::chrono::steady_clock::now();
  PRECAST_ASSIGN_OR_RETURN(step.object, emit_object(module, options.target));
  step.emit_ms = ms_since(emit_start);
  return step;
}

}  // namespace precast::backend
