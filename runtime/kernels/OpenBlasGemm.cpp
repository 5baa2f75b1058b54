// The OpenBLAS GEMM: single-threaded cblas calls on tiles of C, split over the pool.
#include <cblas.h>

#include "runtime/kernels/GemmBackends.h"

namespace precast::gemm_backends {
namespace {

CBLAS_TRANSPOSE transpose(int32_t flag) {
  return flag != 0 ? CblasTrans : CblasNoTrans;
}

void call_cblas(const float* a, const float* b, float* c, const PrecastGemmArgs& args) {
  cblas_sgemm(CblasRowMajor, transpose(args.trans_a), transpose(args.trans_b),
              static_cast<int>(args.m), static_cast<int>(args.n), static_cast<int>(args.k),
              static_cast<float>(args.alpha), a, static_cast<int>(args.lda), b,
              static_cast<int>(args.ldb), static_cast<float>(args.beta), c,
              static_cast<int>(args.ldc));
}

void call_cblas(const double* a, const double* b, double* c, const PrecastGemmArgs& args) {
  cblas_dgemm(CblasRowMajor, transpose(args.trans_a), transpose(args.trans_b),
              static_cast<int>(args.m), static_cast<int>(args.n), static_cast<int>(args.k),
              args.alpha, a, static_cast<int>(args.lda), b, static_cast<int>(args.ldb), args.beta,
              c, static_cast<int>(args.ldc));
}

// Tiles of C per product, fixed by the shape alone: the larger of m and n is cut into `tiles`
// contiguous ranges (powers of two up to kMaxTiles, each of at least kMinTileMultiplyAdds
// multiply-adds and 16 rows or columns). Every thread count computes the same tiles with the
// same single-threaded OpenBLAS calls, so the results never depend on it.
constexpr int64_t kMaxTiles = 8;
constexpr double kMinTileMultiplyAdds = double(1 << 21);

int64_t tile_count(const PrecastGemmArgs& args) {
  double multiply_adds =
      static_cast<double>(args.m) * static_cast<double>(args.n) * static_cast<double>(args.k);
  int64_t longest = args.m >= args.n ? args.m : args.n;
  int64_t tiles = 1;
  while (tiles < kMaxTiles &&
         multiply_adds / static_cast<double>(2 * tiles) >= kMinTileMultiplyAdds &&
         longest / (2 * tiles) >= 16) {
    tiles *= 2;
  }
  return tiles;
}

// Tile `tile` of `tiles` of batch item `item`: rows (m >= n) or columns of C.
template <typename T>
void run_tile(const PrecastGemmArgs& args, int64_t item, int64_t tile, int64_t tiles) {
  const T* a = static_cast<const T*>(args.a) + item * args.stride_a;
  const T* b = static_cast<const T*>(args.b) + item * args.stride_b;
  T* c = static_cast<T*>(args.c) + item * args.stride_c;
  PrecastGemmArgs part = args;
  if (args.m >= args.n) {
    int64_t lo = args.m * tile / tiles, hi = args.m * (tile + 1) / tiles;
    part.m = hi - lo;
    a += args.trans_a ? lo : lo * args.lda;
    c += lo * args.ldc;
  } else {
    int64_t lo = args.n * tile / tiles, hi = args.n * (tile + 1) / tiles;
    part.n = hi - lo;
    b += args.trans_b ? lo * args.ldb : lo;
    c += lo;
  }
  if (part.m > 0 && part.n > 0) call_cblas(a, b, c, part);
}

template <typename T>
void openblas_gemm(ThreadPool* pool, const PrecastGemmArgs& args) {
  // OpenBLAS runs on the calling thread (the caller pins its thread count to 1): its own
  // threads would spin between products and compete with the pool's for the cores. The pool
  // runs the tiles of every product of the batch instead.
  int64_t tiles = tile_count(args);
  auto run = [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task)
      run_tile<T>(args, task / tiles, task % tiles, tiles);
  };
  int64_t tasks = args.batch * tiles;
  if (pool != nullptr && tasks > 1) {
    pool->parallel_for(tasks, run);
    return;
  }
  run(0, tasks);
}

}  // namespace

void openblas_f32(ThreadPool* pool, const PrecastGemmArgs& args) {
  openblas_gemm<float>(pool, args);
}

void openblas_f64(ThreadPool* pool, const PrecastGemmArgs& args) {
  openblas_gemm<double>(pool, args);
}

void pin_openblas_threads(int num_threads) {
  if (openblas_get_num_threads() != num_threads) openblas_set_num_threads(num_threads);
}

}  // namespace precast::gemm_backends
