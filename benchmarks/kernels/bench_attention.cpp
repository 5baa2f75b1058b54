// The runtime's f32 causal attention gradient (precast_attention_grad_f32) on one thread at the
// per-rank shapes of the DDP benchmark's tiny and small configs (batch 4 rows per rank, head_dim
// 64, segment ids all 1, as training passes them). Prints a Markdown table: the fastest of --reps
// calls in thread CPU seconds, and GFLOP/s of causal attention's backward FLOPs (MaxText's count:
// the forward is 2 products of B H T^2 D / 2 multiply-adds each, 2 B H T^2 D FLOPs; the backward
// twice that).
// Usage: bench_attention [--reps R]
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/kernels/Attention.h"
#include "runtime/kernels/RuntimeContext.h"

namespace {

double thread_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

std::vector<float> filled(int64_t n, uint32_t seed) {
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) {
    seed = seed * 1664525u + 1013904223u;
    v = static_cast<float>(seed >> 8) / static_cast<float>(1u << 24) - 0.5f;
  }
  return x;
}

struct Shape {
  const char* name;
  int64_t batch, queries, heads, head_dim;
};

template <typename Fn>
double fastest(int reps, Fn&& fn) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    double start = thread_seconds();
    fn();
    best = std::min(best, thread_seconds() - start);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: bench_attention [--reps R]\n");
      return 2;
    }
  }
  const Shape shapes[] = {{"tiny", 4, 256, 4, 64}, {"small", 4, 512, 8, 64}};
  precast::RuntimeContext context;  // OpenBLAS, one thread
  std::printf("| shape (B x T x H x D, causal) | backward s | backward GFLOP/s |\n");
  std::printf("|---|---|---|\n");
  for (const Shape& s : shapes) {
    int64_t n = s.batch * s.queries * s.heads * s.head_dim;
    std::vector<float> q = filled(n, 1), k = filled(n, 2), v = filled(n, 3), dout = filled(n, 4);
    // out: any values do (the kernel reads it only for dout.out); a copy of v.
    std::vector<float> out = v, dq(out.size()), dk(out.size()), dv(out.size());
    std::vector<int32_t> segments(static_cast<size_t>(s.batch * s.queries), 1);
    PrecastAttentionArgs args{};
    args.batch = s.batch;
    args.queries = args.keys = s.queries;
    args.heads = args.kv_heads = s.heads;
    args.head_dim = args.value_dim = s.head_dim;
    args.causal = 1;
    args.scale = 0.125;
    args.q = q.data();
    args.k = k.data();
    args.v = v.data();
    args.out = out.data();
    args.dout = dout.data();
    args.dq = dq.data();
    args.dk = dk.data();
    args.dv = dv.data();
    args.q_segment = segments.data();
    args.kv_segment = segments.data();
    double backward = fastest(reps, [&] { precast_attention_grad_f32(&context, &args); });
    double flops = 2.0 * static_cast<double>(s.batch * s.heads * s.queries) *
                   static_cast<double>(s.queries * s.head_dim);
    std::printf("| %s (%lld x %lld x %lld x %lld) | %.5f | %.1f |\n", s.name,
                static_cast<long long>(s.batch), static_cast<long long>(s.queries),
                static_cast<long long>(s.heads), static_cast<long long>(s.head_dim), backward,
                2 * flops / backward * 1e-9);
  }
  return 0;
}
