// The GEMM registry, argument checks, the degenerate products, dispatch and the C ABI.
#include "runtime/kernels/Gemm.h"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/kernels/GemmBackends.h"

namespace precast {
namespace {

constexpr GemmImplInfo kGemmImpls[] = {
    {GemmImpl::kPacked, "packed",
     "f32: Precast's own product (packed panels, AVX-512 or AVX2 microkernel, row x column "
     "parts of C split over the runtime's threads); f64, or a CPU without AVX2: OpenBLAS"},
    {GemmImpl::kOpenBlas, "openblas",
     "OpenBLAS cblas_sgemm/dgemm on tiles of C split over the runtime's threads"},
    {GemmImpl::kEigen, "eigen", "Eigen's product, tiles of C split over the runtime's threads"},
};

bool cpu_runs_x86_64_v3() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  return __builtin_cpu_supports("x86-64-v3");
#elif defined(__x86_64__)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
#else
  return false;
#endif
}

std::string str(int64_t value) {
  return std::to_string(value);
}

Status check_dimension(const char* name, int64_t value) {
  if (value < 0) return internal_error(std::string("GEMM ") + name + " = " + str(value) + " < 0");
  if (value > INT_MAX) {
    return internal_error(std::string("GEMM ") + name + " = " + str(value) +
                          " exceeds the BLAS integer range (" + str(INT_MAX) + ")");
  }
  return Status::success();
}

// A row-major matrix stored with `columns` columns needs a row stride of at least max(1, columns).
Status check_leading_dimension(const char* name, int64_t value, int64_t columns, const char* what) {
  PRECAST_RETURN_IF_ERROR(check_dimension(name, value));
  int64_t minimum = columns > 1 ? columns : 1;
  if (value < minimum) {
    return internal_error(std::string("GEMM ") + name + " = " + str(value) +
                          " is less than max(1, columns of " + what + ") = " + str(minimum));
  }
  return Status::success();
}

template <typename T>
void scale_c(const PrecastGemmArgs& args) {
  T beta = static_cast<T>(args.beta);
  if (beta == T(1)) return;
  T* c = static_cast<T*>(args.c);
  for (int64_t item = 0; item < args.batch; ++item) {
    for (int64_t i = 0; i < args.m; ++i) {
      T* row = c + item * args.stride_c + i * args.ldc;
      for (int64_t j = 0; j < args.n; ++j) row[j] = beta == T(0) ? T(0) : beta * row[j];
    }
  }
}

using ImplFunction = void (*)(ThreadPool* pool, const PrecastGemmArgs& args);

template <typename T>
void run_gemm(const RuntimeContext& context, const PrecastGemmArgs& args, ImplFunction openblas,
              ImplFunction eigen, ImplFunction packed) {
  if (args.m == 0 || args.n == 0) return;
  // BLAS semantics: with nothing to add, C = beta * C and A, B are not read.
  if (args.k == 0 || static_cast<T>(args.alpha) == T(0)) {
    scale_c<T>(args);
    return;
  }
  switch (context.impl) {
    case GemmImpl::kOpenBlas:
      // Each tile runs on one thread; the pool splits the tiles.
      gemm_backends::pin_openblas_threads(1);
      openblas(context.pool, args);
      return;
    case GemmImpl::kEigen:
      eigen(context.pool, args);
      return;
    case GemmImpl::kPacked:
      if (packed != nullptr && gemm_backends::packed_f32_available()) {
        packed(context.pool, args);
        return;
      }
      gemm_backends::pin_openblas_threads(1);
      openblas(context.pool, args);
      return;
  }
}

// Generated code passing bad arguments is a compiler bug: say what, then abort.
void check_or_abort(const PrecastGemmArgs* args, const char* entry_point) {
  if (args == nullptr) {
    std::fprintf(stderr, "precast: internal error: %s called with a null PrecastGemmArgs\n",
                 entry_point);
    std::abort();
  }
  Status status = check_gemm_args(*args);
  if (!status.ok()) {
    std::fprintf(stderr, "precast: internal error: %s: %s\n", entry_point,
                 status.error().message().c_str());
    std::abort();
  }
}

}  // namespace

std::span<const GemmImplInfo> gemm_impls() {
  return kGemmImpls;
}

std::string_view eigen_gemm_isa() {
  return gemm_backends::eigen_isa();
}

Expected<GemmImpl> parse_gemm_impl(std::string_view name) {
  for (const GemmImplInfo& info : kGemmImpls) {
    if (info.name != name) continue;
    if (info.impl == GemmImpl::kEigen && eigen_gemm_isa() == "x86-64-v3" && !cpu_runs_x86_64_v3()) {
      return usage_error(
          "GEMM implementation 'eigen' was compiled for x86-64-v3 (AVX2, FMA), which this CPU "
          "lacks; use 'openblas', or rebuild with -DPRECAST_EIGEN_GEMM_ISA=default");
    }
    return info.impl;
  }
  std::string choices;
  for (const GemmImplInfo& info : kGemmImpls) {
    if (!choices.empty()) choices += ", ";
    choices += info.name;
  }
  return usage_error("unknown GEMM implementation '" + std::string(name) +
                     "'; choose one of: " + choices);
}

// The thread count no longer changes auto's choice (Gemm.h); it stays a parameter for a rule
// that may again depend on it.
Expected<GemmImpl> resolve_gemm_impl(std::string_view name, [[maybe_unused]] int num_threads) {
  if (name == "auto") return GemmImpl::kPacked;
  Expected<GemmImpl> parsed = parse_gemm_impl(name);
  if (!parsed.ok() && parsed.error().message().starts_with("unknown GEMM implementation")) {
    std::string choices = "auto";
    for (const GemmImplInfo& info : kGemmImpls) choices += std::string(", ") + std::string(info.name);
    return usage_error("unknown GEMM implementation '" + std::string(name) +
                       "'; choose one of: " + choices);
  }
  return parsed;
}

std::string_view gemm_impl_name(GemmImpl impl) {
  for (const GemmImplInfo& info : kGemmImpls) {
    if (info.impl == impl) return info.name;
  }
  return "unknown";
}

Status check_gemm_args(const PrecastGemmArgs& args) {
  PRECAST_RETURN_IF_ERROR(check_dimension("m", args.m));
  PRECAST_RETURN_IF_ERROR(check_dimension("n", args.n));
  PRECAST_RETURN_IF_ERROR(check_dimension("k", args.k));
  if (args.batch < 1) return internal_error("GEMM batch = " + str(args.batch) + " < 1");
  PRECAST_RETURN_IF_ERROR(
      check_leading_dimension("lda", args.lda, args.trans_a ? args.m : args.k,
                              args.trans_a ? "A (k x m, trans_a)" : "A (m x k)"));
  PRECAST_RETURN_IF_ERROR(
      check_leading_dimension("ldb", args.ldb, args.trans_b ? args.k : args.n,
                              args.trans_b ? "B (n x k, trans_b)" : "B (k x n)"));
  PRECAST_RETURN_IF_ERROR(check_leading_dimension("ldc", args.ldc, args.n, "C (m x n)"));
  bool writes_c = args.m > 0 && args.n > 0;
  if (args.batch > 1) {
    if (args.stride_a < 0) return internal_error("GEMM stride_a = " + str(args.stride_a) + " < 0");
    if (args.stride_b < 0) return internal_error("GEMM stride_b = " + str(args.stride_b) + " < 0");
    // The batch's C matrices must not overlap: they may be written at the same time.
    int64_t c_extent = writes_c ? (args.m - 1) * args.ldc + args.n : 0;
    if (args.stride_c < c_extent) {
      return internal_error("GEMM stride_c = " + str(args.stride_c) +
                            " makes the batch's C matrices overlap (each spans " + str(c_extent) +
                            " elements)");
    }
  }
  if (writes_c && args.c == nullptr) return internal_error("GEMM c is null");
  if (writes_c && args.k > 0 && args.alpha != 0.0) {
    if (args.a == nullptr) return internal_error("GEMM a is null");
    if (args.b == nullptr) return internal_error("GEMM b is null");
  }
  return Status::success();
}

void gemm_f32(const RuntimeContext& context, const PrecastGemmArgs& args) {
  run_gemm<float>(context, args, gemm_backends::openblas_f32, gemm_backends::eigen_f32,
                  gemm_backends::packed_f32);
}

void gemm_f64(const RuntimeContext& context, const PrecastGemmArgs& args) {
  run_gemm<double>(context, args, gemm_backends::openblas_f64, gemm_backends::eigen_f64, nullptr);
}

void pin_openblas_threads(const RuntimeContext& context) {
  gemm_backends::pin_openblas_threads(context.pool != nullptr ? context.pool->num_threads() : 1);
}

}  // namespace precast

namespace {

precast::RuntimeContext context_or_default(const void* context) {
  return context != nullptr ? *static_cast<const precast::RuntimeContext*>(context)
                            : precast::RuntimeContext{};
}

}  // namespace

extern "C" void precast_gemm_f32(const void* context, const PrecastGemmArgs* args) {
  precast::check_or_abort(args, "precast_gemm_f32");
  precast::gemm_f32(context_or_default(context), *args);
}

extern "C" void precast_gemm_f64(const void* context, const PrecastGemmArgs* args) {
  precast::check_or_abort(args, "precast_gemm_f64");
  precast::gemm_f64(context_or_default(context), *args);
}
