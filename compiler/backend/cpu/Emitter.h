// Internal to compiler/backend/cpu (included by its .cpp files only; it pulls in LLVM's
// IRBuilder): the state and helpers the kernel emitters share — LLVM types of IR dtypes, kernel
// functions and how the entry runs them, loops, and the element emitter that computes one
// element of any value at a multi-index, loading materialised values from their buffers and
// computing fused ones (elementwise trees, broadcasts, reshapes, constants, iotas) inline.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "compiler/backend/cpu/CodeGen.h"
#include "compiler/backend/cpu/ValueStorage.h"
#include "ir/Module.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"

namespace precast::backend::cpu {

using Index = std::vector<llvm::Value*>;  // one i64 per dimension
using Dims = std::vector<int64_t>;

class Emitter {
 public:
  Emitter(const ir::Function& function, const StepStorage& storage, llvm::Module& module,
          const CodeGenOptions& options);

  const ir::Function& f() const { return f_; }
  const CodeGenOptions& options() const { return options_; }
  llvm::IRBuilder<>& b() { return builder_; }
  llvm::LLVMContext& context() { return module_.getContext(); }
  llvm::Module& module() { return module_; }
  const ValueStorage& storage(ir::Value v) const { return storage_.values[v.id]; }
  const Dims& dims(ir::Value v) const { return f_.type(v).dims; }
  ir::DType dtype(ir::Value v) const { return f_.type(v).dtype; }

  // Errors met while emitting (an op the element emitter cannot compute, an in-place hazard):
  // the first is kept and generate_step returns it.
  void fail(std::string message);
  const std::optional<Error>& error() const { return error_; }
  size_t num_kernels() const { return num_kernels_; }

  // ---- Types. Storage: f32 float, f64 double, bf16 i16, f16 half, s32/u32 i32, pred i8.
  // Register (how an element is held while computing): the same, except bf16 and f16 are
  // float holding a value representable in the format, and pred is i1.
  llvm::Type* storage_type(ir::DType dtype);
  llvm::Type* register_type(ir::DType dtype);
  llvm::Type* i64() { return builder_.getInt64Ty(); }
  llvm::Type* i32() { return builder_.getInt32Ty(); }
  llvm::Type* f64() { return builder_.getDoubleTy(); }
  llvm::Value* int64(int64_t v) { return builder_.getInt64(static_cast<uint64_t>(v)); }

  // ---- Functions. The step entry owns the per-step context record {args, outputs, arena} that
  // every kernel receives; kernels are internal functions void(ptr ctx, i64 begin, i64 end)
  // over tasks [begin, end).
  void begin_entry(const std::string& name);
  // Opens the function of one program step, external and with the entry's signature
  // void(args, outputs, arena, context), and points the builder into it; end_step closes it,
  // returns to the entry and calls it from there. The runtime calls the steps by symbol in the
  // entry's order (the artifact's step program); the entry itself runs the same sequence.
  llvm::Function* begin_step(const std::string& name);
  void end_step();
  // The step function's fourth argument, the runtime's const RuntimeContext* (GEMM and pool),
  // which generated code passes on to precast_gemm_f32/f64 and precast_parallel_for.
  llvm::Value* runtime_context() const { return runtime_context_; }
  // Opens a kernel function and points the builder into its body (ctx, begin, end set).
  llvm::Function* begin_kernel(const std::string& name);
  llvm::Value* task_begin() const { return state_.begin; }
  llvm::Value* task_end() const { return state_.end; }
  // Closes the kernel and returns to the entry.
  void end_kernel();
  // In the entry: runs `kernel` over tasks [0, tasks), through precast_parallel_for when the
  // work is large enough and parallelism is on.
  void run_kernel(llvm::Function* kernel, int64_t tasks, int64_t work);
  // An alloca in the current function's entry block (stack scratch of bounded size).
  llvm::Value* stack(llvm::Type* type, int64_t count = 1, const std::string& name = "");

  // Kernel over every index of `dims`: fn(index) emits the element's work. Tasks are whole rows
  // of the last dimension (or fixed blocks of a long one), the same whatever the thread count.
  // independent: fn only reads elements no other index writes and writes only its own
  // element (elementwise-like kernels): the row loop is marked parallel for the vectoriser,
  // which then needs no run-time alias checks between the buffers.
  void parallel_loop(const std::string& name, const Dims& dims, int64_t work_per_element,
                     const std::function<void(const Index&)>& fn, bool independent = false);
  // Kernel over tasks [0, tasks): fn(task) emits one task's work.
  void parallel_tasks(const std::string& name, int64_t tasks, int64_t work,
                      const std::function<void(llvm::Value*)>& fn);

  // ---- Loops and indices (inside any function).
  // vectorize = false marks the loop never to be vectorised: task loops, whose bounds vary
  // with the thread count, must not decide which elements take a vector path (libmvec) and which
  // a scalar one, or results would depend on the thread count.
  // parallel_accesses: no iteration reads or writes memory another one writes (the memory
  // accesses of the body are put in one access group, llvm.loop.parallel_accesses).
  void for_range(llvm::Value* lo, llvm::Value* hi, const std::function<void(llvm::Value*)>& body,
                 bool vectorize = true, bool parallel_accesses = false);
  void for_range(int64_t lo, int64_t hi, const std::function<void(llvm::Value*)>& body,
                 bool vectorize = true) {
    for_range(int64(lo), int64(hi), body, vectorize);
  }
  // Nested loops over every index of dims, row-major.
  void for_each_index(const Dims& dims, const std::function<void(const Index&)>& body);
  llvm::Value* linearize(const Index& index, const Dims& dims);
  Index delinearize(llvm::Value* linear, const Dims& dims);
  // if (condition) then(); — then() may open loops.
  void if_then(llvm::Value* condition, const std::function<void()>& then);

  // ---- Memory.
  // Pointer to v's buffer (computed once per function, in its entry block).
  llvm::Value* base_pointer(ir::Value v);
  llvm::Value* base_pointer(const ValueStorage& s);
  llvm::Value* element_pointer(ir::Value v, llvm::Value* linear);
  llvm::Value* load(ir::Value v, llvm::Value* linear);          // register-typed
  void store(ir::Value v, llvm::Value* linear, llvm::Value* x);  // x register-typed
  // The same for an element of a buffer that is no IR value (a collective's staging buffer).
  llvm::Value* load_at(const ValueStorage& s, ir::DType dtype, llvm::Value* linear);
  void store_at(const ValueStorage& s, ir::DType dtype, llvm::Value* linear, llvm::Value* x);
  // Declares which buffer the current kernel writes and at which linear index (null: at many),
  // so that a read of the same buffer elsewhere is reported instead of racing (in-place
  // donation is safe only elementwise).
  void set_written(const ValueStorage& s, llvm::Value* linear) { written_ = {s, linear}; }
  void clear_written() { written_.reset(); }

  // ---- Elements.
  // Element of v at `index` (v's dims), register-typed.
  llvm::Value* element(ir::Value v, const Index& index);
  // Element of v at a row-major linear index.
  llvm::Value* element_linear(ir::Value v, llvm::Value* linear);
  // The element an op computes at `index` of its (single) result, from its operands' elements.
  llvm::Value* compute(const ir::Op& op, const Index& index);
  // An elementwise op applied to its operands' elements.
  llvm::Value* apply_elementwise(const ir::Op& op, const std::vector<llvm::Value*>& args);

  // ---- Numerics (Numerics in ElementOps.cpp).
  // A float register value (float or double) rounded to dtype's register form, correctly
  // rounded once (double → bf16/f16 goes through round-to-odd float).
  llvm::Value* round_float_to(ir::DType dtype, llvm::Value* x);
  // Register value of `from` converted to a double (floats, integers, pred).
  llvm::Value* to_double(ir::DType from, llvm::Value* x);
  llvm::Value* convert(ir::DType from, ir::DType to, llvm::Value* x);
  llvm::Value* constant_of(ir::DType dtype, double value);  // register-typed
  llvm::Value* unary(ir::OpKind kind, ir::DType dtype, llvm::Value* x);
  llvm::Value* binary(ir::OpKind kind, ir::DType dtype, llvm::Value* a, llvm::Value* c);
  llvm::Value* compare(ir::ComparisonDirection direction, ir::DType dtype, llvm::Value* a,
                       llvm::Value* c);
  // NaN-propagating max/min as the interpreter's (std::max/min after a NaN check).
  llvm::Value* float_max(llvm::Value* a, llvm::Value* c);
  llvm::Value* float_min(llvm::Value* a, llvm::Value* c);
  // A call to a libm function of the float type of x (name for float, name without the
  // trailing 'f' for double), declared without side effects so it may be vectorised.
  llvm::Value* math_call(const std::string& float_name, llvm::Value* x,
                         llvm::Value* y = nullptr);
  llvm::Value* intrinsic(llvm::Intrinsic::ID id, llvm::Value* x);
  // exp of a float (or vector of float) without a call: range reduction by ln 2 and a degree-7
  // polynomial (within 2 ulp of the correctly rounded result; results below FLT_MIN flush to
  // +0). Straight-line arithmetic, so loops of it vectorise.
  llvm::Value* fast_exp_f32(llvm::Value* x);

  // Runtime functions.
  llvm::FunctionCallee gemm(ir::DType dtype);
  // This device's position (i64) in the group of a shard_slice or collective: its coordinates
  // along the op's mesh axes (precast_mesh_coordinate, in options().mesh's axis order), major to
  // minor; computed once per function, in its entry block.
  llvm::Value* group_position(const ir::Op& op);
  llvm::StructType* gemm_args_type() const { return gemm_args_type_; }

 private:
  using ValueStorageKey = std::pair<int, int64_t>;
  struct FunctionState {
    llvm::Function* function = nullptr;
    llvm::BasicBlock* entry = nullptr;  // allocas and hoisted pointers go before its terminator
    llvm::Value* ctx = nullptr;
    llvm::Value* begin = nullptr;
    llvm::Value* end = nullptr;
    std::map<ValueStorageKey, llvm::Value*> bases;
  };
  llvm::Function* open_step_function(const std::string& name);
  llvm::Value* hoisted_ctx_field(int field);
  // Element of a constant's literal (a splat, or its private global array).
  llvm::Value* constant_element(ir::Value v, llvm::Value* linear);
  llvm::Value* to_register(ir::DType dtype, llvm::Value* stored);
  llvm::Value* global_constant(ir::Value v);
  void check_hazard(ir::Value v, llvm::Value* linear);

  const ir::Function& f_;
  const StepStorage& storage_;
  llvm::Module& module_;
  const CodeGenOptions& options_;
  llvm::IRBuilder<> builder_;
  std::optional<Error> error_;
  FunctionState state_;        // the function being emitted
  FunctionState entry_state_;  // the step entry, while a kernel is open
  llvm::IRBuilderBase::InsertPoint entry_point_;
  FunctionState step_state_;  // the entry, while a step function is open
  llvm::IRBuilderBase::InsertPoint step_point_;
  llvm::Value* step_runtime_context_ = nullptr;
  llvm::Value* runtime_context_ = nullptr;
  llvm::StructType* ctx_type_ = nullptr;
  llvm::StructType* gemm_args_type_ = nullptr;
  llvm::FunctionType* kernel_type_ = nullptr;
  size_t num_kernels_ = 0;
  std::optional<std::pair<ValueStorage, llvm::Value*>> written_;
  // Memo of computed elements: (block, value, index) → element. Fused computations are
  // straight-line code, so a value computed in a block serves every later use in that block.
  std::map<std::tuple<llvm::BasicBlock*, uint32_t, Index>, llvm::Value*> elements_;
  std::map<std::tuple<llvm::BasicBlock*, Index, Dims>, llvm::Value*> linears_;
  std::map<uint32_t, llvm::GlobalVariable*> globals_;
};

}  // namespace precast::backend::cpu
