// The Eigen GEMM: Eigen's single-threaded product on tiles of C split over the pool.
//
// Eigen picks its vector width from the compiler's target macros, not at run time, so CMake may
// compile this file alone with -march=x86-64-v3 (runtime/kernels/CMakeLists.txt); Gemm.cpp then
// refuses "eigen" on CPUs without it. Eigen's namespace is renamed in this file so that the
// linker cannot merge its template instantiations, built here for another instruction set,
// with those of other Eigen users in the same program (ir/'s interpreter): every weak symbol
// of this object is in the renamed namespace (`nm -C EigenGemm.cpp.o | grep ' W '`); keep it
// so, i.e. use no standard-library templates here that are not inlined. The macro stays
// defined: Eigen's own macros expand to `Eigen::` in the code below.
#define Eigen PrecastGemmEigen
#define EIGEN_DONT_PARALLELIZE
#include <Eigen/Core>

#include "runtime/kernels/GemmBackends.h"

namespace precast::gemm_backends {
namespace {

// One product C = alpha * op(A) * op(B) + beta * C; a tile of a larger one shares its strides.
template <typename T>
struct Product {
  const T* a;
  const T* b;
  T* c;
  int64_t m, n, k;
  int64_t lda, ldb, ldc;
  bool trans_a, trans_b;
  T alpha, beta;
};

template <typename T>
using RowMajorMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ConstView = Eigen::Map<const RowMajorMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <typename T>
using View = Eigen::Map<RowMajorMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

template <typename T, typename Lhs, typename Rhs>
void accumulate(View<T> c, const Lhs& lhs, const Rhs& rhs, T alpha, T beta) {
  if (beta == T(0)) {  // overwrite: C is not read
    c.noalias() = alpha * lhs * rhs;
    return;
  }
  if (beta != T(1)) c *= beta;
  c.noalias() += alpha * lhs * rhs;
}

template <typename T>
void multiply(const Product<T>& p) {
  ConstView<T> a(p.a, p.trans_a ? p.k : p.m, p.trans_a ? p.m : p.k, Eigen::OuterStride<>(p.lda));
  ConstView<T> b(p.b, p.trans_b ? p.n : p.k, p.trans_b ? p.k : p.n, Eigen::OuterStride<>(p.ldb));
  View<T> c(p.c, p.m, p.n, Eigen::OuterStride<>(p.ldc));
  if (!p.trans_a && !p.trans_b) {
    accumulate(c, a, b, p.alpha, p.beta);
  } else if (!p.trans_a) {
    accumulate(c, a, b.transpose(), p.alpha, p.beta);
  } else if (!p.trans_b) {
    accumulate(c, a.transpose(), b, p.alpha, p.beta);
  } else {
    accumulate(c, a.transpose(), b.transpose(), p.alpha, p.beta);
  }
}

template <typename T>
Product<T> batch_item(const PrecastGemmArgs& args, int64_t item) {
  return {static_cast<const T*>(args.a) + item * args.stride_a,
          static_cast<const T*>(args.b) + item * args.stride_b,
          static_cast<T*>(args.c) + item * args.stride_c,
          args.m,
          args.n,
          args.k,
          args.lda,
          args.ldb,
          args.ldc,
          args.trans_a != 0,
          args.trans_b != 0,
          static_cast<T>(args.alpha),
          static_cast<T>(args.beta)};
}

// Rows [begin, end) of C: the matching rows of op(A), all of op(B).
template <typename T>
Product<T> row_tile(Product<T> p, int64_t begin, int64_t end) {
  p.a += p.trans_a ? begin : begin * p.lda;
  p.c += begin * p.ldc;
  p.m = end - begin;
  return p;
}

// Columns [begin, end) of C: all of op(A), the matching columns of op(B).
template <typename T>
Product<T> column_tile(Product<T> p, int64_t begin, int64_t end) {
  p.b += p.trans_b ? begin * p.ldb : begin;
  p.c += begin;
  p.n = end - begin;
  return p;
}

// Splits the work by shape and thread count only, so the tiles (and the bits) are the same on
// every call: whole batch entries when there are at least as many as threads, otherwise each
// product's longer side of C.
template <typename T>
void eigen_gemm(ThreadPool* pool, const PrecastGemmArgs& args) {
  int threads = pool != nullptr ? pool->num_threads() : 1;
  double multiply_adds = static_cast<double>(args.m) * static_cast<double>(args.n) *
                         static_cast<double>(args.k) * static_cast<double>(args.batch);
  if (threads == 1 || multiply_adds <= static_cast<double>(kSmallProductMultiplyAdds)) {
    for (int64_t item = 0; item < args.batch; ++item) multiply(batch_item<T>(args, item));
    return;
  }
  if (args.batch >= threads) {
    pool->parallel_for(args.batch, [&](int64_t begin, int64_t end) {
      for (int64_t item = begin; item < end; ++item) multiply(batch_item<T>(args, item));
    });
    return;
  }
  for (int64_t item = 0; item < args.batch; ++item) {
    Product<T> product = batch_item<T>(args, item);
    if (product.m >= product.n) {
      pool->parallel_for(
          product.m, [&](int64_t begin, int64_t end) { multiply(row_tile(product, begin, end)); });
    } else {
      pool->parallel_for(product.n, [&](int64_t begin, int64_t end) {
        multiply(column_tile(product, begin, end));
      });
    }
  }
}

}  // namespace

void eigen_f32(ThreadPool* pool, const PrecastGemmArgs& args) {
  eigen_gemm<float>(pool, args);
}

void eigen_f64(ThreadPool* pool, const PrecastGemmArgs& args) {
  eigen_gemm<double>(pool, args);
}

std::string_view eigen_isa() {
#if defined(PRECAST_EIGEN_GEMM_X86_64_V3)
  return "x86-64-v3";
#else
  return "default";
#endif
}

}  // namespace precast::gemm_backends
