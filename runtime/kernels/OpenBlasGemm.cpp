// The OpenBLAS GEMM: one cblas call per product of the batch.
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

template <typename T>
void run_batch_items(const PrecastGemmArgs& args, int64_t begin, int64_t end) {
  const T* a = static_cast<const T*>(args.a);
  const T* b = static_cast<const T*>(args.b);
  T* c = static_cast<T*>(args.c);
  for (int64_t item = begin; item < end; ++item) {
    call_cblas(a + item * args.stride_a, b + item * args.stride_b, c + item * args.stride_c, args);
  }
}

template <typename T>
void openblas_gemm(ThreadPool* pool, const PrecastGemmArgs& args) {
  // OpenBLAS runs products this small on the calling thread, so a batch of them is split over
  // the pool instead. Larger products are threaded by OpenBLAS, one after another.
  double multiply_adds =
      static_cast<double>(args.m) * static_cast<double>(args.n) * static_cast<double>(args.k);
  bool small = multiply_adds <= static_cast<double>(kSmallProductMultiplyAdds);
  if (pool != nullptr && args.batch > 1 && small) {
    pool->parallel_for(args.batch,
                       [&](int64_t begin, int64_t end) { run_batch_items<T>(args, begin, end); });
    return;
  }
  run_batch_items<T>(args, 0, args.batch);
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
