// The runtime's f32 attention gradient (precast_attention_grad_f32) called directly: causal, causal
// with a window and unmasked, grouped-query heads, against a reference written here in double
// from the definition (softmax, dP = dout v^T, dS = P (dP - rowsum(P dP)), dq = scale dS k,
// dk = scale dS^T q, dv = P^T dout); the bits the same with 1 and 3 threads, and the same when
// the per-thread scratch the kernel keeps between calls still holds another problem's numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/kernels/Attention.h"
#include "runtime/kernels/RuntimeContext.h"
#include "runtime/kernels/ThreadPool.h"

namespace precast {
namespace {

struct Problem {
  int64_t batch = 2, queries = 200, keys = 200, heads = 4, kv_heads = 2, head_dim = 64,
          value_dim = 40;
  bool causal = true;
  int64_t window = 0;
  double scale = 0.125;
  std::vector<float> q, k, v, out, dout;
};

std::vector<float> filled(int64_t n, uint32_t seed) {
  std::vector<float> x(static_cast<size_t>(n));
  for (float& value : x) {
    seed = seed * 1664525u + 1013904223u;
    value = static_cast<float>(seed >> 8) / static_cast<float>(1u << 24) - 0.5f;
  }
  return x;
}

bool visible(const Problem& p, int64_t t, int64_t s) {
  if (p.causal && s > t) return false;
  if (p.window > 0 && (t - s >= p.window || s - t >= p.window)) return false;
  return true;
}

struct Grads {
  std::vector<double> dq, dk, dv;
};

// Softmax probabilities of query row (b, t, h) over the keys, in double.
std::vector<double> probabilities(const Problem& p, int64_t b, int64_t t, int64_t h) {
  int64_t kv = h / (p.heads / p.kv_heads);
  std::vector<double> prob(static_cast<size_t>(p.keys), 0.0);
  double max = -INFINITY;
  for (int64_t s = 0; s < p.keys; ++s) {
    if (!visible(p, t, s)) continue;
    double score = 0;
    for (int64_t d = 0; d < p.head_dim; ++d) {
      score += static_cast<double>(p.q[static_cast<size_t>(((b * p.queries + t) * p.heads + h) * p.head_dim + d)]) *
               p.k[static_cast<size_t>(((b * p.keys + s) * p.kv_heads + kv) * p.head_dim + d)];
    }
    prob[static_cast<size_t>(s)] = score * p.scale;
    max = std::max(max, score * p.scale);
  }
  double sum = 0;
  for (int64_t s = 0; s < p.keys; ++s) {
    double& x = prob[static_cast<size_t>(s)];
    x = visible(p, t, s) ? std::exp(x - max) : 0.0;
    sum += x;
  }
  for (double& x : prob) x /= sum;
  return prob;
}

// out = P v in double, rounded to float (the kernel's `out` operand).
void forward(Problem& p) {
  p.out.assign(static_cast<size_t>(p.batch * p.queries * p.heads * p.value_dim), 0.0f);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t t = 0; t < p.queries; ++t)
      for (int64_t h = 0; h < p.heads; ++h) {
        int64_t kv = h / (p.heads / p.kv_heads);
        std::vector<double> prob = probabilities(p, b, t, h);
        for (int64_t j = 0; j < p.value_dim; ++j) {
          double sum = 0;
          for (int64_t s = 0; s < p.keys; ++s)
            sum += prob[static_cast<size_t>(s)] *
                   p.v[static_cast<size_t>(((b * p.keys + s) * p.kv_heads + kv) * p.value_dim + j)];
          p.out[static_cast<size_t>(((b * p.queries + t) * p.heads + h) * p.value_dim + j)] =
              static_cast<float>(sum);
        }
      }
}

Grads reference(const Problem& p) {
  Grads g;
  g.dq.assign(p.q.size(), 0.0);
  g.dk.assign(p.k.size(), 0.0);
  g.dv.assign(p.v.size(), 0.0);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t t = 0; t < p.queries; ++t)
      for (int64_t h = 0; h < p.heads; ++h) {
        int64_t kv = h / (p.heads / p.kv_heads);
        std::vector<double> prob = probabilities(p, b, t, h);
        auto q_at = [&](int64_t d) { return static_cast<size_t>(((b * p.queries + t) * p.heads + h) * p.head_dim + d); };
        auto o_at = [&](int64_t j) { return static_cast<size_t>(((b * p.queries + t) * p.heads + h) * p.value_dim + j); };
        auto k_at = [&](int64_t s, int64_t d) { return static_cast<size_t>(((b * p.keys + s) * p.kv_heads + kv) * p.head_dim + d); };
        auto v_at = [&](int64_t s, int64_t j) { return static_cast<size_t>(((b * p.keys + s) * p.kv_heads + kv) * p.value_dim + j); };
        std::vector<double> dp(static_cast<size_t>(p.keys), 0.0);
        double delta = 0;
        for (int64_t s = 0; s < p.keys; ++s) {
          double x = 0;
          for (int64_t j = 0; j < p.value_dim; ++j) x += static_cast<double>(p.dout[o_at(j)]) * p.v[v_at(s, j)];
          dp[static_cast<size_t>(s)] = x;
          delta += prob[static_cast<size_t>(s)] * x;
        }
        for (int64_t s = 0; s < p.keys; ++s) {
          double pr = prob[static_cast<size_t>(s)];
          if (pr == 0) continue;
          double ds = pr * (dp[static_cast<size_t>(s)] - delta);
          for (int64_t d = 0; d < p.head_dim; ++d) {
            g.dq[q_at(d)] += p.scale * ds * p.k[k_at(s, d)];
            g.dk[k_at(s, d)] += p.scale * ds * p.q[q_at(d)];
          }
          for (int64_t j = 0; j < p.value_dim; ++j) g.dv[v_at(s, j)] += pr * p.dout[o_at(j)];
        }
      }
  return g;
}

struct Result {
  std::vector<float> dq, dk, dv;
};

Result run(const Problem& p, ThreadPool* pool) {
  Result r;
  r.dq.assign(p.q.size(), NAN);  // every element must be written
  r.dk.assign(p.k.size(), NAN);
  r.dv.assign(p.v.size(), NAN);
  PrecastAttentionArgs a{};
  a.batch = p.batch;
  a.queries = p.queries;
  a.heads = p.heads;
  a.head_dim = p.head_dim;
  a.keys = p.keys;
  a.kv_heads = p.kv_heads;
  a.value_dim = p.value_dim;
  a.causal = p.causal ? 1 : 0;
  a.window = p.window;
  a.scale = p.scale;
  a.q = p.q.data();
  a.k = p.k.data();
  a.v = p.v.data();
  a.out = p.out.data();
  a.dout = p.dout.data();
  a.dq = r.dq.data();
  a.dk = r.dk.data();
  a.dv = r.dv.data();
  RuntimeContext context;
  context.pool = pool;
  precast_attention_grad_f32(&context, &a);
  return r;
}

Problem make(bool causal, int64_t window, uint32_t seed) {
  Problem p;
  p.causal = causal;
  p.window = window;
  p.q = filled(p.batch * p.queries * p.heads * p.head_dim, seed);
  p.k = filled(p.batch * p.keys * p.kv_heads * p.head_dim, seed + 1);
  p.v = filled(p.batch * p.keys * p.kv_heads * p.value_dim, seed + 2);
  p.dout = filled(p.batch * p.queries * p.heads * p.value_dim, seed + 3);
  // Larger scores than the uniform inputs give, so the softmax is far from flat.
  for (float& x : p.q) x *= 6.0f;
  forward(p);
  return p;
}

// |got - want| <= 1e-5 max|want| for every element (f32 sums of at most 200 terms).
void expect_close(const std::vector<float>& got, const std::vector<double>& want, const char* what) {
  double largest = 0;
  for (double x : want) largest = std::max(largest, std::fabs(x));
  ASSERT_GT(largest, 0.0) << what;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << " element " << i;
    worst = std::max(worst, std::fabs(got[i] - want[i]) / largest);
  }
  EXPECT_LT(worst, 1e-5) << what;
}

void expect_same_bits(const Result& x, const Result& y, const char* what) {
  EXPECT_EQ(std::memcmp(x.dq.data(), y.dq.data(), x.dq.size() * sizeof(float)), 0) << what << " dq";
  EXPECT_EQ(std::memcmp(x.dk.data(), y.dk.data(), x.dk.size() * sizeof(float)), 0) << what << " dk";
  EXPECT_EQ(std::memcmp(x.dv.data(), y.dv.data(), x.dv.size() * sizeof(float)), 0) << what << " dv";
}

// 200 queries make three full blocks of 64 rows and one of 8; head_dim 64 runs the 64-column
// panels and value_dim 40 the 16-column vectors and the column tail; 4 query heads share 2 kv heads.
TEST(AttentionGradKernel, MatchesADoubleReferenceCausalWindowedAndUnmasked) {
  struct Case {
    const char* name;
    bool causal;
    int64_t window;
  };
  for (const Case& c : {Case{"causal", true, 0}, Case{"causal window 50", true, 50},
                        Case{"no mask", false, 0}}) {
    SCOPED_TRACE(c.name);
    Problem p = make(c.causal, c.window, 7);
    Grads want = reference(p);
    Result got = run(p, nullptr);
    expect_close(got.dq, want.dq, "dq");
    expect_close(got.dk, want.dk, "dk");
    expect_close(got.dv, want.dv, "dv");
    ThreadPool pool(3);
    expect_same_bits(got, run(p, &pool), "3 threads against 1");
  }
}

// The kernel keeps its scratch rows per thread between calls, and under a causal mask leaves
// parts of them unwritten (the keys a block's rows cannot see): a call after another problem's
// gives the bits of the first call.
TEST(AttentionGradKernel, ScratchLeftByAnotherCallChangesNoBit) {
  Problem p = make(true, 0, 11);
  Result first = run(p, nullptr);
  Problem other = make(false, 0, 99);
  for (float& x : other.q) x *= 100.0f;  // scores far larger than p's
  (void)run(other, nullptr);
  expect_same_bits(first, run(p, nullptr), "after an unmasked call");
}

}  // namespace
}  // namespace precast
