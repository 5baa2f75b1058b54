// One kernel emitter per op family. Each writes the op's results into their planned buffers and
// reads operands through the element emitter, so a fused operand (a constant, an iota, an
// elementwise tree) is computed inline wherever it is read. Work is cut into tasks that depend
// only on shapes, and every output element is computed by one task in a fixed order, so the
// results are the same for any thread count.
#include "compiler/backend/cpu/Kernels.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <numbers>

#include "ir/Composites.h"
#include "ir/Random.h"
#include "llvm/IR/Intrinsics.h"

namespace precast::backend::cpu {

using ir::AttrKey;
using ir::DType;
using ir::OpKind;

namespace {

int64_t product(const Dims& dims) {
  int64_t p = 1;
  for (int64_t d : dims) p *= d;
  return p;
}

bool contains(std::span<const int64_t> list, int64_t d) {
  return std::find(list.begin(), list.end(), d) != list.end();
}

std::vector<int64_t> free_dims(int64_t rank, std::span<const int64_t> batch,
                               std::span<const int64_t> contract) {
  std::vector<int64_t> free;
  for (int64_t d = 0; d < rank; ++d) {
    if (!contains(batch, d) && !contains(contract, d)) free.push_back(d);
  }
  return free;
}

llvm::Value* is_zero(Emitter& e, llvm::Value* x) {
  return e.b().CreateICmpEQ(x, e.int64(0));
}

// ---- Elementwise and reductions --------------------------------------------------------------

// A materialised elementwise / broadcast / reshape / convert / iota / constant value.
void emit_elementwise(Emitter& e, const ir::Op& op, const std::string& name) {
  ir::Value v = e.f().result(op);
  const Dims& dims = e.dims(v);
  e.parallel_loop(
      name, dims, 1,
      [&](const Index& index) {
        llvm::Value* linear = e.linearize(index, dims);
        e.set_written(e.storage(v), linear);
        e.store(v, linear, e.compute(op, index));
      },
      true);
}

llvm::Value* reduce_initial(Emitter& e, OpKind kind, DType dtype) {
  bool sum = kind == OpKind::kReduceSum, max = kind == OpKind::kReduceMax;
  if (ir::is_floating(dtype)) {
    if (sum) return llvm::ConstantFP::get(e.f64(), 0.0);
    llvm::Type* type = e.register_type(dtype);
    return llvm::ConstantFP::getInfinity(type, max);
  }
  if (sum) return e.b().getInt32(0);
  if (dtype == DType::kS32) return e.b().getInt32(max ? 0x80000000u : 0x7fffffffu);
  return e.b().getInt32(max ? 0u : 0xffffffffu);
}

// Each output element accumulates its reduced elements in row-major order, as the interpreter
// does; float sums in double (one rounding at the end), max/min in the element type.
void emit_reduce(Emitter& e, const ir::Op& op, const std::string& name) {
  const ir::Function& f = e.f();
  ir::Value v = f.result(op), x = f.operands(op)[0];
  std::span<const int64_t> reduced = f.attrs(op).ints(AttrKey::kDims);
  const Dims& x_dims = e.dims(x);
  Dims reduced_dims;
  for (int64_t d : reduced) reduced_dims.push_back(x_dims[static_cast<size_t>(d)]);
  DType dtype = e.dtype(x);
  bool floating = ir::is_floating(dtype), is_signed = dtype == DType::kS32;
  e.parallel_loop(name, e.dims(v), std::max<int64_t>(product(reduced_dims), 1), [&](const Index& out) {
    llvm::Value* linear = e.linearize(out, e.dims(v));
    e.set_written(e.storage(v), linear);
    llvm::Value* initial = reduce_initial(e, op.kind, dtype);
    llvm::Value* acc = e.stack(initial->getType(), 1, "acc");
    e.b().CreateStore(initial, acc);
    e.for_each_index(reduced_dims, [&](const Index& r) {
      Index full(x_dims.size());
      for (size_t d = 0, kept = 0, red = 0; d < x_dims.size(); ++d) {
        full[d] = contains(reduced, static_cast<int64_t>(d)) ? r[red++] : out[kept++];
      }
      llvm::Value* element = e.element(x, full);
      llvm::Value* current = e.b().CreateLoad(initial->getType(), acc);
      llvm::Value* next = nullptr;
      if (op.kind == OpKind::kReduceSum) {
        next = floating ? e.b().CreateFAdd(current, e.to_double(dtype, element))
                        : e.b().CreateAdd(current, element);
      } else if (floating) {
        next = op.kind == OpKind::kReduceMax ? e.float_max(current, element)
                                             : e.float_min(current, element);
      } else {
        OpKind kind = op.kind == OpKind::kReduceMax ? OpKind::kMax : OpKind::kMin;
        next = e.binary(kind, is_signed ? DType::kS32 : DType::kU32, current, element);
      }
      e.b().CreateStore(next, acc);
    });
    llvm::Value* result = e.b().CreateLoad(initial->getType(), acc);
    if (floating) result = e.round_float_to(dtype, result);
    e.store(v, linear, result);
  });
}

// f32 and f64 max / min over the last dimension alone (the loss's row max over the vocabulary):
// kExtremumLanes running extrema, lane l taking the elements l, l + kExtremumLanes, ... (straight
// code the SLP vectoriser packs into vector compares and selects), combined in lane order, then
// the remaining elements. Every bit as emit_reduce's one running extremum: a NaN anywhere gives
// float_max's NaN whatever the order; otherwise the extremum's value is the same, and elements
// of equal value have equal bits except +0 and -0, where the sequential loop keeps the first in
// index order: when the result is 0 a second pass takes the first zero element instead.
constexpr int64_t kExtremumLanes = 16;

bool fast_extremum_applies(Emitter& e, const ir::Op& op) {
  if (op.kind != OpKind::kReduceMax && op.kind != OpKind::kReduceMin) return false;
  const ir::Function& f = e.f();
  ir::Value x = f.operands(op)[0];
  DType dtype = e.dtype(x);
  std::span<const int64_t> reduced = f.attrs(op).ints(AttrKey::kDims);
  const Dims& x_dims = e.dims(x);
  return (dtype == DType::kF32 || dtype == DType::kF64) && e.dtype(f.result(op)) == dtype &&
         reduced.size() == 1 && reduced[0] == static_cast<int64_t>(x_dims.size()) - 1 &&
         x_dims.back() >= 2 * kExtremumLanes && product(x_dims) > 0;
}

void emit_fast_extremum(Emitter& e, const ir::Op& op, const std::string& name) {
  const ir::Function& f = e.f();
  ir::Value v = f.result(op), x = f.operands(op)[0];
  DType dtype = e.dtype(x);
  int64_t n = e.dims(x).back();
  bool max = op.kind == OpKind::kReduceMax;
  llvm::IRBuilder<>& b = e.b();
  llvm::Type* type = e.register_type(dtype);
  auto combine = [&](llvm::Value* acc, llvm::Value* element) {
    return max ? e.float_max(acc, element) : e.float_min(acc, element);
  };
  e.parallel_loop(name, e.dims(v), n, [&](const Index& out) {
    llvm::Value* linear = e.linearize(out, e.dims(v));
    e.set_written(e.storage(v), linear);
    auto element_at = [&](llvm::Value* j) {
      Index full = out;
      full.push_back(j);
      return e.element(x, full);
    };
    llvm::Value* lanes = e.stack(type, kExtremumLanes, "lanes");
    llvm::Value* initial = reduce_initial(e, op.kind, dtype);
    for (int64_t l = 0; l < kExtremumLanes; ++l) {
      b.CreateStore(initial, b.CreateInBoundsGEP(type, lanes, e.int64(l)));
    }
    int64_t chunks = n / kExtremumLanes;
    e.for_range(e.int64(0), e.int64(chunks), [&](llvm::Value* chunk) {
      llvm::Value* first = b.CreateMul(chunk, e.int64(kExtremumLanes));
      for (int64_t l = 0; l < kExtremumLanes; ++l) {
        llvm::Value* slot = b.CreateInBoundsGEP(type, lanes, e.int64(l));
        llvm::Value* element = element_at(b.CreateAdd(first, e.int64(l)));
        b.CreateStore(combine(b.CreateLoad(type, slot), element), slot);
      }
    });
    llvm::Value* acc = e.stack(type, 1, "acc");
    b.CreateStore(initial, acc);
    for (int64_t l = 0; l < kExtremumLanes; ++l) {
      llvm::Value* lane = b.CreateLoad(type, b.CreateInBoundsGEP(type, lanes, e.int64(l)));
      b.CreateStore(combine(b.CreateLoad(type, acc), lane), acc);
    }
    e.for_range(e.int64(chunks * kExtremumLanes), e.int64(n), [&](llvm::Value* j) {
      b.CreateStore(combine(b.CreateLoad(type, acc), element_at(j)), acc);
    });
    llvm::Value* zero = llvm::ConstantFP::get(type, 0.0);
    e.if_then(b.CreateFCmpOEQ(b.CreateLoad(type, acc), zero), [&] {
      // The first zero in index order: taken while none has been found.
      llvm::Value* found = e.stack(b.getInt1Ty(), 1, "found");
      b.CreateStore(b.getFalse(), found);
      e.for_range(
          e.int64(0), e.int64(n),
          [&](llvm::Value* j) {
            llvm::Value* element = element_at(j);
            llvm::Value* already = b.CreateLoad(b.getInt1Ty(), found);
            llvm::Value* take = b.CreateAnd(b.CreateFCmpOEQ(element, zero), b.CreateNot(already));
            b.CreateStore(b.CreateSelect(take, element, b.CreateLoad(type, acc)), acc);
            b.CreateStore(b.CreateOr(already, take), found);
          },
          false);
    });
    e.store(v, linear, b.CreateLoad(type, acc));
  });
}

// f32 sums (exact_kernels off): accumulated in float. When x's last dimension is kept, each task
// owns a block of up to kSumColumns output columns and adds whole rows of x into a stack row
// (vectorised across the columns; the reduced elements are added in row-major order); otherwise
// each output element sums its elements with the innermost reduced loop reassociable (the
// vectoriser's order, fixed when the code is generated).
constexpr int64_t kSumColumns = 64;

bool fast_sum_applies(Emitter& e, const ir::Op& op) {
  if (e.options().exact_kernels || op.kind != OpKind::kReduceSum) return false;
  const ir::Function& f = e.f();
  ir::Value v = f.result(op), x = f.operands(op)[0];
  std::span<const int64_t> reduced = f.attrs(op).ints(AttrKey::kDims);
  return e.dtype(x) == DType::kF32 && e.dtype(v) == DType::kF32 && !reduced.empty() &&
         product(e.dims(x)) > 0;
}

void emit_fast_sum(Emitter& e, const ir::Op& op, const std::string& name) {
  const ir::Function& f = e.f();
  ir::Value v = f.result(op), x = f.operands(op)[0];
  std::span<const int64_t> reduced = f.attrs(op).ints(AttrKey::kDims);
  const Dims& x_dims = e.dims(x);
  size_t rank = x_dims.size();
  Dims reduced_dims;
  for (int64_t d : reduced) reduced_dims.push_back(x_dims[static_cast<size_t>(d)]);
  int64_t count = product(reduced_dims);
  auto full_index = [&](const Index& out, const Index& r) {
    Index full(rank);
    for (size_t d = 0, kept = 0, red = 0; d < rank; ++d) {
      full[d] = contains(reduced, static_cast<int64_t>(d)) ? r[red++] : out[kept++];
    }
    return full;
  };
  llvm::IRBuilder<>& b = e.b();
  llvm::Type* f32 = b.getFloatTy();
  if (!contains(reduced, static_cast<int64_t>(rank - 1))) {
    const Dims& out_dims = e.dims(v);
    int64_t columns = out_dims.back();
    Dims prefix(out_dims.begin(), out_dims.end() - 1);
    int64_t blocks = (columns + kSumColumns - 1) / kSumColumns;
    int64_t block = std::min(columns, kSumColumns);
    e.parallel_tasks(name, product(prefix) * blocks, product(x_dims), [&](llvm::Value* task) {
      llvm::Value* row = blocks == 1 ? task : b.CreateUDiv(task, e.int64(blocks));
      llvm::Value* lo =
          blocks == 1 ? e.int64(0)
                      : b.CreateMul(b.CreateURem(task, e.int64(blocks)), e.int64(kSumColumns));
      llvm::Value* hi = b.CreateAdd(lo, e.int64(block));
      if (columns % block != 0)
        hi = b.CreateSelect(b.CreateICmpSLT(hi, e.int64(columns)), hi, e.int64(columns));
      Index out = e.delinearize(row, prefix);
      llvm::Value* acc = e.stack(f32, block, "acc");
      llvm::Value* width = b.CreateSub(hi, lo);
      e.for_range(e.int64(0), width, [&](llvm::Value* j) {
        b.CreateStore(llvm::ConstantFP::get(f32, 0.0), b.CreateInBoundsGEP(f32, acc, j));
      });
      e.for_each_index(reduced_dims, [&](const Index& r) {
        e.for_range(lo, hi, [&](llvm::Value* j) {
          Index o = out;
          o.push_back(j);
          llvm::Value* slot = b.CreateInBoundsGEP(f32, acc, b.CreateSub(j, lo));
          b.CreateStore(b.CreateFAdd(b.CreateLoad(f32, slot), e.element(x, full_index(o, r))),
                        slot);
        });
      });
      e.set_written(e.storage(v), nullptr);
      e.for_range(lo, hi, [&](llvm::Value* j) {
        Index o = out;
        o.push_back(j);
        e.store(v, e.linearize(o, out_dims),
                b.CreateLoad(f32, b.CreateInBoundsGEP(f32, acc, b.CreateSub(j, lo))));
      });
    });
    return;
  }
  e.parallel_loop(name, e.dims(v), std::max<int64_t>(count, 1), [&](const Index& out) {
    llvm::Value* linear = e.linearize(out, e.dims(v));
    e.set_written(e.storage(v), linear);
    llvm::Value* acc = e.stack(f32, 1, "acc");
    b.CreateStore(llvm::ConstantFP::get(f32, 0.0), acc);
    e.for_each_index(reduced_dims, [&](const Index& r) {
      llvm::IRBuilderBase::FastMathFlagGuard guard(b);
      llvm::FastMathFlags flags;
      flags.setAllowReassoc();
      llvm::Value* element = e.element(x, full_index(out, r));
      b.setFastMathFlags(flags);
      b.CreateStore(b.CreateFAdd(b.CreateLoad(f32, acc), element), acc);
    });
    e.store(v, linear, b.CreateLoad(f32, acc));
  });
}

// ---- dot_general ----------------------------------------------------------------------------

// A group of dimensions seen as one: total size and the stride of its last non-unit dimension,
// when the dimensions are contiguous in the group's order.
struct Group {
  int64_t size = 1;
  int64_t stride = 1;
  bool mergeable = true;
};

Group group_of(const Dims& dims, std::span<const int64_t> list) {
  std::vector<int64_t> strides = ir::row_major_strides(dims);
  Group g;
  int64_t previous = -1;
  for (int64_t d : list) {
    size_t i = static_cast<size_t>(d);
    g.size *= dims[i];
    if (dims[i] == 1) continue;
    if (previous >= 0 && strides[static_cast<size_t>(previous)] != strides[i] * dims[i]) {
      g.mergeable = false;
    }
    previous = d;
    g.stride = strides[i];
  }
  return g;
}

// How a rows x cols operand is handed to the GEMM: transposed or not, and its leading dimension.
struct GemmOperand {
  bool ok = false;
  int32_t trans = 0;
  int64_t ld = 1;
};

GemmOperand gemm_operand(const Group& rows, const Group& cols) {
  if (!rows.mergeable || !cols.mergeable) return {};
  int64_t r = std::max<int64_t>(rows.size, 1), c = std::max<int64_t>(cols.size, 1);
  if (cols.size <= 1 || cols.stride == 1) {
    int64_t ld = rows.size <= 1 ? c : rows.stride;
    if (ld >= c) return {true, 0, ld};
  }
  if (rows.size <= 1 || rows.stride == 1) {
    int64_t ld = cols.size <= 1 ? r : cols.stride;
    if (ld >= r) return {true, 1, ld};
  }
  return {};
}

void fill_zero(Emitter& e, ir::Value v, const std::string& name) {
  e.parallel_loop(name, e.dims(v), 1, [&](const Index& index) {
    e.store(v, e.linearize(index, e.dims(v)), e.constant_of(e.dtype(v), 0.0));
  });
}

void emit_dot(Emitter& e, const ir::Op& op, const std::string& name, KernelCounts& counts) {
  const ir::Function& f = e.f();
  const ir::AttrSet& attrs = f.attrs(op);
  ir::Value lhs = f.operands(op)[0], rhs = f.operands(op)[1], v = f.result(op);
  std::span<const int64_t> lhs_batch = attrs.ints(AttrKey::kLhsBatch);
  std::span<const int64_t> rhs_batch = attrs.ints(AttrKey::kRhsBatch);
  std::span<const int64_t> lhs_contract = attrs.ints(AttrKey::kLhsContract);
  std::span<const int64_t> rhs_contract = attrs.ints(AttrKey::kRhsContract);
  const Dims& ld = e.dims(lhs);
  const Dims& rd = e.dims(rhs);
  std::vector<int64_t> lhs_free = free_dims(static_cast<int64_t>(ld.size()), lhs_batch, lhs_contract);
  std::vector<int64_t> rhs_free = free_dims(static_cast<int64_t>(rd.size()), rhs_batch, rhs_contract);
  if (product(e.dims(v)) == 0) return;

  Group batch_l = group_of(ld, lhs_batch), batch_r = group_of(rd, rhs_batch);
  Group m = group_of(ld, lhs_free), k_l = group_of(ld, lhs_contract);
  Group k_r = group_of(rd, rhs_contract), n = group_of(rd, rhs_free);
  if (k_l.size == 0) {
    fill_zero(e, v, name);
    return;
  }
  DType dtype = e.dtype(v);
  bool gemm_types = (dtype == DType::kF32 || dtype == DType::kF64) && e.dtype(lhs) == dtype &&
                    e.dtype(rhs) == dtype;
  bool in_buffers = e.storage(lhs).materialised() && e.storage(rhs).materialised() &&
                    e.storage(lhs).kind != StorageKind::kEmpty &&
                    e.storage(rhs).kind != StorageKind::kEmpty;
  GemmOperand a = gemm_operand(m, k_l), b = gemm_operand(k_r, n);
  bool batched_ok = batch_l.size <= 1 || (batch_l.mergeable && batch_r.mergeable);
  if (e.options().use_gemm && gemm_types && in_buffers && a.ok && b.ok && batched_ok) {
    llvm::IRBuilder<>& ir = e.b();
    llvm::StructType* type = e.gemm_args_type();
    llvm::Value* args = e.stack(type, 1, "gemm_args");
    auto set = [&](unsigned field, llvm::Value* value) {
      ir.CreateStore(value, ir.CreateStructGEP(type, args, field));
    };
    int64_t batch = batch_l.size;
    set(0, e.int64(m.size));
    set(1, e.int64(n.size));
    set(2, e.int64(k_l.size));
    set(3, e.int64(a.ld));
    set(4, e.int64(b.ld));
    set(5, e.int64(std::max<int64_t>(n.size, 1)));
    set(6, ir.getInt32(static_cast<uint32_t>(a.trans)));
    set(7, ir.getInt32(static_cast<uint32_t>(b.trans)));
    set(8, llvm::ConstantFP::get(e.f64(), 1.0));
    set(9, llvm::ConstantFP::get(e.f64(), 0.0));
    set(10, e.int64(batch));
    set(11, e.int64(batch > 1 ? batch_l.stride : 0));
    set(12, e.int64(batch > 1 ? batch_r.stride : 0));
    set(13, e.int64(m.size * n.size));
    set(14, e.base_pointer(lhs));
    set(15, e.base_pointer(rhs));
    set(16, e.base_pointer(v));
    ir.CreateCall(e.gemm(dtype), {e.runtime_context(), args});
    ++counts.gemm_calls;
    return;
  }

  // A loop nest: any layout, dtype or fused operand; accumulates in double (integers in i64).
  ++counts.naive_dots;
  Dims contract_dims;
  for (int64_t d : lhs_contract) contract_dims.push_back(ld[static_cast<size_t>(d)]);
  DType in = e.dtype(lhs);
  bool floating = ir::is_floating(in);
  size_t nb = lhs_batch.size(), nlf = lhs_free.size();
  e.parallel_loop(name, e.dims(v), k_l.size, [&](const Index& out) {
    llvm::Value* linear = e.linearize(out, e.dims(v));
    e.set_written(e.storage(v), linear);
    llvm::Type* acc_type = floating ? e.f64() : e.i64();
    llvm::Value* acc = e.stack(acc_type, 1, "acc");
    e.b().CreateStore(floating ? llvm::ConstantFP::get(e.f64(), 0.0) : e.int64(0), acc);
    e.for_each_index(contract_dims, [&](const Index& c) {
      Index li(ld.size()), ri(rd.size());
      for (size_t i = 0; i < nb; ++i) {
        li[static_cast<size_t>(lhs_batch[i])] = out[i];
        ri[static_cast<size_t>(rhs_batch[i])] = out[i];
      }
      for (size_t i = 0; i < nlf; ++i) li[static_cast<size_t>(lhs_free[i])] = out[nb + i];
      for (size_t i = 0; i < rhs_free.size(); ++i) {
        ri[static_cast<size_t>(rhs_free[i])] = out[nb + nlf + i];
      }
      for (size_t i = 0; i < lhs_contract.size(); ++i) {
        li[static_cast<size_t>(lhs_contract[i])] = c[i];
        ri[static_cast<size_t>(rhs_contract[i])] = c[i];
      }
      llvm::Value* x = e.element(lhs, li);
      llvm::Value* y = e.element(rhs, ri);
      llvm::Value* current = e.b().CreateLoad(acc_type, acc);
      llvm::Value* next = nullptr;
      if (floating) {
        next = e.b().CreateFAdd(current, e.b().CreateFMul(e.to_double(in, x), e.to_double(in, y)));
      } else {
        bool s = in == DType::kS32;
        llvm::Value* xx = s ? e.b().CreateSExt(x, e.i64()) : e.b().CreateZExt(x, e.i64());
        llvm::Value* yy = s ? e.b().CreateSExt(y, e.i64()) : e.b().CreateZExt(y, e.i64());
        next = e.b().CreateAdd(current, e.b().CreateMul(xx, yy));
      }
      e.b().CreateStore(next, acc);
    });
    llvm::Value* result = e.b().CreateLoad(acc_type, acc);
    result = floating ? e.round_float_to(dtype, result) : e.b().CreateTrunc(result, e.i32());
    e.store(v, linear, result);
  });
}

// ---- Data movement --------------------------------------------------------------------------

// out[index] = element of the operand at map(index).
void emit_gather(Emitter& e, ir::Value v, ir::Value x, const std::string& name,
                 const std::function<Index(const Index&)>& map) {
  e.parallel_loop(
      name, e.dims(v), 1,
      [&](const Index& index) {
        llvm::Value* linear = e.linearize(index, e.dims(v));
        e.set_written(e.storage(v), nullptr);
        e.store(v, linear, e.element(x, map(index)));
      },
      true);
}

// A transpose whose permutation rotates the dimensions left by k (perm[i] = (i + k) mod n:
// [1, 0], [1, 2, 0], [2, 0, 1], ...) is the 2-D transpose of x seen as [P, Q] (P the product of
// its first k dimensions, Q of the rest) into v = [Q, P]. Returns k, or 0 for other
// permutations.
size_t rotation_of(std::span<const int64_t> permutation) {
  size_t n = permutation.size();
  if (n < 2) return 0;
  size_t k = static_cast<size_t>(permutation[0]);
  if (k == 0) return 0;
  for (size_t i = 0; i < n; ++i) {
    if (static_cast<size_t>(permutation[i]) != (i + k) % n) return 0;
  }
  return k;
}

// Tiles of the 2-D transpose: each task writes kTransposeRows rows of v, tile by tile of
// kTransposeColumns columns, so that the tile's strided reads of x (kTransposeColumns rows of x,
// kTransposeRows elements each) stay in the first-level cache while its rows of v are written
// contiguously. Every element is a copy, so the bits do not depend on the tiling or the threads.
constexpr int64_t kTransposeRows = 32;
constexpr int64_t kTransposeColumns = 64;

void emit_tiled_transpose(Emitter& e, ir::Value v, ir::Value x, size_t k,
                          const std::string& name) {
  const Dims& x_dims = e.dims(x);
  int64_t p = 1, q = 1;
  for (size_t d = 0; d < x_dims.size(); ++d) (d < k ? p : q) *= x_dims[d];
  int64_t tasks = (q + kTransposeRows - 1) / kTransposeRows;
  llvm::IRBuilder<>& b = e.b();
  e.parallel_tasks(name, tasks, p * q, [&](llvm::Value* task) {
    llvm::Value* row_lo = b.CreateMul(task, e.int64(kTransposeRows));
    llvm::Value* row_end = b.CreateAdd(row_lo, e.int64(kTransposeRows));
    llvm::Value* row_hi =
        q % kTransposeRows == 0
            ? row_end
            : b.CreateSelect(b.CreateICmpSLT(row_end, e.int64(q)), row_end, e.int64(q));
    e.set_written(e.storage(v), nullptr);
    e.for_range(
        e.int64(0), e.int64((p + kTransposeColumns - 1) / kTransposeColumns),
        [&](llvm::Value* tile) {
          llvm::Value* column_lo = b.CreateMul(tile, e.int64(kTransposeColumns));
          llvm::Value* column_end = b.CreateAdd(column_lo, e.int64(kTransposeColumns));
          llvm::Value* column_hi =
              p % kTransposeColumns == 0
                  ? column_end
                  : b.CreateSelect(b.CreateICmpSLT(column_end, e.int64(p)), column_end,
                                   e.int64(p));
          e.for_range(
              row_lo, row_hi,
              [&](llvm::Value* row) {
                llvm::Value* out_row = b.CreateMul(row, e.int64(p));
                e.for_range(
                    column_lo, column_hi,
                    [&](llvm::Value* column) {
                      llvm::Value* from = b.CreateAdd(b.CreateMul(column, e.int64(q)), row);
                      e.store(v, b.CreateAdd(out_row, column), e.load(x, from));
                    },
                    true, true);
              },
              false);
        },
        false);
  });
}

void emit_transpose(Emitter& e, const ir::Op& op, const std::string& name) {
  std::span<const int64_t> permutation = e.f().attrs(op).ints(AttrKey::kPermutation);
  ir::Value x = e.f().operands(op)[0];
  ir::Value v = e.f().result(op);
  if (size_t k = rotation_of(permutation); k != 0 && e.storage(x).materialised()) {
    return emit_tiled_transpose(e, v, x, k, name);
  }
  emit_gather(e, e.f().result(op), x, name, [&](const Index& index) {
    Index at(index.size());
    for (size_t i = 0; i < permutation.size(); ++i) at[static_cast<size_t>(permutation[i])] = index[i];
    return at;
  });
}

void emit_slice(Emitter& e, const ir::Op& op, const std::string& name) {
  const ir::AttrSet& attrs = e.f().attrs(op);
  std::span<const int64_t> start = attrs.ints(AttrKey::kStart);
  std::span<const int64_t> stride = attrs.ints(AttrKey::kStride);
  emit_gather(e, e.f().result(op), e.f().operands(op)[0], name, [&](const Index& index) {
    Index at(index.size());
    for (size_t d = 0; d < index.size(); ++d) {
      int64_t step = stride.empty() ? 1 : stride[d];
      llvm::Value* scaled = step == 1 ? index[d] : e.b().CreateMul(index[d], e.int64(step));
      at[d] = start[d] == 0 ? scaled : e.b().CreateAdd(scaled, e.int64(start[d]));
    }
    return at;
  });
}

// One loop per part, each writing its slab of the result.
void emit_concatenate(Emitter& e, const ir::Op& op, const std::string& name) {
  ir::Value v = e.f().result(op);
  size_t dimension = static_cast<size_t>(e.f().attrs(op).integer(AttrKey::kDimension));
  int64_t offset = 0;
  size_t part_number = 0;
  for (ir::Value part : e.f().operands(op)) {
    int64_t at = offset;
    e.parallel_loop(fmt::format("{}_part{}", name, part_number++), e.dims(part), 1,
                    [&](const Index& index) {
                      Index out = index;
                      if (at != 0) out[dimension] = e.b().CreateAdd(index[dimension], e.int64(at));
                      e.set_written(e.storage(v), nullptr);
                      e.store(v, e.linearize(out, e.dims(v)), e.element(part, index));
                    });
    offset += e.dims(part)[dimension];
  }
}

// out[i] = x[(i - low) / (interior + 1)] where that lands on an element, else the padding.
void emit_pad(Emitter& e, const ir::Op& op, const std::string& name) {
  const ir::AttrSet& attrs = e.f().attrs(op);
  std::span<const int64_t> low = attrs.ints(AttrKey::kLow);
  std::span<const int64_t> interior = attrs.ints(AttrKey::kInterior);
  ir::Value v = e.f().result(op), x = e.f().operands(op)[0], padding = e.f().operands(op)[1];
  const Dims& x_dims = e.dims(x);
  bool x_empty = product(x_dims) == 0;
  e.parallel_loop(name, e.dims(v), 1, [&](const Index& index) {
    llvm::IRBuilder<>& b = e.b();
    llvm::Value* linear = e.linearize(index, e.dims(v));
    e.set_written(e.storage(v), nullptr);
    llvm::Value* pad_value = e.element(padding, {});
    if (x_empty) {
      e.store(v, linear, pad_value);
      return;
    }
    llvm::Value* inside = b.getTrue();
    Index at(index.size());
    for (size_t d = 0; d < index.size(); ++d) {
      int64_t step = 1 + (interior.empty() ? 0 : interior[d]);
      llvm::Value* c = b.CreateSub(index[d], e.int64(low[d]));
      llvm::Value* q = step == 1 ? c : b.CreateSDiv(c, e.int64(step));
      llvm::Value* ok = b.CreateAnd(b.CreateICmpSGE(c, e.int64(0)),
                                    b.CreateICmpSLT(q, e.int64(x_dims[d])));
      if (step != 1) ok = b.CreateAnd(ok, is_zero(e, b.CreateSRem(c, e.int64(step))));
      inside = b.CreateAnd(inside, ok);
      llvm::Value* clamped = b.CreateSelect(b.CreateICmpSLT(q, e.int64(0)), e.int64(0), q);
      at[d] = b.CreateSelect(b.CreateICmpSGT(clamped, e.int64(x_dims[d] - 1)),
                             e.int64(x_dims[d] - 1), clamped);
    }
    e.store(v, linear, b.CreateSelect(inside, e.element(x, at), pad_value));
  });
}

// ---- Indexing -------------------------------------------------------------------------------

llvm::Value* id_as_i64(Emitter& e, ir::Value ids, llvm::Value* id) {
  return e.dtype(ids) == DType::kS32 ? e.b().CreateSExt(id, e.i64()) : e.b().CreateZExt(id, e.i64());
}

// Rows clamp into the table (XLA's gather); an empty table gives zeros.
void emit_take(Emitter& e, const ir::Op& op, const std::string& name) {
  ir::Value v = e.f().result(op), table = e.f().operands(op)[0], ids = e.f().operands(op)[1];
  size_t axis = static_cast<size_t>(e.f().attrs(op).integer(AttrKey::kAxis));
  int64_t rows = e.dims(table)[axis];
  size_t id_rank = e.dims(ids).size();
  e.parallel_loop(name, e.dims(v), 1, [&](const Index& index) {
    llvm::IRBuilder<>& b = e.b();
    llvm::Value* linear = e.linearize(index, e.dims(v));
    e.set_written(e.storage(v), nullptr);
    if (rows == 0) {
      e.store(v, linear, e.constant_of(e.dtype(v), 0.0));
      return;
    }
    Index id_index(index.begin() + static_cast<std::ptrdiff_t>(axis),
                   index.begin() + static_cast<std::ptrdiff_t>(axis + id_rank));
    llvm::Value* id = id_as_i64(e, ids, e.element(ids, id_index));
    llvm::Value* row = b.CreateSelect(b.CreateICmpSLT(id, e.int64(0)), e.int64(0), id);
    row = b.CreateSelect(b.CreateICmpSGT(row, e.int64(rows - 1)), e.int64(rows - 1), row);
    Index at(index.begin(), index.begin() + static_cast<std::ptrdiff_t>(axis));
    at.push_back(row);
    at.insert(at.end(), index.begin() + static_cast<std::ptrdiff_t>(axis + id_rank), index.end());
    e.store(v, linear, e.element(table, at));
  });
}

// result = target, then each update row added into row ids[j] (out-of-range ids dropped), in
// order of j. Tasks split the rows' columns, so duplicate ids never race.
void emit_scatter_add(Emitter& e, const ir::Op& op, const std::string& name) {
  ir::Value v = e.f().result(op);
  ir::Value target = e.f().operands(op)[0], ids = e.f().operands(op)[1];
  ir::Value updates = e.f().operands(op)[2];
  if (!(e.storage(v) == e.storage(target))) {
    e.parallel_loop(name + "_init", e.dims(v), 1, [&](const Index& index) {
      llvm::Value* linear = e.linearize(index, e.dims(v));
      e.set_written(e.storage(v), linear);
      e.store(v, linear, e.element(target, index));
    });
  }
  const Dims& dims = e.dims(v);
  size_t axis = static_cast<size_t>(e.f().attrs(op).integer(AttrKey::kAxis));
  int64_t outer = 1, rows = dims[axis], inner = 1;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (d < axis) outer *= dims[d];
    if (d > axis) inner *= dims[d];
  }
  int64_t count = product(e.dims(ids));
  if (outer * inner * count == 0) return;
  int64_t block = inner > 8192 ? 4096 : inner;
  int64_t blocks = (inner + block - 1) / block;
  DType dtype = e.dtype(v);
  e.parallel_tasks(name, outer * blocks, outer * count * inner, [&](llvm::Value* task) {
    llvm::IRBuilder<>& b = e.b();
    llvm::Value* o = blocks == 1 ? task : b.CreateUDiv(task, e.int64(blocks));
    llvm::Value* lo = blocks == 1 ? e.int64(0) : b.CreateMul(b.CreateURem(task, e.int64(blocks)), e.int64(block));
    llvm::Value* hi = e.int64(inner);
    if (blocks > 1) {
      llvm::Value* end = b.CreateAdd(lo, e.int64(block));
      hi = b.CreateSelect(b.CreateICmpSLT(end, hi), end, hi);
    }
    e.for_range(0, count, [&](llvm::Value* j) {
      llvm::Value* row = id_as_i64(e, ids, e.element_linear(ids, j));
      llvm::Value* in_range = b.CreateAnd(b.CreateICmpSGE(row, e.int64(0)),
                                          b.CreateICmpSLT(row, e.int64(rows)));
      e.if_then(in_range, [&] {
        llvm::Value* out_row = b.CreateMul(b.CreateAdd(b.CreateMul(o, e.int64(rows)), row), e.int64(inner));
        llvm::Value* update_row =
            b.CreateMul(b.CreateAdd(b.CreateMul(o, e.int64(count)), j), e.int64(inner));
        e.for_range(lo, hi, [&](llvm::Value* q) {
          llvm::Value* at = b.CreateAdd(out_row, q);
          llvm::Value* u = e.element_linear(updates, b.CreateAdd(update_row, q));
          e.store(v, at, e.binary(OpKind::kAdd, dtype, e.load(v, at), u));
        });
      });
    });
  });
}

// top_k (jax.lax.top_k's indices): per row of the last dimension, each element's rank is the
// number of elements above it (larger, or equal at a lower index; NaN below every number); the
// ranks are distinct, so the elements of rank < k fill the k result slots once each. O(N^2) a
// row: N is a router's expert count.
void emit_top_k(Emitter& e, const ir::Op& op, const std::string& name) {
  ir::Value v = e.f().result(op), x = e.f().operands(op)[0];
  int64_t n = e.dims(x).back();
  int64_t k = e.f().attrs(op).integer(AttrKey::kK);
  int64_t rows = n == 0 ? 0 : product(e.dims(x)) / n;
  if (rows == 0) return;
  DType dtype = e.dtype(x);
  e.set_written(e.storage(v), nullptr);
  e.parallel_tasks(name, rows, rows * n * n, [&](llvm::Value* row) {
    llvm::IRBuilder<>& b = e.b();
    llvm::Value* rank_slot = e.stack(b.getInt64Ty(), 1, "rank");
    llvm::Value* base = b.CreateMul(row, e.int64(n));
    e.for_range(0, n, [&](llvm::Value* i) {
      llvm::Value* xi = e.element_linear(x, b.CreateAdd(base, i));
      llvm::Value* xi_nan = e.compare(ir::ComparisonDirection::kNe, dtype, xi, xi);
      b.CreateStore(e.int64(0), rank_slot);
      e.for_range(0, n, [&](llvm::Value* j) {
        llvm::Value* xj = e.element_linear(x, b.CreateAdd(base, j));
        llvm::Value* xj_nan = e.compare(ir::ComparisonDirection::kNe, dtype, xj, xj);
        llvm::Value* greater = e.compare(ir::ComparisonDirection::kGt, dtype, xj, xi);
        llvm::Value* equal = b.CreateOr(e.compare(ir::ComparisonDirection::kEq, dtype, xj, xi),
                                        b.CreateAnd(xi_nan, xj_nan));
        llvm::Value* above = b.CreateOr(
            b.CreateOr(greater, b.CreateAnd(xi_nan, b.CreateNot(xj_nan))),
            b.CreateAnd(equal, b.CreateICmpSLT(j, i)));
        llvm::Value* rank = b.CreateLoad(b.getInt64Ty(), rank_slot);
        b.CreateStore(b.CreateAdd(rank, b.CreateZExt(above, b.getInt64Ty())), rank_slot);
      }, false);
      llvm::Value* rank = b.CreateLoad(b.getInt64Ty(), rank_slot);
      e.if_then(b.CreateICmpSLT(rank, e.int64(k)), [&] {
        llvm::Value* at = b.CreateAdd(b.CreateMul(row, e.int64(k)), rank);
        e.store(v, at, b.CreateTrunc(i, b.getInt32Ty()));
      });
    }, false);
  });
}

// ---- Grouped matmuls (MoE's sparse_matmul) ---------------------------------------------------

// One element of grouped_dot: result[r, n, m] = Σ_c lhs[r, n, c] · rhs[ids[r, n], c, m], in the
// operands' dtype (bf16 ones are widened to f32 first), c ascending; an id outside the groups
// gives 0.
void emit_grouped_dot(Emitter& e, const ir::Op& op, const std::string& name) {
  ir::Value v = e.f().result(op);
  std::span<const ir::Value> x = e.f().operands(op);
  ir::Value lhs = x[0], rhs = x[1], ids = x[2];
  int64_t k = e.dims(lhs)[2], groups = e.dims(rhs)[0];
  DType dtype = e.dtype(v);
  e.parallel_loop(name, e.dims(v), k, [&](const Index& index) {
    llvm::IRBuilder<>& b = e.b();
    llvm::Value* linear = e.linearize(index, e.dims(v));
    e.set_written(e.storage(v), nullptr);
    llvm::Value* sum = e.stack(e.register_type(dtype), 1, "sum");
    b.CreateStore(e.constant_of(dtype, 0.0), sum);
    llvm::Value* g = id_as_i64(e, ids, e.element(ids, {index[0], index[1]}));
    llvm::Value* in_range =
        b.CreateAnd(b.CreateICmpSGE(g, e.int64(0)), b.CreateICmpSLT(g, e.int64(groups)));
    e.if_then(in_range, [&] {
      e.for_range(0, k, [&](llvm::Value* c) {
        llvm::Value* product = e.binary(OpKind::kMul, dtype, e.element(lhs, {index[0], index[1], c}),
                                        e.element(rhs, {g, c, index[2]}));
        llvm::Value* acc = b.CreateLoad(e.register_type(dtype), sum);
        b.CreateStore(e.binary(OpKind::kAdd, dtype, acc, product), sum);
      }, false);
    });
    e.store(v, linear, b.CreateLoad(e.register_type(dtype), sum));
  });
}

// One element of grouped_dot_weight_grad: result[g, c, m] = Σ over rows (r, n) with
// ids[r, n] == g of lhs[r, n, c] · dout[r, n, m], rows in order.
void emit_grouped_dot_weight_grad(Emitter& e, const ir::Op& op, const std::string& name) {
  ir::Value v = e.f().result(op);
  std::span<const ir::Value> x = e.f().operands(op);
  ir::Value lhs = x[0], dout = x[1], ids = x[2];
  int64_t rows = e.dims(lhs)[0] * e.dims(lhs)[1], k = e.dims(lhs)[2], m = e.dims(dout)[2];
  DType dtype = e.dtype(v);
  e.parallel_loop(name, e.dims(v), rows, [&](const Index& index) {
    llvm::IRBuilder<>& b = e.b();
    llvm::Value* linear = e.linearize(index, e.dims(v));
    e.set_written(e.storage(v), nullptr);
    llvm::Value* sum = e.stack(e.register_type(dtype), 1, "sum");
    b.CreateStore(e.constant_of(dtype, 0.0), sum);
    e.for_range(0, rows, [&](llvm::Value* n) {
      llvm::Value* g = id_as_i64(e, ids, e.element_linear(ids, n));
      e.if_then(b.CreateICmpEQ(g, index[0]), [&] {
        llvm::Value* a = e.element_linear(lhs, b.CreateAdd(b.CreateMul(n, e.int64(k)), index[1]));
        llvm::Value* d = e.element_linear(dout, b.CreateAdd(b.CreateMul(n, e.int64(m)), index[2]));
        llvm::Value* acc = b.CreateLoad(e.register_type(dtype), sum);
        b.CreateStore(e.binary(OpKind::kAdd, dtype, acc, e.binary(OpKind::kMul, dtype, a, d)), sum);
      });
    }, false);
    e.store(v, linear, b.CreateLoad(e.register_type(dtype), sum));
  });
}

// ---- Random numbers (ir/Random.h, bit for bit) -------------------------------------------------

llvm::Value* mix64(llvm::IRBuilder<>& b, llvm::Value* z) {
  z = b.CreateXor(z, b.CreateLShr(z, 33));
  z = b.CreateMul(z, b.getInt64(0xff51afd7ed558ccdULL));
  z = b.CreateXor(z, b.CreateLShr(z, 33));
  z = b.CreateMul(z, b.getInt64(0xc4ceb9fe1a85ec53ULL));
  return b.CreateXor(z, b.CreateLShr(z, 33));
}

// c[0] + z * (c[1] + z * (... + z * c[n-1])), as ir::horner evaluates it.
template <size_t N>
llvm::Value* horner(Emitter& e, const double (&c)[N], llvm::Value* z) {
  llvm::IRBuilder<>& b = e.b();
  llvm::Value* p = llvm::ConstantFP::get(e.f64(), c[N - 1]);
  for (size_t i = N - 1; i-- > 0;) {
    p = b.CreateFAdd(b.CreateFMul(p, z), llvm::ConstantFP::get(e.f64(), c[i]));
  }
  return p;
}

// ir::log_of_fraction(a): ln(a 2^-24) for an i32 a in [1, 2^24].
llvm::Value* log_of_fraction(Emitter& e, llvm::Value* a) {
  llvm::IRBuilder<>& b = e.b();
  auto c = [&](double v) { return llvm::ConstantFP::get(e.f64(), v); };
  llvm::Value* bits = b.CreateBitCast(b.CreateUIToFP(a, e.f64()), e.i64());
  llvm::Value* k = b.CreateSub(b.CreateLShr(bits, 52), e.int64(1023 + 24));
  llvm::Value* m_bits = b.CreateOr(b.CreateAnd(bits, b.getInt64(0x000fffffffffffffULL)),
                                   b.getInt64(0x3ff0000000000000ULL));
  llvm::Value* halve = b.CreateZExt(
      b.CreateICmpUGT(m_bits, b.getInt64(std::bit_cast<uint64_t>(std::numbers::sqrt2))), e.i64());
  llvm::Value* m = b.CreateBitCast(b.CreateSub(m_bits, b.CreateShl(halve, 52)), e.f64());
  k = b.CreateAdd(k, halve);
  llvm::Value* f = b.CreateFSub(m, c(1.0));
  llvm::Value* s = b.CreateFDiv(f, b.CreateFAdd(c(2.0), f));
  llvm::Value* z = b.CreateFMul(s, s);
  llvm::Value* r = b.CreateFMul(z, horner(e, ir::kLogCoefficients, z));
  llvm::Value* half_f_squared = b.CreateFMul(b.CreateFMul(c(0.5), f), f);
  llvm::Value* dk = b.CreateSIToFP(k, e.f64());
  llvm::Value* inner = b.CreateFAdd(b.CreateFMul(s, b.CreateFAdd(half_f_squared, r)),
                                    b.CreateFMul(dk, c(ir::kLn2Low)));
  return b.CreateFSub(b.CreateFMul(dk, c(ir::kLn2High)),
                      b.CreateFSub(b.CreateFSub(half_f_squared, inner), f));
}

// ir::cos_of_turn_fraction(t): cos(2 pi t 2^-24) for an i32 t in [0, 2^24).
llvm::Value* cos_of_turn_fraction(Emitter& e, llvm::Value* t) {
  llvm::IRBuilder<>& b = e.b();
  auto c = [&](double v) { return llvm::ConstantFP::get(e.f64(), v); };
  llvm::Value* quadrant = b.CreateLShr(t, 22);
  llvm::Value* steps = b.CreateAnd(t, b.getInt32(0x3fffff));
  llvm::Value* fold = b.CreateICmpUGT(steps, b.getInt32(0x200000));
  steps = b.CreateSelect(fold, b.CreateSub(b.getInt32(0x400000), steps), steps);
  llvm::Value* x = b.CreateFMul(b.CreateUIToFP(steps, e.f64()), c(ir::kTurnStep));
  llvm::Value* z = b.CreateFMul(x, x);
  llvm::Value* sin_x =
      b.CreateFAdd(x, b.CreateFMul(b.CreateFMul(z, x), horner(e, ir::kSinCoefficients, z)));
  llvm::Value* r = b.CreateFMul(z, horner(e, ir::kCosCoefficients, z));
  llvm::Value* half_z = b.CreateFMul(c(0.5), z);
  llvm::Value* w = b.CreateFSub(c(1.0), half_z);
  llvm::Value* cos_x = b.CreateFAdd(
      w, b.CreateFAdd(b.CreateFSub(b.CreateFSub(c(1.0), w), half_z), b.CreateFMul(z, r)));
  llvm::Value* odd = b.CreateICmpNE(b.CreateAnd(quadrant, b.getInt32(1)), b.getInt32(0));
  llvm::Value* use_sin = b.CreateXor(odd, fold);
  llvm::Value* negate = b.CreateOr(b.CreateICmpEQ(quadrant, b.getInt32(1)),
                                   b.CreateICmpEQ(quadrant, b.getInt32(2)));
  llvm::Value* v = b.CreateBitCast(b.CreateSelect(use_sin, sin_x, cos_x), e.i64());
  llvm::Value* sign = b.CreateShl(b.CreateZExt(negate, e.i64()), 63);
  return b.CreateBitCast(b.CreateXor(v, sign), e.f64());
}

void emit_rng(Emitter& e, const ir::Op& op, const std::string& name) {
  ir::Value v = e.f().result(op), seed = e.f().operands(op)[0];
  uint64_t stream = static_cast<uint32_t>(e.f().attrs(op).integer(AttrKey::kStream));
  DType dtype = e.dtype(v);
  e.parallel_loop(name, e.dims(v), 8, [&](const Index& index) {
    llvm::IRBuilder<>& b = e.b();
    llvm::Value* linear = e.linearize(index, e.dims(v));
    llvm::Value* seed_bits = b.CreateZExt(e.element(seed, {}), e.i64());
    llvm::Value* key = mix64(b, b.CreateOr(b.CreateShl(seed_bits, 32), b.getInt64(stream)));
    auto bits = [&](llvm::Value* i) {
      llvm::Value* z = mix64(b, b.CreateAdd(key, b.CreateMul(i, b.getInt64(0x9e3779b97f4a7c15ULL))));
      return b.CreateTrunc(b.CreateLShr(z, 32), e.i32());
    };
    llvm::Value* result = nullptr;
    if (op.kind == OpKind::kRngBits) {
      result = bits(linear);
    } else if (op.kind == OpKind::kRngUniform) {  // (raw >> (32 - n)) * 2^-n, ir/Random.h
      int n = ir::uniform_bits(dtype == DType::kBF16, dtype == DType::kF16);
      llvm::Value* top = b.CreateLShr(bits(linear), static_cast<uint64_t>(32 - n));
      result = e.round_float_to(
          dtype, b.CreateFMul(b.CreateUIToFP(top, e.f64()),
                              llvm::ConstantFP::get(e.f64(), std::ldexp(1.0, -n))));
    } else {
      auto normal = [&](llvm::Value* i) {  // random_normal(seed, stream, i), in f64
        llvm::Value* twice = b.CreateMul(i, e.int64(2));
        llvm::Value* a = b.CreateAdd(b.CreateLShr(bits(twice), 8), b.getInt32(1));
        llvm::Value* turn = b.CreateLShr(bits(b.CreateAdd(twice, e.int64(1))), 8);
        llvm::Value* radius = e.intrinsic(
            llvm::Intrinsic::sqrt,
            b.CreateFMul(llvm::ConstantFP::get(e.f64(), -2.0), log_of_fraction(e, a)));
        return b.CreateFMul(radius, cos_of_turn_fraction(e, turn));
      };
      double bound = e.f().attrs(op).real(AttrKey::kTruncate);
      llvm::Value* z = nullptr;
      if (bound <= 0) {
        z = normal(linear);
      } else {  // random_truncated_normal: redraw while outside the bound, then clamp
        llvm::Value* slot = e.stack(e.f64(), 1, "draw");
        llvm::Value* limit = llvm::ConstantFP::get(e.f64(), bound);
        b.CreateStore(normal(linear), slot);
        for (int attempt = 1; attempt < ir::kTruncationAttempts; ++attempt) {
          llvm::Value* outside = b.CreateFCmpOGT(
              e.intrinsic(llvm::Intrinsic::fabs, b.CreateLoad(e.f64(), slot)), limit);
          e.if_then(outside, [&] {
            uint64_t offset = static_cast<uint64_t>(attempt) * ir::kTruncationAttemptStride;
            b.CreateStore(normal(b.CreateAdd(linear, b.getInt64(offset))), slot);
          });
        }
        z = b.CreateLoad(e.f64(), slot);
        llvm::Value* negative_limit = llvm::ConstantFP::get(e.f64(), -bound);
        z = b.CreateSelect(b.CreateFCmpOGT(z, limit), limit, z);
        z = b.CreateSelect(b.CreateFCmpOLT(z, negative_limit), negative_limit, z);
      }
      result = e.round_float_to(dtype, z);
    }
    e.store(v, linear, result);
  });
}

// ---- Attention ------------------------------------------------------------------------------

struct AttentionShape {
  int64_t batch, queries, heads, head_dim, keys, kv_heads, value_dim, group;
};

AttentionShape attention_shape(Emitter& e, const ir::Op& op) {
  std::span<const ir::Value> x = e.f().operands(op);
  const Dims& q = e.dims(x[0]);
  const Dims& k = e.dims(x[1]);
  const Dims& v = e.dims(x[2]);
  return {q[0], q[1], q[2], q[3], k[1], k[2], v[3], k[2] == 0 ? 1 : q[2] / k[2]};
}

// Visibility and score transform of one (query, key) pair (Composites.h), in double.
struct Scorer {
  Emitter& e;
  double scale, softcap, mask;
  bool causal;
  int64_t window;
  std::optional<ir::Value> q_segment, kv_segment;
  // With `positions` (a context-parallel piece): the positions [T] and [S] the causal and window
  // masks compare instead of t and s.
  std::optional<ir::Value> q_positions, kv_positions;

  // The masking operands (segment ids, then positions with `positions`) start at operand
  // `first_mask_operand`.
  Scorer(Emitter& emitter, const ir::Op& op, size_t first_mask_operand) : e(emitter) {
    const ir::AttrSet& attrs = e.f().attrs(op);
    std::span<const ir::Value> x = e.f().operands(op);
    scale = attrs.real(AttrKey::kScale);
    softcap = attrs.real(AttrKey::kSoftcap);
    mask = ir::attention_mask_value(e.dtype(x[0]));
    causal = attrs.flag(AttrKey::kCausal);
    window = attrs.integer(AttrKey::kSlidingWindow);
    bool positions = attrs.flag(AttrKey::kPositions);
    if (x.size() - first_mask_operand == (positions ? 4u : 2u)) {
      q_segment = x[first_mask_operand];
      kv_segment = x[first_mask_operand + 1];
    }
    if (positions) {
      q_positions = x[x.size() - 2];
      kv_positions = x[x.size() - 1];
    }
  }
  // Position `i` of a positions operand, as an i64.
  llvm::Value* position(ir::Value positions, llvm::Value* i) {
    llvm::Value* p = e.element(positions, {i});
    return p->getType()->isIntegerTy() ? e.b().CreateSExt(p, e.i64())
                                       : e.b().CreateFPToSI(p, e.i64());
  }
  llvm::Value* visible(llvm::Value* b, llvm::Value* t, llvm::Value* s) {
    llvm::IRBuilder<>& ir = e.b();
    llvm::Value* yes = ir.getTrue();
    llvm::Value* segment_t = t;
    llvm::Value* segment_s = s;
    if (q_positions) {
      t = position(*q_positions, t);
      s = position(*kv_positions, s);
    }
    if (causal) yes = ir.CreateAnd(yes, ir.CreateICmpSLE(s, t));
    if (window > 0) {
      llvm::Value* d = ir.CreateSub(t, s);
      llvm::Value* distance = ir.CreateSelect(ir.CreateICmpSLT(d, e.int64(0)), ir.CreateNeg(d), d);
      yes = ir.CreateAnd(yes, ir.CreateICmpSLT(distance, e.int64(window)));
    }
    if (q_segment) {
      yes = ir.CreateAnd(yes, ir.CreateICmpEQ(e.element(*q_segment, {b, segment_t}),
                                              e.element(*kv_segment, {b, segment_s})));
    }
    return yes;
  }
  llvm::Value* constant(double x) { return llvm::ConstantFP::get(e.f64(), x); }
  llvm::Value* transform(llvm::Value* dot) {
    llvm::Value* score = e.b().CreateFMul(dot, constant(scale));
    if (softcap <= 0) return score;
    return e.b().CreateFMul(constant(softcap),
                            e.math_call("tanhf", e.b().CreateFDiv(score, constant(softcap))));
  }
  llvm::Value* slope(llvm::Value* dot) {
    if (softcap <= 0) return constant(1.0);
    llvm::Value* capped = e.math_call(
        "tanhf", e.b().CreateFDiv(e.b().CreateFMul(dot, constant(scale)), constant(softcap)));
    return e.b().CreateFSub(constant(1.0), e.b().CreateFMul(capped, capped));
  }
};

// sum_i x[prefix_x, i] * y[prefix_y, i] in double.
llvm::Value* dot_rows(Emitter& e, ir::Value x, const Index& px, ir::Value y, const Index& py,
                      int64_t length) {
  llvm::Value* acc = e.stack(e.f64(), 1, "dot");
  e.b().CreateStore(llvm::ConstantFP::get(e.f64(), 0.0), acc);
  e.for_range(0, length, [&](llvm::Value* i) {
    Index ix = px, iy = py;
    ix.push_back(i);
    iy.push_back(i);
    llvm::Value* product = e.b().CreateFMul(e.to_double(e.dtype(x), e.element(x, ix)),
                                            e.to_double(e.dtype(y), e.element(y, iy)));
    e.b().CreateStore(e.b().CreateFAdd(e.b().CreateLoad(e.f64(), acc), product), acc);
  });
  return e.b().CreateLoad(e.f64(), acc);
}

llvm::Value* emit_exp(Emitter& e, llvm::Value* x) { return e.intrinsic(llvm::Intrinsic::exp, x); }

// What both forward attention kernels start from: the shape, the operands and result, the
// scorer, the query rows (one task each in the exact kernel) and the work estimate.
struct ForwardAttention {
  AttentionShape s;
  ir::Value q, k, v, out;
  Scorer scorer;
  int64_t rows, work;

  ForwardAttention(Emitter& e, const ir::Op& op)
      : s(attention_shape(e, op)),
        q(e.f().operands(op)[0]),
        k(e.f().operands(op)[1]),
        v(e.f().operands(op)[2]),
        out(e.f().result(op)),
        scorer(e, op, 3),
        rows(s.batch * s.heads * s.queries),
        work(rows * s.keys * (s.head_dim + s.value_dim) + rows) {}
};

// One task per query row (b, h, t): a single pass over the keys with a running max, sum and
// value accumulator (online softmax) in double on the stack; the [T,S] scores never exist.
void emit_attention(Emitter& e, const ir::Op& op, const std::string& name) {
  ForwardAttention forward(e, op);
  auto& [s, q, k, v, out, scorer, rows, work] = forward;
  e.parallel_tasks(name, rows, work, [&](llvm::Value* task) {
    llvm::IRBuilder<>& b = e.b();
    Index row = e.delinearize(task, {s.batch, s.heads, s.queries});
    llvm::Value *bi = row[0], *h = row[1], *t = row[2];
    llvm::Value* kv = s.group == 1 ? h : b.CreateUDiv(h, e.int64(s.group));
    llvm::Value* running_max = e.stack(e.f64(), 1, "max");
    llvm::Value* running_sum = e.stack(e.f64(), 1, "sum");
    llvm::Value* acc = e.stack(e.f64(), std::max<int64_t>(s.value_dim, 1), "acc");
    llvm::Value* score = e.stack(e.f64(), 1, "score");
    b.CreateStore(llvm::ConstantFP::getInfinity(e.f64(), true), running_max);
    b.CreateStore(scorer.constant(0.0), running_sum);
    e.for_range(0, s.value_dim, [&](llvm::Value* j) {
      b.CreateStore(scorer.constant(0.0), b.CreateInBoundsGEP(e.f64(), acc, j));
    });
    e.for_range(0, s.keys, [&](llvm::Value* key) {
      b.CreateStore(scorer.constant(scorer.mask), score);
      e.if_then(scorer.visible(bi, t, key), [&] {
        b.CreateStore(scorer.transform(dot_rows(e, q, {bi, t, h}, k, {bi, key, kv}, s.head_dim)), score);
      });
      llvm::Value* current = b.CreateLoad(e.f64(), score);
      llvm::Value* old_max = b.CreateLoad(e.f64(), running_max);
      llvm::Value* new_max = b.CreateSelect(b.CreateFCmpOGT(current, old_max), current, old_max);
      llvm::Value* correction = emit_exp(e, b.CreateFSub(old_max, new_max));
      llvm::Value* weight = emit_exp(e, b.CreateFSub(current, new_max));
      b.CreateStore(b.CreateFAdd(b.CreateFMul(b.CreateLoad(e.f64(), running_sum), correction), weight),
                    running_sum);
      b.CreateStore(new_max, running_max);
      e.for_range(0, s.value_dim, [&](llvm::Value* j) {
        llvm::Value* slot = b.CreateInBoundsGEP(e.f64(), acc, j);
        llvm::Value* value = e.to_double(e.dtype(v), e.element(v, {bi, key, kv, j}));
        b.CreateStore(b.CreateFAdd(b.CreateFMul(b.CreateLoad(e.f64(), slot), correction),
                                   b.CreateFMul(weight, value)),
                      slot);
      });
    });
    llvm::Value* sum = b.CreateLoad(e.f64(), running_sum);
    e.for_range(0, s.value_dim, [&](llvm::Value* j) {
      llvm::Value* result = s.keys == 0
                                ? scorer.constant(0.0)
                                : b.CreateFDiv(b.CreateLoad(e.f64(), b.CreateInBoundsGEP(e.f64(), acc, j)), sum);
      e.store(out, e.linearize({bi, t, h, j}, e.dims(out)), e.round_float_to(e.dtype(out), result));
    });
    if (op.kind == OpKind::kAttentionStats) {
      // The row's largest masked score and softmax denominator, [B,T,H] (Composites.h).
      ir::Value max = e.f().result(op, 1), denominator = e.f().result(op, 2);
      llvm::Value* at = e.linearize({bi, t, h}, e.dims(max));
      e.store(max, at, e.round_float_to(e.dtype(max), b.CreateLoad(e.f64(), running_max)));
      e.store(denominator, at, e.round_float_to(e.dtype(denominator), sum));
    }
  });
}

// Row statistics of the query rows one attention_grad task handles, kept on its stack when they
// fit this bound (3 doubles per row); beyond it dk and dv accumulate in place in their dtype.
constexpr int64_t kAttentionStatsStackBytes = 128 * 1024;

// One task per (batch, kv head): it owns dk and dv of that head and dq of the query heads reading
// it, so no two tasks write the same element and the thread count changes nothing. All sums are
// in double in the interpreter's order, rounded once:
//   A. per query row (head g of the group, query t): the softmax max and sum (online) and
//      Δ = dout·out, into a stack array;
//   B. per query row: dq = scale Σ_s draw k[s], accumulated in a double row on the stack;
//   C. per key s: dk[s] = scale Σ_(g,t) draw q[t] and dv[s] = Σ_(g,t) p dout[t], double rows.
// Scores are recomputed in each pass; the [T,S] matrix never exists.
void emit_attention_grad(Emitter& e, const ir::Op& op, const std::string& name) {
  AttentionShape s = attention_shape(e, op);
  std::span<const ir::Value> x = e.f().operands(op);
  ir::Value q = x[0], k = x[1], v = x[2], out = x[3], dout = x[4];
  ir::Value dq = e.f().result(op, 0), dk = e.f().result(op, 1), dv = e.f().result(op, 2);
  Scorer scorer(e, op, 5);
  int64_t rows = s.group * s.queries;  // query rows per task
  bool stats_on_stack = rows * 3 * 8 <= kAttentionStatsStackBytes;
  int64_t tasks = s.batch * s.kv_heads;
  int64_t work = s.batch * s.heads * s.queries * s.keys * (3 * s.head_dim + 2 * s.value_dim);
  e.parallel_tasks(name, tasks, work, [&](llvm::Value* task) {
    llvm::IRBuilder<>& b = e.b();
    Index pair = e.delinearize(task, {s.batch, s.kv_heads});
    llvm::Value *bi = pair[0], *kv = pair[1];
    llvm::Value* zero = scorer.constant(0.0);
    llvm::Value* score = e.stack(e.f64(), 1, "score");
    llvm::Value* raw = e.stack(e.f64(), 1, "dot");
    llvm::Value* row_max = e.stack(e.f64(), 1, "max");
    llvm::Value* row_sum = e.stack(e.f64(), 1, "sum");
    llvm::Value* dq_acc = e.stack(e.f64(), std::max<int64_t>(s.head_dim, 1), "dq");
    llvm::Value* dk_acc = e.stack(e.f64(), std::max<int64_t>(s.head_dim, 1), "dk");
    llvm::Value* dv_acc = e.stack(e.f64(), std::max<int64_t>(s.value_dim, 1), "dv");
    llvm::Value* stats = stats_on_stack ? e.stack(e.f64(), std::max<int64_t>(rows * 3, 1), "stats") : nullptr;
    auto head_of = [&](llvm::Value* g) { return b.CreateAdd(b.CreateMul(kv, e.int64(s.group)), g); };
    auto slot = [&](llvm::Value* base, llvm::Value* i) { return b.CreateInBoundsGEP(e.f64(), base, i); };
    auto zero_row = [&](llvm::Value* base, int64_t n) {
      e.for_range(0, n, [&](llvm::Value* i) { b.CreateStore(zero, slot(base, i)); });
    };
    // The score of (t, key) for query head h: the mask value, or the transformed q·k (raw keeps q·k).
    auto score_of = [&](llvm::Value* t, llvm::Value* h, llvm::Value* key, llvm::Value* visible) {
      b.CreateStore(scorer.constant(scorer.mask), score);
      b.CreateStore(zero, raw);
      e.if_then(visible, [&] {
        llvm::Value* dot = dot_rows(e, q, {bi, t, h}, k, {bi, key, kv}, s.head_dim);
        b.CreateStore(dot, raw);
        b.CreateStore(scorer.transform(dot), score);
      });
      return b.CreateLoad(e.f64(), score);
    };
    // Pass A for one row: running max and sum over the keys (the interpreter's online update).
    auto row_statistics = [&](llvm::Value* t, llvm::Value* h) {
      b.CreateStore(llvm::ConstantFP::getInfinity(e.f64(), true), row_max);
      b.CreateStore(zero, row_sum);
      e.for_range(0, s.keys, [&](llvm::Value* key) {
        llvm::Value* current = score_of(t, h, key, scorer.visible(bi, t, key));
        llvm::Value* old_max = b.CreateLoad(e.f64(), row_max);
        llvm::Value* old_sum = b.CreateLoad(e.f64(), row_sum);
        llvm::Value* larger = b.CreateFCmpOGT(current, old_max);
        llvm::Value* factor = emit_exp(e, b.CreateSelect(larger, b.CreateFSub(old_max, current),
                                                         b.CreateFSub(current, old_max)));
        b.CreateStore(b.CreateSelect(larger,
                                     b.CreateFAdd(b.CreateFMul(old_sum, factor), scorer.constant(1.0)),
                                     b.CreateFAdd(old_sum, factor)),
                      row_sum);
        b.CreateStore(b.CreateSelect(larger, current, old_max), row_max);
      });
      return std::array<llvm::Value*, 3>{b.CreateLoad(e.f64(), row_max), b.CreateLoad(e.f64(), row_sum),
                                         dot_rows(e, dout, {bi, t, h}, out, {bi, t, h}, s.value_dim)};
    };
    // p and (when visible) c = scale * draw of one pair, given its row's statistics.
    struct Pair {
      llvm::Value* p;
      llvm::Value* visible;
    };
    auto probability = [&](llvm::Value* t, llvm::Value* h, llvm::Value* key,
                           const std::array<llvm::Value*, 3>& st) {
      llvm::Value* visible = scorer.visible(bi, t, key);
      llvm::Value* current = score_of(t, h, key, visible);
      return Pair{b.CreateFDiv(emit_exp(e, b.CreateFSub(current, st[0])), st[1]), visible};
    };
    auto scaled_draw = [&](llvm::Value* t, llvm::Value* h, llvm::Value* key, llvm::Value* p,
                           llvm::Value* delta) {
      llvm::Value* dp = dot_rows(e, dout, {bi, t, h}, v, {bi, key, kv}, s.value_dim);
      llvm::Value* dot = b.CreateLoad(e.f64(), raw);
      llvm::Value* draw = b.CreateFMul(b.CreateFMul(p, b.CreateFSub(dp, delta)), scorer.slope(dot));
      return b.CreateFMul(scorer.constant(scorer.scale), draw);
    };
    auto add_scaled = [&](llvm::Value* acc, llvm::Value* c, ir::Value row_of, const Index& prefix,
                          int64_t n) {
      e.for_range(0, n, [&](llvm::Value* i) {
        Index at = prefix;
        at.push_back(i);
        llvm::Value* term = b.CreateFMul(c, e.to_double(e.dtype(row_of), e.element(row_of, at)));
        b.CreateStore(b.CreateFAdd(b.CreateLoad(e.f64(), slot(acc, i)), term), slot(acc, i));
      });
    };
    auto store_row = [&](ir::Value result, const Index& prefix, llvm::Value* acc, int64_t n) {
      e.for_range(0, n, [&](llvm::Value* i) {
        Index at = prefix;
        at.push_back(i);
        e.store(result, e.linearize(at, e.dims(result)),
                e.round_float_to(e.dtype(result), b.CreateLoad(e.f64(), slot(acc, i))));
      });
    };
    auto stat_slot = [&](llvm::Value* g, llvm::Value* t, int64_t which) {
      llvm::Value* row = b.CreateAdd(b.CreateMul(g, e.int64(s.queries)), t);
      return slot(stats, b.CreateAdd(b.CreateMul(row, e.int64(3)), e.int64(which)));
    };

    // dq of query row t of head h: the sum over keys of its scaled draws times k, in double, in
    // key order (both paths below; the fallback recomputes the row's probabilities for dk, dv).
    auto dq_row = [&](llvm::Value* h, llvm::Value* t, const std::array<llvm::Value*, 3>& st) {
      zero_row(dq_acc, s.head_dim);
      e.for_range(0, s.keys, [&](llvm::Value* key) {
        Pair pr = probability(t, h, key, st);
        e.if_then(pr.visible, [&] {
          add_scaled(dq_acc, scaled_draw(t, h, key, pr.p, st[2]), k, {bi, key, kv}, s.head_dim);
        });
      });
      store_row(dq, {bi, t, h}, dq_acc, s.head_dim);
    };

    if (!stats_on_stack) {
      // Fallback for very long rows: dk and dv accumulate in place in their dtype.
      e.for_range(0, s.keys, [&](llvm::Value* key) {
        e.for_range(0, s.head_dim, [&](llvm::Value* d) {
          e.store(dk, e.linearize({bi, key, kv, d}, e.dims(dk)), e.constant_of(e.dtype(dk), 0.0));
        });
        e.for_range(0, s.value_dim, [&](llvm::Value* j) {
          e.store(dv, e.linearize({bi, key, kv, j}, e.dims(dv)), e.constant_of(e.dtype(dv), 0.0));
        });
      });
      e.for_range(0, s.group, [&](llvm::Value* g) {
        llvm::Value* h = head_of(g);
        e.for_range(0, s.queries, [&](llvm::Value* t) {
          std::array<llvm::Value*, 3> st = row_statistics(t, h);
          dq_row(h, t, st);
          e.for_range(0, s.keys, [&](llvm::Value* key) {
            Pair pr = probability(t, h, key, st);
            e.for_range(0, s.value_dim, [&](llvm::Value* j) {
              llvm::Value* at = e.linearize({bi, key, kv, j}, e.dims(dv));
              llvm::Value* add = b.CreateFMul(pr.p, e.to_double(e.dtype(dout), e.element(dout, {bi, t, h, j})));
              llvm::Value* sum = b.CreateFAdd(e.to_double(e.dtype(dv), e.load(dv, at)), add);
              e.store(dv, at, e.round_float_to(e.dtype(dv), sum));
            });
            e.if_then(pr.visible, [&] {
              llvm::Value* c = scaled_draw(t, h, key, pr.p, st[2]);
              e.for_range(0, s.head_dim, [&](llvm::Value* d) {
                llvm::Value* at = e.linearize({bi, key, kv, d}, e.dims(dk));
                llvm::Value* qd = e.to_double(e.dtype(q), e.element(q, {bi, t, h, d}));
                llvm::Value* sum = b.CreateFAdd(e.to_double(e.dtype(dk), e.load(dk, at)), b.CreateFMul(c, qd));
                e.store(dk, at, e.round_float_to(e.dtype(dk), sum));
              });
            });
          });
        });
      });
      return;
    }

    // A: statistics of every row.
    e.for_range(0, s.group, [&](llvm::Value* g) {
      e.for_range(0, s.queries, [&](llvm::Value* t) {
        std::array<llvm::Value*, 3> st = row_statistics(t, head_of(g));
        for (int64_t i = 0; i < 3; ++i) b.CreateStore(st[static_cast<size_t>(i)], stat_slot(g, t, i));
      });
    });
    auto load_stats = [&](llvm::Value* g, llvm::Value* t) {
      return std::array<llvm::Value*, 3>{b.CreateLoad(e.f64(), stat_slot(g, t, 0)),
                                         b.CreateLoad(e.f64(), stat_slot(g, t, 1)),
                                         b.CreateLoad(e.f64(), stat_slot(g, t, 2))};
    };
    // B: dq, one row at a time.
    e.for_range(0, s.group, [&](llvm::Value* g) {
      e.for_range(0, s.queries, [&](llvm::Value* t) { dq_row(head_of(g), t, load_stats(g, t)); });
    });
    // C: dk and dv, one key at a time, summed over the rows in the interpreter's order.
    e.for_range(0, s.keys, [&](llvm::Value* key) {
      zero_row(dk_acc, s.head_dim);
      zero_row(dv_acc, s.value_dim);
      e.for_range(0, s.group, [&](llvm::Value* g) {
        llvm::Value* h = head_of(g);
        e.for_range(0, s.queries, [&](llvm::Value* t) {
          std::array<llvm::Value*, 3> st = load_stats(g, t);
          Pair pr = probability(t, h, key, st);
          add_scaled(dv_acc, pr.p, dout, {bi, t, h}, s.value_dim);
          e.if_then(pr.visible, [&] {
            add_scaled(dk_acc, scaled_draw(t, h, key, pr.p, st[2]), q, {bi, t, h}, s.head_dim);
          });
        });
      });
      store_row(dk, {bi, key, kv}, dk_acc, s.head_dim);
      store_row(dv, {bi, key, kv}, dv_acc, s.value_dim);
    });
  });
}

// ---- f32 attention_grad in the runtime -------------------------------------------------------
//
// With GEMM calls on (CodeGenOptions::use_gemm: the runtime's kernels, not only the generated
// code), the gradient of f32 attention without softcap (segment ids in s32 buffers), whose causal
// and window masks leave every query row a key, is the runtime's (runtime/kernels/Attention.h):
// blocks of query rows times the keys the block sees in register-blocked microkernels, the
// softmax between them. The forward pass keeps the row-block kernel below.

bool every_row_sees_a_key(const AttentionShape& s, bool causal, int64_t window) {
  for (int64_t t = 0; t < s.queries; ++t) {
    int64_t first = window > 0 ? std::max<int64_t>(0, t - window + 1) : 0;
    int64_t end = s.keys;
    if (causal) end = std::min(end, t + 1);
    if (window > 0) end = std::min(end, t + window);
    if (first >= end) return false;
  }
  return true;
}

bool fast_attention_applies(Emitter& e, const ir::Op& op, size_t tensor_operands);

bool runtime_attention_grad_applies(Emitter& e, const ir::Op& op) {
  constexpr size_t tensor_operands = 5;  // q, k, v, out, dout
  if (!e.options().use_gemm || !fast_attention_applies(e, op, tensor_operands)) return false;
  std::span<const ir::Value> x = e.f().operands(op);
  for (size_t i = tensor_operands; i < x.size(); ++i) {  // segment ids: s32 in buffers
    const ValueStorage& st = e.storage(x[i]);
    if (e.dtype(x[i]) != DType::kS32 || !st.materialised() || st.kind == StorageKind::kEmpty) {
      return false;
    }
  }
  const ir::AttrSet& attrs = e.f().attrs(op);
  AttentionShape s = attention_shape(e, op);
  if (attrs.real(AttrKey::kSoftcap) > 0 || s.head_dim < 1 || s.value_dim < 1 || s.batch < 1) {
    return false;
  }
  return every_row_sees_a_key(s, attrs.flag(AttrKey::kCausal),
                              attrs.integer(AttrKey::kSlidingWindow));
}

// Fills a PrecastAttentionArgs on the stack and calls precast_attention_grad_f32 (results dq, dk,
// dv).
void emit_runtime_attention_grad(Emitter& e, const ir::Op& op) {
  llvm::IRBuilder<>& b = e.b();
  llvm::LLVMContext& c = b.getContext();
  auto* ptr = llvm::PointerType::get(c, 0);
  std::vector<llvm::Type*> fields(9, e.i64());
  fields.push_back(e.f64());
  fields.insert(fields.end(), 10, ptr);
  llvm::StructType* type = llvm::StructType::get(c, fields);
  llvm::Value* args = e.stack(type, 1, "attention_args");
  auto set = [&](unsigned field, llvm::Value* value) {
    b.CreateStore(value, b.CreateStructGEP(type, args, field));
  };
  AttentionShape s = attention_shape(e, op);
  const ir::AttrSet& attrs = e.f().attrs(op);
  std::span<const ir::Value> x = e.f().operands(op);
  int64_t ints[] = {s.batch,
                    s.queries,
                    s.heads,
                    s.head_dim,
                    s.keys,
                    s.kv_heads,
                    s.value_dim,
                    attrs.flag(AttrKey::kCausal) ? 1 : 0,
                    attrs.integer(AttrKey::kSlidingWindow)};
  for (unsigned i = 0; i < 9; ++i) set(i, e.int64(ints[i]));
  set(9, llvm::ConstantFP::get(e.f64(), attrs.real(AttrKey::kScale)));
  // q, k, v, out, dout, dq, dk, dv, q_segment, kv_segment (PrecastAttentionArgs' order).
  std::vector<llvm::Value*> pointers;
  for (size_t i = 0; i < 5; ++i) pointers.push_back(e.base_pointer(x[i]));
  for (uint32_t r = 0; r < 3; ++r) pointers.push_back(e.base_pointer(e.f().result(op, r)));
  for (size_t i = 5; i < 7; ++i) {
    pointers.push_back(x.size() == 7 ? e.base_pointer(x[i]) : llvm::ConstantPointerNull::get(ptr));
  }
  for (unsigned i = 0; i < 10; ++i) set(10 + i, pointers[i]);
  llvm::FunctionCallee callee = e.module().getOrInsertFunction(
      "precast_attention_grad_f32", llvm::FunctionType::get(b.getVoidTy(), {ptr, ptr}, false));
  b.CreateCall(callee, {e.runtime_context(), args});
}

// ---- f32 attention ---------------------------------------------------------------------------
//
// The default kernels for f32 attention (CodeGenOptions::exact_kernels off): scores, softmax and
// all sums in float. Without softcap, blocks of kRowLanes query rows are computed together with
// one vector lane per row (row_block forms below); with softcap, and for rows that see no key,
// one row at a time (its scores on the stack, so at most kFastAttentionMaxKeys keys), with
// vector code when the head dimensions split into 8 or 16 lanes and vectorisable loops otherwise
// (dot products reassociable: the vectoriser picks their order when the code is generated).
// Every order is fixed at compile time, so every thread count computes the same bits. Only the
// keys that causal masking and the sliding window leave visible are scored (a masked key's weight
// exp(mask - max) is exactly 0 whenever the row sees any key); a row that sees no key weighs all
// keys equally, as the interpreter does.

constexpr int64_t kFastAttentionMaxKeys = 8192;

// Rows of f32 values and the loops over them.
struct FloatRows {
  Emitter& e;
  llvm::IRBuilder<>& b;
  llvm::Type* f;
  explicit FloatRows(Emitter& emitter) : e(emitter), b(emitter.b()), f(emitter.b().getFloatTy()) {}

  llvm::Value* c(double v) { return llvm::ConstantFP::get(f, v); }
  // The start of row (i0, i1, i2) of a rank-4 value (its last dimension is the row).
  llvm::Value* row(ir::Value x, llvm::Value* i0, llvm::Value* i1, llvm::Value* i2) {
    const Dims& d = e.dims(x);
    llvm::Value* r = b.CreateAdd(
        b.CreateMul(b.CreateAdd(b.CreateMul(i0, e.int64(d[1])), i1), e.int64(d[2])), i2);
    return b.CreateInBoundsGEP(f, e.base_pointer(x), b.CreateMul(r, e.int64(d[3])));
  }
  llvm::Value* at(llvm::Value* p, llvm::Value* i) { return b.CreateInBoundsGEP(f, p, i); }
  llvm::Value* get(llvm::Value* p, llvm::Value* i) { return b.CreateLoad(f, at(p, i)); }
  void set(llvm::Value* p, llvm::Value* i, llvm::Value* x) { b.CreateStore(x, at(p, i)); }
  static llvm::FastMathFlags reassociable() {
    llvm::FastMathFlags flags;
    flags.setAllowReassoc();
    flags.setAllowContract();
    return flags;
  }
  static llvm::FastMathFlags contractable() {
    llvm::FastMathFlags flags;
    flags.setAllowContract();
    return flags;
  }
  // Σ_i x[i] y[i] over [0, n).
  llvm::Value* dot(llvm::Value* x, llvm::Value* y, int64_t n) {
    llvm::Value* acc = e.stack(f, 1, "dot");
    b.CreateStore(c(0.0), acc);
    e.for_range(0, n, [&](llvm::Value* i) {
      llvm::IRBuilderBase::FastMathFlagGuard guard(b);
      b.setFastMathFlags(reassociable());
      b.CreateStore(b.CreateFAdd(b.CreateLoad(f, acc), b.CreateFMul(get(x, i), get(y, i))), acc);
    });
    return b.CreateLoad(f, acc);
  }
  // y[i] += a x[i] over [0, n).
  void axpy(llvm::Value* a, llvm::Value* x, llvm::Value* y, int64_t n) {
    e.for_range(0, n, [&](llvm::Value* i) {
      llvm::IRBuilderBase::FastMathFlagGuard guard(b);
      b.setFastMathFlags(contractable());
      set(y, i, b.CreateFAdd(get(y, i), b.CreateFMul(a, get(x, i))));
    });
  }
  void fill(llvm::Value* p, int64_t n, llvm::Value* x) {
    e.for_range(0, n, [&](llvm::Value* i) { set(p, i, x); });
  }
  // y[i] += Σ_j as[j] xs[j][i] over [0, n).
  void axpys(const std::vector<llvm::Value*>& as, const std::vector<llvm::Value*>& xs,
             llvm::Value* y, int64_t n) {
    e.for_range(0, n, [&](llvm::Value* i) {
      llvm::IRBuilderBase::FastMathFlagGuard guard(b);
      b.setFastMathFlags(contractable());
      llvm::Value* sum = get(y, i);
      for (size_t j = 0; j < xs.size(); ++j)
        sum = b.CreateFAdd(sum, b.CreateFMul(as[j], get(xs[j], i)));
      set(y, i, sum);
    });
  }
};

bool fast_attention_applies(Emitter& e, const ir::Op& op, size_t tensor_operands) {
  if (e.options().exact_kernels) return false;
  const ir::Function& f = e.f();
  // Positions (context-parallel pieces) only in the exact kernels.
  if (f.attrs(op).flag(AttrKey::kPositions)) return false;
  std::span<const ir::Value> x = f.operands(op);
  AttentionShape s = attention_shape(e, op);
  if (s.keys < 1 || s.keys > kFastAttentionMaxKeys || s.queries < 1 || s.kv_heads < 1 ||
      s.heads % s.kv_heads != 0) {
    return false;
  }
  auto buffered_f32 = [&](ir::Value v) {
    const ValueStorage& st = e.storage(v);
    return e.dtype(v) == DType::kF32 && st.materialised() && st.kind != StorageKind::kEmpty;
  };
  for (size_t i = 0; i < tensor_operands; ++i) {
    if (!buffered_f32(x[i])) return false;
  }
  for (uint32_t r = 0; r < op.num_results; ++r) {
    ir::Value result = f.result(op, r);
    if (!buffered_f32(result)) return false;
    for (size_t i = 0; i < tensor_operands; ++i) {
      if (e.storage(result) == e.storage(x[i])) return false;
    }
  }
  return true;
}

// One query row's scores in float.
struct ScoreRow {
  llvm::Value* lo;  // keys [lo, hi) may carry weight
  llvm::Value* hi;
  llvm::Value* any;  // some key is visible
  llvm::Value* max;
};

llvm::Value* score_f32(FloatRows& r, const Scorer& scorer, llvm::Value* dot) {
  llvm::Value* score = r.b.CreateFMul(dot, r.c(scorer.scale));
  if (scorer.softcap <= 0) return score;
  return r.b.CreateFMul(r.c(scorer.softcap),
                        r.e.math_call("tanhf", r.b.CreateFMul(score, r.c(1.0 / scorer.softcap))));
}

llvm::Value* slope_f32(FloatRows& r, const Scorer& scorer, llvm::Value* dot) {
  if (scorer.softcap <= 0) return r.c(1.0);
  llvm::Value* capped =
      r.e.math_call("tanhf", r.b.CreateFMul(dot, r.c(scorer.scale / scorer.softcap)));
  return r.b.CreateFSub(r.c(1.0), r.b.CreateFMul(capped, capped));
}

// scores[s] = the (masked) score of query row (bi, t, h) and key s for the keys in range, raw[s]
// the plain q·k (softcap only).
// key_dot, when given, computes q·k from the start of a k row (instead of a dot loop).
ScoreRow score_row(FloatRows& r, Scorer& scorer, const AttentionShape& s, ir::Value q, ir::Value k,
                   llvm::Value* bi, llvm::Value* t, llvm::Value* h, llvm::Value* kv,
                   llvm::Value* scores, llvm::Value* raw,
                   const std::function<llvm::Value*(llvm::Value*)>& key_dot = nullptr) {
  Emitter& e = r.e;
  llvm::IRBuilder<>& b = r.b;
  auto smin = [&](llvm::Value* x, llvm::Value* y) {
    return b.CreateSelect(b.CreateICmpSLT(x, y), x, y);
  };
  auto smax = [&](llvm::Value* x, llvm::Value* y) {
    return b.CreateSelect(b.CreateICmpSGT(x, y), x, y);
  };
  llvm::Value* lo = e.int64(0);
  llvm::Value* hi = e.int64(s.keys);
  if (scorer.causal) hi = smin(hi, b.CreateAdd(t, e.int64(1)));
  if (scorer.window > 0) {
    lo = smax(lo, b.CreateSub(t, e.int64(scorer.window - 1)));
    hi = smin(hi, b.CreateAdd(t, e.int64(scorer.window)));
  }
  llvm::Value* lo_slot = e.stack(e.i64(), 1, "lo");
  llvm::Value* hi_slot = e.stack(e.i64(), 1, "hi");
  llvm::Value* any_slot = e.stack(b.getInt1Ty(), 1, "any");
  llvm::Value* max_slot = e.stack(r.f, 1, "max");
  b.CreateStore(lo, lo_slot);
  b.CreateStore(hi, hi_slot);
  b.CreateStore(b.getFalse(), any_slot);
  b.CreateStore(llvm::ConstantFP::getInfinity(r.f, true), max_slot);
  llvm::Value* mask = r.c(static_cast<float>(scorer.mask));
  llvm::Value* q_row = r.row(q, bi, t, h);
  // Every key in range is scored (its rows exist); masked ones then take the mask value.
  e.for_range(
      lo, hi,
      [&](llvm::Value* key) {
        llvm::Value* k_row = r.row(k, bi, key, kv);
        llvm::Value* dot = key_dot ? key_dot(k_row) : r.dot(q_row, k_row, s.head_dim);
        llvm::Value* visible = scorer.visible(bi, t, key);
        if (raw) r.set(raw, key, dot);
        llvm::Value* score = b.CreateSelect(visible, score_f32(r, scorer, dot), mask);
        r.set(scores, key, score);
        b.CreateStore(b.CreateOr(b.CreateLoad(b.getInt1Ty(), any_slot), visible), any_slot);
        llvm::Value* max = b.CreateLoad(r.f, max_slot);
        b.CreateStore(b.CreateSelect(b.CreateFCmpOGT(score, max), score, max), max_slot);
      },
      false);
  e.if_then(b.CreateNot(b.CreateLoad(b.getInt1Ty(), any_slot)), [&] {
    r.fill(scores, s.keys, mask);
    b.CreateStore(e.int64(0), lo_slot);
    b.CreateStore(e.int64(s.keys), hi_slot);
    b.CreateStore(mask, max_slot);
  });
  return {b.CreateLoad(e.i64(), lo_slot), b.CreateLoad(e.i64(), hi_slot),
          b.CreateLoad(b.getInt1Ty(), any_slot), b.CreateLoad(r.f, max_slot)};
}

// scores[s] = exp(scores[s] - max) over the row's range; returns their sum.
llvm::Value* exp_row(FloatRows& r, const ScoreRow& row, llvm::Value* scores) {
  llvm::Value* sum = r.e.stack(r.f, 1, "sum");
  r.b.CreateStore(r.c(0.0), sum);
  r.e.for_range(row.lo, row.hi, [&](llvm::Value* key) {
    llvm::Value* p = r.e.fast_exp_f32(r.b.CreateFSub(r.get(scores, key), row.max));
    r.set(scores, key, p);
    llvm::IRBuilderBase::FastMathFlagGuard guard(r.b);
    r.b.setFastMathFlags(FloatRows::reassociable());
    r.b.CreateStore(r.b.CreateFAdd(r.b.CreateLoad(r.f, sum), p), sum);
  });
  return r.b.CreateLoad(r.f, sum);
}

// Rows of float held as vectors of `width` lanes (head dimensions that are multiples of it):
// a query row stays in registers while the keys stream past, and the sums over keys accumulate
// in vector registers (explicit vector code: the order is the one written here).
struct VectorRows {
  FloatRows& r;
  int64_t width;
  llvm::FixedVectorType* type;
  VectorRows(FloatRows& rows, int64_t lanes)
      : r(rows),
        width(lanes),
        type(llvm::FixedVectorType::get(rows.f, static_cast<unsigned>(lanes))) {}

  llvm::Value* chunk_pointer(llvm::Value* row, int64_t chunk) {
    return chunk == 0 ? row : r.b.CreateInBoundsGEP(r.f, row, r.e.int64(chunk * width));
  }
  std::vector<llvm::Value*> load(llvm::Value* row, int64_t n) {
    std::vector<llvm::Value*> chunks;
    for (int64_t c = 0; c < n / width; ++c) {
      chunks.push_back(r.b.CreateAlignedLoad(type, chunk_pointer(row, c), llvm::Align(4)));
    }
    return chunks;
  }
  void store(llvm::Value* row, const std::vector<llvm::Value*>& chunks) {
    for (size_t c = 0; c < chunks.size(); ++c) {
      r.b.CreateAlignedStore(chunks[c], chunk_pointer(row, static_cast<int64_t>(c)),
                             llvm::Align(4));
    }
  }
  llvm::Value* splat(llvm::Value* x) {
    return r.b.CreateVectorSplat(static_cast<unsigned>(width), x);
  }
  llvm::Value* fma(llvm::Value* a, llvm::Value* x, llvm::Value* y) {
    return r.b.CreateIntrinsic(llvm::Intrinsic::fmuladd, {type}, {a, x, y});
  }
  // Σ chunks · row, lane-wise products summed over the chunks, then across the lanes.
  llvm::Value* dot(const std::vector<llvm::Value*>& chunks, llvm::Value* row) {
    std::vector<llvm::Value*> other = load(row, static_cast<int64_t>(chunks.size()) * width);
    llvm::Value* sum = r.b.CreateFMul(chunks[0], other[0]);
    for (size_t c = 1; c < chunks.size(); ++c) sum = fma(chunks[c], other[c], sum);
    llvm::IRBuilderBase::FastMathFlagGuard guard(r.b);
    r.b.setFastMathFlags(FloatRows::reassociable());
    return r.b.CreateFAddReduce(r.c(-0.0), sum);
  }
  // row += a x (x in registers), in place.
  void add_scaled(llvm::Value* row, llvm::Value* a, const std::vector<llvm::Value*>& x) {
    std::vector<llvm::Value*> y = load(row, static_cast<int64_t>(x.size()) * width);
    llvm::Value* as = splat(a);
    for (size_t c = 0; c < x.size(); ++c) y[c] = fma(as, x[c], y[c]);
    store(row, y);
  }
  // Stack vectors accumulating across a loop (promoted to registers by the optimiser).
  std::vector<llvm::Value*> accumulators(int64_t n, const char* name) {
    std::vector<llvm::Value*> slots;
    for (int64_t c = 0; c < n / width; ++c) {
      slots.push_back(r.e.stack(type, 1, name));
      r.b.CreateStore(llvm::ConstantFP::get(type, 0.0), slots.back());
    }
    return slots;
  }
  std::vector<llvm::Value*> read(const std::vector<llvm::Value*>& slots) {
    std::vector<llvm::Value*> values;
    for (llvm::Value* slot : slots) values.push_back(r.b.CreateLoad(type, slot));
    return values;
  }
  // slots += a x, x loaded from a row.
  void accumulate(const std::vector<llvm::Value*>& slots, llvm::Value* a, llvm::Value* row) {
    std::vector<llvm::Value*> x = load(row, static_cast<int64_t>(slots.size()) * width);
    llvm::Value* as = splat(a);
    for (size_t c = 0; c < slots.size(); ++c) {
      r.b.CreateStore(fma(as, x[c], r.b.CreateLoad(type, slots[c])), slots[c]);
    }
  }
};

// The vector width for the head and value dimensions: 16 or 8 lanes, 0 when they do not split.
int64_t attention_lanes(const AttentionShape& s) {
  for (int64_t lanes : {16, 8}) {
    if (s.head_dim % lanes == 0 && s.value_dim % lanes == 0 && s.head_dim > 0 && s.value_dim > 0) {
      return lanes;
    }
  }
  return 0;
}

// The row-block attention kernels: query rows per block (one vector lane each), keys per tile.
constexpr int64_t kRowLanes = 16;
constexpr int64_t kKeyTile = 32;
// Keys scored together and value columns accumulated together: independent vector sums.
constexpr int64_t kKeyGroup = 8;
constexpr int64_t kValueGroup = 8;

// A block of kRowLanes query rows of one (batch, head), one vector lane per row: the vector
// helpers and the masking the two row-block attention kernels share.
struct RowBlock {
  Emitter& e;
  FloatRows& r;
  llvm::IRBuilder<>& b;
  llvm::FixedVectorType* lanes;
  llvm::FixedVectorType* lane_ints;

  RowBlock(Emitter& emitter, FloatRows& rows)
      : e(emitter),
        r(rows),
        b(emitter.b()),
        lanes(llvm::FixedVectorType::get(rows.f, kRowLanes)),
        lane_ints(llvm::FixedVectorType::get(emitter.i32(), kRowLanes)) {}

  llvm::Value* splat(llvm::Value* scalar) const { return b.CreateVectorSplat(kRowLanes, scalar); }
  // The lanes at base[index * kRowLanes].
  llvm::Value* vec_at(llvm::Value* base, llvm::Value* index) const {
    return b.CreateInBoundsGEP(r.f, base, b.CreateMul(index, e.int64(kRowLanes)));
  }
  llvm::Value* vload(llvm::Value* p) const { return b.CreateAlignedLoad(lanes, p, llvm::Align(4)); }
  void vstore(llvm::Value* x, llvm::Value* p) const { b.CreateAlignedStore(x, p, llvm::Align(4)); }
  llvm::Value* vmax(llvm::Value* x, llvm::Value* y) const {
    return b.CreateSelect(b.CreateFCmpOGT(x, y), x, y);
  }
  llvm::Value* fmuladd(llvm::Value* x, llvm::Value* y, llvm::Value* z) const {
    return b.CreateIntrinsic(llvm::Intrinsic::fmuladd, {lanes}, {x, y, z});
  }
  llvm::Value* smin(llvm::Value* x, llvm::Value* y) const {
    return b.CreateSelect(b.CreateICmpSLT(x, y), x, y);
  }
  llvm::Value* smax(llvm::Value* x, llvm::Value* y) const {
    return b.CreateSelect(b.CreateICmpSGT(x, y), x, y);
  }
  // body(first, count) over [begin, end): in runs of `group` (count = group, independent sums
  // whose latencies overlap), then the rest one at a time.
  void in_groups(llvm::Value* begin, llvm::Value* end, int64_t group,
                 const std::function<void(llvm::Value*, int64_t)>& body) const {
    llvm::Value* groups = b.CreateSDiv(b.CreateSub(end, begin), e.int64(group));
    e.for_range(
        e.int64(0), groups,
        [&](llvm::Value* g) { body(b.CreateAdd(begin, b.CreateMul(g, e.int64(group))), group); },
        false);
    e.for_range(
        b.CreateAdd(begin, b.CreateMul(groups, e.int64(group))), end,
        [&](llvm::Value* i) { body(i, 1); }, false);
  }
  // The scalar index of `lane` of vector `index` in a transposed block (base[index * kRowLanes +
  // lane]).
  llvm::Value* lane_at(llvm::Value* index, llvm::Value* lane) const {
    return b.CreateAdd(b.CreateMul(index, e.int64(kRowLanes)), lane);
  }
  // The query row of `lane` in the block starting at t0: t0 + lane, or the last row past the end
  // (whose lanes are then not `valid`).
  llvm::Value* row_of(llvm::Value* t0, llvm::Value* lane, int64_t queries) const {
    return smin(b.CreateAdd(t0, lane), e.int64(queries - 1));
  }
  // The lanes whose row exists.
  llvm::Value* valid_rows(llvm::Value* t_lanes, int64_t queries) const {
    return b.CreateICmpSLT(t_lanes, splat(b.getInt32(static_cast<uint32_t>(queries))));
  }
  // Per-lane q segment ids: a stack slot each lane's row writes (store_segment), read back as one
  // vector (segment_lanes); none without segment ids.
  llvm::Value* segment_slots(const Scorer& scorer) const {
    return scorer.q_segment ? e.stack(e.i32(), kRowLanes, "q_segments") : nullptr;
  }
  void store_segment(llvm::Value* slots, const Scorer& scorer, llvm::Value* bi, llvm::Value* t,
                     llvm::Value* lane) const {
    if (slots) {
      b.CreateStore(e.element(*scorer.q_segment, {bi, t}),
                    b.CreateInBoundsGEP(e.i32(), slots, lane));
    }
  }
  llvm::Value* segment_lanes(llvm::Value* slots) const {
    return slots ? b.CreateAlignedLoad(lane_ints, slots, llvm::Align(4)) : nullptr;
  }
  // t0 + lane in each lane (i32).
  llvm::Value* row_lanes(llvm::Value* t0) const {
    std::vector<llvm::Constant*> iota;
    for (int64_t i = 0; i < kRowLanes; ++i) iota.push_back(b.getInt32(static_cast<uint32_t>(i)));
    return b.CreateAdd(splat(b.CreateTrunc(t0, e.i32())), llvm::ConstantVector::get(iota));
  }
  // [lo, hi): the keys any row of the block starting at t0 may see.
  std::pair<llvm::Value*, llvm::Value*> key_range(const Scorer& scorer, int64_t keys,
                                                  llvm::Value* t0) const {
    llvm::Value* lo = e.int64(0);
    llvm::Value* hi = e.int64(keys);
    if (scorer.causal) hi = smin(hi, b.CreateAdd(t0, e.int64(kRowLanes)));
    if (scorer.window > 0) {
      lo = smax(lo, b.CreateSub(t0, e.int64(scorer.window - 1)));
      hi = smin(hi, b.CreateAdd(t0, e.int64(kRowLanes - 1 + scorer.window)));
    }
    return {lo, hi};
  }
  // The lanes whose row sees `key`: of the `valid` rows at `t_lanes`, those the causal mask,
  // the window and the segment ids (`q_segment_lanes`, or none) let through.
  llvm::Value* visible(const Scorer& scorer, llvm::Value* valid, llvm::Value* t_lanes,
                       llvm::Value* q_segment_lanes, llvm::Value* bi, llvm::Value* key) const {
    llvm::Value* key32 = splat(b.CreateTrunc(key, e.i32()));
    llvm::Value* yes = valid;
    if (scorer.causal) yes = b.CreateAnd(yes, b.CreateICmpSLE(key32, t_lanes));
    if (scorer.window > 0) {
      llvm::Value* distance = b.CreateSub(t_lanes, key32);
      distance = b.CreateSelect(b.CreateICmpSLT(distance, splat(b.getInt32(0))),
                                b.CreateNeg(distance), distance);
      yes = b.CreateAnd(
          yes,
          b.CreateICmpSLT(distance, splat(b.getInt32(static_cast<uint32_t>(scorer.window)))));
    }
    if (q_segment_lanes) {
      yes = b.CreateAnd(yes, b.CreateICmpEQ(q_segment_lanes,
                                            splat(e.element(*scorer.kv_segment, {bi, key}))));
    }
    return yes;
  }
};

// The forward kernel's row-block form (no softcap): one task per block of kRowLanes query rows
// of one (batch, head), one vector lane per row. q's block is transposed onto the stack once;
// each key then scores all the rows at once (Σ_d qT[d] k[s, d], no horizontal sums), and keys
// are taken kKeyTile at a time with a running max and sum per lane (online softmax), the
// accumulator out^T[j] (a vector over the rows) gathering p[s] v[s, j]. Rows that see no key
// are recomputed by the one-row form, which weighs all keys equally as the interpreter does.
void emit_fast_attention(Emitter& e, const ir::Op& op, const std::string& name) {
  ForwardAttention forward(e, op);
  auto& [s, q, k, v, out, scorer, rows, work] = forward;
  // One query row (b, h, t), alone: its scores, their softmax, and the weighted sum of v rows.
  auto one_row = [&](llvm::Value* bi, llvm::Value* h, llvm::Value* t) {
    FloatRows r(e);
    llvm::IRBuilder<>& b = e.b();
    llvm::Value* kv = s.group == 1 ? h : b.CreateUDiv(h, e.int64(s.group));
    llvm::Value* scores = e.stack(r.f, s.keys, "scores");
    llvm::Value* raw = scorer.softcap > 0 ? e.stack(r.f, s.keys, "raw") : nullptr;
    llvm::Value* acc = e.stack(r.f, std::max<int64_t>(s.value_dim, 1), "acc");
    int64_t lanes = attention_lanes(s);
    if (lanes > 0) {
      VectorRows vr(r, lanes);
      std::vector<llvm::Value*> q_chunks = vr.load(r.row(q, bi, t, h), s.head_dim);
      ScoreRow range = score_row(r, scorer, s, q, k, bi, t, h, kv, scores, raw,
                                 [&](llvm::Value* k_row) { return vr.dot(q_chunks, k_row); });
      llvm::Value* sum = exp_row(r, range, scores);
      std::vector<llvm::Value*> slots = vr.accumulators(s.value_dim, "acc");
      e.for_range(
          range.lo, range.hi,
          [&](llvm::Value* key) {
            vr.accumulate(slots, r.get(scores, key), r.row(v, bi, key, kv));
          },
          false);
      std::vector<llvm::Value*> result = vr.read(slots);
      llvm::Value* sums = vr.splat(sum);
      for (llvm::Value*& chunk : result) chunk = b.CreateFDiv(chunk, sums);
      vr.store(r.row(out, bi, t, h), result);
    } else {
      ScoreRow range = score_row(r, scorer, s, q, k, bi, t, h, kv, scores, raw);
      llvm::Value* sum = exp_row(r, range, scores);
      r.fill(acc, s.value_dim, r.c(0.0));
      e.for_range(
          range.lo, range.hi,
          [&](llvm::Value* key) {
            r.axpy(r.get(scores, key), r.row(v, bi, key, kv), acc, s.value_dim);
          },
          false);
      llvm::Value* out_row = r.row(out, bi, t, h);
      e.for_range(0, s.value_dim,
                  [&](llvm::Value* j) { r.set(out_row, j, b.CreateFDiv(r.get(acc, j), sum)); });
    }
  };
  if (scorer.softcap > 0) {
    e.parallel_tasks(name, rows, work, [&](llvm::Value* task) {
      Index row = e.delinearize(task, {s.batch, s.heads, s.queries});
      one_row(row[0], row[1], row[2]);
    });
    return;
  }
  int64_t blocks = (s.queries + kRowLanes - 1) / kRowLanes;
  e.parallel_tasks(name, s.batch * s.heads * blocks, work, [&](llvm::Value* task) {
    FloatRows r(e);
    RowBlock L(e, r);
    llvm::IRBuilder<>& b = e.b();
    auto* lanes = L.lanes;
    Index at = e.delinearize(task, {s.batch, s.heads, blocks});
    llvm::Value *bi = at[0], *h = at[1];
    llvm::Value* kv = s.group == 1 ? h : b.CreateUDiv(h, e.int64(s.group));
    llvm::Value* t0 = b.CreateMul(at[2], e.int64(kRowLanes));
    llvm::Value* t_lanes = L.row_lanes(t0);
    llvm::Value* valid = L.valid_rows(t_lanes, s.queries);
    // q's rows transposed: qT[d] holds q[t0 + lane, d] (the last row repeated past the end).
    llvm::Value* qT = e.stack(r.f, s.head_dim * kRowLanes, "qT");
    llvm::Value* q_segments = L.segment_slots(scorer);
    e.for_range(
        0, kRowLanes,
        [&](llvm::Value* lane) {
          llvm::Value* t = L.row_of(t0, lane, s.queries);
          llvm::Value* q_row = r.row(q, bi, t, h);
          e.for_range(0, s.head_dim,
                      [&](llvm::Value* d) { r.set(qT, L.lane_at(d, lane), r.get(q_row, d)); });
          L.store_segment(q_segments, scorer, bi, t, lane);
        },
        false);
    llvm::Value* q_segment_lanes = L.segment_lanes(q_segments);
    // The keys any row of the block may see.
    auto [lo, hi] = L.key_range(scorer, s.keys, t0);
    llvm::Value* mask = L.splat(r.c(static_cast<float>(scorer.mask)));
    llvm::Value* max_slot = e.stack(lanes, 1, "max");
    llvm::Value* sum_slot = e.stack(lanes, 1, "sum");
    llvm::Value* any_slot = e.stack(lanes, 1, "any");  // 1.0 in the lanes that saw a key
    llvm::Value* acc = e.stack(r.f, std::max<int64_t>(s.value_dim, 1) * kRowLanes, "outT");
    llvm::Value* tile = e.stack(r.f, kKeyTile * kRowLanes, "tile");
    b.CreateStore(L.splat(llvm::ConstantFP::getInfinity(r.f, true)), max_slot);
    b.CreateStore(L.splat(r.c(0.0)), sum_slot);
    b.CreateStore(L.splat(r.c(0.0)), any_slot);
    e.for_range(0, s.value_dim, [&](llvm::Value* j) { L.vstore(L.splat(r.c(0.0)), L.vec_at(acc, j)); });
    llvm::Value* tiles =
        b.CreateSDiv(b.CreateAdd(b.CreateSub(hi, lo), e.int64(kKeyTile - 1)), e.int64(kKeyTile));
    e.for_range(
        e.int64(0), tiles,
        [&](llvm::Value* index) {
          llvm::Value* s0 = b.CreateAdd(lo, b.CreateMul(index, e.int64(kKeyTile)));
          llvm::Value* s1 = L.smin(b.CreateAdd(s0, e.int64(kKeyTile)), hi);
          llvm::Value* tile_max = e.stack(lanes, 1, "tile_max");
          b.CreateStore(L.splat(llvm::ConstantFP::getInfinity(r.f, true)), tile_max);
          // Scores, kKeyGroup keys at a time (independent sums, so their latencies overlap).
          auto score_keys = [&](llvm::Value* first, int64_t count) {
            std::vector<llvm::Value*> keys, k_rows, sums;
            for (int64_t i = 0; i < count; ++i) {
              keys.push_back(i == 0 ? first : b.CreateAdd(first, e.int64(i)));
              k_rows.push_back(r.row(k, bi, keys.back(), kv));
              sums.push_back(e.stack(lanes, 1, "dot"));
              b.CreateStore(L.splat(r.c(0.0)), sums.back());
            }
            e.for_range(0, s.head_dim, [&](llvm::Value* d) {
              llvm::Value* q_lanes = L.vload(L.vec_at(qT, d));
              for (int64_t i = 0; i < count; ++i) {
                b.CreateStore(L.fmuladd(q_lanes, L.splat(r.get(k_rows[static_cast<size_t>(i)], d)),
                                      b.CreateLoad(lanes, sums[static_cast<size_t>(i)])),
                              sums[static_cast<size_t>(i)]);
              }
            });
            for (int64_t i = 0; i < count; ++i) {
              llvm::Value* key = keys[static_cast<size_t>(i)];
              llvm::Value* visible = L.visible(scorer, valid, t_lanes, q_segment_lanes, bi, key);
              llvm::Value* dot = b.CreateLoad(lanes, sums[static_cast<size_t>(i)]);
              llvm::Value* score =
                  b.CreateSelect(visible, b.CreateFMul(dot, L.splat(r.c(scorer.scale))), mask);
              L.vstore(score, L.vec_at(tile, b.CreateSub(key, s0)));
              b.CreateStore(L.vmax(score, b.CreateLoad(lanes, tile_max)), tile_max);
              b.CreateStore(b.CreateSelect(visible, L.splat(r.c(1.0)), b.CreateLoad(lanes, any_slot)),
                            any_slot);
            }
          };
          L.in_groups(s0, s1, kKeyGroup, score_keys);
          // Rescale the running sum and accumulator to the new max, then add this tile.
          llvm::Value* old_max = b.CreateLoad(lanes, max_slot);
          llvm::Value* new_max = L.vmax(b.CreateLoad(lanes, tile_max), old_max);
          llvm::Value* correction = e.fast_exp_f32(b.CreateFSub(old_max, new_max));
          b.CreateStore(new_max, max_slot);
          llvm::Value* sum = e.stack(lanes, 1, "tile_sum");
          b.CreateStore(b.CreateFMul(b.CreateLoad(lanes, sum_slot), correction), sum);
          e.for_range(
              s0, s1,
              [&](llvm::Value* key) {
                llvm::Value* p_at = L.vec_at(tile, b.CreateSub(key, s0));
                llvm::Value* p = e.fast_exp_f32(b.CreateFSub(L.vload(p_at), new_max));
                L.vstore(p, p_at);
                b.CreateStore(b.CreateFAdd(b.CreateLoad(lanes, sum), p), sum);
              },
              false);
          b.CreateStore(b.CreateLoad(lanes, sum), sum_slot);
          // outT[j] = outT[j] * correction + Σ_s p[s] v[s, j], kValueGroup columns at a time.
          auto add_values = [&](llvm::Value* first, int64_t count) {
            std::vector<llvm::Value*> js, sums;
            for (int64_t i = 0; i < count; ++i) {
              js.push_back(i == 0 ? first : b.CreateAdd(first, e.int64(i)));
              sums.push_back(e.stack(lanes, 1, "outT_j"));
              b.CreateStore(b.CreateFMul(L.vload(L.vec_at(acc, js.back())), correction), sums.back());
            }
            e.for_range(
                s0, s1,
                [&](llvm::Value* key) {
                  llvm::Value* p = L.vload(L.vec_at(tile, b.CreateSub(key, s0)));
                  llvm::Value* v_row = r.row(v, bi, key, kv);
                  for (int64_t i = 0; i < count; ++i) {
                    size_t at = static_cast<size_t>(i);
                    b.CreateStore(
                        L.fmuladd(p, L.splat(r.get(v_row, js[at])), b.CreateLoad(lanes, sums[at])),
                        sums[at]);
                  }
                },
                false);
            for (int64_t i = 0; i < count; ++i) {
              L.vstore(b.CreateLoad(lanes, sums[static_cast<size_t>(i)]),
                     L.vec_at(acc, js[static_cast<size_t>(i)]));
            }
          };
          L.in_groups(e.int64(0), e.int64(s.value_dim), kValueGroup, add_values);
        },
        false);
    // out[t0 + lane, j] = outT[j][lane] / sum[lane]; rows that saw no key go the one-row way.
    llvm::Value* sums = e.stack(lanes, 1, "sums");
    llvm::Value* seen = e.stack(lanes, 1, "seen");
    b.CreateStore(b.CreateLoad(lanes, sum_slot), sums);
    b.CreateStore(b.CreateLoad(lanes, any_slot), seen);
    llvm::Value* rows_here = L.smin(e.int64(kRowLanes), b.CreateSub(e.int64(s.queries), t0));
    e.for_range(
        e.int64(0), rows_here,
        [&](llvm::Value* lane) {
          llvm::Value* t = b.CreateAdd(t0, lane);
          llvm::Value* saw = b.CreateFCmpONE(r.get(seen, lane), r.c(0.0));
          e.if_then(saw, [&] {
            llvm::Value* sum = r.get(sums, lane);
            llvm::Value* out_row = r.row(out, bi, t, h);
            e.for_range(0, s.value_dim, [&](llvm::Value* j) {
              llvm::Value* value =
                  r.get(acc, b.CreateAdd(b.CreateMul(j, e.int64(kRowLanes)), lane));
              r.set(out_row, j, b.CreateFDiv(value, sum));
            });
          });
          e.if_then(b.CreateNot(saw), [&] { one_row(bi, h, t); });
        },
        false);
  });
}

// The gradient's row-block form (no softcap), per (batch, kv head) task: for each query head of
// the group and each block of kRowLanes query rows (one vector lane per row, q and dout
// transposed onto the stack), pass A finds the rows' softmax max and sum over the visible keys
// (online, kKeyTile keys at a time); pass B recomputes each tile's scores, p, dp = dout·v and
// ds = scale p (dp - Δ) as vectors over the rows, adds ds k into dq^T, and adds each key's
// Σ_rows ds q and Σ_rows p dout into dk[s] and dv[s] (which only this task writes). Rows that
// see no key are left to `one_row`.
struct GradValues {
  ir::Value q, k, v, out, dout, dq, dk, dv;
};

void row_block_grad(Emitter& e, FloatRows& r, const AttentionShape& s, Scorer& scorer,
                    const GradValues& x, llvm::Value* bi, llvm::Value* kv,
                    const std::function<void(llvm::Value*, llvm::Value*)>& one_row) {
  llvm::IRBuilder<>& b = e.b();
  RowBlock L(e, r);
  auto* lanes = L.lanes;
  llvm::Value* zero = L.splat(r.c(0.0));
  llvm::Value* mask = L.splat(r.c(static_cast<float>(scorer.mask)));
  int64_t blocks = (s.queries + kRowLanes - 1) / kRowLanes;
  llvm::Value* qT = e.stack(r.f, s.head_dim * kRowLanes, "qT");
  llvm::Value* doutT = e.stack(r.f, s.value_dim * kRowLanes, "doutT");
  llvm::Value* dqT = e.stack(r.f, s.head_dim * kRowLanes, "dqT");
  llvm::Value* deltas = e.stack(r.f, kRowLanes, "deltas");
  llvm::Value* q_segments = L.segment_slots(scorer);
  llvm::Value* tile = e.stack(r.f, kKeyTile * kRowLanes, "tile");
  llvm::Value* ds_tile = e.stack(r.f, kKeyTile * kRowLanes, "ds_tile");
  llvm::Value* max_slot = e.stack(lanes, 1, "max");
  llvm::Value* sum_slot = e.stack(lanes, 1, "sum");
  llvm::Value* any_slot = e.stack(lanes, 1, "any");
  llvm::Value* tile_max = e.stack(lanes, 1, "tile_max");
  llvm::Value* seen_slot = e.stack(lanes, 1, "seen");

  e.for_range(
      0, s.group,
      [&](llvm::Value* g) {
        llvm::Value* h = b.CreateAdd(b.CreateMul(kv, e.int64(s.group)), g);
        e.for_range(
            0, blocks,
            [&](llvm::Value* block) {
              llvm::Value* t0 = b.CreateMul(block, e.int64(kRowLanes));
              llvm::Value* t_lanes = L.row_lanes(t0);
              llvm::Value* valid = L.valid_rows(t_lanes, s.queries);
              auto row_t = [&](llvm::Value* lane) { return L.row_of(t0, lane, s.queries); };
              e.for_range(
                  0, kRowLanes,
                  [&](llvm::Value* lane) {
                    llvm::Value* t = row_t(lane);
                    llvm::Value* q_row = r.row(x.q, bi, t, h);
                    llvm::Value* dout_row = r.row(x.dout, bi, t, h);
                    e.for_range(0, s.head_dim, [&](llvm::Value* d) {
                      r.set(qT, L.lane_at(d, lane), r.get(q_row, d));
                      r.set(dqT, L.lane_at(d, lane), r.c(0.0));
                    });
                    e.for_range(0, s.value_dim, [&](llvm::Value* j) {
                      r.set(doutT, L.lane_at(j, lane), r.get(dout_row, j));
                    });
                    r.set(deltas, lane, r.dot(dout_row, r.row(x.out, bi, t, h), s.value_dim));
                    L.store_segment(q_segments, scorer, bi, t, lane);
                  },
                  false);
              llvm::Value* q_segment_lanes = L.segment_lanes(q_segments);
              llvm::Value* delta = L.vload(deltas);
              auto [lo, hi] = L.key_range(scorer, s.keys, t0);
              llvm::Value* tiles = b.CreateSDiv(
                  b.CreateAdd(b.CreateSub(hi, lo), e.int64(kKeyTile - 1)), e.int64(kKeyTile));
              // Σ_d xT[d] row(key)[d] for `count` keys from `first`, as vectors over the rows.
              auto lane_dots = [&](llvm::Value* xT, int64_t n, ir::Value rows_of,
                                   llvm::Value* first, int64_t count) {
                std::vector<llvm::Value*> rows, sums;
                for (int64_t i = 0; i < count; ++i) {
                  rows.push_back(
                      r.row(rows_of, bi, i == 0 ? first : b.CreateAdd(first, e.int64(i)), kv));
                  sums.push_back(e.stack(lanes, 1, "lane_dot"));
                  b.CreateStore(zero, sums.back());
                }
                e.for_range(0, n, [&](llvm::Value* d) {
                  llvm::Value* column = L.vload(L.vec_at(xT, d));
                  for (size_t i = 0; i < rows.size(); ++i) {
                    b.CreateStore(
                        L.fmuladd(column, L.splat(r.get(rows[i], d)), b.CreateLoad(lanes, sums[i])),
                        sums[i]);
                  }
                });
                std::vector<llvm::Value*> values;
                for (llvm::Value* sum : sums) values.push_back(b.CreateLoad(lanes, sum));
                return values;
              };
              auto visible_lanes = [&](llvm::Value* key) {
                return L.visible(scorer, valid, t_lanes, q_segment_lanes, bi, key);
              };
              // For each tile [s0, s1): body(s0, s1) after the tile's scores are in `tile`.
              auto for_tiles = [&](bool statistics,
                                   const std::function<void(llvm::Value*, llvm::Value*)>& body) {
                e.for_range(
                    e.int64(0), tiles,
                    [&](llvm::Value* index) {
                      llvm::Value* s0 = b.CreateAdd(lo, b.CreateMul(index, e.int64(kKeyTile)));
                      llvm::Value* s1 = L.smin(b.CreateAdd(s0, e.int64(kKeyTile)), hi);
                      if (statistics)
                        b.CreateStore(L.splat(llvm::ConstantFP::getInfinity(r.f, true)), tile_max);
                      auto score_keys = [&](llvm::Value* first, int64_t count) {
                        std::vector<llvm::Value*> dots =
                            lane_dots(qT, s.head_dim, x.k, first, count);
                        for (int64_t i = 0; i < count; ++i) {
                          llvm::Value* key = i == 0 ? first : b.CreateAdd(first, e.int64(i));
                          llvm::Value* visible = visible_lanes(key);
                          llvm::Value* score = b.CreateSelect(
                              visible,
                              b.CreateFMul(dots[static_cast<size_t>(i)], L.splat(r.c(scorer.scale))),
                              mask);
                          L.vstore(score, L.vec_at(tile, b.CreateSub(key, s0)));
                          if (statistics) {
                            b.CreateStore(L.vmax(score, b.CreateLoad(lanes, tile_max)), tile_max);
                            b.CreateStore(b.CreateSelect(visible, L.splat(r.c(1.0)),
                                                         b.CreateLoad(lanes, any_slot)),
                                          any_slot);
                          }
                        }
                      };
                      L.in_groups(s0, s1, kKeyGroup, score_keys);
                      body(s0, s1);
                    },
                    false);
              };
              // Pass A: the rows' max and sum.
              b.CreateStore(L.splat(llvm::ConstantFP::getInfinity(r.f, true)), max_slot);
              b.CreateStore(zero, sum_slot);
              b.CreateStore(zero, any_slot);
              for_tiles(true, [&](llvm::Value* s0, llvm::Value* s1) {
                llvm::Value* old_max = b.CreateLoad(lanes, max_slot);
                llvm::Value* new_max = L.vmax(b.CreateLoad(lanes, tile_max), old_max);
                b.CreateStore(new_max, max_slot);
                b.CreateStore(b.CreateFMul(b.CreateLoad(lanes, sum_slot),
                                           e.fast_exp_f32(b.CreateFSub(old_max, new_max))),
                              sum_slot);
                e.for_range(
                    s0, s1,
                    [&](llvm::Value* key) {
                      llvm::Value* p = e.fast_exp_f32(
                          b.CreateFSub(L.vload(L.vec_at(tile, b.CreateSub(key, s0))), new_max));
                      b.CreateStore(b.CreateFAdd(b.CreateLoad(lanes, sum_slot), p), sum_slot);
                    },
                    false);
              });
              llvm::Value* seen = b.CreateFCmpONE(b.CreateLoad(lanes, any_slot), zero);
              b.CreateStore(b.CreateLoad(lanes, any_slot), seen_slot);
              llvm::Value* row_max = b.CreateLoad(lanes, max_slot);
              llvm::Value* row_sum = b.CreateLoad(lanes, sum_slot);
              // Pass B.
              for_tiles(false, [&](llvm::Value* s0, llvm::Value* s1) {
                // p and ds per key of the tile (rows that see no key weigh nothing here).
                auto ds_keys = [&](llvm::Value* first, int64_t count) {
                  std::vector<llvm::Value*> dps = lane_dots(doutT, s.value_dim, x.v, first, count);
                  for (int64_t i = 0; i < count; ++i) {
                    llvm::Value* key = i == 0 ? first : b.CreateAdd(first, e.int64(i));
                    llvm::Value* at = L.vec_at(tile, b.CreateSub(key, s0));
                    llvm::Value* p =
                        b.CreateFDiv(e.fast_exp_f32(b.CreateFSub(L.vload(at), row_max)), row_sum);
                    p = b.CreateSelect(seen, p, zero);
                    L.vstore(p, at);
                    llvm::Value* ds = b.CreateFMul(
                        b.CreateFMul(p, b.CreateFSub(dps[static_cast<size_t>(i)], delta)),
                        L.splat(r.c(scorer.scale)));
                    L.vstore(ds, L.vec_at(ds_tile, b.CreateSub(key, s0)));
                  }
                };
                L.in_groups(s0, s1, kKeyGroup, ds_keys);
                // dq^T[d] += Σ_s ds[s] k[s, d], kValueGroup columns at a time.
                auto add_dq = [&](llvm::Value* first, int64_t count) {
                  std::vector<llvm::Value*> ds_, sums;
                  for (int64_t i = 0; i < count; ++i) {
                    ds_.push_back(i == 0 ? first : b.CreateAdd(first, e.int64(i)));
                    sums.push_back(e.stack(lanes, 1, "dqT_d"));
                    b.CreateStore(L.vload(L.vec_at(dqT, ds_.back())), sums.back());
                  }
                  e.for_range(
                      s0, s1,
                      [&](llvm::Value* key) {
                        llvm::Value* d_s = L.vload(L.vec_at(ds_tile, b.CreateSub(key, s0)));
                        llvm::Value* k_row = r.row(x.k, bi, key, kv);
                        for (size_t i = 0; i < sums.size(); ++i) {
                          b.CreateStore(L.fmuladd(d_s, L.splat(r.get(k_row, ds_[i])),
                                                b.CreateLoad(lanes, sums[i])),
                                        sums[i]);
                        }
                      },
                      false);
                  for (size_t i = 0; i < sums.size(); ++i)
                    L.vstore(b.CreateLoad(lanes, sums[i]), L.vec_at(dqT, ds_[i]));
                };
                L.in_groups(e.int64(0), e.int64(s.head_dim), kValueGroup, add_dq);
                // dk[s] += Σ_rows ds q_row and dv[s] += Σ_rows p dout_row.
                std::vector<llvm::Value*> q_rows, dout_rows;
                for (int64_t lane = 0; lane < kRowLanes; ++lane) {
                  llvm::Value* t = row_t(e.int64(lane));
                  q_rows.push_back(r.row(x.q, bi, t, h));
                  dout_rows.push_back(r.row(x.dout, bi, t, h));
                }
                e.for_range(
                    s0, s1,
                    [&](llvm::Value* key) {
                      llvm::Value* index = b.CreateSub(key, s0);
                      std::vector<llvm::Value*> ds_lanes, p_lanes;
                      for (int64_t lane = 0; lane < kRowLanes; ++lane) {
                        ds_lanes.push_back(r.get(ds_tile, L.lane_at(index, e.int64(lane))));
                        p_lanes.push_back(r.get(tile, L.lane_at(index, e.int64(lane))));
                      }
                      r.axpys(ds_lanes, q_rows, r.row(x.dk, bi, key, kv), s.head_dim);
                      r.axpys(p_lanes, dout_rows, r.row(x.dv, bi, key, kv), s.value_dim);
                    },
                    false);
              });
              // dq rows; rows that see no key go the one-row way.
              llvm::Value* rows_here =
                  L.smin(e.int64(kRowLanes), b.CreateSub(e.int64(s.queries), t0));
              e.for_range(
                  e.int64(0), rows_here,
                  [&](llvm::Value* lane) {
                    llvm::Value* t = b.CreateAdd(t0, lane);
                    llvm::Value* saw = b.CreateFCmpONE(r.get(seen_slot, lane), r.c(0.0));
                    e.if_then(saw, [&] {
                      llvm::Value* dq_row = r.row(x.dq, bi, t, h);
                      e.for_range(0, s.head_dim, [&](llvm::Value* d) {
                        r.set(dq_row, d, r.get(dqT, L.lane_at(d, lane)));
                      });
                    });
                    e.if_then(b.CreateNot(saw), [&] { one_row(h, t); });
                  },
                  false);
            },
            false);
      },
      false);
}

// One task per (batch, kv head), as the exact kernel, but one pass per query row: its scores and
// softmax (kept on the stack), then per key with weight p: dv[s] += p dout[t] and, for visible
// keys, ds = scale p (dout[t]·v[s] - dout[t]·out[t]) slope, dq[t] += ds k[s], dk[s] += ds q[t].
// dk and dv accumulate in their (f32) buffers, which only this task writes.
// The one-row gradient's shared pieces (its vector and scalar forms differ only in how rows are
// read and summed). softmax_row: the row's scores [lo, hi) become probabilities in place,
// exp(score - max) / sum.
void softmax_row(FloatRows& r, const ScoreRow& range, llvm::Value* scores) {
  llvm::Value* sum = exp_row(r, range, scores);
  r.e.for_range(range.lo, range.hi, [&](llvm::Value* key) {
    r.set(scores, key, r.b.CreateFDiv(r.get(scores, key), sum));
  });
}

// The score gradient of one pair: p (dp - Δ) times the scale, times the soft cap's slope at the
// raw score `raw[key]` when the scores are capped (raw non-null).
llvm::Value* score_gradient(FloatRows& r, const Scorer& scorer, llvm::Value* p, llvm::Value* dp,
                            llvm::Value* delta, llvm::Value* raw, llvm::Value* key) {
  llvm::Value* ds =
      r.b.CreateFMul(r.b.CreateFMul(p, r.b.CreateFSub(dp, delta)), r.c(scorer.scale));
  if (raw != nullptr) ds = r.b.CreateFMul(ds, slope_f32(r, scorer, r.get(raw, key)));
  return ds;
}

void emit_fast_attention_grad(Emitter& e, const ir::Op& op, const std::string& name) {
  AttentionShape s = attention_shape(e, op);
  std::span<const ir::Value> x = e.f().operands(op);
  ir::Value q = x[0], k = x[1], v = x[2], out = x[3], dout = x[4];
  ir::Value dq = e.f().result(op, 0), dk = e.f().result(op, 1), dv = e.f().result(op, 2);
  Scorer scorer(e, op, 5);
  int64_t tasks = s.batch * s.kv_heads;
  int64_t work = s.batch * s.heads * s.queries * s.keys * (3 * s.head_dim + 2 * s.value_dim);
  e.parallel_tasks(name, tasks, work, [&](llvm::Value* task) {
    FloatRows r(e);
    llvm::IRBuilder<>& b = e.b();
    Index pair = e.delinearize(task, {s.batch, s.kv_heads});
    llvm::Value *bi = pair[0], *kv = pair[1];
    llvm::Value* scores = e.stack(r.f, s.keys, "scores");
    llvm::Value* raw = scorer.softcap > 0 ? e.stack(r.f, s.keys, "raw") : nullptr;
    llvm::Value* dq_acc = e.stack(r.f, std::max<int64_t>(s.head_dim, 1), "dq");
    e.for_range(
        0, s.keys,
        [&](llvm::Value* key) {
          r.fill(r.row(dk, bi, key, kv), s.head_dim, r.c(0.0));
          r.fill(r.row(dv, bi, key, kv), s.value_dim, r.c(0.0));
        },
        false);
    // One query row (h, t) alone.
    auto one_row = [&](llvm::Value* h, llvm::Value* t) {
      int64_t lanes = attention_lanes(s);
      if (lanes > 0) {
        VectorRows vr(r, lanes);
        std::vector<llvm::Value*> q_chunks = vr.load(r.row(q, bi, t, h), s.head_dim);
        ScoreRow range = score_row(r, scorer, s, q, k, bi, t, h, kv, scores, raw,
                                   [&](llvm::Value* k_row) { return vr.dot(q_chunks, k_row); });
        softmax_row(r, range, scores);
        llvm::Value* dout_row = r.row(dout, bi, t, h);
        std::vector<llvm::Value*> dout_chunks = vr.load(dout_row, s.value_dim);
        llvm::Value* delta = vr.dot(dout_chunks, r.row(out, bi, t, h));
        std::vector<llvm::Value*> dq_slots = vr.accumulators(s.head_dim, "dq");
        e.if_then(range.any, [&] {
          e.for_range(
              range.lo, range.hi,
              [&](llvm::Value* key) {
                llvm::Value* p = r.get(scores, key);
                llvm::Value* dp = vr.dot(dout_chunks, r.row(v, bi, key, kv));
                vr.add_scaled(r.row(dv, bi, key, kv), p, dout_chunks);
                llvm::Value* ds = score_gradient(r, scorer, p, dp, delta, raw, key);
                vr.accumulate(dq_slots, ds, r.row(k, bi, key, kv));
                vr.add_scaled(r.row(dk, bi, key, kv), ds, q_chunks);
              },
              false);
        });
        // A row that sees no key has no score gradient: its weights only feed dv.
        e.if_then(b.CreateNot(range.any), [&] {
          e.for_range(
              range.lo, range.hi,
              [&](llvm::Value* key) {
                vr.add_scaled(r.row(dv, bi, key, kv), r.get(scores, key), dout_chunks);
              },
              false);
        });
        vr.store(r.row(dq, bi, t, h), vr.read(dq_slots));
        return;
      }
      ScoreRow range = score_row(r, scorer, s, q, k, bi, t, h, kv, scores, raw);
      softmax_row(r, range, scores);
      llvm::Value* q_row = r.row(q, bi, t, h);
      llvm::Value* dout_row = r.row(dout, bi, t, h);
      llvm::Value* delta = r.dot(dout_row, r.row(out, bi, t, h), s.value_dim);
      r.fill(dq_acc, s.head_dim, r.c(0.0));
      e.for_range(
          range.lo, range.hi,
          [&](llvm::Value* key) {
            llvm::Value* p = r.get(scores, key);
            r.axpy(p, dout_row, r.row(dv, bi, key, kv), s.value_dim);
            // A row that sees no key has no score gradient: its weights only feed dv.
            e.if_then(range.any, [&] {
              llvm::Value* dp = r.dot(dout_row, r.row(v, bi, key, kv), s.value_dim);
              llvm::Value* ds = score_gradient(r, scorer, p, dp, delta, raw, key);
              r.axpy(ds, r.row(k, bi, key, kv), dq_acc, s.head_dim);
              r.axpy(ds, q_row, r.row(dk, bi, key, kv), s.head_dim);
            });
          },
          false);
      llvm::Value* dq_row = r.row(dq, bi, t, h);
      e.for_range(0, s.head_dim, [&](llvm::Value* d) { r.set(dq_row, d, r.get(dq_acc, d)); });
    };
    if (scorer.softcap > 0) {
      e.for_range(
          0, s.group,
          [&](llvm::Value* g) {
            llvm::Value* h = b.CreateAdd(b.CreateMul(kv, e.int64(s.group)), g);
            e.for_range(
                0, s.queries, [&](llvm::Value* t) { one_row(h, t); }, false);
          },
          false);
      return;
    }
    row_block_grad(e, r, s, scorer, {q, k, v, out, dout, dq, dk, dv}, bi, kv, one_row);
  });
}

// A value's dims with dimension d divided among `group` pieces, behind a leading piece number:
// the layout of a staging buffer holding the group's pieces one after another.
Dims staged_dims(const Dims& dims, size_t d, int64_t group) {
  Dims out = {group};
  out.insert(out.end(), dims.begin(), dims.end());
  out[d + 1] /= group;
  return out;
}

}  // namespace

void emit_pack(Emitter& e, ir::OpIndex index, const ValueStorage& staging,
               const std::string& name) {
  const ir::Op& op = e.f().op(index);
  const ir::AttrSet& attrs = e.f().attrs(op);
  ir::Value x = e.f().operands(op)[0];
  DType dtype = e.dtype(x);
  bool splits = op.kind == OpKind::kReduceScatter || op.kind == OpKind::kAllToAll;
  if (!splits) {
    e.parallel_loop(
        name, e.dims(x), 1,
        [&](const Index& at) {
          e.store_at(staging, dtype, e.linearize(at, e.dims(x)), e.element(x, at));
        },
        true);
    return;
  }
  size_t d = static_cast<size_t>(
      attrs.integer(op.kind == OpKind::kAllToAll ? AttrKey::kSplitDimension : AttrKey::kDimension));
  int64_t group = attrs.integer(AttrKey::kGroupSize);
  Dims staged = staged_dims(e.dims(x), d, group);
  int64_t piece = staged[d + 1];
  e.parallel_loop(
      name, staged, 1,
      [&](const Index& at) {
        Index from(at.begin() + 1, at.end());
        from[d] = e.b().CreateAdd(from[d], e.b().CreateMul(at[0], e.int64(piece)));
        e.store_at(staging, dtype, e.linearize(at, staged), e.element(x, from));
      },
      true);
}

void emit_unpack(Emitter& e, ir::OpIndex index, const ValueStorage& staging,
                 const std::string& name) {
  const ir::Op& op = e.f().op(index);
  const ir::AttrSet& attrs = e.f().attrs(op);
  ir::Value v = e.f().result(op);
  size_t d = static_cast<size_t>(attrs.integer(AttrKey::kDimension));
  int64_t group = attrs.integer(AttrKey::kGroupSize);
  Dims staged = staged_dims(e.dims(v), d, group);
  int64_t piece = staged[d + 1];
  e.parallel_loop(
      name, e.dims(v), 1,
      [&](const Index& at) {
        Index from = {e.b().CreateUDiv(at[d], e.int64(piece))};
        from.insert(from.end(), at.begin(), at.end());
        from[d + 1] = e.b().CreateURem(at[d], e.int64(piece));
        llvm::Value* linear = e.linearize(at, e.dims(v));
        e.set_written(e.storage(v), linear);
        e.store(v, linear, e.load_at(staging, e.dtype(v), e.linearize(from, staged)));
      },
      true);
}

void emit_identity(Emitter& e, ir::OpIndex index, const std::string& name) {
  const ir::Op& op = e.f().op(index);
  emit_gather(e, e.f().result(op), e.f().operands(op)[0], name, [](const Index& at) { return at; });
}

void emit_copy(Emitter& e, llvm::Value* to, llvm::Value* from, int64_t bytes) {
  if (bytes <= 0) return;
  e.if_then(e.b().CreateICmpNE(to, from), [&] {
    e.b().CreateMemCpy(to, llvm::MaybeAlign(8), from, llvm::MaybeAlign(8), e.int64(bytes));
  });
}

void emit_op(Emitter& e, ir::OpIndex index, KernelCounts& counts) {
  const ir::Op& op = e.f().op(index);
  std::string name = fmt::format("precast_k{}_{}", index, ir::op_name(op.kind));
  switch (op.kind) {
    case OpKind::kReduceSum:
    case OpKind::kReduceMax:
    case OpKind::kReduceMin:
      if (fast_sum_applies(e, op)) return emit_fast_sum(e, op, name);
      if (fast_extremum_applies(e, op)) return emit_fast_extremum(e, op, name);
      return emit_reduce(e, op, name);
    case OpKind::kDotGeneral: return emit_dot(e, op, name, counts);
    case OpKind::kTranspose: return emit_transpose(e, op, name);
    case OpKind::kSlice: return emit_slice(e, op, name);
    case OpKind::kConcatenate: return emit_concatenate(e, op, name);
    case OpKind::kPad: return emit_pad(e, op, name);
    case OpKind::kTake: return emit_take(e, op, name);
    case OpKind::kScatterAdd: return emit_scatter_add(e, op, name);
    case OpKind::kTopK: return emit_top_k(e, op, name);
    case OpKind::kGroupedDot: return emit_grouped_dot(e, op, name);
    case OpKind::kGroupedDotWeightGrad: return emit_grouped_dot_weight_grad(e, op, name);
    case OpKind::kRngBits:
    case OpKind::kRngUniform:
    case OpKind::kRngNormal: return emit_rng(e, op, name);
    case OpKind::kAttention:
      if (fast_attention_applies(e, op, 3)) return emit_fast_attention(e, op, name);
      return emit_attention(e, op, name);
    case OpKind::kAttentionGrad:
      if (runtime_attention_grad_applies(e, op)) return emit_runtime_attention_grad(e, op);
      if (fast_attention_applies(e, op, 5)) return emit_fast_attention_grad(e, op, name);
      return emit_attention_grad(e, op, name);
    case OpKind::kAttentionStats:
      return emit_attention(e, op, name);
    default: break;
  }
  // A collective over a group of more than one device is the runtime's (CodeGen.cpp).
  if (ir::is_collective(op.kind)) return emit_identity(e, index, name);
  if (ir::is_elementwise(op.kind) || op.kind == OpKind::kBroadcastInDim ||
      op.kind == OpKind::kReshape || op.kind == OpKind::kIota || op.kind == OpKind::kConstant ||
      op.kind == OpKind::kShardSlice) {
    return emit_elementwise(e, op, name);
  }
  e.fail(fmt::format("no CPU kernel for {}", ir::op_name(op.kind)));
}

}  // namespace precast::backend::cpu
