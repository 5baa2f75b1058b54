// The CPU code generator: one IR function plus its buffer plan → an ELF object with one entry
//
//   extern "C" void <entry_name>(void* const* args, void* const* outputs, char* arena,
//                                const void* context)
//
// args[i] is parameter i's buffer, outputs[k] result k's (for a result aliasing donated
// parameter p the caller passes outputs[k] == args[p]), arena the temp arena of plan.temp_bytes
// bytes (64-byte aligned), context a const precast::RuntimeContext* (the GEMM implementation and
// thread pool; runtime/kernels/RuntimeContext.h) or null (OpenBLAS, one thread), which the code
// passes to precast_gemm_f32/f64(context, args) and precast_parallel_for. Every materialised
// value lives exactly where the plan puts it; the generated code uses no other memory besides
// small, bounded stack frames (kernel loop counters, attention's running max/sum/accumulator
// rows). The object references precast_gemm_f32/f64 and precast_parallel_for
// (runtime/kernels) and libm/libmvec names (the loader resolves those).
//
// The entry is a sequence of calls, one per op that needs code (and one for the final copies into
// outputs), to external functions of the same signature named <entry_name>_<op>_<op kind>
// (CompiledStep::program lists them with the buffers each reads and writes): the artifact's step
// program, which precast-run calls in order; the entry runs the same sequence.
//
// A per-device function (after SPMD partitioning) may hold collectives. Each collective over a
// group of more than one device is a ProgramCall of kind kCollective with no function: the
// runtime runs it through its Communicator, which moves rank-major pieces (an all-gather
// concatenates the ranks' buffers, a reduce-scatter hands rank r the r-th contiguous piece). When
// the op works on another dimension (all_gather/reduce_scatter along d with a larger dimension
// before d; all_to_all's split or concat dimension likewise), or its operand is computed inside
// its readers, generated kernels pack the operand into a send staging buffer before the call
// (step <entry>_<op>_<kind>_pack) and unpack the received pieces from a receive staging buffer
// after it (<entry>_<op>_<kind>_unpack). The staging buffers are the plan's transient buffers of
// the collective's step (compiler/passes/CollectiveStaging.h: plan with
// BufferPlanSettings::collective_staging), so the arena stays plan.temp_bytes. A collective of a
// group of one device is a copy kernel. shard_slice (this device's piece) reads the device's
// coordinates at run time: precast_mesh_coordinate(context, axis) of runtime/kernels, axis
// numbered as in CodeGenOptions::mesh (coordinate 0 with a null context).
//
// The entry cannot run a collective (it has no communicator): a program with a kCollective call
// has no entry function (CompiledStep::has_entry is false, the symbol is absent from the object);
// such a step runs only through its program, as precast-run does.
//
// Precondition: `plan` is plan_memory(function, options) for this very function, with
// options.fuse as planned, no host-offloaded values and no per-device byte override, and with
// the transients of buffer_options(function, settings) where settings.collective_staging.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compiler/analysis/BufferAssignment.h"
#include "compiler/backend/cpu/ObjectEmitter.h"
#include "compiler/backend/cpu/ValueStorage.h"
#include "ir/Module.h"
#include "ir/support/Error.h"

namespace precast::backend {

// Progress of long work: `done` of `total` items of `stage` (total 0: a stage without items).
using ProgressCallback =
    std::function<void(std::string_view stage, int64_t done, int64_t total)>;

struct CodeGenOptions {
  std::string entry_name = "precast_step";
  // Told of each op's kernels generated ("LLVM kernels", op i of n) and of the LLVM
  // optimisation and object emission; null: nothing is told.
  ProgressCallback progress;
  TargetSpec target;
  // Split kernels whose work exceeds min_parallel_elements over precast_parallel_for; smaller
  // ones (and all of them when false) run on the calling thread. Results never depend on it:
  // every kernel cuts its work into the same fixed tasks whatever the thread count.
  bool parallel = true;
  int64_t min_parallel_elements = 16384;
  // Transcendental ops of f32/bf16/f16 (exp, log, tanh, logistic, rsqrt, erf, pow, ...) computed
  // in double and rounded once, as the interpreter does: results then equal its to the last bit
  // almost always, but the loops computing them vectorise poorly (double, half the lanes).
  // false (the default): float libm functions, vectorised through libmvec where it has them
  // (within a few ulp of the interpreter, far inside the 1e-5 relative the step is held to).
  bool precise_transcendentals = false;
  // Kernels computing as the interpreter does, sums in double in its order (with use_gemm off
  // and precise_transcendentals on, the step's results equal the interpreter's bit for bit; an
  // oracle mode, several times slower). false: f32 attention, attention_grad and reductions
  // sum in float with vectorised loops (within 1e-5 relative of the interpreter).
  bool exact_kernels = false;
  // dot_generals of f32/f64 whose layout allows it call precast_gemm_f32/f64; false computes
  // every dot with the loop-nest kernel (double accumulation; slow, for checks).
  bool use_gemm = true;
  // Keep the textual LLVM IR (before optimisation) in CompiledStep::llvm_ir, for debugging.
  bool keep_llvm_ir = false;
  // The device mesh a per-device function was partitioned for: axis names and sizes in mesh
  // order (the order of precast_mesh_coordinate's axis numbers). Needed by shard_slice over a
  // group of more than one device; empty for a single-device step.
  std::vector<std::pair<std::string, int64_t>> mesh;
};

// The runtime symbols generated code calls (bind them in the loader's SymbolTable).
inline constexpr std::string_view kRuntimeSymbols[] = {
    "precast_gemm_f32", "precast_gemm_f64", "precast_parallel_for", "precast_mesh_coordinate",
    "precast_attention_grad_f32"};

// What a kCollective call does, in the IR's terms: the runtime turns it into its collective step.
// Its buffers hold rank-major pieces (the packing steps around it see to that).
struct CollectiveCall {
  ir::OpKind kind = ir::OpKind::kAllReduce;  // all_gather, all_reduce, reduce_scatter, ...
  bool max = false;                          // all_reduce/reduce_scatter: max instead of sum
  std::vector<std::string> mesh_axes;        // the axes one group spans, major to minor
  int64_t group_size = 1;
  int64_t shift = 0;  // collective_permute
  // The IR's dimensions: all_gather/reduce_scatter {dimension}; all_to_all {split, concat}.
  std::vector<int64_t> dimensions;
  ir::DType dtype = ir::DType::kF32;
  int64_t bytes = 0;  // the send buffer's bytes on one device (the operand's)
};

// The call for collective op `op` of `f` (its kind, reduction, mesh axes, group size, shift,
// dimensions, operand dtype) whose operand is `bytes` bytes on one device.
CollectiveCall collective_call(const ir::Function& f, const ir::Op& op, int64_t bytes);

// One call of the step program, in the order the entry makes them: an external function of the
// object with the entry's signature that runs one op's kernels (or the final result copies).
struct ProgramCall {
  enum class Kind : uint8_t { kKernel, kGemm, kAttention, kCopy, kCollective };
  Kind kind = Kind::kKernel;
  std::string symbol;  // empty for kCollective (no function: reads[0] → writes[0])
  int64_t op = -1;  // the IR op it computes; -1 for the result copies
  // What a profile calls it: the op's name ("<collective>_pack"/"_unpack" for the staging
  // kernels, "result_copies" for the copies) and the op's scope name ("" when none).
  std::string op_name, scope;
  // The buffers it reads and writes, with their sizes in bytes (fused operands are followed to
  // the buffers they read).
  std::vector<std::pair<ValueStorage, int64_t>> reads, writes;
  CollectiveCall collective;  // kCollective only
};

struct CompiledStep {
  std::string entry_name;
  bool has_entry = true;  // false when the program has a kCollective call (see above)
  std::vector<ProgramCall> program;
  std::vector<char> object;  // relocatable ELF for options.target
  int64_t temp_bytes = 0;    // the arena the entry expects: plan.temp_bytes
  size_t num_kernels = 0;    // loop kernels generated (each one LLVM function)
  size_t num_gemm_calls = 0;
  size_t num_naive_dots = 0;  // dot_generals computed by a loop nest instead of the GEMM
  double generate_ms = 0;    // building the LLVM module
  double emit_ms = 0;        // optimising and emitting the object
  std::string llvm_ir;       // with keep_llvm_ir
};

// Generates the step. Every op of a per-device function has code: the context-parallel forms
// (attention_stats, attention/attention_grad with positions) run the exact attention kernels
// (sums in double). A plan that does not fit the function (staging buffers included) is an
// internal error; an op the element emitter cannot compute is an error naming it.
Expected<CompiledStep> generate_step(const ir::Function& function, const MemoryPlan& plan,
                                     const CodeGenOptions& options = {});

}  // namespace precast::backend
