// The GEMM implementations behind Gemm.h's registry; only Gemm.cpp calls them.
// Preconditions for all: check_gemm_args(args) succeeded, m > 0, n > 0, k > 0, alpha != 0 (the
// degenerate products, C = beta * C, are handled in Gemm.cpp the same way for every
// implementation). `pool` may be null (one thread).
#pragma once

#include <string_view>

#include "runtime/kernels/Gemm.h"

namespace precast::gemm_backends {

// OpenBLAS's cblas_?gemm on one thread (the caller pins OpenBLAS to 1) per tile of C; the
// tiles, fixed by the shape, and the products of a batch are split over `pool`.
void openblas_f32(ThreadPool* pool, const PrecastGemmArgs& args);
void openblas_f64(ThreadPool* pool, const PrecastGemmArgs& args);
// Sets OpenBLAS's (process-wide) thread count, when it differs.
void pin_openblas_threads(int num_threads);

// Eigen's single-threaded product on tiles of C (or whole batch entries) split over `pool`.
void eigen_f32(ThreadPool* pool, const PrecastGemmArgs& args);
void eigen_f64(ThreadPool* pool, const PrecastGemmArgs& args);
// "x86-64-v3" or "baseline": what EigenGemm.cpp was compiled for.
std::string_view eigen_isa();

// Precast's own f32 product on packed panels with an AVX-512 or AVX2 + FMA microkernel
// (PackedGemm.cpp); the same bits for every thread count. Precondition: packed_f32_available().
void packed_f32(ThreadPool* pool, const PrecastGemmArgs& args);
// Whether this CPU runs one of its microkernels; "avx512", "avx2" or "none": which one.
bool packed_f32_available();
std::string_view packed_isa();

// How packed_f32 cuts one product of `args` over `threads` threads: row_parts x col_parts
// independent parts of C (each packs its own B block), chosen from the shape so that the slowest
// part has the least work. 1 x 1 on one thread. Precondition: packed_f32_available().
struct PackedSplit {
  int64_t row_parts, col_parts;
};
PackedSplit packed_split(const PrecastGemmArgs& args, int threads);

// At most this many multiply-adds per product, the Eigen implementation does not split a
// product over the pool.
inline constexpr int64_t kSmallProductMultiplyAdds = int64_t{64} * 64 * 64;

}  // namespace precast::gemm_backends
