#include "runtime/train/StateInit.h"

#include <fmt/format.h>

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

// As the IR's @init computes it: the draw in the weight's type times the stddev constant in that
// type, one rounding of the exact product — the same bits as the interpreter. Each element is a
// function of (seed, stream, index) alone, so how the range is cut does not change a bit.
template <class Format>
void draw_normal(const NormalDraw& d, int64_t begin, int64_t end) {
  auto* out = static_cast<typename Format::Cell*>(d.buffer);
  for (int64_t i = begin; i < end; ++i) {
    auto global = static_cast<uint64_t>(d.shard != nullptr ? d.shard->global_index(i) : i);
    double z = d.bound > 0 ? ir::random_truncated_normal(d.seed, d.stream, global, d.bound)
                           : ir::random_normal(d.seed, d.stream, global);
    out[i] = Format::from(Format::value(Format::from(z)) * d.stddev);
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
