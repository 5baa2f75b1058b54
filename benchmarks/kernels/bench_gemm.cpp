// SGEMM N x N x N through precast_gemm_f32 (OpenBLAS and Eigen implementations) against plain
// cblas_sgemm called directly, with the same thread count. Prints a Markdown table: median
// GFLOP/s over the repetitions and the ratio to cblas_sgemm at that thread count.
// Usage: bench_gemm [--size N] [--reps R] [--threads 1,2,...]
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "runtime/kernels/Gemm.h"
#include "runtime/kernels/ThreadPool.h"

namespace {

struct Options {
  int64_t size = 2048;
  int reps = 5;
  std::vector<int> threads = {1, 2};
};

bool parse_options(int argc, char** argv, Options& options) {
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc) return false;
    std::string value = argv[++i];
    if (flag == "--size") {
      options.size = std::atoll(value.c_str());
    } else if (flag == "--reps") {
      options.reps = std::atoi(value.c_str());
    } else if (flag == "--threads") {
      options.threads.clear();
      for (size_t start = 0; start < value.size();) {
        size_t comma = value.find(',', start);
        if (comma == std::string::npos) comma = value.size();
        options.threads.push_back(std::atoi(value.substr(start, comma - start).c_str()));
        start = comma + 1;
      }
    } else {
      return false;
    }
  }
  return options.size > 0 && options.reps > 0 && !options.threads.empty();
}

template <typename Fn>
double seconds_of(Fn&& fn) {
  auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

// OpenBLAS's idle threads keep polling for a while after a call (OPENBLAS_THREAD_TIMEOUT,
// ~2^28 cycles by default); let them go to sleep before timing something else.
void let_openblas_threads_sleep() {
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!parse_options(argc, argv, options)) {
    std::fprintf(stderr, "usage: bench_gemm [--size N] [--reps R] [--threads 1,2,...]\n");
    return 2;
  }
  const int64_t n = options.size;
  std::vector<float> a(n * n), b(n * n), c(n * n);
  for (int64_t i = 0; i < n * n; ++i) {
    a[i] = static_cast<float>((i * 7) % 13) / 13.0f - 0.5f;
    b[i] = static_cast<float>((i * 5) % 11) / 11.0f - 0.5f;
  }
  PrecastGemmArgs args{};
  args.m = args.n = args.k = n;
  args.lda = args.ldb = args.ldc = n;
  args.alpha = 1.0;
  args.beta = 0.0;
  args.batch = 1;
  args.a = a.data();
  args.b = b.data();
  args.c = c.data();
  const double flops =
      2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  // Plain cblas_sgemm with OpenBLAS's own threads, as many as the pool has: precast's entry
  // point pins OpenBLAS to one thread per tile while it runs, so pin it back before each call.
  int cblas_threads = 1;
  auto cblas = [&] {
    openblas_set_num_threads(cblas_threads);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n), static_cast<int>(n),
                static_cast<int>(n), 1.0f, a.data(), static_cast<int>(n), b.data(),
                static_cast<int>(n), 0.0f, c.data(), static_cast<int>(n));
  };
  precast::RuntimeContext context;
  auto precast = [&] { precast_gemm_f32(&context, &args); };

  std::printf("%s; Eigen GEMM ISA %s; %d cores available\n", openblas_get_config(),
              std::string(precast::eigen_gemm_isa()).c_str(), precast::default_thread_count());
  std::printf("SGEMM %lld^3, row-major, no transposes, beta 0; median of %d products\n\n",
              static_cast<long long>(n), options.reps);
  std::printf("| impl | threads | GFLOP/s | ratio vs cblas |\n|---|---|---|---|\n");
  for (int threads : options.threads) {
    precast::ThreadPool pool(threads);
    cblas_threads = threads;
    // cblas_sgemm and precast openblas alternate, so drift on a shared machine hits both alike.
    std::vector<double> cblas_gflops, openblas_gflops, eigen_gflops;
    context = {precast::GemmImpl::kOpenBlas, &pool, {}};
    precast::pin_openblas_threads(context);
    cblas();
    precast();
    for (int rep = 0; rep < options.reps; ++rep) {
      cblas_gflops.push_back(flops / seconds_of(cblas) / 1e9);
      openblas_gflops.push_back(flops / seconds_of(precast) / 1e9);
    }
    let_openblas_threads_sleep();
    context = {precast::GemmImpl::kEigen, &pool, {}};
    precast();
    for (int rep = 0; rep < options.reps; ++rep) {
      eigen_gflops.push_back(flops / seconds_of(precast) / 1e9);
    }
    double reference = median(cblas_gflops);
    auto row = [&](const char* impl, double gflops) {
      std::printf("| %s | %d | %.1f | %.2f |\n", impl, threads, gflops, gflops / reference);
    };
    row("cblas_sgemm (direct)", reference);
    row("precast openblas", median(openblas_gflops));
    row("precast eigen", median(eigen_gflops));
    precast::pin_openblas_threads({});
    let_openblas_threads_sleep();
  }
  return 0;
}
