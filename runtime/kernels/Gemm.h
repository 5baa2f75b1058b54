// The runtime's matrix product: C = alpha * op(A) * op(B) + beta * C, row-major, f32 and f64,
// optionally batched, computed by one of several implementations picked at run time by name
// (the registry below; the default, "auto", picks "packed", Precast's own f32 product — see
// resolve_gemm_impl). Compiled kernels call
// it through precast_gemm_f32/f64 with the RuntimeContext their step function was given.
//
// Determinism: for a given implementation, shape and thread count, every call computes
// bitwise-identical results. The packed implementation sums every element of C in the same
// order whatever the thread count or the split (PackedGemm.cpp), so its bits depend on the shape
// and the CPU's instruction set only. The OpenBLAS implementation computes tiles of C fixed by the
// shape alone, each by a single-threaded OpenBLAS call, split over the pool (never the k
// reduction); the Eigen implementation is single-threaded per tile and tiles C over the pool by
// chunk_range, which depends only on the shape and the thread count. Results may differ between
// thread counts, implementations and CPU models.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "ir/support/Error.h"
#include "runtime/kernels/RuntimeContext.h"
#include "runtime/kernels/ThreadPool.h"

extern "C" {

// One (batched) row-major product, as generated code fills it in. Matrix i of the batch is
// A + i * stride_a, B + i * stride_b, C + i * stride_c (strides in elements).
//   op(A) is m x k: A is stored m x k (trans_a == 0) or k x m (trans_a != 0), row stride lda.
//   op(B) is k x n: B is stored k x n (trans_b == 0) or n x k (trans_b != 0), row stride ldb.
//   C is m x n, row stride ldc. When beta == 0, C is not read (NaNs in it do not propagate).
// Pointers are float* for precast_gemm_f32 and double* for precast_gemm_f64; alpha and beta are
// rounded to float for f32.
typedef struct PrecastGemmArgs {
  int64_t m, n, k;
  int64_t lda, ldb, ldc;
  int32_t trans_a, trans_b;
  double alpha, beta;
  int64_t batch;  // >= 1 matrices
  int64_t stride_a, stride_b, stride_c;
  const void* a;
  const void* b;
  void* c;
} PrecastGemmArgs;

// Run the product with `context` (a const precast::RuntimeContext*: its implementation and pool;
// null: OpenBLAS on the caller's thread). Invalid arguments are a bug in the generated code:
// they abort with a message naming the field.
void precast_gemm_f32(const void* context, const PrecastGemmArgs* args);
void precast_gemm_f64(const void* context, const PrecastGemmArgs* args);

}  // extern "C"

namespace precast {

// The registry: one row per implementation, the first is the default.
struct GemmImplInfo {
  GemmImpl impl;
  std::string_view name;         // what `--gemm` (or a config key) accepts
  std::string_view description;  // for --help
};
std::span<const GemmImplInfo> gemm_impls();

// "packed" | "openblas" | "eigen"; anything else is a usage error naming the value and the choices.
// Also an error when the implementation cannot run on this CPU (see eigen_gemm_isa()).
Expected<GemmImpl> parse_gemm_impl(std::string_view name);
std::string_view gemm_impl_name(GemmImpl impl);

// `--gemm`'s value for a run on `num_threads` threads: "auto" (the default) is "packed" on any
// thread count (since its products are cut into row x column parts of C, it is at least as fast
// as OpenBLAS on 2 threads too: the 110m config's step, benchmarks/README.md); any other name as
// parse_gemm_impl, whose unknown-name error then lists "auto" too. (f64, and a CPU without
// AVX2, run OpenBLAS under "packed".)
Expected<GemmImpl> resolve_gemm_impl(std::string_view name, int num_threads);

// The instruction set the Eigen implementation was compiled for: "x86-64-v3" when the build
// machine supported it (runtime/kernels/CMakeLists.txt, PRECAST_EIGEN_GEMM_ISA), "default" (the
// flags of the rest of the build) otherwise.
std::string_view eigen_gemm_isa();

// Checks shapes, leading dimensions, strides and pointers; the error names the field and value.
Status check_gemm_args(const PrecastGemmArgs& args);

// Run one (batched) product. Precondition: check_gemm_args(args) succeeded. For OpenBLAS the
// library's thread count is pinned to 1 before the call (a process-wide setting): the pool
// splits the work into tiles.
void gemm_f32(const RuntimeContext& context, const PrecastGemmArgs& args);
void gemm_f64(const RuntimeContext& context, const PrecastGemmArgs& args);

// Pins OpenBLAS's thread count (a process-wide setting of the library) to the context's pool
// (1 without a pool), for code calling OpenBLAS itself. precast_gemm_f32/f64 with OpenBLAS pin
// it to 1 when they run: OpenBLAS's own threads would spin between products and compete with
// the pool's for the cores, so the pool's threads run the tiles instead, and at most
// num_threads threads compute at once. Call at start-up, before compiled code runs.
void pin_openblas_threads(const RuntimeContext& context);

}  // namespace precast
