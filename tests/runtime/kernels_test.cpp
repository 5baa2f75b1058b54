// The runtime's kernel library: the thread pool's chunking (every index once, the same chunks on
// every call, the caller participating, nesting, concurrent callers) and the GEMM against a
// naive triple loop in double for both implementations, f32 and f64, all transpose
// combinations, odd sizes, padded leading dimensions, alpha/beta, batches, and bitwise-equal
// repeated runs; plus every error path of the argument checks and the name registry.
#include <cblas.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <thread>
#include <type_traits>
#include <vector>

#include "runtime/kernels/Gemm.h"
#include "runtime/kernels/GemmBackends.h"
#include "runtime/kernels/ThreadPool.h"

namespace precast {
namespace {

// ---------------------------------------------------------------------------------------------
// Thread pool

std::vector<ChunkRange> expected_chunks(int64_t n, int threads) {
  std::vector<ChunkRange> chunks;
  for (int64_t i = 0; i < chunk_count(n, threads); ++i)
    chunks.push_back(chunk_range(n, threads, i));
  return chunks;
}

TEST(ThreadPoolTest, ChunkRangesAreContiguousBalancedAndCoverTheRange) {
  for (int64_t n : {0, 1, 2, 3, 7, 100, 1001}) {
    for (int threads : {1, 2, 3, 8}) {
      std::vector<ChunkRange> chunks = expected_chunks(n, threads);
      ASSERT_EQ(static_cast<int64_t>(chunks.size()), std::min<int64_t>(n, threads));
      int64_t next = 0;
      for (const ChunkRange& chunk : chunks) {
        EXPECT_EQ(chunk.begin, next);
        int64_t size = chunk.end - chunk.begin;
        EXPECT_TRUE(size == n / threads || size == n / threads + 1) << n << " " << threads;
        EXPECT_GE(size, 1);
        next = chunk.end;
      }
      EXPECT_EQ(next, n);
    }
  }
  // Worked by hand: 10 over 3 threads is 4, 3, 3.
  EXPECT_EQ(chunk_range(10, 3, 0).end, 4);
  EXPECT_EQ(chunk_range(10, 3, 1).end, 7);
  EXPECT_EQ(chunk_range(10, 3, 2).end, 10);
}

TEST(ThreadPoolTest, DefaultThreadCountIsTheAffinityMask) {
  EXPECT_GE(default_thread_count(), 1);
  ThreadPool pool;
  EXPECT_EQ(pool.num_threads(), default_thread_count());
  ThreadPool three(3);
  EXPECT_EQ(three.num_threads(), 3);
}

TEST(ThreadPoolTest, EveryIndexRunsExactlyOnce) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 5, 64, 1000, 4099}) {
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(n, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n " << n << " i " << i;
    }
  }
}

TEST(ThreadPoolTest, ChunksDependOnlyOnSizeAndThreadCount) {
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {2, 3, 10, 1001}) {
      for (int call = 0; call < 50; ++call) {
        std::mutex mutex;
        std::vector<ChunkRange> seen;
        pool.parallel_for(n, [&](int64_t begin, int64_t end) {
          std::lock_guard<std::mutex> lock(mutex);
          seen.push_back({begin, end});
        });
        std::sort(seen.begin(), seen.end(),
                  [](const ChunkRange& x, const ChunkRange& y) { return x.begin < y.begin; });
        std::vector<ChunkRange> expected = expected_chunks(n, threads);
        ASSERT_EQ(seen.size(), expected.size());
        for (size_t i = 0; i < seen.size(); ++i) {
          EXPECT_EQ(seen[i].begin, expected[i].begin);
          EXPECT_EQ(seen[i].end, expected[i].end);
        }
      }
    }
  }
}

// A 2-thread pool has one worker: two chunks running at the same time prove the caller runs one.
TEST(ThreadPoolTest, CallingThreadParticipates) {
  ThreadPool pool(2);
  std::atomic<int> started{0};
  std::atomic<bool> overlapped{true};
  std::thread::id caller = std::this_thread::get_id();
  std::atomic<bool> caller_ran{false};
  pool.parallel_for(2, [&](int64_t, int64_t) {
    if (std::this_thread::get_id() == caller) caller_ran = true;
    started.fetch_add(1);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (started.load() < 2) {
      if (std::chrono::steady_clock::now() > deadline) {
        overlapped = false;
        return;
      }
      std::this_thread::yield();
    }
  });
  EXPECT_TRUE(overlapped.load());
  EXPECT_TRUE(caller_ran.load());
}

TEST(ThreadPoolTest, OneThreadRunsOnTheCaller) {
  ThreadPool pool(1);
  std::thread::id caller = std::this_thread::get_id();
  int chunks = 0;
  pool.parallel_for(100, [&](int64_t begin, int64_t end) {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 100);
    ++chunks;
  });
  EXPECT_EQ(chunks, 1);
}

TEST(ThreadPoolTest, NestedParallelForRunsInlineWithTheSameChunks) {
  ThreadPool pool(2);
  EXPECT_FALSE(ThreadPool::in_parallel_region());
  std::vector<std::atomic<int>> hits(2 * 9);
  std::atomic<int> inner_chunks{0};
  pool.parallel_for(2, [&](int64_t outer_begin, int64_t outer_end) {
    EXPECT_TRUE(ThreadPool::in_parallel_region());
    for (int64_t outer = outer_begin; outer < outer_end; ++outer) {
      std::thread::id me = std::this_thread::get_id();
      pool.parallel_for(9, [&](int64_t begin, int64_t end) {
        EXPECT_EQ(std::this_thread::get_id(), me);
        inner_chunks.fetch_add(1);
        for (int64_t i = begin; i < end; ++i) hits[outer * 9 + i].fetch_add(1);
      });
    }
  });
  EXPECT_FALSE(ThreadPool::in_parallel_region());
  EXPECT_EQ(inner_chunks.load(), 2 * 2);  // chunk_count(9, 2) per outer index
  for (auto& hit : hits) EXPECT_EQ(hit.load(), 1);
}

TEST(ThreadPoolTest, ConcurrentCallersTakeTurns) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  auto caller = [&] {
    for (int call = 0; call < 300; ++call) {
      pool.parallel_for(37, [&](int64_t begin, int64_t end) { total.fetch_add(end - begin); });
    }
  };
  std::thread first(caller);
  std::thread second(caller);
  first.join();
  second.join();
  EXPECT_EQ(total.load(), 2 * 300 * 37);
}

// Many back-to-back jobs, so that workers waking late meet a newer job: stresses the hand-over.
TEST(ThreadPoolTest, ManyShortJobs) {
  for (int threads : {2, 3}) {
    ThreadPool pool(threads, std::chrono::microseconds(threads == 2 ? 0 : 5));
    int64_t expected = 0;
    std::atomic<int64_t> total{0};
    for (int call = 0; call < 20000; ++call) {
      int64_t n = 1 + call % 5;
      expected += n * (n - 1) / 2;
      pool.parallel_for(n, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) total.fetch_add(i, std::memory_order_relaxed);
      });
      ASSERT_EQ(total.load(), expected) << "call " << call;
    }
  }
}

TEST(ThreadPoolTest, CreatesAndDestroysQuickly) {
  for (int i = 0; i < 100; ++i) {
    ThreadPool pool(3);
    if (i % 2 == 0) pool.parallel_for(3, [](int64_t, int64_t) {});
  }
}

// Per-chunk float sums combined in chunk order: the bits depend on the chunking alone.
TEST(ThreadPoolTest, RepeatedRunsAreBitwiseIdentical) {
  const int64_t n = 100003;
  std::vector<float> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = 1.0f / static_cast<float>(i + 1);
  ThreadPool pool(2);
  auto run = [&] {
    std::vector<float> partial(chunk_count(n, pool.num_threads()));
    pool.parallel_for(n, [&](int64_t begin, int64_t end) {
      float sum = 0;
      for (int64_t i = begin; i < end; ++i) sum += values[i];
      partial[begin == 0 ? 0 : 1] = sum;  // two chunks with two threads
    });
    float total = 0;
    for (float p : partial) total += p;
    return total;
  };
  float first = run();
  for (int i = 0; i < 100; ++i) {
    float again = run();
    ASSERT_EQ(std::memcmp(&first, &again, sizeof(float)), 0);
  }
}

struct CountingContext {
  std::atomic<int64_t> covered{0};
  std::atomic<int> chunks{0};
};

void count_body(void* ctx, int64_t begin, int64_t end) {
  auto* counting = static_cast<CountingContext*>(ctx);
  counting->covered.fetch_add(end - begin);
  counting->chunks.fetch_add(1);
}

TEST(ThreadPoolTest, CAbiEntryPoint) {
  ThreadPool pool(2);
  RuntimeContext context{GemmImpl::kOpenBlas, &pool, {}};
  CountingContext with_pool;
  precast_parallel_for(&context, 1000, count_body, &with_pool);
  EXPECT_EQ(with_pool.covered.load(), 1000);
  EXPECT_EQ(with_pool.chunks.load(), 2);

  CountingContext without_context;  // null context: the caller, one chunk
  precast_parallel_for(nullptr, 1000, count_body, &without_context);
  EXPECT_EQ(without_context.covered.load(), 1000);
  EXPECT_EQ(without_context.chunks.load(), 1);

  RuntimeContext no_pool;  // a context without a pool: the caller too
  CountingContext without_pool;
  precast_parallel_for(&no_pool, 1000, count_body, &without_pool);
  EXPECT_EQ(without_pool.chunks.load(), 1);

  CountingContext empty;
  precast_parallel_for(&context, 0, count_body, &empty);
  EXPECT_EQ(empty.chunks.load(), 0);
}

// ---------------------------------------------------------------------------------------------
// GEMM

// Deterministic values in [-1, 1).
class Lcg {
 public:
  explicit Lcg(uint64_t seed) : state_(seed) {}
  double next() {
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(state_ >> 11) / static_cast<double>(1ULL << 53) * 2.0 - 1.0;
  }

 private:
  uint64_t state_;
};

struct Shape {
  int64_t m, n, k;
  bool trans_a, trans_b;
  int64_t batch = 1;
  int64_t pad = 0;  // added to every leading dimension
  double alpha = 1.0, beta = 0.0;
  bool broadcast_b = false;  // stride_b = 0: every batch entry shares one B
};

std::string describe(const Shape& s) {
  return "m " + std::to_string(s.m) + " n " + std::to_string(s.n) + " k " + std::to_string(s.k) +
         " trans " + std::to_string(s.trans_a) + std::to_string(s.trans_b) + " batch " +
         std::to_string(s.batch) + " pad " + std::to_string(s.pad) + " alpha " +
         std::to_string(s.alpha) + " beta " + std::to_string(s.beta);
}

// Operands laid out as PrecastGemmArgs describes them; padding holds NaN (A, B: must not be
// read) or a sentinel (C: must not be written).
template <typename T>
struct Operands {
  PrecastGemmArgs args{};
  std::vector<T> a, b, c, c_initial;
};

constexpr double kCSentinel = 12345.0;

template <typename T>
Operands<T> make_operands(const Shape& s, uint64_t seed) {
  Operands<T> o;
  PrecastGemmArgs& args = o.args;
  args.m = s.m;
  args.n = s.n;
  args.k = s.k;
  args.trans_a = s.trans_a;
  args.trans_b = s.trans_b;
  args.alpha = s.alpha;
  args.beta = s.beta;
  args.batch = s.batch;
  int64_t a_rows = s.trans_a ? s.k : s.m, a_cols = s.trans_a ? s.m : s.k;
  int64_t b_rows = s.trans_b ? s.n : s.k, b_cols = s.trans_b ? s.k : s.n;
  args.lda = std::max<int64_t>(a_cols, 1) + s.pad;
  args.ldb = std::max<int64_t>(b_cols, 1) + s.pad;
  args.ldc = std::max<int64_t>(s.n, 1) + s.pad;
  args.stride_a = a_rows * args.lda + 5;
  args.stride_b = s.broadcast_b ? 0 : b_rows * args.ldb + 3;
  args.stride_c = s.m * args.ldc + 2;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  o.a.assign(std::max<int64_t>(s.batch * args.stride_a, 1), nan);
  o.b.assign(std::max<int64_t>((s.broadcast_b ? 1 : s.batch) * (b_rows * args.ldb + 3), 1), nan);
  o.c.assign(std::max<int64_t>(s.batch * args.stride_c, 1), static_cast<T>(kCSentinel));
  Lcg random(seed);
  for (int64_t item = 0; item < s.batch; ++item) {
    for (int64_t i = 0; i < a_rows; ++i)
      for (int64_t j = 0; j < a_cols; ++j)
        o.a[item * args.stride_a + i * args.lda + j] = static_cast<T>(random.next());
    for (int64_t i = 0; i < b_rows && (item == 0 || !s.broadcast_b); ++i)
      for (int64_t j = 0; j < b_cols; ++j)
        o.b[item * args.stride_b + i * args.ldb + j] = static_cast<T>(random.next());
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j)
        o.c[item * args.stride_c + i * args.ldc + j] =
            s.beta == 0.0 ? nan : static_cast<T>(random.next());
  }
  o.c_initial = o.c;
  args.a = o.a.data();
  args.b = o.b.data();
  args.c = o.c.data();
  return o;
}

// Checks C against a triple loop in double, within a forward error bound of the dot product:
// (k + 2) u sum |terms|, u the unit round-off of T (x4 for slack); padding of C untouched.
template <typename T>
void expect_matches_reference(const Operands<T>& o, const std::string& what) {
  const PrecastGemmArgs& args = o.args;
  const double u = std::numeric_limits<T>::epsilon();
  int failures = 0;
  for (int64_t item = 0; item < args.batch; ++item) {
    const T* a = o.a.data() + item * args.stride_a;
    const T* b = o.b.data() + item * args.stride_b;
    const T* c0 = o.c_initial.data() + item * args.stride_c;
    const T* c = o.c.data() + item * args.stride_c;
    for (int64_t i = 0; i < args.m; ++i) {
      for (int64_t j = 0; j < args.n; ++j) {
        double sum = 0, magnitude = 0;
        for (int64_t p = 0; p < args.k; ++p) {
          double x = args.trans_a ? a[p * args.lda + i] : a[i * args.lda + p];
          double y = args.trans_b ? b[j * args.ldb + p] : b[p * args.ldb + j];
          sum += x * y;
          magnitude += std::abs(x * y);
        }
        double expected = args.alpha == 0.0 ? 0.0 : args.alpha * sum;  // A, B unread
        magnitude = args.alpha == 0.0 ? 0.0 : magnitude * std::abs(args.alpha);
        if (args.beta != 0.0) {
          expected += args.beta * static_cast<double>(c0[i * args.ldc + j]);
          magnitude += std::abs(args.beta * static_cast<double>(c0[i * args.ldc + j]));
        }
        double got = c[i * args.ldc + j];
        double tolerance = 4.0 * (static_cast<double>(args.k) + 2.0) * u * magnitude + 1e-300;
        if (!(std::abs(got - expected) <= tolerance) && failures++ < 5) {
          ADD_FAILURE() << what << ": C[" << item << "][" << i << "][" << j << "] = " << got
                        << ", expected " << expected << " (tolerance " << tolerance << ")";
        }
      }
    }
  }
  // Everything outside the m x n matrices keeps its initial value.
  for (size_t index = 0; index < o.c.size(); ++index) {
    int64_t item = static_cast<int64_t>(index) / args.stride_c;
    int64_t offset = static_cast<int64_t>(index) % args.stride_c;
    bool inside = item < args.batch && offset / args.ldc < args.m && offset % args.ldc < args.n;
    if (!inside && o.c[index] != o.c_initial[index] && failures++ < 5) {
      ADD_FAILURE() << what << ": wrote outside C at element " << index;
    }
  }
}

template <typename T>
void run(const RuntimeContext& context, const PrecastGemmArgs& args) {
  Status status = check_gemm_args(args);
  ASSERT_TRUE(status.ok()) << status.error().message();
  if constexpr (std::is_same_v<T, float>) {
    gemm_f32(context, args);
  } else {
    gemm_f64(context, args);
  }
}

template <typename T>
void check_product(const RuntimeContext& context, const Shape& shape, uint64_t seed = 1) {
  Operands<T> o = make_operands<T>(shape, seed);
  run<T>(context, o.args);
  expect_matches_reference(o, std::string(gemm_impl_name(context.impl)) + " " +
                                  (sizeof(T) == 4 ? "f32 " : "f64 ") + describe(shape));
}

// Parameterised over implementation and thread count (0: no pool).
struct GemmCase {
  GemmImpl impl;
  int threads;
};

class GemmTest : public ::testing::TestWithParam<GemmCase> {
 protected:
  void SetUp() override {
    Expected<GemmImpl> parsed = parse_gemm_impl(gemm_impl_name(GetParam().impl));
    if (!parsed.ok()) GTEST_SKIP() << parsed.error().message();
    if (GetParam().threads > 0) pool_ = std::make_unique<ThreadPool>(GetParam().threads);
    context_ = {GetParam().impl, pool_.get(), {}};
  }
  std::unique_ptr<ThreadPool> pool_;
  RuntimeContext context_;
};

TEST_P(GemmTest, AllTransposesOddSizesPaddedLeadingDimensions) {
  const int64_t sizes[] = {1, 7, 33, 129};
  uint64_t seed = 1;
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      for (int64_t m : sizes) {
        for (int64_t n : sizes) {
          for (int64_t k : sizes) {
            Shape shape{m, n, k, trans_a, trans_b};
            shape.pad = (m + n + k) % 3 == 0 ? 0 : 3;  // tight and padded rows
            shape.alpha = 1.5;
            shape.beta = (m + k) % 2 == 0 ? -0.5 : 0.0;
            check_product<float>(context_, shape, seed);
            check_product<double>(context_, shape, seed);
            ++seed;
          }
        }
      }
    }
  }
}

TEST_P(GemmTest, AlphaBetaCombinations) {
  for (double alpha : {1.0, -2.0, 0.25}) {
    for (double beta : {0.0, 1.0, 0.5}) {
      Shape shape{33, 7, 129, false, true};
      shape.alpha = alpha;
      shape.beta = beta;
      shape.pad = 2;
      check_product<float>(context_, shape);
      check_product<double>(context_, shape);
    }
  }
}

// BLAS semantics: k == 0 or alpha == 0 gives C = beta * C without reading A or B.
TEST_P(GemmTest, DegenerateProductsScaleC) {
  for (double beta : {0.0, 1.0, -3.0}) {
    Shape empty_k{7, 5, 0, false, false};
    empty_k.beta = beta;
    empty_k.pad = 1;
    check_product<float>(context_, empty_k);
    check_product<double>(context_, empty_k);
    Shape zero_alpha{7, 5, 9, true, false};  // A and B are read as NaN if read at all
    zero_alpha.alpha = 0.0;
    zero_alpha.beta = beta;
    Operands<float> o = make_operands<float>(zero_alpha, 3);
    std::fill(o.a.begin(), o.a.end(), std::numeric_limits<float>::quiet_NaN());
    run<float>(context_, o.args);
    expect_matches_reference(o, "zero alpha");
  }
  Shape empty_m{0, 5, 3, false, false};  // nothing to do; no C element exists
  check_product<float>(context_, empty_m);
}

TEST_P(GemmTest, Batched) {
  const Shape shapes[] = {
      {7, 33, 129, false, false, /*batch=*/3},   // small products
      {33, 7, 1, true, true, /*batch=*/5},       // more entries than threads
      {129, 33, 129, false, true, /*batch=*/2},  // large enough to split each product's rows
      {33, 300, 129, true, false, /*batch=*/2},  // ... or its columns (n > m)
      {64, 64, 65, false, false, /*batch=*/3},   // just above the small-product threshold
  };
  for (Shape shape : shapes) {
    for (bool broadcast_b : {false, true}) {
      shape.pad = 1;
      shape.alpha = 0.75;
      shape.beta = 0.5;
      shape.broadcast_b = broadcast_b;
      check_product<float>(context_, shape);
      check_product<double>(context_, shape);
    }
  }
}

template <typename T>
std::vector<T> product_bits(const RuntimeContext& context, const Shape& shape) {
  Operands<T> o = make_operands<T>(shape, 7);
  run<T>(context, o.args);
  return o.c;
}

TEST_P(GemmTest, RepeatedRunsAreBitwiseIdentical) {
  const Shape shapes[] = {
      {257, 263, 511, false, false},
      {200, 190, 301, true, true, /*batch=*/3},
      {40, 40, 40, false, true, /*batch=*/7},
  };
  for (const Shape& shape : shapes) {
    std::vector<float> first = product_bits<float>(context_, shape);
    std::vector<double> first_f64 = product_bits<double>(context_, shape);
    for (int repeat = 0; repeat < 3; ++repeat) {
      std::vector<float> again = product_bits<float>(context_, shape);
      std::vector<double> again_f64 = product_bits<double>(context_, shape);
      ASSERT_EQ(std::memcmp(first.data(), again.data(), first.size() * sizeof(float)), 0)
          << describe(shape);
      ASSERT_EQ(std::memcmp(first_f64.data(), again_f64.data(), first_f64.size() * sizeof(double)),
                0)
          << describe(shape);
    }
  }
}

// Compiled code may call the GEMM from inside a parallel_for body; the results must equal the
// same product called from outside.
TEST_P(GemmTest, CalledFromInsideParallelFor) {
  if (pool_ == nullptr) GTEST_SKIP() << "needs a pool";
  Shape shape{130, 120, 140, false, true};  // above OpenBLAS's threading threshold
  shape.beta = 0.5;
  std::vector<float> outside = product_bits<float>(context_, shape);
  std::vector<Operands<float>> operands;
  for (int i = 0; i < 4; ++i) operands.push_back(make_operands<float>(shape, 7));
  pool_->parallel_for(4, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) gemm_f32(context_, operands[i].args);
  });
  for (const Operands<float>& o : operands) {
    expect_matches_reference(o, "nested");
    EXPECT_EQ(std::memcmp(o.c.data(), outside.data(), outside.size() * sizeof(float)), 0);
  }
}

// The C ABI entry points run the GEMM of the context they are given.
TEST_P(GemmTest, CAbiEntryPointsUseTheirContext) {
  pin_openblas_threads(context_);
  Shape shape{33, 129, 7, true, false, /*batch=*/2};
  shape.pad = 2;
  shape.beta = 1.0;
  Operands<float> f32 = make_operands<float>(shape, 11);
  precast_gemm_f32(&context_, &f32.args);
  expect_matches_reference(f32, "precast_gemm_f32");
  Operands<double> f64 = make_operands<double>(shape, 11);
  precast_gemm_f64(&context_, &f64.args);
  expect_matches_reference(f64, "precast_gemm_f64");
  std::vector<float> direct = product_bits<float>(context_, shape);
  Operands<float> again = make_operands<float>(shape, 7);
  precast_gemm_f32(&context_, &again.args);
  EXPECT_EQ(std::memcmp(again.c.data(), direct.data(), direct.size() * sizeof(float)), 0);
  // A null context is OpenBLAS on the caller's thread.
  Operands<float> plain = make_operands<float>(shape, 11);
  precast_gemm_f32(nullptr, &plain.args);
  expect_matches_reference(plain, "precast_gemm_f32(null context)");
  pin_openblas_threads({});
}

INSTANTIATE_TEST_SUITE_P(
    Impls, GemmTest,
    ::testing::Values(GemmCase{GemmImpl::kOpenBlas, 0}, GemmCase{GemmImpl::kOpenBlas, 2},
                      GemmCase{GemmImpl::kEigen, 0}, GemmCase{GemmImpl::kEigen, 2},
                      GemmCase{GemmImpl::kEigen, 3}, GemmCase{GemmImpl::kPacked, 0},
                      GemmCase{GemmImpl::kPacked, 2}, GemmCase{GemmImpl::kPacked, 3}),
    [](const ::testing::TestParamInfo<GemmCase>& info) {
      return std::string(gemm_impl_name(info.param.impl)) + "_threads" +
             std::to_string(info.param.threads);
    });

// The packed GEMM's blocks are 48 rows and 1024 columns, and k is cut into equal blocks of at
// most 512 (1030: 344 + 344 + 342); its microkernel tile is 12 x 32 (AVX-512) or 6 x 16 (AVX2).
// 205 x 1060 x 1030 crosses every one of those boundaries with a remainder (205 = 4 x 48 + 12 +
// 1, 1060 = 1024 + 32 + 4, k blocks not multiples of 8): every transpose variant matches the
// double reference, and the bits are the same with 1, 2 and 3 threads.
TEST(PackedGemmTest, BlockEdgesMatchTheReferenceAndEveryThreadCountGivesTheSameBits) {
  if (!parse_gemm_impl("packed").ok()) GTEST_SKIP();
  uint64_t seed = 40;
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      Shape shape{205, 1060, 1030, trans_a, trans_b};
      shape.pad = 3;
      shape.alpha = trans_a ? 1.0 : -0.5;
      shape.beta = trans_b ? 0.25 : 0.0;
      Operands<float> one = make_operands<float>(shape, seed);
      run<float>(RuntimeContext{GemmImpl::kPacked, nullptr, {}}, one.args);
      expect_matches_reference(one, "packed f32 " + describe(shape));
      for (int threads : {2, 3}) {
        ThreadPool pool(threads);
        Operands<float> many = make_operands<float>(shape, seed);
        run<float>(RuntimeContext{GemmImpl::kPacked, &pool, {}}, many.args);
        EXPECT_EQ(std::memcmp(one.c.data(), many.c.data(), one.c.size() * sizeof(float)), 0)
            << describe(shape) << " with " << threads << " threads";
      }
      ++seed;
    }
  }
}

// A batched call (its products split over the pool whole) gives each product the bits of the same
// product called alone (its row blocks split over the pool): the split never changes the sums.
TEST(PackedGemmTest, BatchedProductsHaveTheBitsOfSingleOnes) {
  if (!parse_gemm_impl("packed").ok()) GTEST_SKIP();
  ThreadPool pool(2);
  RuntimeContext context{GemmImpl::kPacked, &pool, {}};
  Shape shape{200, 70, 300, false, true, /*batch=*/3};
  shape.beta = 0.5;
  Operands<float> batched = make_operands<float>(shape, 9);
  run<float>(context, batched.args);
  expect_matches_reference(batched, "packed f32 batched " + describe(shape));
  for (int64_t item = 0; item < shape.batch; ++item) {
    Operands<float> single = batched;
    single.c = batched.c_initial;
    PrecastGemmArgs args = batched.args;
    args.batch = 1;
    args.a = single.a.data() + item * args.stride_a;
    args.b = single.b.data() + item * args.stride_b;
    args.c = single.c.data() + item * args.stride_c;
    run<float>(context, args);
    const float* want = batched.c.data() + item * args.stride_c;
    EXPECT_EQ(std::memcmp(want, args.c, static_cast<size_t>(args.m * args.ldc) * sizeof(float)), 0)
        << "item " << item;
  }
}

// On several threads one product is cut into row parts x column parts of C, each run whole by
// one thread (its own B blocks): wide products split their columns, tall ones their rows, and
// four threads may take a 2 x 2 grid. Whatever the cut, every element keeps its sums, so 2, 3,
// 4 and 6 threads give the bits of one thread, which match the double reference (the tolerance
// of expect_matches_reference: 4 (k + 2) u sum |a b|).
TEST(PackedGemmTest, RowAndColumnSplitsGiveTheBitsOfOneThread) {
  if (!parse_gemm_impl("packed").ok()) GTEST_SKIP();
  // Cuts that hold for both microkernels (12 x 32 and 6 x 16 tiles): 8 rows are at most 2 row
  // tiles, so 2 threads take 4096 columns each half (a row split would give each thread all
  // of B to pack and half or none of the rows); 8 columns are one column tile, so the rows split.
  auto split_of = [](const Shape& shape, int threads) {
    Operands<float> o = make_operands<float>(shape, 1);
    gemm_backends::PackedSplit split = gemm_backends::packed_split(o.args, threads);
    return std::pair<int64_t, int64_t>(split.row_parts, split.col_parts);
  };
  EXPECT_EQ(split_of(Shape{8, 4096, 256, false, false}, 2), (std::pair<int64_t, int64_t>(1, 2)));
  EXPECT_EQ(split_of(Shape{4096, 8, 256, false, false}, 2), (std::pair<int64_t, int64_t>(2, 1)));
  EXPECT_EQ(split_of(Shape{4096, 8, 256, false, false}, 1), (std::pair<int64_t, int64_t>(1, 1)));
  // 3 threads and a single row tile: only 3 column parts are possible.
  EXPECT_EQ(split_of(Shape{5, 700, 64, true, false}, 3), (std::pair<int64_t, int64_t>(1, 3)));

  const Shape shapes[] = {
      {13, 1100, 300, false, false},  // wide, two row tiles: column parts
      {700, 40, 130, false, true},    // tall: row parts
      {301, 333, 520, true, true},    // both: a grid on 4 and 6 threads
      {5, 70, 33, true, false},       // fewer tiles than some thread counts
  };
  uint64_t seed = 60;
  for (Shape shape : shapes) {
    shape.pad = 2;
    shape.alpha = shape.trans_a ? 0.5 : 1.0;
    shape.beta = shape.trans_b ? -1.0 : 0.0;
    Operands<float> one = make_operands<float>(shape, seed);
    run<float>(RuntimeContext{GemmImpl::kPacked, nullptr, {}}, one.args);
    expect_matches_reference(one, "packed f32 " + describe(shape));
    for (int threads : {2, 3, 4, 6}) {
      ThreadPool pool(threads);
      Operands<float> many = make_operands<float>(shape, seed);
      run<float>(RuntimeContext{GemmImpl::kPacked, &pool, {}}, many.args);
      gemm_backends::PackedSplit split = gemm_backends::packed_split(many.args, threads);
      EXPECT_EQ(std::memcmp(one.c.data(), many.c.data(), one.c.size() * sizeof(float)), 0)
          << describe(shape) << " with " << threads << " threads (" << split.row_parts << " x "
          << split.col_parts << " parts)";
    }
    ++seed;
  }
}

TEST(GemmRegistryTest, NamesParseAndPrint) {
  ASSERT_GE(gemm_impls().size(), 2u);
  EXPECT_EQ(gemm_impls()[0].impl, GemmImpl::kPacked);  // the default comes first
  for (const GemmImplInfo& info : gemm_impls()) {
    EXPECT_EQ(gemm_impl_name(info.impl), info.name);
    EXPECT_FALSE(info.description.empty());
  }
  Expected<GemmImpl> openblas = parse_gemm_impl("openblas");
  ASSERT_TRUE(openblas.ok());
  EXPECT_EQ(*openblas, GemmImpl::kOpenBlas);
  EXPECT_TRUE(eigen_gemm_isa() == "x86-64-v3" || eigen_gemm_isa() == "default");
}

TEST(GemmRegistryTest, UnknownNameIsAUsageErrorListingTheChoices) {
  Expected<GemmImpl> parsed = parse_gemm_impl("mkl");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.error().code(), ExitCode::kUsage);
  EXPECT_EQ(parsed.error().message(),
            "unknown GEMM implementation 'mkl'; choose one of: packed, openblas, eigen");
  EXPECT_FALSE(parse_gemm_impl("OpenBLAS").ok());  // names are exact
  // The run's choice: "auto" is packed on every thread count (its row x column split made it
  // the faster on 2 threads too); an unknown name lists "auto" with the registry's names.
  EXPECT_EQ(*resolve_gemm_impl("auto", 1), GemmImpl::kPacked);
  EXPECT_EQ(*resolve_gemm_impl("auto", 2), GemmImpl::kPacked);
  EXPECT_EQ(*resolve_gemm_impl("auto", 16), GemmImpl::kPacked);
  EXPECT_EQ(*resolve_gemm_impl("eigen", 1), GemmImpl::kEigen);
  Expected<GemmImpl> unknown = resolve_gemm_impl("mkl", 1);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().message(),
            "unknown GEMM implementation 'mkl'; choose one of: auto, packed, openblas, eigen");
  EXPECT_FALSE(parse_gemm_impl("").ok());
}

TEST(GemmRegistryTest, PinOpenBlasThreadsFollowsTheContextsPool) {
  ThreadPool pool(2);
  pin_openblas_threads({GemmImpl::kOpenBlas, &pool, {}});
  EXPECT_EQ(openblas_get_num_threads(), 2);
  pin_openblas_threads({});
  EXPECT_EQ(openblas_get_num_threads(), 1);
}

PrecastGemmArgs valid_args(const float* a, const float* b, float* c) {
  PrecastGemmArgs args{};
  args.m = 2;
  args.n = 3;
  args.k = 4;
  args.lda = 4;
  args.ldb = 3;
  args.ldc = 3;
  args.alpha = 1;
  args.batch = 1;
  args.a = a;
  args.b = b;
  args.c = c;
  return args;
}

void expect_invalid(const PrecastGemmArgs& args, const std::string& message) {
  Status status = check_gemm_args(args);
  ASSERT_FALSE(status.ok()) << message;
  EXPECT_EQ(status.error().code(), ExitCode::kInternal);
  EXPECT_EQ(status.error().message(), message);
}

TEST(GemmArgsTest, EachInvalidFieldIsNamed) {
  float a[64] = {}, b[64] = {}, c[64] = {};
  ASSERT_TRUE(check_gemm_args(valid_args(a, b, c)).ok());
  PrecastGemmArgs args = valid_args(a, b, c);
  args.m = -1;
  expect_invalid(args, "GEMM m = -1 < 0");
  args = valid_args(a, b, c);
  args.k = int64_t{1} << 31;
  expect_invalid(args, "GEMM k = 2147483648 exceeds the BLAS integer range (2147483647)");
  args = valid_args(a, b, c);
  args.lda = 3;
  expect_invalid(args, "GEMM lda = 3 is less than max(1, columns of A (m x k)) = 4");
  args = valid_args(a, b, c);
  args.trans_a = 1;  // A is stored k x m: 2 columns
  args.lda = 2;
  EXPECT_TRUE(check_gemm_args(args).ok());
  args.lda = 1;
  expect_invalid(args, "GEMM lda = 1 is less than max(1, columns of A (k x m, trans_a)) = 2");
  args = valid_args(a, b, c);
  args.trans_b = 1;
  args.ldb = 3;
  expect_invalid(args, "GEMM ldb = 3 is less than max(1, columns of B (n x k, trans_b)) = 4");
  args = valid_args(a, b, c);
  args.ldc = 0;
  expect_invalid(args, "GEMM ldc = 0 is less than max(1, columns of C (m x n)) = 3");
  args = valid_args(a, b, c);
  args.batch = 0;
  expect_invalid(args, "GEMM batch = 0 < 1");
  args = valid_args(a, b, c);
  args.batch = 2;
  args.stride_a = 8;
  args.stride_b = 0;  // shared B is fine
  args.stride_c = 5;
  expect_invalid(args,
                 "GEMM stride_c = 5 makes the batch's C matrices overlap (each spans 6 elements)");
  args.stride_c = 6;
  EXPECT_TRUE(check_gemm_args(args).ok());
  args.stride_a = -8;
  expect_invalid(args, "GEMM stride_a = -8 < 0");
  args = valid_args(a, b, c);
  args.c = nullptr;
  expect_invalid(args, "GEMM c is null");
  args = valid_args(a, b, c);
  args.b = nullptr;
  expect_invalid(args, "GEMM b is null");
  args.alpha = 0;  // B is not read
  EXPECT_TRUE(check_gemm_args(args).ok());
}

TEST(GemmArgsDeathTest, CAbiAbortsOnInvalidArguments) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  float a[64] = {}, b[64] = {}, c[64] = {};
  PrecastGemmArgs args = valid_args(a, b, c);
  args.ldc = 1;
  EXPECT_DEATH(precast_gemm_f32(nullptr, &args), "precast_gemm_f32: GEMM ldc = 1 is less than");
  EXPECT_DEATH(precast_gemm_f64(nullptr, nullptr), "null PrecastGemmArgs");
}

}  // namespace
}  // namespace precast
