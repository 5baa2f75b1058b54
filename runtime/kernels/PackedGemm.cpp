// Precast's own f32 GEMM ("packed"): operands copied into panels once per block, a register-
// blocked microkernel (AVX-512: 12 x 32 of C in 24 zmm registers; AVX2 + FMA: 6 x 16 in 12 ymm),
// picked when the library loads. Loop order and block sizes follow the usual layout of such
// products (the Goto/BLIS scheme): columns of C in blocks of nc, the k sum in blocks of kc, the
// block of B packed once and shared by every row block; rows in blocks of mc, each packed once
// (or, op(A) not transposed, read in place: no copy) and run against every column panel. The
// microkernel fetches its tile of C into the cache while it sums.
//
// Threads: a product is cut into row parts x column parts of C (choose_split, from the shape:
// wide products split their columns, tall ones their rows), each run whole by one thread with
// its own B blocks, so the threads never wait for each other inside a product. A batch splits
// whole products over the threads instead.
//
// Determinism: every element of C gets the same arithmetic wherever it lies: its k sum in kc
// blocks (kc a function of the shape alone), each summed in order by one FMA chain starting
// from zero, the blocks added to C in order (the first also scaling C by beta). Edge tiles run
// the same microkernel on zero-padded panels into a local tile and the same multiplies and adds
// in scalar code. So the result depends on the shape and the ISA only, never on the thread
// count or on how rows, columns and batch items are split.
//
// This file is compiled with -ffp-contract=off (CMakeLists.txt): the only fused multiply-adds
// are the microkernels' explicit ones, so edge and interior tiles round alike.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime/kernels/GemmBackends.h"

namespace precast::gemm_backends {
namespace {

// Block sizes, measured on the per-rank step's shapes (bench_gemm_shapes; benchmarks/README.md).
// k is cut into equal blocks of at most kMaxKc: fewer passes over C than 256-deep blocks (a
// product with k = 8192 read and wrote its 4 MiB C 32 times), while a B micro-panel (kc x 32
// floats, up to 64 KiB) still streams from L2 with the rows' A panels; 48 rows a block keep
// those A panels (96 KiB) in L2 beside the B block. small's step: +9% for 512 against 256
// deep, +7% more for 48 rows against 96.
constexpr int64_t kMaxKc = 512;  // k per block, at most
constexpr int64_t kMc = 48;      // rows per block; 12 and 6 divide it
constexpr int64_t kNc = 1024;    // columns per block: a packed B block (up to 2 MiB)
constexpr int64_t kMaxMr = 12, kMaxNr = 32;

// C tile (mr x nr at c, row stride ldc) from the tile's k-block sum `acc`: C = alpha acc +
// beta C for the first k block (C not read when beta == 0), C += alpha acc for the later ones.
inline float combine(float acc, float c, float alpha, float beta, bool first) {
  float t = alpha == 1.0f ? acc : alpha * acc;
  if (!first) return c + t;
  return beta == 0.0f ? t : t + beta * c;
}

// A microkernel: the kc-deep product of an mr x kc panel of A and a packed kc x nr panel of B into
// the mr x nr tile of C at c (row stride ldc). With lda == 0 the A panel is packed (k-major, mr
// values per k); otherwise it is read in place: row i of the panel at a + i * lda (op(A) not
// transposed), which spares the copy. Both read the same values in the same order.
using KernelFunction = void (*)(int64_t kc, const float* a, int64_t lda, const float* b, float* c,
                                int64_t ldc, float alpha, float beta, bool first);

struct Microkernel {
  int64_t mr, nr;
  KernelFunction run;
};

#if defined(__x86_64__) && defined(__GNUC__)

[[gnu::target("avx512f")]] inline __m512 combine16(__m512 acc, const float* c, float alpha,
                                                   float beta, bool first) {
  __m512 t = alpha == 1.0f ? acc : _mm512_mul_ps(_mm512_set1_ps(alpha), acc);
  if (!first) return _mm512_add_ps(_mm512_loadu_ps(c), t);
  if (beta == 0.0f) return t;
  return _mm512_add_ps(t, _mm512_mul_ps(_mm512_set1_ps(beta), _mm512_loadu_ps(c)));
}

// 12 rows x 32 columns: per k, two vectors of B and twelve broadcasts of A into 24 accumulators.
template <bool kInPlace>
[[gnu::target("avx512f")]] void kernel_avx512_t(int64_t kc, const float* a, int64_t lda,
                                                const float* b, float* c, int64_t ldc, float alpha,
                                                float beta, bool first) {
  __m512 acc[12][2];
#pragma GCC unroll 12
  for (int i = 0; i < 12; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
#pragma GCC unroll 12
  for (int i = 0; i < 12; ++i) {
    // The tile of C (two lines a row) is read or written after the k loop: fetch it meanwhile.
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + 31), _MM_HINT_T0);
  }
  // In place: rows 3q, 3q + 1, 3q + 2 at rows[q], rows[q] + lda, rows[q] + 2 lda.
  const int64_t offsets[3] = {0, lda, 2 * lda};
  const float* rows[4] = {a, a + 3 * lda, a + 6 * lda, a + 9 * lda};
  for (int64_t k = 0; k < kc; ++k) {
    __m512 b0 = _mm512_loadu_ps(b);
    __m512 b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) {
      __m512 ai = _mm512_set1_ps(kInPlace ? rows[i / 3][offsets[i % 3]] : a[i]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
    }
    if (kInPlace) {
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) ++rows[q];
    } else {
      a += 12;
    }
    b += 32;
  }
#pragma GCC unroll 12
  for (int i = 0; i < 12; ++i) {
    float* row = c + i * ldc;
    __m512 lo = combine16(acc[i][0], row, alpha, beta, first);
    __m512 hi = combine16(acc[i][1], row + 16, alpha, beta, first);
    _mm512_storeu_ps(row, lo);
    _mm512_storeu_ps(row + 16, hi);
  }
}

void kernel_avx512(int64_t kc, const float* a, int64_t lda, const float* b, float* c, int64_t ldc,
                   float alpha, float beta, bool first) {
  if (lda == 0) {
    kernel_avx512_t<false>(kc, a, lda, b, c, ldc, alpha, beta, first);
  } else {
    kernel_avx512_t<true>(kc, a, lda, b, c, ldc, alpha, beta, first);
  }
}

[[gnu::target("avx2,fma")]] inline __m256 combine8(__m256 acc, const float* c, float alpha,
                                                   float beta, bool first) {
  __m256 t = alpha == 1.0f ? acc : _mm256_mul_ps(_mm256_set1_ps(alpha), acc);
  if (!first) return _mm256_add_ps(_mm256_loadu_ps(c), t);
  if (beta == 0.0f) return t;
  return _mm256_add_ps(t, _mm256_mul_ps(_mm256_set1_ps(beta), _mm256_loadu_ps(c)));
}

// 6 rows x 16 columns: per k, two vectors of B and six broadcasts of A into 12 accumulators.
template <bool kInPlace>
[[gnu::target("avx2,fma")]] void kernel_avx2_t(int64_t kc, const float* a, int64_t lda,
                                               const float* b, float* c, int64_t ldc, float alpha,
                                               float beta, bool first) {
  __m256 acc[6][2];
#pragma GCC unroll 6
  for (int i = 0; i < 6; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
#pragma GCC unroll 6
  for (int i = 0; i < 6; ++i) {
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + 15), _MM_HINT_T0);
  }
  const int64_t offsets[3] = {0, lda, 2 * lda};
  const float* rows[2] = {a, a + 3 * lda};
  for (int64_t k = 0; k < kc; ++k) {
    __m256 b0 = _mm256_loadu_ps(b);
    __m256 b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
    for (int i = 0; i < 6; ++i) {
      __m256 ai = _mm256_broadcast_ss(kInPlace ? rows[i / 3] + offsets[i % 3] : a + i);
      acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
    }
    if (kInPlace) {
      ++rows[0];
      ++rows[1];
    } else {
      a += 6;
    }
    b += 16;
  }
#pragma GCC unroll 6
  for (int i = 0; i < 6; ++i) {
    float* row = c + i * ldc;
    __m256 lo = combine8(acc[i][0], row, alpha, beta, first);
    __m256 hi = combine8(acc[i][1], row + 8, alpha, beta, first);
    _mm256_storeu_ps(row, lo);
    _mm256_storeu_ps(row + 8, hi);
  }
}

void kernel_avx2(int64_t kc, const float* a, int64_t lda, const float* b, float* c, int64_t ldc,
                 float alpha, float beta, bool first) {
  if (lda == 0) {
    kernel_avx2_t<false>(kc, a, lda, b, c, ldc, alpha, beta, first);
  } else {
    kernel_avx2_t<true>(kc, a, lda, b, c, ldc, alpha, beta, first);
  }
}

Microkernel pick_microkernel() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return {12, 32, kernel_avx512};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return {6, 16, kernel_avx2};
  return {0, 0, nullptr};
}

#else

Microkernel pick_microkernel() {
  return {0, 0, nullptr};
}

#endif

const Microkernel& microkernel() {
  static const Microkernel picked = pick_microkernel();
  return picked;
}

// A 64-byte aligned scratch area that grows on demand; one per thread (packing buffers).
class Scratch {
 public:
  ~Scratch() { std::free(data_); }
  float* get(int64_t floats) {
    if (floats > size_) {
      std::free(data_);
      size_t bytes = (static_cast<size_t>(floats) * sizeof(float) + 63) / 64 * 64;
      data_ = static_cast<float*>(std::aligned_alloc(64, bytes));
      if (data_ == nullptr) {
        std::fputs("precast: out of memory for the GEMM's packing buffers\n", stderr);
        std::abort();
      }
      size_ = floats;
    }
    return data_;
  }

 private:
  float* data_ = nullptr;
  int64_t size_ = 0;
};

Scratch& a_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

Scratch& b_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

// Rows [i0, i0 + mc) and k [k0, k0 + kc) of op(A) as mr-row panels, each kc x mr (k-major),
// rows past the end zero.
void pack_a(const PrecastGemmArgs& args, const float* a, int64_t i0, int64_t mc, int64_t k0,
            int64_t kc, int64_t mr, float* out) {
  for (int64_t p = 0; p < mc; p += mr) {
    int64_t rows = std::min(mr, mc - p);
    float* panel = out + p * kc;
    if (args.trans_a == 0) {
      for (int64_t r = 0; r < rows; ++r) {
        const float* src = a + (i0 + p + r) * args.lda + k0;
        for (int64_t k = 0; k < kc; ++k) panel[k * mr + r] = src[k];
      }
    } else {
      for (int64_t k = 0; k < kc; ++k) {
        const float* src = a + (k0 + k) * args.lda + i0 + p;
        for (int64_t r = 0; r < rows; ++r) panel[k * mr + r] = src[r];
      }
    }
    if (rows < mr) {
      for (int64_t k = 0; k < kc; ++k) {
        for (int64_t r = rows; r < mr; ++r) panel[k * mr + r] = 0.0f;
      }
    }
  }
}

// Columns [j0, j0 + nc) and k [k0, k0 + kc) of op(B) as nr-column panels, each kc x nr
// (k-major), columns past the end zero.
void pack_b(const PrecastGemmArgs& args, const float* b, int64_t j0, int64_t nc, int64_t k0,
            int64_t kc, int64_t nr, float* out) {
  for (int64_t q = 0; q < nc; q += nr) {
    int64_t cols = std::min(nr, nc - q);
    float* panel = out + q * kc;
    if (args.trans_b == 0) {
      for (int64_t k = 0; k < kc; ++k) {
        const float* src = b + (k0 + k) * args.ldb + j0 + q;
        float* dst = panel + k * nr;
        std::memcpy(dst, src, static_cast<size_t>(cols) * sizeof(float));
        for (int64_t j = cols; j < nr; ++j) dst[j] = 0.0f;
      }
    } else {
      for (int64_t j = 0; j < cols; ++j) {
        const float* src = b + (j0 + q + j) * args.ldb + k0;
        for (int64_t k = 0; k < kc; ++k) panel[k * nr + j] = src[k];
      }
      if (cols < nr) {
        for (int64_t k = 0; k < kc; ++k) {
          for (int64_t j = cols; j < nr; ++j) panel[k * nr + j] = 0.0f;
        }
      }
    }
  }
}

// How one product is cut: the k block (the only size that changes the bits, so a function of
// the shape alone), the row and column blocks, and whether the full mr-row panels of op(A) are
// read in place or packed.
struct Blocking {
  int64_t kc, mc, nc;
  bool pack_a;
};

Blocking choose_blocking(const PrecastGemmArgs& args) {
  const int64_t k_blocks = std::max<int64_t>(1, (args.k + kMaxKc - 1) / kMaxKc);
  return {(args.k + k_blocks - 1) / k_blocks, kMc, kNc, args.trans_a != 0};
}

// One row block of C (rows [i0, i0 + mc), columns [j0, j0 + nc)) against the packed B block.
// Unless blocking.pack_a, full mr-row panels of op(A) are read in place and only a last partial
// one is packed.
void run_row_block(const Microkernel& kernel, const Blocking& blocking, const PrecastGemmArgs& args,
                   const float* a, const float* packed_b, float* c, int64_t i0, int64_t mc,
                   int64_t j0, int64_t nc, int64_t k0, int64_t kc, bool first) {
  const int64_t mr = kernel.mr, nr = kernel.nr;
  const int64_t full_rows = blocking.pack_a ? 0 : mc / mr * mr;
  float* packed_a = a_scratch().get(blocking.mc * blocking.kc);
  if (full_rows < mc) pack_a(args, a, i0 + full_rows, mc - full_rows, k0, kc, mr, packed_a);
  const float alpha = static_cast<float>(args.alpha);
  const float beta = static_cast<float>(args.beta);
  alignas(64) float tile[kMaxMr * kMaxNr];
  for (int64_t jr = 0; jr < nc; jr += nr) {
    int64_t cols = std::min(nr, nc - jr);
    const float* b_panel = packed_b + jr * kc;
    for (int64_t ir = 0; ir < mc; ir += mr) {
      int64_t rows = std::min(mr, mc - ir);
      const float* a_panel =
          ir < full_rows ? a + (i0 + ir) * args.lda + k0 : packed_a + (ir - full_rows) * kc;
      int64_t lda = ir < full_rows ? args.lda : 0;
      float* c_tile = c + (i0 + ir) * args.ldc + j0 + jr;
      if (rows == mr && cols == nr) {
        kernel.run(kc, a_panel, lda, b_panel, c_tile, args.ldc, alpha, beta, first);
        continue;
      }
      // Edge tile: the sums alone (alpha 1, beta 0 leave them exact), then the same combine.
      kernel.run(kc, a_panel, lda, b_panel, tile, nr, 1.0f, 0.0f, true);
      for (int64_t i = 0; i < rows; ++i) {
        float* row = c_tile + i * args.ldc;
        for (int64_t j = 0; j < cols; ++j)
          row[j] = combine(tile[i * nr + j], row[j], alpha, beta, first);
      }
    }
  }
}

// The part of C in rows [r0, r1) and columns [c0, c1), whole: column blocks, k blocks in order
// (each packing its B block into this thread's scratch), row blocks.
void run_part(const Microkernel& kernel, const Blocking& blocking, const PrecastGemmArgs& args,
              const float* a, const float* b, float* c, int64_t r0, int64_t r1, int64_t c0,
              int64_t c1) {
  float* packed_b = b_scratch().get(blocking.kc * (blocking.nc + kMaxNr));
  for (int64_t j0 = c0; j0 < c1; j0 += blocking.nc) {
    int64_t nc = std::min(blocking.nc, c1 - j0);
    for (int64_t k0 = 0; k0 < args.k; k0 += blocking.kc) {
      int64_t kc = std::min(blocking.kc, args.k - k0);
      pack_b(args, b, j0, nc, k0, kc, kernel.nr, packed_b);
      for (int64_t i0 = r0; i0 < r1; i0 += blocking.mc) {
        run_row_block(kernel, blocking, args, a, packed_b, c, i0, std::min(blocking.mc, r1 - i0),
                      j0, nc, k0, kc, k0 == 0);
      }
    }
  }
}

// The split whose slowest task has the least work: its tiles' multiply-adds (edge tiles cost a
// whole tile) plus the copies it makes, B's block for its columns and, when op(A) is packed, A's
// rows once per column block. A copied element is costed as kCopyCost multiply-adds.
PackedSplit choose_split(const Microkernel& kernel, const Blocking& blocking,
                         const PrecastGemmArgs& args, int threads) {
  constexpr double kCopyCost = 8;
  const int64_t row_tiles = (args.m + kernel.mr - 1) / kernel.mr;
  const int64_t col_tiles = (args.n + kernel.nr - 1) / kernel.nr;
  PackedSplit best{1, 1};
  double best_cost = 0;
  for (int64_t row_parts = 1; row_parts <= threads; ++row_parts) {
    if (threads % row_parts != 0) continue;
    int64_t col_parts = threads / row_parts;
    if (row_parts > row_tiles || col_parts > col_tiles) continue;
    double rows = static_cast<double>((row_tiles + row_parts - 1) / row_parts * kernel.mr);
    double cols = static_cast<double>((col_tiles + col_parts - 1) / col_parts * kernel.nr);
    double k = static_cast<double>(args.k);
    double column_blocks = std::ceil(cols / static_cast<double>(blocking.nc));
    double cost = rows * cols * k + kCopyCost * cols * k;
    if (blocking.pack_a) cost += kCopyCost * rows * k * column_blocks;
    if (best_cost == 0 || cost < best_cost) {
      best = {row_parts, col_parts};
      best_cost = cost;
    }
  }
  return best;
}

// One product of the batch, split over `pool` (may be null) by choose_split.
void run_product(const Microkernel& kernel, ThreadPool* pool, const PrecastGemmArgs& args,
                 const float* a, const float* b, float* c) {
  const Blocking blocking = choose_blocking(args);
  const int threads = pool == nullptr ? 1 : pool->num_threads();
  const PackedSplit split = choose_split(kernel, blocking, args, threads);
  if (pool == nullptr || split.row_parts * split.col_parts == 1) {
    run_part(kernel, blocking, args, a, b, c, 0, args.m, 0, args.n);
    return;
  }
  const int64_t row_tiles = (args.m + kernel.mr - 1) / kernel.mr;
  const int64_t col_tiles = (args.n + kernel.nr - 1) / kernel.nr;
  auto parts = [&](int64_t begin, int64_t end) {
    for (int64_t part = begin; part < end; ++part) {
      ChunkRange rows =
          chunk_range(row_tiles, static_cast<int>(split.row_parts), part / split.col_parts);
      ChunkRange cols =
          chunk_range(col_tiles, static_cast<int>(split.col_parts), part % split.col_parts);
      run_part(kernel, blocking, args, a, b, c, rows.begin * kernel.mr,
               std::min(args.m, rows.end * kernel.mr), cols.begin * kernel.nr,
               std::min(args.n, cols.end * kernel.nr));
    }
  };
  pool->parallel_for(split.row_parts * split.col_parts, parts);
}

}  // namespace

bool packed_f32_available() {
  return microkernel().run != nullptr;
}

std::string_view packed_isa() {
  switch (microkernel().mr) {
    case 12:
      return "avx512";
    case 6:
      return "avx2";
    default:
      return "none";
  }
}

PackedSplit packed_split(const PrecastGemmArgs& args, int threads) {
  return choose_split(microkernel(), choose_blocking(args), args, threads);
}

void packed_f32(ThreadPool* pool, const PrecastGemmArgs& args) {
  const Microkernel& kernel = microkernel();
  auto item = [&](int64_t index, ThreadPool* item_pool) {
    run_product(kernel, item_pool, args, static_cast<const float*>(args.a) + index * args.stride_a,
                static_cast<const float*>(args.b) + index * args.stride_b,
                static_cast<float*>(args.c) + index * args.stride_c);
  };
  if (args.batch == 1) {
    item(0, pool);
    return;
  }
  // A batch: whole products per task, each packing its own operands.
  auto items = [&](int64_t begin, int64_t end) {
    for (int64_t index = begin; index < end; ++index) item(index, nullptr);
  };
  if (pool != nullptr) {
    pool->parallel_for(args.batch, items);
    return;
  }
  items(0, args.batch);
}

}  // namespace precast::gemm_backends
