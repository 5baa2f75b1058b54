#include "runtime/train/StateInit.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "ir/Random.h"
#include "runtime/train/TensorElements.h"

namespace precast::runtime {
namespace {

// store() and rounded() of one floating-point dtype, as functions a loop can inline.
struct F32Format {
  using Cell = float;
  static Cell from(double v) { return static_cast<float>(v); }
  static double value(Cell c) { return c; }
};
struct F64Format {
  using Cell = double;
  static Cell from(double v) { return v; }
  static double value(Cell c) { return c; }
};
struct BF16Format {
  using Cell = uint16_t;
  static Cell from(double v) { return to_bf16(static_cast<float>(v)); }
  static double value(Cell c) { return from_bf16(c); }
};
struct F16Format {
  using Cell = _Float16;
  static Cell from(double v) { return static_cast<_Float16>(v); }
  static double value(Cell c) { return static_cast<double>(c); }
};

// What a "normal" or "truncated_normal" initialiser writes to elements [begin, end).
struct NormalDraw {
  void* buffer;
  uint32_t seed, stream;
  double stddev;  // already rounded to the weight's dtype
  double bound;   // > 0: the draw is truncated to [-bound, bound]
  const TensorShard* shard;  // null: element i is global element i
};

// The block loop below is built for AVX-512 (x86-64-v4) and AVX2 (x86-64-v3) as well as the
// baseline, and the widest version the CPU runs is used. Every version does the same IEEE
// operations in the same order (this file is compiled with -ffp-contract=off, so no multiply-add
// is fused), so the bits do not depend on the version; `normal_block_version` lets a test run each.
constexpr int kBlock = 256;

// Standard normal draws of `n` (<= kBlock) elements by their global indices: ir::random_normal
// element by element, written as loops over the block so that they vectorise.
[[gnu::always_inline]] inline void normal_block_body(uint64_t key, const uint64_t* index, int n,
                                                     double* z) {
  uint32_t a[kBlock], b[kBlock];
  for (int j = 0; j < n; ++j) {
    a[j] = ir::normal_log_operand(key, index[j]);
    b[j] = ir::normal_cos_operand(key, index[j]);
  }
  for (int j = 0; j < n; ++j) z[j] = ir::normal_of_bits(a[j], b[j]);
}

void normal_block_baseline(uint64_t key, const uint64_t* index, int n, double* z) {
  normal_block_body(key, index, n, z);
}
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PRECAST_INIT_VERSIONS 3
[[gnu::target("arch=x86-64-v3")]] void normal_block_v3(uint64_t key, const uint64_t* index,
                                                        int n, double* z) {
  normal_block_body(key, index, n, z);
}
[[gnu::target("arch=x86-64-v4")]] void normal_block_v4(uint64_t key, const uint64_t* index,
                                                        int n, double* z) {
  normal_block_body(key, index, n, z);
}
#else
#define PRECAST_INIT_VERSIONS 1
#endif

using NormalBlock = void (*)(uint64_t, const uint64_t*, int, double*);

// Version v (0 = baseline, 1 = x86-64-v3, 2 = x86-64-v4), or null where this build or CPU
// lacks it.
NormalBlock normal_block_of(int version) {
#if PRECAST_INIT_VERSIONS > 1
  __builtin_cpu_init();
  if (version == 2) return __builtin_cpu_supports("x86-64-v4") ? &normal_block_v4 : nullptr;
  if (version == 1) return __builtin_cpu_supports("x86-64-v3") ? &normal_block_v3 : nullptr;
#endif
  return version == 0 ? &normal_block_baseline : nullptr;
}

NormalBlock widest_normal_block() {
  static const NormalBlock widest = [] {
    for (int v = 2; v > 0; --v) {
      if (NormalBlock f = normal_block_of(v)) return f;
    }
    return &normal_block_baseline;
  }();
  return widest;
}

// ir::random_truncated_normal for an element whose first attempt `z` fell outside the bound:
// the same later attempts, and the same clamp after the last.
double redraw_truncated(uint32_t seed, uint32_t stream, uint64_t index, double bound) {
  double z = 0.0;
  for (int a = 1; a < ir::kTruncationAttempts; ++a) {
    z = ir::random_normal(seed, stream,
                          index + static_cast<uint64_t>(a) * ir::kTruncationAttemptStride);
    if (std::fabs(z) <= bound) return z;
  }
  return z < 0 ? -bound : bound;
}

// As the IR's @init computes it: the draw in the weight's type times the stddev constant in that
// type, one rounding of the exact product — the same bits as the interpreter. Each element is a
// function of (seed, stream, index) alone, so how the range is cut does not change a bit.
template <class Format>
void draw_normal(const NormalDraw& d, int64_t begin, int64_t end) {
  auto* out = static_cast<typename Format::Cell*>(d.buffer);
  uint64_t key = ir::random_key(d.seed, d.stream);
  uint64_t index[kBlock];
  double z[kBlock];
  for (int64_t first = begin; first < end; first += kBlock) {
    int n = static_cast<int>(std::min<int64_t>(kBlock, end - first));
    for (int j = 0; j < n; ++j) {
      int64_t i = first + j;
      index[j] = static_cast<uint64_t>(d.shard != nullptr ? d.shard->global_index(i) : i);
    }
    widest_normal_block()(key, index, n, z);
    if (d.bound > 0) {
      for (int j = 0; j < n; ++j) {
        if (!(std::fabs(z[j]) <= d.bound)) z[j] = redraw_truncated(d.seed, d.stream, index[j], d.bound);
      }
    }
    for (int j = 0; j < n; ++j) {
      out[first + j] = Format::from(Format::value(Format::from(z[j])) * d.stddev);
    }
  }
}

using DrawRange = void (*)(const NormalDraw&, int64_t, int64_t);

DrawRange normal_drawer(const std::string& dtype) {
  if (dtype == "f32") return &draw_normal<F32Format>;
  if (dtype == "f64") return &draw_normal<F64Format>;
  if (dtype == "bf16") return &draw_normal<BF16Format>;
  if (dtype == "f16") return &draw_normal<F16Format>;
  return nullptr;
}

}  // namespace

bool normal_block_version(int version, uint32_t seed, uint32_t stream, const uint64_t* index,
                          int n, double* z) {
  NormalBlock f = normal_block_of(version);
  if (f == nullptr) return false;
  uint64_t key = ir::random_key(seed, stream);
  for (int first = 0; first < n; first += kBlock) f(key, index + first, std::min(kBlock, n - first), z + first);
  return true;
}

// ThreadPool's chunks depend only on the size and the thread count, and each element only on
// (seed, stream, index), so the split does not change a bit.
Status initialise(void* buffer, const artifact::TensorSignature& t, size_t index, uint32_t seed,
                  ThreadPool& pool, const TensorShard* shard) {
  if (shard != nullptr && shard->whole()) shard = nullptr;
  int64_t n = elements(t);
  if (t.init == "zeros" || t.init.empty()) return Status::success();
  if (t.init == "ones") {
    for (int64_t i = 0; i < n; ++i) store(buffer, i, t.dtype, 1.0);
    return Status::success();
  }
  bool truncated = t.init.rfind("truncated_normal ", 0) == 0;
  if (t.init.rfind("normal ", 0) == 0 || truncated) {
    const char* numbers = t.init.c_str() + (truncated ? 17 : 7);
    char* end = nullptr;
    double stddev = std::strtod(numbers, &end);
    double bound = truncated ? std::strtod(end, &end) : 0.0;
    if (truncated && !(bound >= ir::kMinTruncation && std::isfinite(bound))) {
      return Error(ExitCode::kIncompatible,
                   fmt::format("input {} ('{}'): initialiser '{}' has no truncation bound of at "
                               "least {}; recompile with this build's precast compile",
                               index, t.name, t.init, ir::kMinTruncation));
    }
    NormalDraw draw{buffer, seed, static_cast<uint32_t>(index), rounded(t.dtype, stddev), bound,
                    shard};
    DrawRange drawer = normal_drawer(t.dtype);
    if (drawer == nullptr) {
      return Error(ExitCode::kIncompatible,
                   fmt::format("input {} ('{}'): initialiser '{}' on a {} tensor; only floating "
                               "point weights are drawn from a normal; recompile with this "
                               "build's precast compile",
                               index, t.name, t.init, t.dtype));
    }
    pool.parallel_for(n, [&](int64_t begin, int64_t end) { drawer(draw, begin, end); });
    return Status::success();
  }
  return Error(ExitCode::kIncompatible,
               fmt::format("input {} ('{}'): unknown initialiser '{}' in the artifact; recompile "
                           "with this build's precast compile",
                           index, t.name, t.init));
}

}  // namespace precast::runtime
