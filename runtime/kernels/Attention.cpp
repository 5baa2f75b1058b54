// Query-block attention on the runtime's GEMM: per block of query rows, the scores against the
// keys the block may see (keys past a causal or window edge are never multiplied), the softmax
// per row in vector code, then the products with v (forward) or the five gradient products.
#include "runtime/kernels/Attention.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "runtime/kernels/Gemm.h"

namespace precast {
namespace {

// ---- Row helpers (vector code: compiled for AVX-512, AVX2 + FMA and the baseline, picked at
// load time; sums run in kLanes fixed partial sums, so each build's order is fixed) ----------

constexpr int kLanes = 16;

#define PRECAST_ROW_CLONES [[gnu::target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")]]

// e^x in float, as the compiler's fast_exp_f32 (ElementOps.cpp): n = round(x / ln 2) through the
// 1.5 * 2^23 shifter, e^r by Taylor to degree 7, times 2^n; below log(FLT_MIN) it is 0.
[[gnu::always_inline]] inline float exp_f32(float x) {
  constexpr float kLow = -87.33654475f;
  constexpr float kHigh = 88.72283935f;
  constexpr float kShifter = 12582912.0f;
  bool low = x < kLow;
  float xc = low ? kLow : x;
  xc = xc > kHigh ? kHigh : xc;
  float t = std::fma(xc, 1.44269504088896341f, kShifter);
  float n = t - kShifter;
  float r = std::fma(-n, 0.693145751953125f, xc);
  r = std::fma(-n, 1.428606765330187045e-06f, r);
  float p = 1.0f / 5040;
  p = std::fma(p, r, 1.0f / 720);
  p = std::fma(p, r, 1.0f / 120);
  p = std::fma(p, r, 1.0f / 24);
  p = std::fma(p, r, 1.0f / 6);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  int32_t ni = std::bit_cast<int32_t>(t) - 0x4B400000;
  float scale = std::bit_cast<float>((ni + 127) << 23);
  return low ? 0.0f : p * scale;
}

// The largest of z[a, b) (b > a).
PRECAST_ROW_CLONES float row_max(const float* z, int64_t a, int64_t b) {
  float lanes[kLanes];
  for (int i = 0; i < kLanes; ++i) lanes[i] = z[a];
  int64_t j = a;
  for (; j + kLanes <= b; j += kLanes) {
    for (int i = 0; i < kLanes; ++i) lanes[i] = z[j + i] > lanes[i] ? z[j + i] : lanes[i];
  }
  float m = lanes[0];
  for (int i = 1; i < kLanes; ++i) m = lanes[i] > m ? lanes[i] : m;
  for (; j < b; ++j) m = z[j] > m ? z[j] : m;
  return m;
}

// z[j] = exp(z[j] - max) on [a, b), 0 on the rest of [0, n); returns the sum over [a, b).
PRECAST_ROW_CLONES float exp_row(float* z, int64_t n, int64_t a, int64_t b, float max) {
  for (int64_t j = 0; j < a; ++j) z[j] = 0.0f;
  for (int64_t j = b; j < n; ++j) z[j] = 0.0f;
  float lanes[kLanes] = {};
  int64_t j = a;
  for (; j + kLanes <= b; j += kLanes) {
    for (int i = 0; i < kLanes; ++i) {
      float e = exp_f32(z[j + i] - max);
      z[j + i] = e;
      lanes[i] += e;
    }
  }
  float sum = 0.0f;
  for (int i = 0; i < kLanes; ++i) sum += lanes[i];
  for (; j < b; ++j) {
    float e = exp_f32(z[j] - max);
    z[j] = e;
    sum += e;
  }
  return sum;
}

// z[j] /= sum on [a, b).
PRECAST_ROW_CLONES void divide_row(float* z, int64_t a, int64_t b, float sum) {
  for (int64_t j = a; j < b; ++j) z[j] = z[j] / sum;
}

// Σ x[i] y[i] over [0, n).
PRECAST_ROW_CLONES float dot_row(const float* x, const float* y, int64_t n) {
  float lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int i = 0; i < kLanes; ++i) lanes[i] = std::fma(x[j + i], y[j + i], lanes[i]);
  }
  float sum = 0.0f;
  for (int i = 0; i < kLanes; ++i) sum += lanes[i];
  for (; j < n; ++j) sum = std::fma(x[j], y[j], sum);
  return sum;
}

// z[j] = -inf where kv_segment[j] != segment, on [a, b).
PRECAST_ROW_CLONES void mask_segments(float* z, const int32_t* kv_segment, int32_t segment,
                                      int64_t a, int64_t b) {
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  for (int64_t j = a; j < b; ++j) z[j] = kv_segment[j] == segment ? z[j] : kMasked;
}

// ds[j] = p[j] (dp[j] - delta) over [0, n), in place of dp.
PRECAST_ROW_CLONES void score_gradient_row(const float* p, float* dp, int64_t n, float delta) {
  for (int64_t j = 0; j < n; ++j) dp[j] = p[j] * (dp[j] - delta);
}

#undef PRECAST_ROW_CLONES

// ---- Shapes and products ---------------------------------------------------------------------

struct View {
  const PrecastAttentionArgs& a;
  int64_t group;
  int64_t ld_q() const { return a.heads * a.head_dim; }
  int64_t ld_k() const { return a.kv_heads * a.head_dim; }
  int64_t ld_v() const { return a.kv_heads * a.value_dim; }
  int64_t ld_out() const { return a.heads * a.value_dim; }
  int64_t q_at(int64_t b, int64_t t, int64_t h) const { return (b * a.queries + t) * ld_q() + h * a.head_dim; }
  int64_t k_at(int64_t b, int64_t s, int64_t kv) const { return (b * a.keys + s) * ld_k() + kv * a.head_dim; }
  int64_t v_at(int64_t b, int64_t s, int64_t kv) const { return (b * a.keys + s) * ld_v() + kv * a.value_dim; }
  int64_t out_at(int64_t b, int64_t t, int64_t h) const {
    return (b * a.queries + t) * ld_out() + h * a.value_dim;
  }
  // [lo, hi): the keys query row t sees.
  int64_t first_key(int64_t t) const { return a.window > 0 ? std::max<int64_t>(0, t - a.window + 1) : 0; }
  int64_t end_key(int64_t t) const {
    int64_t hi = a.keys;
    if (a.causal != 0) hi = std::min(hi, t + 1);
    if (a.window > 0) hi = std::min(hi, t + a.window);
    return hi;
  }
};

// C = alpha op(A) op(B) + beta C on the calling thread, with the context's implementation.
void product(const RuntimeContext& one_thread, int64_t m, int64_t n, int64_t k, const float* a,
             int64_t lda, bool trans_a, const float* b, int64_t ldb, bool trans_b, float* c,
             int64_t ldc, double alpha, double beta) {
  PrecastGemmArgs g{};
  g.m = m;
  g.n = n;
  g.k = k;
  g.lda = lda;
  g.ldb = ldb;
  g.ldc = ldc;
  g.trans_a = trans_a ? 1 : 0;
  g.trans_b = trans_b ? 1 : 0;
  g.alpha = alpha;
  g.beta = beta;
  g.batch = 1;
  g.a = a;
  g.b = b;
  g.c = c;
  gemm_f32(one_thread, g);
}

// Scores of query rows [t0, t1) of head h against keys [lo, hi) into z (ld hi - lo), then each
// row's softmax numerators exp(z - max) (0 outside the row's keys); max and sum per row. A row
// that sees no key (segment ids) is all 0 with sum 0: the callers weigh every key for it.
void softmax_block(const RuntimeContext& one_thread, const View& w, int64_t b, int64_t h,
                   int64_t t0, int64_t t1, int64_t lo, int64_t hi, float* z, float* maxes,
                   float* sums) {
  const PrecastAttentionArgs& a = w.a;
  int64_t n = hi - lo, kv = h / w.group;
  product(one_thread, t1 - t0, n, a.head_dim, a.q + w.q_at(b, t0, h), w.ld_q(), false,
          a.k + w.k_at(b, lo, kv), w.ld_k(), true, z, n, a.scale, 0.0);
  for (int64_t t = t0; t < t1; ++t) {
    float* row = z + (t - t0) * n;
    int64_t first = w.first_key(t) - lo, end = w.end_key(t) - lo;
    if (a.q_segment != nullptr) {
      mask_segments(row, a.kv_segment + b * a.keys + lo, a.q_segment[b * a.queries + t], first,
                    end);
    }
    float max = row_max(row, first, end);
    maxes[t - t0] = max;
    if (max == -std::numeric_limits<float>::infinity()) {
      std::fill_n(row, n, 0.0f);
      sums[t - t0] = 0.0f;
      continue;
    }
    sums[t - t0] = exp_row(row, n, first, end, max);
  }
}

// The key range [lo, hi) the rows [t0, t1) see.
std::pair<int64_t, int64_t> block_keys(const View& w, int64_t t0, int64_t t1) {
  return {w.first_key(t0), w.end_key(t1 - 1)};
}

void run_tasks(const RuntimeContext& context, int64_t tasks,
               const std::function<void(int64_t, std::vector<float>&)>& task) {
  auto chunk = [&](int64_t begin, int64_t end) {
    std::vector<float> scratch;
    for (int64_t i = begin; i < end; ++i) task(i, scratch);
  };
  if (context.pool != nullptr && tasks > 1) {
    context.pool->parallel_for(tasks, chunk);
    return;
  }
  chunk(0, tasks);
}

// One task per (batch, head, query block): out = softmax(scores) v, rows divided by their sums.
void attention_forward(const RuntimeContext& context, const PrecastAttentionArgs& a) {
  View w{a, a.heads / a.kv_heads};
  RuntimeContext one_thread{context.impl, nullptr, {}};
  int64_t blocks = (a.queries + kAttentionQueryBlock - 1) / kAttentionQueryBlock;
  run_tasks(context, a.batch * a.heads * blocks, [&](int64_t task, std::vector<float>& scratch) {
    int64_t block = task % blocks, h = (task / blocks) % a.heads, b = task / (blocks * a.heads);
    int64_t t0 = block * kAttentionQueryBlock;
    int64_t t1 = std::min(a.queries, t0 + kAttentionQueryBlock);
    auto [lo, hi] = block_keys(w, t0, t1);
    int64_t rows = t1 - t0, n = hi - lo;
    scratch.resize(static_cast<size_t>(rows * n + 2 * kAttentionQueryBlock));
    float* z = scratch.data();
    float* maxes = z + rows * n;
    float* sums = maxes + kAttentionQueryBlock;
    softmax_block(one_thread, w, b, h, t0, t1, lo, hi, z, maxes, sums);
    float* out = a.result + w.out_at(b, t0, h);
    product(one_thread, rows, a.value_dim, n, z, n, false, a.v + w.v_at(b, lo, h / w.group),
            w.ld_v(), false, out, w.ld_out(), 1.0, 0.0);
    for (int64_t i = 0; i < rows; ++i) {
      float* row = out + i * w.ld_out();
      if (sums[i] != 0.0f) {
        divide_row(row, 0, a.value_dim, sums[i]);
        continue;
      }
      // No key seen: the mean of every key's v row.
      std::fill_n(row, a.value_dim, 0.0f);
      for (int64_t s = 0; s < a.keys; ++s) {
        const float* v = a.v + w.v_at(b, s, h / w.group);
        for (int64_t j = 0; j < a.value_dim; ++j) row[j] += v[j];
      }
      divide_row(row, 0, a.value_dim, static_cast<float>(a.keys));
    }
  });
}

// One task per (batch, kv head): it owns dk and dv of that head and dq of the query heads that
// read it. Per query block of each of those heads (in order): P = softmax(scores), dP = dout v^T,
// dS = P (dP - Δ) with Δ = dout.out per row, then dq = scale dS k, dk += scale dS^T q,
// dv += P^T dout.
void attention_backward(const RuntimeContext& context, const PrecastAttentionArgs& a) {
  View w{a, a.heads / a.kv_heads};
  RuntimeContext one_thread{context.impl, nullptr, {}};
  run_tasks(context, a.batch * a.kv_heads, [&](int64_t task, std::vector<float>& scratch) {
    int64_t kv = task % a.kv_heads, b = task / a.kv_heads;
    for (int64_t s = 0; s < a.keys; ++s) {
      std::fill_n(a.dk + w.k_at(b, s, kv), a.head_dim, 0.0f);
      std::fill_n(a.dv + w.v_at(b, s, kv), a.value_dim, 0.0f);
    }
    scratch.resize(static_cast<size_t>(2 * kAttentionQueryBlock * a.keys + 2 * kAttentionQueryBlock));
    float* p = scratch.data();
    float* ds = p + kAttentionQueryBlock * a.keys;
    float* maxes = ds + kAttentionQueryBlock * a.keys;
    float* sums = maxes + kAttentionQueryBlock;
    for (int64_t g = 0; g < w.group; ++g) {
      int64_t h = kv * w.group + g;
      for (int64_t t0 = 0; t0 < a.queries; t0 += kAttentionQueryBlock) {
        int64_t t1 = std::min(a.queries, t0 + kAttentionQueryBlock);
        auto [lo, hi] = block_keys(w, t0, t1);
        int64_t rows = t1 - t0, n = hi - lo;
        softmax_block(one_thread, w, b, h, t0, t1, lo, hi, p, maxes, sums);
        for (int64_t i = 0; i < rows; ++i) {
          if (sums[i] != 0.0f) divide_row(p + i * n, 0, n, sums[i]);
        }
        const float* dout = a.dout + w.out_at(b, t0, h);
        product(one_thread, rows, n, a.value_dim, dout, w.ld_out(), false, a.v + w.v_at(b, lo, kv),
                w.ld_v(), true, ds, n, 1.0, 0.0);
        for (int64_t i = 0; i < rows; ++i) {
          float delta = dot_row(dout + i * w.ld_out(), a.out + w.out_at(b, t0 + i, h), a.value_dim);
          score_gradient_row(p + i * n, ds + i * n, n, delta);
        }
        const float* k = a.k + w.k_at(b, lo, kv);
        const float* q = a.q + w.q_at(b, t0, h);
        product(one_thread, rows, a.head_dim, n, ds, n, false, k, w.ld_k(), false,
                a.dq + w.q_at(b, t0, h), w.ld_q(), a.scale, 0.0);
        product(one_thread, n, a.head_dim, rows, ds, n, true, q, w.ld_q(), false,
                a.dk + w.k_at(b, lo, kv), w.ld_k(), a.scale, 1.0);
        product(one_thread, n, a.value_dim, rows, p, n, true, dout, w.ld_out(), false,
                a.dv + w.v_at(b, lo, kv), w.ld_v(), 1.0, 1.0);
        // Rows that saw no key (their p and ds rows were 0): weight 1 / keys on every key's dv.
        for (int64_t i = 0; i < rows; ++i) {
          if (sums[i] != 0.0f) continue;
          float weight = 1.0f / static_cast<float>(a.keys);
          const float* dout_row = dout + i * w.ld_out();
          for (int64_t s = 0; s < a.keys; ++s) {
            float* dv = a.dv + w.v_at(b, s, kv);
            for (int64_t j = 0; j < a.value_dim; ++j) dv[j] += weight * dout_row[j];
          }
        }
      }
    }
  });
}

RuntimeContext context_or_default(const void* context) {
  return context != nullptr ? *static_cast<const RuntimeContext*>(context) : RuntimeContext{};
}

}  // namespace
}  // namespace precast

extern "C" void precast_attention_f32(const void* context, const PrecastAttentionArgs* args) {
  precast::attention_forward(precast::context_or_default(context), *args);
}

extern "C" void precast_attention_grad_f32(const void* context, const PrecastAttentionArgs* args) {
  precast::attention_backward(precast::context_or_default(context), *args);
}
