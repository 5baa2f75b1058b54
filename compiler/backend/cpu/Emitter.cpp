// The emitter's functions, loops, memory access and element computation (see Emitter.h);
// scalar numerics live in ElementOps.cpp.
#include "compiler/backend/cpu/Emitter.h"

#include <fmt/format.h>

#include <algorithm>

#include "ir/Printer.h"

namespace precast::backend::cpu {

using ir::DType;
using ir::OpKind;

Emitter::Emitter(const ir::Function& function, const StepStorage& storage, llvm::Module& module,
                 const CodeGenOptions& options)
    : f_(function), storage_(storage), module_(module), options_(options),
      builder_(module.getContext()) {
  llvm::LLVMContext& c = module.getContext();
  auto* ptr = llvm::PointerType::get(c, 0);
  // {args, outputs, arena, runtime context}: the step function's four arguments.
  ctx_type_ = llvm::StructType::create(c, {ptr, ptr, ptr, ptr}, "precast.step_context");
  auto* i64t = llvm::Type::getInt64Ty(c);
  auto* i32t = llvm::Type::getInt32Ty(c);
  auto* dbl = llvm::Type::getDoubleTy(c);
  gemm_args_type_ = llvm::StructType::create(
      c, {i64t, i64t, i64t, i64t, i64t, i64t, i32t, i32t, dbl, dbl, i64t, i64t, i64t, i64t, ptr, ptr, ptr},
      "PrecastGemmArgs");
  kernel_type_ = llvm::FunctionType::get(llvm::Type::getVoidTy(c), {ptr, i64t, i64t}, false);
}

void Emitter::fail(std::string message) {
  if (!error_) error_ = internal_error("code generation: " + std::move(message));
}

// ---- Types ----------------------------------------------------------------------------------

llvm::Type* Emitter::storage_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return builder_.getFloatTy();
    case DType::kF64: return builder_.getDoubleTy();
    case DType::kBF16: return builder_.getInt16Ty();
    case DType::kF16: return builder_.getHalfTy();
    case DType::kS32:
    case DType::kU32: return builder_.getInt32Ty();
    case DType::kPred: return builder_.getInt8Ty();
  }
  return builder_.getFloatTy();
}

llvm::Type* Emitter::register_type(DType dtype) {
  switch (dtype) {
    case DType::kF64: return builder_.getDoubleTy();
    case DType::kF32:
    case DType::kBF16:
    case DType::kF16: return builder_.getFloatTy();
    case DType::kS32:
    case DType::kU32: return builder_.getInt32Ty();
    case DType::kPred: return builder_.getInt1Ty();
  }
  return builder_.getFloatTy();
}

// ---- Functions ------------------------------------------------------------------------------

llvm::Function* Emitter::open_step_function(const std::string& name) {
  llvm::LLVMContext& c = context();
  auto* ptr = llvm::PointerType::get(c, 0);
  auto* type = llvm::FunctionType::get(llvm::Type::getVoidTy(c), {ptr, ptr, ptr, ptr}, false);
  llvm::Function* function =
      llvm::Function::Create(type, llvm::Function::ExternalLinkage, name, module_);
  function->addFnAttr(llvm::Attribute::NoUnwind);
  auto* first = llvm::BasicBlock::Create(c, "entry", function);
  auto* body = llvm::BasicBlock::Create(c, "body", function);
  builder_.SetInsertPoint(first);
  llvm::Value* ctx = builder_.CreateAlloca(ctx_type_, nullptr, "ctx");
  for (unsigned i = 0; i < 4; ++i) {
    builder_.CreateStore(function->getArg(i), builder_.CreateStructGEP(ctx_type_, ctx, i));
  }
  builder_.CreateBr(body);
  builder_.SetInsertPoint(body);
  state_ = FunctionState{};
  state_.function = function;
  state_.entry = first;
  state_.ctx = ctx;
  runtime_context_ = function->getArg(3);
  return function;
}

void Emitter::begin_entry(const std::string& name) { open_step_function(name); }

llvm::Function* Emitter::begin_step(const std::string& name) {
  step_point_ = builder_.saveIP();
  step_state_ = std::move(state_);
  step_runtime_context_ = runtime_context_;
  llvm::Function* step = open_step_function(name);
  // Kept out of line: the runtime calls each step by its symbol.
  step->addFnAttr(llvm::Attribute::NoInline);
  return step;
}

void Emitter::end_step() {
  builder_.CreateRetVoid();
  llvm::Function* step = state_.function;
  state_ = std::move(step_state_);
  runtime_context_ = step_runtime_context_;
  builder_.restoreIP(step_point_);
  clear_written();
  llvm::Function* entry = state_.function;
  builder_.CreateCall(step->getFunctionType(), step,
                      {entry->getArg(0), entry->getArg(1), entry->getArg(2), entry->getArg(3)});
}

llvm::Function* Emitter::begin_kernel(const std::string& name) {
  entry_point_ = builder_.saveIP();
  entry_state_ = std::move(state_);
  llvm::Function* kernel = llvm::Function::Create(kernel_type_, llvm::Function::InternalLinkage,
                                                  name, module_);
  kernel->addFnAttr(llvm::Attribute::NoUnwind);
  // Kept out of line: inlining hundreds of kernels into the entry only slows the optimiser.
  kernel->addFnAttr(llvm::Attribute::NoInline);
  auto* first = llvm::BasicBlock::Create(context(), "entry", kernel);
  auto* body = llvm::BasicBlock::Create(context(), "body", kernel);
  builder_.SetInsertPoint(first);
  builder_.CreateBr(body);
  builder_.SetInsertPoint(body);
  state_ = FunctionState{};
  state_.function = kernel;
  state_.entry = first;
  state_.ctx = kernel->getArg(0);
  state_.begin = kernel->getArg(1);
  state_.end = kernel->getArg(2);
  ++num_kernels_;
  return kernel;
}

void Emitter::end_kernel() {
  builder_.CreateRetVoid();
  state_ = std::move(entry_state_);
  builder_.restoreIP(entry_point_);
  clear_written();
}

void Emitter::run_kernel(llvm::Function* kernel, int64_t tasks, int64_t work) {
  if (tasks <= 0) return;
  bool parallel = options_.parallel && tasks > 1 && work >= options_.min_parallel_elements;
  if (!parallel) {
    builder_.CreateCall(kernel_type_, kernel, {state_.ctx, int64(0), int64(tasks)});
    return;
  }
  auto* ptr = llvm::PointerType::get(context(), 0);
  llvm::FunctionCallee parallel_for = module_.getOrInsertFunction(
      "precast_parallel_for",
      llvm::FunctionType::get(builder_.getVoidTy(), {ptr, i64(), ptr, ptr}, false));
  builder_.CreateCall(parallel_for, {runtime_context_, int64(tasks), kernel, state_.ctx});
}

llvm::Value* Emitter::stack(llvm::Type* type, int64_t count, const std::string& name) {
  llvm::IRBuilder<> at(state_.entry->getTerminator());
  return at.CreateAlloca(type, count == 1 ? nullptr : int64(count), name);
}

void Emitter::parallel_loop(const std::string& name, const Dims& dims, int64_t work_per_element,
                            const std::function<void(const Index&)>& fn, bool independent) {
  int64_t total = 1;
  for (int64_t d : dims) total *= d;
  if (total == 0) return;
  int64_t rank = static_cast<int64_t>(dims.size());
  int64_t inner = rank == 0 ? 1 : dims.back();
  int64_t rows = total / inner;
  // A long last dimension with few rows is cut into fixed blocks so that it can be shared.
  int64_t block = (rows < 8 && inner > 8192) ? 4096 : inner;
  int64_t blocks = (inner + block - 1) / block;
  Dims outer_dims(dims.begin(), rank == 0 ? dims.end() : dims.end() - 1);
  llvm::Function* kernel = begin_kernel(name);
  for_range(
      task_begin(), task_end(),
      [&](llvm::Value* task) {
    llvm::Value* row = blocks == 1 ? task : builder_.CreateUDiv(task, int64(blocks));
    Index index = delinearize(row, outer_dims);
    if (rank == 0) {
      fn(index);
      return;
    }
    llvm::Value* lo = int64(0);
    llvm::Value* hi = int64(inner);
    if (blocks > 1) {
      lo = builder_.CreateMul(builder_.CreateURem(task, int64(blocks)), int64(block));
      llvm::Value* end = builder_.CreateAdd(lo, int64(block));
      hi = builder_.CreateSelect(builder_.CreateICmpSLT(end, int64(inner)), end, int64(inner));
    }
    for_range(
        lo, hi,
        [&](llvm::Value* i) {
          Index full = index;
          full.push_back(i);
          fn(full);
        },
        true, independent);
      },
      false);
  end_kernel();
  run_kernel(kernel, rows * blocks, total * work_per_element);
}

void Emitter::parallel_tasks(const std::string& name, int64_t tasks, int64_t work,
                             const std::function<void(llvm::Value*)>& fn) {
  if (tasks <= 0) return;
  llvm::Function* kernel = begin_kernel(name);
  for_range(task_begin(), task_end(), fn, false);
  end_kernel();
  run_kernel(kernel, tasks, work);
}

// ---- Loops ----------------------------------------------------------------------------------

void Emitter::for_range(llvm::Value* lo, llvm::Value* hi,
                        const std::function<void(llvm::Value*)>& body, bool vectorize,
                        bool parallel_accesses) {
  llvm::BasicBlock* before = builder_.GetInsertBlock();
  llvm::Function* function = before->getParent();
  auto* loop = llvm::BasicBlock::Create(context(), "loop", function);
  auto* exit = llvm::BasicBlock::Create(context(), "loop.exit", function);
  builder_.CreateCondBr(builder_.CreateICmpSLT(lo, hi), loop, exit);
  builder_.SetInsertPoint(loop);
  llvm::PHINode* i = builder_.CreatePHI(i64(), 2, "i");
  i->addIncoming(lo, before);
  body(i);
  llvm::Value* next = builder_.CreateAdd(i, int64(1), "i.next", true, true);
  i->addIncoming(next, builder_.GetInsertBlock());
  llvm::BranchInst* latch = builder_.CreateCondBr(builder_.CreateICmpSLT(next, hi), loop, exit);
  if (parallel_accesses) {
    // The loop's blocks: `loop` and every block appended after it but `exit`.
    llvm::LLVMContext& c = context();
    llvm::MDNode* group = llvm::MDNode::getDistinct(c, {});
    bool inside = false;
    for (llvm::BasicBlock& block : *function) {
      if (&block == loop) inside = true;
      if (!inside || &block == exit) continue;
      for (llvm::Instruction& instruction : block) {
        if (instruction.mayReadOrWriteMemory()) {
          instruction.setMetadata(llvm::LLVMContext::MD_access_group, group);
        }
      }
    }
    llvm::Metadata* parallel[] = {llvm::MDString::get(c, "llvm.loop.parallel_accesses"), group};
    llvm::Metadata* self[] = {nullptr, llvm::MDNode::get(c, parallel)};
    llvm::MDNode* id = llvm::MDNode::getDistinct(c, self);
    id->replaceOperandWith(0, id);
    latch->setMetadata(llvm::LLVMContext::MD_loop, id);
  }
  if (!vectorize) {
    llvm::LLVMContext& c = context();
    // Nor unrolled: the SLP vectoriser could otherwise pack copies of consecutive tasks.
    llvm::Metadata* off[] = {llvm::MDString::get(c, "llvm.loop.vectorize.enable"),
                             llvm::ConstantAsMetadata::get(builder_.getFalse())};
    llvm::Metadata* no_unroll[] = {llvm::MDString::get(c, "llvm.loop.unroll.disable")};
    llvm::Metadata* self[] = {nullptr, llvm::MDNode::get(c, off), llvm::MDNode::get(c, no_unroll)};
    llvm::MDNode* id = llvm::MDNode::getDistinct(c, self);
    id->replaceOperandWith(0, id);
    latch->setMetadata(llvm::LLVMContext::MD_loop, id);
  }
  builder_.SetInsertPoint(exit);
}

void Emitter::for_each_index(const Dims& dims, const std::function<void(const Index&)>& body) {
  std::function<void(size_t, Index&)> nest = [&](size_t d, Index& index) {
    if (d == dims.size()) {
      body(index);
      return;
    }
    if (dims[d] == 1) {
      index.push_back(int64(0));
      nest(d + 1, index);
      index.pop_back();
      return;
    }
    for_range(0, dims[d], [&](llvm::Value* i) {
      index.push_back(i);
      nest(d + 1, index);
      index.pop_back();
    });
  };
  Index index;
  nest(0, index);
}

llvm::Value* Emitter::linearize(const Index& index, const Dims& dims) {
  auto key = std::make_tuple(builder_.GetInsertBlock(), index, dims);
  if (auto it = linears_.find(key); it != linears_.end()) return it->second;
  llvm::Value* linear = int64(0);
  int64_t stride = 1;
  for (size_t d = dims.size(); d-- > 0;) {
    if (dims[d] != 1) {
      llvm::Value* term = stride == 1 ? index[d] : builder_.CreateMul(index[d], int64(stride), "", true, true);
      linear = llvm::isa<llvm::ConstantInt>(linear) && llvm::cast<llvm::ConstantInt>(linear)->isZero()
                   ? term
                   : builder_.CreateAdd(linear, term, "", true, true);
    }
    stride *= dims[d];
  }
  linears_[key] = linear;
  return linear;
}

Index Emitter::delinearize(llvm::Value* linear, const Dims& dims) {
  Index index(dims.size(), nullptr);
  llvm::Value* rest = linear;
  for (size_t d = dims.size(); d-- > 0;) {
    if (dims[d] == 1) {
      index[d] = int64(0);
    } else if (d == 0) {
      index[d] = rest;
    } else {
      index[d] = builder_.CreateURem(rest, int64(dims[d]));
      rest = builder_.CreateUDiv(rest, int64(dims[d]));
    }
  }
  return index;
}

void Emitter::if_then(llvm::Value* condition, const std::function<void()>& then) {
  llvm::Function* function = builder_.GetInsertBlock()->getParent();
  auto* yes = llvm::BasicBlock::Create(context(), "then", function);
  auto* after = llvm::BasicBlock::Create(context(), "endif", function);
  builder_.CreateCondBr(condition, yes, after);
  builder_.SetInsertPoint(yes);
  then();
  builder_.CreateBr(after);
  builder_.SetInsertPoint(after);
}

// ---- Memory ---------------------------------------------------------------------------------

llvm::Value* Emitter::hoisted_ctx_field(int field) {
  ValueStorageKey key{-1, field};
  if (auto it = state_.bases.find(key); it != state_.bases.end()) return it->second;
  llvm::IRBuilder<> at(state_.entry->getTerminator());
  auto* ptr = llvm::PointerType::get(context(), 0);
  llvm::Value* value =
      at.CreateLoad(ptr, at.CreateStructGEP(ctx_type_, state_.ctx, static_cast<unsigned>(field)));
  state_.bases[key] = value;
  return value;
}

llvm::Value* Emitter::base_pointer(const ValueStorage& s) {
  auto* ptr = llvm::PointerType::get(context(), 0);
  if (s.kind == StorageKind::kEmpty) return llvm::ConstantPointerNull::get(ptr);
  if (s.kind == StorageKind::kFused) {
    fail("internal: a fused value has no buffer");
    return llvm::ConstantPointerNull::get(ptr);
  }
  ValueStorageKey key{static_cast<int>(s.kind), s.index};
  if (auto it = state_.bases.find(key); it != state_.bases.end()) return it->second;
  llvm::Value* base = nullptr;
  if (s.kind == StorageKind::kArena) {
    llvm::Value* arena = hoisted_ctx_field(2);
    llvm::IRBuilder<> at(state_.entry->getTerminator());
    base = at.CreateInBoundsGEP(at.getInt8Ty(), arena, at.getInt64(static_cast<uint64_t>(s.index)));
  } else {
    llvm::Value* table = hoisted_ctx_field(s.kind == StorageKind::kArgument ? 0 : 1);
    llvm::IRBuilder<> at(state_.entry->getTerminator());
    base = at.CreateLoad(ptr, at.CreateInBoundsGEP(ptr, table, at.getInt64(static_cast<uint64_t>(s.index))));
  }
  state_.bases[key] = base;
  return base;
}

llvm::Value* Emitter::base_pointer(ir::Value v) { return base_pointer(storage(v)); }

llvm::Value* Emitter::element_pointer(ir::Value v, llvm::Value* linear) {
  return builder_.CreateInBoundsGEP(storage_type(dtype(v)), base_pointer(v), linear);
}

void Emitter::check_hazard(ir::Value v, llvm::Value* linear) {
  if (!written_ || !(storage(v) == written_->first)) return;
  if (written_->second != nullptr && written_->second == linear) return;
  fail(fmt::format(
      "value {} ({}) is read by a kernel that writes its buffer at other positions (an in-place "
      "donated result computed by a non-elementwise op); plan it without in-place donation",
      v.id, ir::to_string(f_.type(v))));
}

llvm::Value* Emitter::load(ir::Value v, llvm::Value* linear) {
  check_hazard(v, linear);
  return load_at(storage(v), dtype(v), linear);
}

llvm::Value* Emitter::load_at(const ValueStorage& s, DType t, llvm::Value* linear) {
  llvm::Value* at = builder_.CreateInBoundsGEP(storage_type(t), base_pointer(s), linear);
  return to_register(t, builder_.CreateLoad(storage_type(t), at));
}

void Emitter::store(ir::Value v, llvm::Value* linear, llvm::Value* x) {
  store_at(storage(v), dtype(v), linear, x);
}

void Emitter::store_at(const ValueStorage& s, DType t, llvm::Value* linear, llvm::Value* x) {
  switch (t) {
    case DType::kBF16:
      x = builder_.CreateTrunc(
          builder_.CreateLShr(builder_.CreateBitCast(x, i32()), 16), builder_.getInt16Ty());
      break;
    case DType::kF16: x = builder_.CreateFPTrunc(x, builder_.getHalfTy()); break;
    case DType::kPred: x = builder_.CreateZExt(x, builder_.getInt8Ty()); break;
    default: break;
  }
  builder_.CreateStore(x, builder_.CreateInBoundsGEP(storage_type(t), base_pointer(s), linear));
}

// ---- Elements -------------------------------------------------------------------------------

llvm::Value* Emitter::global_constant(ir::Value v) {
  if (auto it = globals_.find(v.id); it != globals_.end()) return it->second;
  const ir::Op& op = f_.op(f_.defining_op(v));
  std::span<const double> literal = f_.attrs(op).reals(ir::AttrKey::kValue);
  DType t = dtype(v);
  llvm::Type* element_type = storage_type(t);
  std::vector<llvm::Constant*> elements;
  elements.reserve(literal.size());
  for (double x : literal) {
    switch (t) {
      case DType::kF32: elements.push_back(llvm::ConstantFP::get(element_type, static_cast<float>(x))); break;
      case DType::kF64: elements.push_back(llvm::ConstantFP::get(element_type, x)); break;
      case DType::kF16: elements.push_back(llvm::ConstantFP::get(element_type, x)); break;
      case DType::kBF16: {
        llvm::APFloat value(x);
        bool lost = false;
        value.convert(llvm::APFloat::BFloat(), llvm::APFloat::rmNearestTiesToEven, &lost);
        elements.push_back(llvm::ConstantInt::get(element_type, value.bitcastToAPInt()));
        break;
      }
      case DType::kS32:
      case DType::kU32:
        elements.push_back(llvm::ConstantInt::get(
            element_type, static_cast<uint64_t>(static_cast<uint32_t>(static_cast<int64_t>(x)))));
        break;
      case DType::kPred: elements.push_back(llvm::ConstantInt::get(element_type, x != 0.0 ? 1 : 0)); break;
    }
  }
  auto* array_type = llvm::ArrayType::get(element_type, elements.size());
  auto* global = new llvm::GlobalVariable(module_, array_type, true,
                                          llvm::GlobalValue::PrivateLinkage,
                                          llvm::ConstantArray::get(array_type, elements),
                                          fmt::format("precast.constant.{}", v.id));
  global->setUnnamedAddr(llvm::GlobalValue::UnnamedAddr::Global);
  globals_[v.id] = global;
  return global;
}

llvm::Value* Emitter::constant_element(ir::Value v, llvm::Value* linear) {
  std::span<const double> literal = f_.attrs(f_.op(f_.defining_op(v))).reals(ir::AttrKey::kValue);
  DType t = dtype(v);
  if (literal.size() == 1) return constant_of(t, literal[0]);
  llvm::Value* raw = builder_.CreateLoad(
      storage_type(t), builder_.CreateInBoundsGEP(storage_type(t), global_constant(v), linear));
  return to_register(t, raw);
}

llvm::Value* Emitter::to_register(DType t, llvm::Value* x) {
  switch (t) {
    case DType::kBF16:
      return builder_.CreateBitCast(builder_.CreateShl(builder_.CreateZExt(x, i32()), 16),
                                    builder_.getFloatTy());
    case DType::kF16: return builder_.CreateFPExt(x, builder_.getFloatTy());
    case DType::kPred: return builder_.CreateICmpNE(x, builder_.getInt8(0));
    default: return x;
  }
}

llvm::Value* Emitter::element(ir::Value v, const Index& index) {
  // A scalar read inside a kernel's loops is computed once, in the kernel's entry block. Left in
  // the loop, its loads may alias the loop's stores as far as LLVM knows, so a call on them
  // stays there: AdamW's bias corrections 1 - b^t were a vector pow per weight element.
  if (index.empty() && state_.begin != nullptr && builder_.GetInsertBlock() != state_.entry) {
    llvm::IRBuilderBase::InsertPoint here = builder_.saveIP();
    builder_.SetInsertPoint(state_.entry->getTerminator());
    llvm::Value* x = element(v, index);
    builder_.restoreIP(here);
    return x;
  }
  auto key = std::make_tuple(builder_.GetInsertBlock(), v.id, index);
  if (auto it = elements_.find(key); it != elements_.end()) return it->second;
  llvm::Value* x = storage(v).materialised() ? load(v, linearize(index, dims(v)))
                                             : compute(f_.op(f_.defining_op(v)), index);
  elements_[key] = x;
  return x;
}

llvm::Value* Emitter::element_linear(ir::Value v, llvm::Value* linear) {
  // The null entry keeps these keys apart from multi-indices of the same value.
  auto key = std::make_tuple(builder_.GetInsertBlock(), v.id, Index{linear, nullptr});
  if (auto it = elements_.find(key); it != elements_.end()) return it->second;
  llvm::Value* x = nullptr;
  if (storage(v).materialised()) {
    x = load(v, linear);
  } else {
    const ir::Op& op = f_.op(f_.defining_op(v));
    std::span<const ir::Value> operands = f_.operands(op);
    bool same_shape_elementwise = ir::is_elementwise(op.kind);
    if (op.kind == OpKind::kReshape) {
      x = element_linear(operands[0], linear);
    } else if (op.kind == OpKind::kConstant) {
      x = constant_element(v, linear);
    } else if (same_shape_elementwise) {
      std::vector<llvm::Value*> args;
      for (ir::Value u : operands) args.push_back(element_linear(u, linear));
      x = apply_elementwise(op, args);
    } else {
      x = element(v, delinearize(linear, dims(v)));
    }
  }
  elements_[key] = x;
  return x;
}

llvm::Value* Emitter::compute(const ir::Op& op, const Index& index) {
  ir::Value v = f_.result(op);
  std::span<const ir::Value> operands = f_.operands(op);
  const ir::AttrSet& attrs = f_.attrs(op);
  switch (op.kind) {
    case OpKind::kConstant: {
      return constant_element(v, linearize(index, dims(v)));
    }
    case OpKind::kIota: {
      llvm::Value* i = index[static_cast<size_t>(attrs.integer(ir::AttrKey::kDimension))];
      DType t = dtype(v);
      if (t == DType::kS32 || t == DType::kU32) return builder_.CreateTrunc(i, i32());
      return round_float_to(t, builder_.CreateSIToFP(i, f64()));
    }
    case OpKind::kBroadcastInDim: {
      ir::Value x = operands[0];
      std::span<const int64_t> map = attrs.ints(ir::AttrKey::kDims);
      Index at;
      for (size_t i = 0; i < map.size(); ++i) {
        at.push_back(dims(x)[i] == 1 ? int64(0) : index[static_cast<size_t>(map[i])]);
      }
      return element(x, at);
    }
    case OpKind::kReshape:
      return element_linear(operands[0], linearize(index, dims(v)));
    case OpKind::kShardSlice: {
      // This device's piece: the operand at the index offset by its position in the group.
      size_t d = static_cast<size_t>(attrs.integer(ir::AttrKey::kDimension));
      Index at = index;
      at[d] =
          builder_.CreateAdd(index[d], builder_.CreateMul(group_position(op), int64(dims(v)[d])));
      return element(operands[0], at);
    }
    default:
      break;
  }
  if (!ir::is_elementwise(op.kind)) {
    fail(fmt::format("{} cannot be computed inside a loop kernel", ir::op_name(op.kind)));
    return llvm::UndefValue::get(register_type(dtype(v)));
  }
  std::vector<llvm::Value*> args;
  for (ir::Value u : operands) args.push_back(element(u, index));
  return apply_elementwise(op, args);
}

llvm::Value* Emitter::apply_elementwise(const ir::Op& op, const std::vector<llvm::Value*>& args) {
  std::span<const ir::Value> operands = f_.operands(op);
  DType in = dtype(operands[0]);
  switch (op.kind) {
    case OpKind::kCompare: return compare(f_.attrs(op).direction(), in, args[0], args[1]);
    case OpKind::kSelect: return builder_.CreateSelect(args[0], args[1], args[2]);
    case OpKind::kConvert: return convert(in, dtype(f_.result(op)), args[0]);
    default:
      return args.size() == 1 ? unary(op.kind, in, args[0]) : binary(op.kind, in, args[0], args[1]);
  }
}

// ---- Runtime functions ----------------------------------------------------------------------

llvm::Value* Emitter::group_position(const ir::Op& op) {
  ValueStorageKey key{-2, static_cast<int64_t>(f_.result(op).id)};
  if (auto it = state_.bases.find(key); it != state_.bases.end()) return it->second;
  const ir::AttrSet& attrs = f_.attrs(op);
  llvm::Value* context = hoisted_ctx_field(3);
  llvm::IRBuilder<> at(state_.entry->getTerminator());
  auto* ptr = llvm::PointerType::get(this->context(), 0);
  llvm::FunctionCallee coordinate = module_.getOrInsertFunction(
      "precast_mesh_coordinate", llvm::FunctionType::get(i64(), {ptr, i64()}, false));
  if (auto* declared = llvm::dyn_cast<llvm::Function>(coordinate.getCallee())) {
    declared->setOnlyReadsMemory();
    declared->setDoesNotThrow();
    declared->setWillReturn();
  }
  llvm::Value* position = at.getInt64(0);
  int64_t group = 1;
  for (int64_t id : attrs.ints(ir::AttrKey::kMeshAxes)) {
    std::string_view name = f_.context().string(static_cast<ir::StringId>(id));
    size_t axis = 0;
    while (axis < options_.mesh.size() && options_.mesh[axis].first != name) ++axis;
    if (axis == options_.mesh.size()) {
      if (attrs.integer(ir::AttrKey::kGroupSize) == 1) continue;  // an axis of size one
      fail(
          fmt::format("{} spans mesh axis '{}', which CodeGenOptions::mesh does not list; pass "
                      "the mesh the function was partitioned for",
                      ir::op_name(op.kind), name));
      break;
    }
    int64_t size = options_.mesh[axis].second;
    llvm::Value* c = at.CreateCall(coordinate, {context, at.getInt64(static_cast<uint64_t>(axis))});
    position = at.CreateAdd(at.CreateMul(position, at.getInt64(static_cast<uint64_t>(size))), c);
    group *= size;
  }
  if (!error_ && group != attrs.integer(ir::AttrKey::kGroupSize)) {
    fail(fmt::format("{}: group_size {} but its mesh axes hold {} devices in CodeGenOptions::mesh",
                     ir::op_name(op.kind), attrs.integer(ir::AttrKey::kGroupSize), group));
  }
  state_.bases[key] = position;
  return position;
}

llvm::FunctionCallee Emitter::gemm(DType dtype) {
  auto* ptr = llvm::PointerType::get(context(), 0);
  return module_.getOrInsertFunction(
      dtype == DType::kF64 ? "precast_gemm_f64" : "precast_gemm_f32",
      llvm::FunctionType::get(builder_.getVoidTy(), {ptr, ptr}, false));
}

}  // namespace precast::backend::cpu
