// Query-block attention gradient: per block of query rows, the scores against the keys the block
// may see, the softmax per row in vector code, then the four gradient products, all in the
// register-blocked multiply() below.
#include "runtime/kernels/Attention.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "runtime/kernels/RuntimeContext.h"
#include "runtime/kernels/ThreadPool.h"

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

// Sixteen floats as one value (GCC's vector extension: one AVX-512 register, two AVX2 ones, four
// SSE ones in the baseline clone); Attention.cpp is compiled with -ffp-contract=fast, so a * b + c
// is one fused multiply-add where the clone has them.
using Vec = float __attribute__((vector_size(64)));
using IntVec = int32_t __attribute__((vector_size(64)));
static_assert(sizeof(Vec) == kLanes * sizeof(float));

[[gnu::always_inline]] inline void load(Vec& v, const float* p) {
  std::memcpy(&v, p, sizeof v);
}
[[gnu::always_inline]] inline void store(float* p, const Vec& v) {
  std::memcpy(p, &v, sizeof v);
}

// exp_f32 lane by lane (references, not values: no vector-ABI argument in the baseline clone).
[[gnu::always_inline]] inline void exp_lanes(const Vec& x, Vec& result) {
  constexpr float kLow = -87.33654475f;
  constexpr float kHigh = 88.72283935f;
  constexpr float kShifter = 12582912.0f;
  IntVec low = x < kLow;
  Vec xc = low ? kLow : x;
  xc = xc > kHigh ? kHigh : xc;
  Vec t = xc * 1.44269504088896341f + kShifter;
  Vec n = t - kShifter;
  Vec r = xc - n * 0.693145751953125f;
  r = r - n * 1.428606765330187045e-06f;
  Vec p = r * (1.0f / 5040) + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  IntVec ni = __builtin_bit_cast(IntVec, t) - 0x4B400000;
  IntVec bits = (ni + 127) << 23;
  Vec scale = __builtin_bit_cast(Vec, bits);
  Vec zero = {};
  result = low ? zero : p * scale;
}

// The lanes of v summed in a fixed order (pairwise).
[[gnu::always_inline]] inline float lane_sum(const Vec& v) {
  float x[kLanes];
  std::memcpy(x, &v, sizeof x);
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int i = 0; i < width; ++i) x[i] += x[i + width];
  }
  return x[0];
}

// The largest of z[a, b) (b > a).
PRECAST_ROW_CLONES float row_max(const float* z, int64_t a, int64_t b) {
  float m = z[a];
  int64_t j = a;
  if (b - a >= kLanes) {
    Vec lanes, x;
    load(lanes, z + a);
    for (j = a + kLanes; j + kLanes <= b; j += kLanes) {
      load(x, z + j);
      lanes = x > lanes ? x : lanes;
    }
    float l[kLanes];
    std::memcpy(l, &lanes, sizeof l);
    for (float v : l) m = v > m ? v : m;
  }
  for (; j < b; ++j) m = z[j] > m ? z[j] : m;
  return m;
}

// z[j] = exp(z[j] - max) on [a, b), 0 on the rest of [0, n); returns the sum over [a, b).
PRECAST_ROW_CLONES float exp_row(float* z, int64_t n, int64_t a, int64_t b, float max) {
  std::fill(z, z + a, 0.0f);
  std::fill(z + b, z + n, 0.0f);
  Vec sums = {}, x, e;
  int64_t j = a;
  for (; j + kLanes <= b; j += kLanes) {
    load(x, z + j);
    x = x - max;
    exp_lanes(x, e);
    store(z + j, e);
    sums += e;
  }
  float sum = lane_sum(sums);
  for (; j < b; ++j) {
    float v = exp_f32(z[j] - max);
    z[j] = v;
    sum += v;
  }
  return sum;
}

// Σ x[i] y[i] over [0, n).
PRECAST_ROW_CLONES float dot_row(const float* x, const float* y, int64_t n) {
  Vec sums = {}, u, v;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    load(u, x + j);
    load(v, y + j);
    sums = u * v + sums;
  }
  float sum = lane_sum(sums);
  for (; j < n; ++j) sum = std::fma(x[j], y[j], sum);
  return sum;
}

// z[j] = -inf where kv_segment[j] != segment, on [a, b).
PRECAST_ROW_CLONES void mask_segments(float* z, const int32_t* kv_segment, int32_t segment,
                                      int64_t a, int64_t b) {
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  for (int64_t j = a; j < b; ++j) z[j] = kv_segment[j] == segment ? z[j] : kMasked;
}

// p[j] = e[j] / sum (the softmax) and ds[j] = p[j] (dp[j] - delta), in place of e and dp, over
// [0, end); past end (keys a causal mask hides: e is 0 there and dp was not computed) ds is 0.
PRECAST_ROW_CLONES void score_gradient_row(float* e, float* dp, int64_t end, int64_t n, float sum,
                                           float delta) {
  for (int64_t j = 0; j < end; ++j) {
    float p = e[j] / sum;
    e[j] = p;
    dp[j] = p * (dp[j] - delta);
  }
  std::fill(dp + end, dp + n, 0.0f);
}

// The part of a product that a causal mask leaves, row i of C needing
//   kColumns: only its columns j < i + offset (the others are never read);
//   kKEnd:    only the terms kk < i + offset (A(i, kk) is 0 from there on);
//   kKBegin:  only the terms kk >= i + offset (A(i, kk) is 0 before).
// Skipping terms whose A(i, kk) is 0 changes no bit of C: every sum starts at +0, a sum that is
// not -0 is unchanged by adding a zero, and a sum of +0 and zeros is +0, so leaving out leading or
// trailing zero terms (finite B) gives the same sum.
struct Band {
  enum Kind { kNone, kColumns, kKEnd, kKBegin } kind = kNone;
  int64_t offset = 0;
};

// One tile of multiply(): kRows rows of C times kVectors vectors of columns, accumulated in
// registers over the whole of k, then scaled by alpha (and added to C when accumulating).
template <int kRows, int kVectors>
[[gnu::always_inline]] inline void multiply_tile(float* c, int64_t ldc, const float* a,
                                                 int64_t a_row, int64_t a_col, const float* b,
                                                 int64_t ldb, int64_t k_begin, int64_t k_end,
                                                 float alpha, bool accumulate) {
  Vec acc[kRows][kVectors] = {};
  Vec bv[kVectors];
  for (int64_t kk = k_begin; kk < k_end; ++kk) {
#pragma GCC unroll 8
    for (int v = 0; v < kVectors; ++v) load(bv[v], b + kk * ldb + v * kLanes);
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      float x = a[r * a_row + kk * a_col];
#pragma GCC unroll 8
      for (int v = 0; v < kVectors; ++v) acc[r][v] = x * bv[v] + acc[r][v];
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < kVectors; ++v) {
      float* out = c + r * ldc + v * kLanes;
      Vec result = acc[r][v] * alpha;
      if (accumulate) {
        Vec old;
        load(old, out);
        result = result + old;
      }
      store(out, result);
    }
  }
}

// What rows [i, i + rows) of C need of column j and of the terms [0, k) under `band`: whether
// column j is needed at all, and the terms [begin, end).
struct TileRange {
  bool needed = true;
  int64_t begin = 0, end = 0;
};

[[gnu::always_inline]] inline TileRange tile_range(const Band& band, int64_t i, int64_t rows,
                                                   int64_t j, int64_t k) {
  TileRange r{true, 0, k};
  int64_t last = i + rows - 1;  // the tile's last row needs the most columns and terms
  switch (band.kind) {
    case Band::kNone: break;
    case Band::kColumns: r.needed = j < last + band.offset; break;
    case Band::kKEnd: r.end = std::clamp<int64_t>(last + band.offset, 0, k); break;
    case Band::kKBegin: r.begin = std::clamp<int64_t>(i + band.offset, 0, k); break;
  }
  r.begin = std::min(r.begin, r.end);
  return r;
}

// The columns [j, j + kVectors * kLanes) of every row of C, kMultiplyRows rows at a time (b
// points at column j).
template <int kVectors>
[[gnu::always_inline]] inline void multiply_columns(float* c, int64_t ldc, const float* a,
                                                    int64_t a_row, int64_t a_col, const float* b,
                                                    int64_t ldb, int64_t m, int64_t k, float alpha,
                                                    bool accumulate, const Band& band, int64_t j) {
  constexpr int kMultiplyRows = 4;
  int64_t i = 0;
  for (; i + kMultiplyRows <= m; i += kMultiplyRows) {
    TileRange r = tile_range(band, i, kMultiplyRows, j, k);
    if (!r.needed) continue;
    // A tile that needs only the first few vectors of the columns (kColumns) computes those alone.
    int64_t vectors = kVectors;
    if (band.kind == Band::kColumns) {
      vectors = std::min<int64_t>(kVectors, (i + kMultiplyRows - 1 + band.offset - j + kLanes - 1) / kLanes);
    }
    if (vectors == kVectors) {
      multiply_tile<kMultiplyRows, kVectors>(c + i * ldc, ldc, a + i * a_row, a_row, a_col, b, ldb,
                                             r.begin, r.end, alpha, accumulate);
      continue;
    }
    for (int64_t v = 0; v < vectors; ++v) {
      multiply_tile<kMultiplyRows, 1>(c + i * ldc + v * kLanes, ldc, a + i * a_row, a_row, a_col,
                                      b + v * kLanes, ldb, r.begin, r.end, alpha, accumulate);
    }
  }
  for (; i < m; ++i) {
    TileRange r = tile_range(band, i, 1, j, k);
    if (!r.needed) continue;
    multiply_tile<1, kVectors>(c + i * ldc, ldc, a + i * a_row, a_row, a_col, b, ldb, r.begin,
                               r.end, alpha, accumulate);
  }
}

// C[i][j] = alpha Σ_kk A(i, kk) B[kk][j] (plus C[i][j] when accumulating) for i < m, j < n, with
// A(i, kk) = a[i a_row + kk a_col] (any layout) and B's and C's rows contiguous (strides ldb,
// ldc). Every element sums over kk in order, in registers: a fixed order, no packing. `band`
// leaves out what a causal mask makes 0 or unread (Band).
// A panel of B (k rows of 4 kLanes columns) read by more than one row tile is first copied into
// contiguous rows: B's rows are a power of two of floats apart in every product here (the heads'
// row stride, the key count), so the panel's rows would share a few first-level cache sets and
// evict each other between the row tiles. The copy changes no sum.
PRECAST_ROW_CLONES void multiply(float* c, int64_t ldc, const float* a, int64_t a_row,
                                 int64_t a_col, const float* b, int64_t ldb, int64_t m, int64_t n,
                                 int64_t k, float alpha, bool accumulate, Band band = {}) {
  constexpr int64_t kPanel = 4 * kLanes;
  thread_local std::vector<float> panel;
  int64_t j = 0;
  for (; j + kPanel <= n; j += kPanel) {
    if (band.kind == Band::kColumns && j >= m - 1 + band.offset) break;  // no row needs it
    const float* bj = b + j;
    int64_t ld = ldb;
    if (m > 4 && ldb != kPanel) {
      if (panel.size() < static_cast<size_t>(k * kPanel)) panel.resize(static_cast<size_t>(k * kPanel));
      for (int64_t kk = 0; kk < k; ++kk) {
        std::memcpy(panel.data() + kk * kPanel, bj + kk * ldb, kPanel * sizeof(float));
      }
      bj = panel.data();
      ld = kPanel;
    }
    multiply_columns<4>(c + j, ldc, a, a_row, a_col, bj, ld, m, k, alpha, accumulate, band, j);
  }
  for (; j + kLanes <= n; j += kLanes) {
    multiply_columns<1>(c + j, ldc, a, a_row, a_col, b + j, ldb, m, k, alpha, accumulate, band, j);
  }
  for (; j < n; ++j) {
    for (int64_t i = 0; i < m; ++i) {
      TileRange r = tile_range(band, i, 1, j, k);
      if (!r.needed) continue;
      float sum = 0.0f;
      for (int64_t kk = r.begin; kk < r.end; ++kk)
        sum = std::fma(a[i * a_row + kk * a_col], b[kk * ldb + j], sum);
      float* out = c + i * ldc + j;
      *out = accumulate ? alpha * sum + *out : alpha * sum;
    }
  }
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
  int64_t q_at(int64_t b, int64_t t, int64_t h) const {
    return (b * a.queries + t) * ld_q() + h * a.head_dim;
  }
  int64_t k_at(int64_t b, int64_t s, int64_t kv) const {
    return (b * a.keys + s) * ld_k() + kv * a.head_dim;
  }
  int64_t v_at(int64_t b, int64_t s, int64_t kv) const {
    return (b * a.keys + s) * ld_v() + kv * a.value_dim;
  }
  int64_t out_at(int64_t b, int64_t t, int64_t h) const {
    return (b * a.queries + t) * ld_out() + h * a.value_dim;
  }
  // Under a causal mask query row t sees no key past t (whatever the window and segments add),
  // so in a block of query rows from t0 against keys from lo: score row i needs the keys
  // j < i + t0 + 1 - lo (kColumns and kKEnd); key row i gets terms from query rows
  // kk >= i + lo - t0 (kKBegin). Without one, every product is whole (kNone).
  Band band(Band::Kind kind, int64_t t0, int64_t lo) const {
    if (a.causal == 0) return {};
    return {kind, kind == Band::kKBegin ? lo - t0 : t0 + 1 - lo};
  }
  // [lo, hi): the keys query row t sees.
  int64_t first_key(int64_t t) const {
    return a.window > 0 ? std::max<int64_t>(0, t - a.window + 1) : 0;
  }
  int64_t end_key(int64_t t) const {
    int64_t hi = a.keys;
    if (a.causal != 0) hi = std::min(hi, t + 1);
    if (a.window > 0) hi = std::min(hi, t + a.window);
    return hi;
  }
};

// rows x columns of x (row stride ld) transposed into xt (row stride rows).
// Column by column: the writes are contiguous, and the rows read stay in the cache across columns.
void transpose(const float* x, int64_t ld, int64_t rows, int64_t columns, float* xt) {
  constexpr int64_t kRowTile = 32;
  for (int64_t r0 = 0; r0 < rows; r0 += kRowTile) {
    int64_t r1 = std::min(rows, r0 + kRowTile);
    for (int64_t c = 0; c < columns; ++c) {
      for (int64_t r = r0; r < r1; ++r) xt[c * rows + r] = x[r * ld + c];
    }
  }
}

// Scores of query rows [t0, t1) of head h against keys [lo, hi) into z (ld hi - lo), then each
// row's softmax numerators exp(z - max) (0 outside the row's keys) and their sum. kt is the kv
// head's k transposed ([head_dim, keys], row stride ld_kt) from key lo on. A row that sees no key
// (segment ids) is all 0 with sum 0: the callers weigh every key for it.
void softmax_block(const View& w, const float* kt, int64_t ld_kt, int64_t b, int64_t h, int64_t t0,
                   int64_t t1, int64_t lo, int64_t hi, float* z, float* sums) {
  const PrecastAttentionArgs& a = w.a;
  int64_t n = hi - lo;
  multiply(z, n, a.q + w.q_at(b, t0, h), w.ld_q(), 1, kt, ld_kt, t1 - t0, n, a.head_dim,
           static_cast<float>(a.scale), false, w.band(Band::kColumns, t0, lo));
  for (int64_t t = t0; t < t1; ++t) {
    float* row = z + (t - t0) * n;
    int64_t first = w.first_key(t) - lo, end = w.end_key(t) - lo;
    if (a.q_segment != nullptr) {
      mask_segments(row, a.kv_segment + b * a.keys + lo, a.q_segment[b * a.queries + t], first,
                    end);
    }
    float max = row_max(row, first, end);
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
    thread_local std::vector<float> scratch;
    for (int64_t i = begin; i < end; ++i) task(i, scratch);
  };
  if (context.pool != nullptr && tasks > 1) {
    context.pool->parallel_for(tasks, chunk);
    return;
  }
  chunk(0, tasks);
}

// One task per (batch, kv head): it owns dk and dv of that head and dq of the query heads that
// read it. Per query block of each of those heads (in order): P = softmax(scores), dP = dout v^T,
// dS = P (dP - Δ) with Δ = dout.out per row, then dq = scale dS k, dk += scale dS^T q,
// dv += P^T dout.
void attention_backward(const RuntimeContext& context, const PrecastAttentionArgs& a) {
  View w{a, a.heads / a.kv_heads};
  run_tasks(context, a.batch * a.kv_heads, [&](int64_t task, std::vector<float>& scratch) {
    int64_t kv = task % a.kv_heads, b = task / a.kv_heads;
    for (int64_t s = 0; s < a.keys; ++s) {
      std::fill_n(a.dk + w.k_at(b, s, kv), a.head_dim, 0.0f);
      std::fill_n(a.dv + w.v_at(b, s, kv), a.value_dim, 0.0f);
    }
    int64_t block_scores = kAttentionQueryBlock * a.keys;
    scratch.resize(static_cast<size_t>(2 * block_scores + kAttentionQueryBlock +
                                       (a.head_dim + a.value_dim) * a.keys));
    float* p = scratch.data();
    float* ds = p + block_scores;
    float* sums = ds + block_scores;
    float* kt = sums + kAttentionQueryBlock;  // [head_dim, keys]
    float* vt = kt + a.head_dim * a.keys;     // [value_dim, keys]
    transpose(a.k + w.k_at(b, 0, kv), w.ld_k(), a.keys, a.head_dim, kt);
    transpose(a.v + w.v_at(b, 0, kv), w.ld_v(), a.keys, a.value_dim, vt);
    for (int64_t g = 0; g < w.group; ++g) {
      int64_t h = kv * w.group + g;
      for (int64_t t0 = 0; t0 < a.queries; t0 += kAttentionQueryBlock) {
        int64_t t1 = std::min(a.queries, t0 + kAttentionQueryBlock);
        auto [lo, hi] = block_keys(w, t0, t1);
        int64_t rows = t1 - t0, n = hi - lo;
        softmax_block(w, kt + lo, a.keys, b, h, t0, t1, lo, hi, p, sums);
        const float* dout = a.dout + w.out_at(b, t0, h);
        multiply(ds, n, dout, w.ld_out(), 1, vt + lo, a.keys, rows, n, a.value_dim, 1.0f, false,
                 w.band(Band::kColumns, t0, lo));
        for (int64_t i = 0; i < rows; ++i) {
          float delta = dot_row(dout + i * w.ld_out(), a.out + w.out_at(b, t0 + i, h), a.value_dim);
          // A row that saw no key keeps p and ds 0 (its dv share is added below).
          if (sums[i] != 0.0f) {
            score_gradient_row(p + i * n, ds + i * n, w.end_key(t0 + i) - lo, n, sums[i], delta);
          } else {
            std::fill_n(ds + i * n, n, 0.0f);
          }
        }
        const float* k = a.k + w.k_at(b, lo, kv);
        const float* q = a.q + w.q_at(b, t0, h);
        float scale = static_cast<float>(a.scale);
        multiply(a.dq + w.q_at(b, t0, h), w.ld_q(), ds, n, 1, k, w.ld_k(), rows, a.head_dim, n,
                 scale, false, w.band(Band::kKEnd, t0, lo));
        multiply(a.dk + w.k_at(b, lo, kv), w.ld_k(), ds, 1, n, q, w.ld_q(), n, a.head_dim, rows,
                 scale, true, w.band(Band::kKBegin, t0, lo));
        multiply(a.dv + w.v_at(b, lo, kv), w.ld_v(), p, 1, n, dout, w.ld_out(), n, a.value_dim,
                 rows, 1.0f, true, w.band(Band::kKBegin, t0, lo));
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

extern "C" void precast_attention_grad_f32(const void* context, const PrecastAttentionArgs* args) {
  precast::attention_backward(precast::context_or_default(context), *args);
}
