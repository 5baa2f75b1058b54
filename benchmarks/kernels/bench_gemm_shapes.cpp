// The GEMMs of one data-parallel rank's llama2-style training step (the DDP benchmark's tiny and
// small configs at 4 rows per rank) through precast_gemm_f32's implementations, on one thread.
// Per product: the forward x W (nn), the backward's dY Wᵀ (nt) and xᵀ dY (tn), as the step calls
// them. Times are the calling thread's CPU seconds (a shared machine's load inflates them far
// less than wall time), the fastest of --reps runs of each product, the implementations
// alternating. Prints a Markdown table per config: GFLOP/s per product and the step's total.
// With --threads T > 1 the products run on a pool of T threads and the times are the process's
// CPU seconds (every thread's, spinning included); --only keeps the products whose name contains
// the given text.
// Usage: bench_gemm_shapes [--reps R] [--config tiny|small|both] [--impls openblas,packed,...]
//                          [--threads T] [--only TEXT]
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "runtime/kernels/Gemm.h"

namespace {

struct Product {
  std::string name;
  int64_t m, n, k;
  bool trans_a, trans_b;
  int64_t count;  // how many times one step calls it
};

struct Config {
  std::string name;
  int64_t rows, emb, heads_dim, mlp, vocab, layers;
};

// The weight contractions of a step: per layer q, k, v, o (emb x heads_dim), gate, up, down
// (emb x mlp); the logits once. Each forward x W [rows x in] [in x out] has the backward
// dx = dY Wᵀ (nt) and dW = xᵀ dY (tn).
std::vector<Product> step_products(const Config& c) {
  struct Weight {
    std::string name;
    int64_t in, out, count;
  };
  const Weight weights[] = {
      {"qkv", c.emb, c.heads_dim, 3 * c.layers},
      {"o", c.heads_dim, c.emb, c.layers},
      {"gate/up", c.emb, c.mlp, 2 * c.layers},
      {"down", c.mlp, c.emb, c.layers},
      {"logits", c.emb, c.vocab, 1},
  };
  std::vector<Product> products;
  for (const Weight& w : weights) {
    products.push_back({w.name + " x W", c.rows, w.out, w.in, false, false, w.count});
    products.push_back({w.name + " dY Wt", c.rows, w.in, w.out, false, true, w.count});
    products.push_back({w.name + " xt dY", w.in, w.out, c.rows, true, false, w.count});
  }
  return products;
}

double cpu_seconds(bool whole_process) {
  timespec now{};
  clock_gettime(whole_process ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

struct Operands {
  std::vector<float> a, b, c;
  PrecastGemmArgs args{};
};

Operands make_operands(const Product& p) {
  Operands o;
  o.a.resize(static_cast<size_t>(p.m * p.k));
  o.b.resize(static_cast<size_t>(p.k * p.n));
  o.c.assign(static_cast<size_t>(p.m * p.n), 0.0f);
  uint32_t state = 12345;
  for (float& x : o.a)
    x = static_cast<float>((state = state * 1664525u + 1013904223u) >> 8) * 1e-7f;
  for (float& x : o.b)
    x = static_cast<float>((state = state * 1664525u + 1013904223u) >> 8) * 1e-7f;
  PrecastGemmArgs& args = o.args;
  args.m = p.m;
  args.n = p.n;
  args.k = p.k;
  args.lda = p.trans_a ? p.m : p.k;
  args.ldb = p.trans_b ? p.k : p.n;
  args.ldc = p.n;
  args.trans_a = p.trans_a;
  args.trans_b = p.trans_b;
  args.alpha = 1.0;
  args.beta = 0.0;
  args.batch = 1;
  args.a = o.a.data();
  args.b = o.b.data();
  args.c = o.c.data();
  return o;
}

int usage() {
  std::fprintf(stderr,
               "usage: bench_gemm_shapes [--reps R] [--config tiny|small|both] "
               "[--impls openblas,packed,...] [--threads T] [--only TEXT]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  std::string which = "both";
  int threads = 1;
  std::string only;
  std::vector<precast::GemmImpl> impls;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc) return usage();
    std::string value = argv[++i];
    if (flag == "--reps") {
      reps = std::atoi(value.c_str());
    } else if (flag == "--threads") {
      threads = std::atoi(value.c_str());
    } else if (flag == "--only") {
      only = value;
    } else if (flag == "--config") {
      which = value;
    } else if (flag == "--impls") {
      for (size_t start = 0; start <= value.size();) {
        size_t comma = std::min(value.find(',', start), value.size());
        auto parsed = precast::parse_gemm_impl(value.substr(start, comma - start));
        if (!parsed.ok()) {
          std::fprintf(stderr, "%s\n", parsed.error().message().c_str());
          return 2;
        }
        impls.push_back(*parsed);
        start = comma + 1;
      }
    } else {
      return usage();
    }
  }
  if (reps < 1 || threads < 1 || (which != "tiny" && which != "small" && which != "both"))
    return usage();
  if (impls.empty()) impls = {precast::GemmImpl::kOpenBlas, precast::GemmImpl::kPacked};
  std::unique_ptr<precast::ThreadPool> pool;
  if (threads > 1) pool = std::make_unique<precast::ThreadPool>(threads);

  const Config configs[] = {{"tiny", 4 * 256, 256, 256, 768, 1024, 4},
                            {"small", 4 * 512, 512, 512, 1536, 8192, 8}};
  for (const Config& config : configs) {
    if (which != "both" && which != config.name) continue;
    std::printf(
        "\n%s: %lld rows, emb %lld, heads x head_dim %lld, mlp %lld, vocab %lld, %lld "
        "layers; %d thread(s), GFLOP/s of %s CPU time (fastest of %d)\n\n",
        config.name.c_str(), static_cast<long long>(config.rows),
        static_cast<long long>(config.emb), static_cast<long long>(config.heads_dim),
        static_cast<long long>(config.mlp), static_cast<long long>(config.vocab),
        static_cast<long long>(config.layers), threads, threads > 1 ? "process" : "thread", reps);
    std::printf("| product | m x n x k | calls/step |");
    for (precast::GemmImpl impl : impls) {
      std::printf(" %s |", std::string(precast::gemm_impl_name(impl)).c_str());
    }
    std::printf("\n|---|---|---|");
    for (size_t i = 0; i < impls.size(); ++i) std::printf("---|");
    std::printf("\n");
    std::vector<double> step_seconds(impls.size(), 0.0);
    double step_flops = 0;
    for (const Product& product : step_products(config)) {
      if (product.name.find(only) == std::string::npos) continue;
      Operands o = make_operands(product);
      double flops =
          2.0 * static_cast<double>(product.m * product.n) * static_cast<double>(product.k);
      std::vector<double> best(impls.size(), 1e30);
      for (int rep = 0; rep <= reps; ++rep) {  // rep 0 warms up
        for (size_t i = 0; i < impls.size(); ++i) {
          precast::RuntimeContext context{impls[i], pool.get(), {}};
          double start = cpu_seconds(threads > 1);
          precast_gemm_f32(&context, &o.args);
          double seconds = cpu_seconds(threads > 1) - start;
          if (rep > 0) best[i] = std::min(best[i], seconds);
        }
      }
      std::printf("| %s | %lld x %lld x %lld | %lld |", product.name.c_str(),
                  static_cast<long long>(product.m), static_cast<long long>(product.n),
                  static_cast<long long>(product.k), static_cast<long long>(product.count));
      for (size_t i = 0; i < impls.size(); ++i) {
        std::printf(" %.1f |", flops / best[i] / 1e9);
        step_seconds[i] += best[i] * static_cast<double>(product.count);
      }
      std::printf("\n");
      step_flops += flops * static_cast<double>(product.count);
    }
    std::printf("| **step total** (s, GFLOP/s) | %.2f GFLOP | |", step_flops / 1e9);
    for (size_t i = 0; i < impls.size(); ++i) {
      std::printf(" %.4f s, %.1f |", step_seconds[i], step_flops / step_seconds[i] / 1e9);
    }
    std::printf("\n");
  }
  return 0;
}
