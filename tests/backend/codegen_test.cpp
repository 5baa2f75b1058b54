// The CPU code generator against the reference interpreter: every op kind on tiny functions
// (f32, f64 where meaningful, other dtypes where the op takes them), then a whole llama2 train
// step. Each function is planned (plan_memory), generated, emitted, linked with the runtime
// kernels and run with buffers laid out as the runtime will: the arena is exactly
// plan.temp_bytes, followed by a PROT_NONE page and preceded by canary bytes, and every
// argument/output buffer is followed by canary bytes. Each run is repeated on a 2-thread pool
// and must give the same bits.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/analysis/BufferAssignment.h"
#include "compiler/autodiff/TrainStep.h"
#include "compiler/backend/cpu/CodeGen.h"
#include "compiler/frontend/Frontend.h"
#include "ir/Builder.h"
#include "ir/FloatFormats.h"
#include "ir/Interpreter.h"
#include "ir/Printer.h"
#include "ir/ValueNames.h"
#include "ir/Verifier.h"
#include "runtime/kernels/Attention.h"
#include "runtime/kernels/Gemm.h"
#include "runtime/kernels/ThreadPool.h"
#include "runtime/loader/ObjectLoader.h"
#include "tests/support/ConfigTestUtil.h"
#include "tests/support/Random.h"

namespace precast {
namespace {

using backend::CodeGenOptions;
using backend::CompiledStep;
using backend::generate_step;
using backend::ProgramCall;
using backend::StorageKind;
using ir::Builder;
using ir::DType;
using ir::HostTensor;
using ir::OpKind;
using ir::TensorType;
using ir::Value;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- Buffers ---------------------------------------------------------------------------------

constexpr size_t kCanaryBytes = 64;
constexpr uint8_t kCanary = 0xa5;

// A 64-byte aligned buffer followed by canary bytes.
class GuardedBuffer {
 public:
  explicit GuardedBuffer(size_t bytes) : bytes_(bytes) {
    size_t total = (bytes + kCanaryBytes + 63) / 64 * 64;
    data_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, total)));
    std::memset(data_.get(), 0x5a, bytes);
    std::memset(data_.get() + bytes, kCanary, kCanaryBytes);
  }
  uint8_t* data() const { return data_.get(); }
  bool intact() const {
    for (size_t i = 0; i < kCanaryBytes; ++i) {
      if (data_[bytes_ + i] != kCanary) return false;
    }
    return true;
  }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  size_t bytes_;
  std::unique_ptr<uint8_t[], Free> data_;
};

// The temp arena: exactly `bytes`, ending at a PROT_NONE page (an overrun faults) and starting
// after canary bytes (an underrun is reported).
class GuardedArena {
 public:
  explicit GuardedArena(int64_t bytes) {
    size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    size_t used = static_cast<size_t>(bytes) + 4096;
    total_ = (used + page - 1) / page * page + page;
    void* map = mmap(nullptr, total_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(map, MAP_FAILED);
    base_ = static_cast<uint8_t*>(map);
    uint8_t* guard = base_ + total_ - page;
    EXPECT_EQ(mprotect(guard, page, PROT_NONE), 0);
    arena_ = guard - bytes;
    std::memset(base_, kCanary, static_cast<size_t>(arena_ - base_));
    std::memset(arena_, 0x5a, static_cast<size_t>(bytes));
  }
  ~GuardedArena() { munmap(base_, total_); }
  GuardedArena(const GuardedArena&) = delete;
  GuardedArena& operator=(const GuardedArena&) = delete;
  char* arena() const { return reinterpret_cast<char*>(arena_); }
  bool intact() const {
    for (uint8_t* p = base_; p < arena_; ++p) {
      if (*p != kCanary) return false;
    }
    return true;
  }

 private:
  uint8_t* base_ = nullptr;
  uint8_t* arena_ = nullptr;
  size_t total_ = 0;
};

void encode(const HostTensor& t, uint8_t* out) {
  for (size_t i = 0; i < t.values.size(); ++i) {
    double x = ir::round_to_dtype(t.type.dtype, t.values[i]);
    switch (t.type.dtype) {
      case DType::kF32: {
        float v = static_cast<float>(x);
        std::memcpy(out + 4 * i, &v, 4);
        break;
      }
      case DType::kF64: std::memcpy(out + 8 * i, &x, 8); break;
      case DType::kBF16: {
        float v = static_cast<float>(x);
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        auto half = static_cast<uint16_t>(bits >> 16);
        std::memcpy(out + 2 * i, &half, 2);
        break;
      }
      case DType::kF16: {
        auto v = static_cast<_Float16>(static_cast<float>(x));
        std::memcpy(out + 2 * i, &v, 2);
        break;
      }
      case DType::kS32: {
        auto v = static_cast<int32_t>(x);
        std::memcpy(out + 4 * i, &v, 4);
        break;
      }
      case DType::kU32: {
        auto v = static_cast<uint32_t>(x);
        std::memcpy(out + 4 * i, &v, 4);
        break;
      }
      case DType::kPred: out[i] = x != 0.0 ? 1 : 0; break;
    }
  }
}

HostTensor decode(const TensorType& type, const uint8_t* in) {
  HostTensor t = HostTensor::filled(type, 0.0);
  for (size_t i = 0; i < t.values.size(); ++i) {
    switch (type.dtype) {
      case DType::kF32: {
        float v;
        std::memcpy(&v, in + 4 * i, 4);
        t.values[i] = v;
        break;
      }
      case DType::kF64: std::memcpy(&t.values[i], in + 8 * i, 8); break;
      case DType::kBF16: {
        uint16_t half;
        std::memcpy(&half, in + 2 * i, 2);
        uint32_t bits = static_cast<uint32_t>(half) << 16;
        float v;
        std::memcpy(&v, &bits, 4);
        t.values[i] = v;
        break;
      }
      case DType::kF16: {
        _Float16 v;
        std::memcpy(&v, in + 2 * i, 2);
        t.values[i] = static_cast<double>(static_cast<float>(v));
        break;
      }
      case DType::kS32: {
        int32_t v;
        std::memcpy(&v, in + 4 * i, 4);
        t.values[i] = v;
        break;
      }
      case DType::kU32: {
        uint32_t v;
        std::memcpy(&v, in + 4 * i, 4);
        t.values[i] = v;
        break;
      }
      case DType::kPred: t.values[i] = in[i] != 0 ? 1.0 : 0.0; break;
    }
  }
  return t;
}

// ---- Compile, load, run ------------------------------------------------------------------------

runtime::SymbolTable runtime_symbols() {
  return {
      {"precast_gemm_f32", reinterpret_cast<const void*>(&precast_gemm_f32)},
      {"precast_gemm_f64", reinterpret_cast<const void*>(&precast_gemm_f64)},
      {"precast_parallel_for", reinterpret_cast<const void*>(&precast_parallel_for)},
      {"precast_attention_grad_f32", reinterpret_cast<const void*>(&precast_attention_grad_f32)}};
}

using Entry = void(void* const*, void* const*, char*, const void*);

struct Compiled {
  MemoryPlan plan;
  CompiledStep step;
  std::optional<runtime::LoadedObject> object;
  Entry* entry = nullptr;
  double load_ms = 0;
};

Expected<Compiled> compile(const ir::Function& f, const CodeGenOptions& options = {},
                           const BufferOptions& buffers = {}) {
  Compiled c;
  c.plan = plan_memory(f, buffers);
  PRECAST_ASSIGN_OR_RETURN(c.step, generate_step(f, c.plan, options));
  auto start = std::chrono::steady_clock::now();
  PRECAST_ASSIGN_OR_RETURN(runtime::LoadedObject object,
                           runtime::load_object(c.step.object, runtime_symbols()));
  c.object.emplace(std::move(object));
  PRECAST_ASSIGN_OR_RETURN(c.entry, c.object->function<Entry>(c.step.entry_name));
  c.load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return c;
}

struct RunResult {
  std::vector<HostTensor> results;
  bool guards_intact = true;
  double run_ms = 0;
};

// Runs the step on fresh copies of `args`; outputs of donated results are the parameters'
// buffers, as the runtime passes them.
RunResult run(const Compiled& c, const ir::Function& f, const std::vector<HostTensor>& args,
              ThreadPool* pool) {
  std::vector<GuardedBuffer> params;
  std::vector<void*> arg_pointers;
  for (const HostTensor& a : args) {
    params.emplace_back(static_cast<size_t>(a.type.byte_size()));
    encode(a, params.back().data());
    arg_pointers.push_back(params.back().data());
  }
  std::vector<GuardedBuffer> outputs;
  std::vector<void*> output_pointers;
  for (size_t k = 0; k < f.results().size(); ++k) {
    int32_t alias = f.result_alias(k);
    if (alias >= 0) {
      output_pointers.push_back(arg_pointers[static_cast<size_t>(alias)]);
    } else {
      outputs.emplace_back(static_cast<size_t>(f.type(f.results()[k]).byte_size()));
      output_pointers.push_back(outputs.back().data());
    }
  }
  GuardedArena arena(c.plan.temp_bytes);
  RuntimeContext context{GemmImpl::kOpenBlas, pool, {}};  // what precast-run passes every step
  auto start = std::chrono::steady_clock::now();
  c.entry(arg_pointers.data(), output_pointers.data(), arena.arena(), &context);
  RunResult r;
  r.run_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  for (size_t k = 0; k < f.results().size(); ++k) {
    r.results.push_back(decode(f.type(f.results()[k]),
                               static_cast<const uint8_t*>(output_pointers[k])));
  }
  r.guards_intact = arena.intact();
  for (const GuardedBuffer& b : params) r.guards_intact = r.guards_intact && b.intact();
  for (const GuardedBuffer& b : outputs) r.guards_intact = r.guards_intact && b.intact();
  return r;
}

bool same_bits(const std::vector<HostTensor>& a, const std::vector<HostTensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].values.size() != b[i].values.size()) return false;
    if (std::memcmp(a[i].values.data(), b[i].values.data(), a[i].values.size() * sizeof(double)) != 0) {
      return false;
    }
  }
  return true;
}

// Worst |got - want| / max(|want|, floor); NaN matches NaN, infinities match exactly.
double worst_error(const HostTensor& got, const HostTensor& want, double floor) {
  double worst = 0;
  for (size_t i = 0; i < want.values.size(); ++i) {
    double x = got.values[i], y = want.values[i];
    if (std::isnan(x) || std::isnan(y)) {
      if (std::isnan(x) != std::isnan(y)) return kInf;
      continue;
    }
    if (std::isinf(x) || std::isinf(y)) {
      if (x != y) return kInf;
      continue;
    }
    worst = std::max(worst, std::fabs(x - y) / std::max(std::fabs(y), floor));
  }
  return worst;
}

double max_abs(const HostTensor& t) {
  double m = 0;
  for (double v : t.values) {
    if (std::isfinite(v)) m = std::max(m, std::fabs(v));
  }
  return m;
}

double tolerance_for(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 1e-5;
    case DType::kF64: return 1e-12;
    case DType::kBF16: return 1e-2;
    case DType::kF16: return 2e-3;
    default: return 0.0;  // integers and pred: exact
  }
}

ThreadPool& two_threads() {
  static ThreadPool pool(2);
  return pool;
}

// Compiles f, runs it on one thread and on two, and compares with the interpreter: floats
// within tolerance_for(dtype) relative (or `tolerance` when given), integers exactly. Returns
// the worst relative error.
// Every kernel splits over the pool, however small, so the 2-thread run exercises the split.
CodeGenOptions split_everything() {
  CodeGenOptions options;
  options.min_parallel_elements = 1;
  return options;
}

// normwise: float errors relative to each result's largest element instead of elementwise.
double check(const ir::Function& f, const std::vector<HostTensor>& args, double tolerance = -1,
             const CodeGenOptions& options = split_everything(), bool normwise = false) {
  Status verified = ir::verify_function(f);
  EXPECT_TRUE(verified.ok()) << (verified.ok() ? "" : verified.error().message());
  if (!verified.ok()) return kInf;
  Expected<Compiled> c = compile(f, options);
  EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().message());
  if (!c.ok()) return kInf;
  RunResult one = run(*c, f, args, nullptr);
  RunResult two = run(*c, f, args, &two_threads());
  EXPECT_TRUE(one.guards_intact && two.guards_intact) << "a buffer or the arena was overrun";
  EXPECT_TRUE(same_bits(one.results, two.results)) << "1 and 2 threads differ";
  Expected<std::vector<HostTensor>> want = ir::interpret(f, args);
  EXPECT_TRUE(want.ok()) << (want.ok() ? "" : want.error().message());
  if (!want.ok()) return kInf;
  double worst = 0;
  for (size_t k = 0; k < want->size(); ++k) {
    DType dtype = (*want)[k].type.dtype;
    double tol = tolerance >= 0 ? tolerance : tolerance_for(dtype);
    double err = worst_error(one.results[k], (*want)[k], normwise ? max_abs((*want)[k]) : 1e-30);
    if (!ir::is_floating(dtype)) {
      EXPECT_EQ(one.results[k].values, (*want)[k].values) << "result " << k;
    } else {
      EXPECT_LE(err, tol) << "result " << k << " (" << ir::to_string((*want)[k].type) << ")";
    }
    worst = std::max(worst, err);
  }
  return worst;
}

// ---- Test data ---------------------------------------------------------------------------------

using testing::Random;

// Floats in [lo, hi] (a few special values first when `specials`), s32 in [-10, 10], u32 in
// [0, 20], pred 0/1.
HostTensor random_tensor(const TensorType& type, uint64_t seed, double lo = -2, double hi = 2,
                         bool specials = false) {
  HostTensor t = HostTensor::filled(type, 0.0);
  Random random{seed};
  static const double kSpecial[] = {0.0, -0.0, 1.0, -1.0, 0.5, 2.5, -2.5, kInf, -kInf, kNaN};
  for (size_t i = 0; i < t.values.size(); ++i) {
    double v = 0;
    if (ir::is_floating(type.dtype)) {
      v = specials && i < std::size(kSpecial) ? kSpecial[i] : random.uniform(lo, hi);
    } else if (type.dtype == DType::kS32) {
      v = static_cast<double>(random.below(21) - 10);
    } else if (type.dtype == DType::kU32) {
      v = static_cast<double>(random.below(21));
    } else {
      v = static_cast<double>(random.below(2));
    }
    t.values[i] = ir::round_to_dtype(type.dtype, v);
  }
  return t;
}

std::vector<HostTensor> random_args(const ir::Function& f, uint64_t seed, double lo = -2,
                                    double hi = 2, bool specials = false) {
  std::vector<HostTensor> args;
  for (Value p : f.params()) args.push_back(random_tensor(f.type(p), seed++, lo, hi, specials));
  return args;
}

TensorType ty(DType dtype, std::vector<int64_t> dims) { return TensorType{dtype, std::move(dims)}; }

// A module with one function "f" built by `body`, which returns the results.
struct TestFunction {
  ir::Module module;
  ir::Function* f = nullptr;
  explicit TestFunction(const std::function<std::vector<Value>(Builder&)>& body) {
    f = &module.add_function("f");
    Builder b(*f);
    std::vector<Value> results = body(b);
    b.set_results(results);
    Status status = b.status();
    EXPECT_TRUE(status.ok()) << (status.ok() ? "" : status.error().message());
  }
};

// ---- Elementwise ---------------------------------------------------------------------------------

constexpr DType kFloatTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16};

// Each op once materialised (a result) and once fused into a multiply.
TEST(CodeGenElementwise, UnaryFloatOps) {
  const OpKind kinds[] = {OpKind::kNeg,   OpKind::kAbs,     OpKind::kSign,  OpKind::kFloor,
                          OpKind::kCeil,  OpKind::kRoundNearestEven, OpKind::kExp,
                          OpKind::kExpm1, OpKind::kLog,     OpKind::kLog1p, OpKind::kLogistic,
                          OpKind::kTanh,  OpKind::kSqrt,    OpKind::kRsqrt, OpKind::kSin,
                          OpKind::kCos,   OpKind::kErf,     OpKind::kIsFinite};
  for (DType dtype : kFloatTypes) {
    double worst = 0;
    for (OpKind kind : kinds) {
      TestFunction t([&](Builder& b) -> std::vector<Value> {
        Value x = b.param(ty(dtype, {3, 37}));
        Value direct = b.unary(kind, x);
        Value fused = b.unary(kind, x);
        if (kind == OpKind::kIsFinite) return {direct, b.binary(OpKind::kAnd, fused, fused)};
        return {direct, b.mul(fused, b.splat(1.5, fused))};
      });
      bool positive = kind == OpKind::kLog || kind == OpKind::kSqrt || kind == OpKind::kRsqrt;
      std::vector<HostTensor> args = random_args(*t.f, 7, positive ? 0.01 : -3, 3, true);
      double err = check(*t.f, args);
      SCOPED_TRACE(std::string(ir::op_name(kind)));
      worst = std::max(worst, err);
    }
    std::printf("unary float ops %s: worst relative error %.3g\n",
                std::string(ir::dtype_name(dtype)).c_str(), worst);
  }
}

TEST(CodeGenElementwise, BinaryFloatOps) {
  const OpKind kinds[] = {OpKind::kAdd, OpKind::kSub, OpKind::kMul, OpKind::kDiv, OpKind::kRem,
                          OpKind::kMax, OpKind::kMin, OpKind::kPow, OpKind::kAtan2};
  for (DType dtype : kFloatTypes) {
    double worst = 0;
    for (OpKind kind : kinds) {
      TestFunction t([&](Builder& b) -> std::vector<Value> {
        Value x = b.param(ty(dtype, {4, 33}));
        Value y = b.param(ty(dtype, {4, 33}));
        Value direct = b.binary(kind, x, y);
        Value fused = b.binary(kind, y, x);
        return {direct, b.add(fused, b.splat(0.25, fused))};
      });
      std::vector<HostTensor> args = random_args(*t.f, 11, kind == OpKind::kPow ? 0.1 : -3, 3, true);
      worst = std::max(worst, check(*t.f, args));
    }
    std::printf("binary float ops %s: worst relative error %.3g\n",
                std::string(ir::dtype_name(dtype)).c_str(), worst);
  }
}

TEST(CodeGenElementwise, IntegerAndPredicateOps) {
  for (DType dtype : {DType::kS32, DType::kU32}) {
    for (OpKind kind : {OpKind::kAdd, OpKind::kSub, OpKind::kMul, OpKind::kDiv, OpKind::kRem,
                        OpKind::kMax, OpKind::kMin, OpKind::kAnd, OpKind::kOr, OpKind::kXor,
                        OpKind::kShiftLeft, OpKind::kShiftRightLogical}) {
      TestFunction t([&](Builder& b) -> std::vector<Value> {
        Value x = b.param(ty(dtype, {40}));
        Value y = b.param(ty(dtype, {40}));
        return {b.binary(kind, x, y)};
      });
      std::vector<HostTensor> args = random_args(*t.f, 3);
      // Division by zero, INT_MIN / -1, large and negative shifts.
      double special_x[] = {7, -7, -2147483648.0, -2147483648.0, 5, 1, 3, -1};
      double special_y[] = {0, 0, -1, 1, 32, 31, 33, -1};
      for (size_t i = 0; i < std::size(special_x); ++i) {
        args[0].values[i] = ir::round_to_dtype(dtype, dtype == DType::kU32 ? std::fabs(special_x[i]) : special_x[i]);
        args[1].values[i] = dtype == DType::kU32 ? ir::wrap_to_u32(special_y[i]) : special_y[i];
      }
      SCOPED_TRACE(std::string(ir::op_name(kind)) + " " + std::string(ir::dtype_name(dtype)));
      check(*t.f, args);
    }
  }
  TestFunction unary([&](Builder& b) -> std::vector<Value> {
    Value x = b.param(ty(DType::kS32, {30}));
    Value u = b.param(ty(DType::kU32, {30}));
    Value p = b.param(ty(DType::kPred, {30}));
    Value q = b.param(ty(DType::kPred, {30}));
    return {b.unary(OpKind::kNeg, x), b.unary(OpKind::kAbs, x), b.unary(OpKind::kSign, x),
            b.unary(OpKind::kNot, x), b.unary(OpKind::kNot, u), b.unary(OpKind::kNot, p),
            b.binary(OpKind::kAnd, p, q), b.binary(OpKind::kOr, p, q), b.binary(OpKind::kXor, p, q)};
  });
  std::vector<HostTensor> args = random_args(*unary.f, 5);
  args[0].values[0] = -2147483648.0;
  check(*unary.f, args);
}

TEST(CodeGenElementwise, CompareSelectConvert) {
  using ir::ComparisonDirection;
  for (DType dtype : {DType::kF32, DType::kF64, DType::kS32, DType::kU32, DType::kPred, DType::kBF16}) {
    TestFunction t([&](Builder& b) -> std::vector<Value> {
      Value x = b.param(ty(dtype, {50}));
      Value y = b.param(ty(dtype, {50}));
      std::vector<Value> out;
      for (ComparisonDirection d : {ComparisonDirection::kEq, ComparisonDirection::kNe,
                                    ComparisonDirection::kLt, ComparisonDirection::kLe,
                                    ComparisonDirection::kGt, ComparisonDirection::kGe}) {
        out.push_back(b.select(b.compare(x, y, d), x, y));
      }
      return out;
    });
    std::vector<HostTensor> args = random_args(*t.f, 9, -2, 2, true);
    for (size_t i = 0; i < 10; ++i) args[1].values[i] = args[0].values[(i * 3) % 10];
    SCOPED_TRACE(std::string(ir::dtype_name(dtype)));
    check(*t.f, args);
  }
  const DType all[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16,
                       DType::kS32, DType::kU32, DType::kPred};
  for (DType from : all) {
    TestFunction t([&](Builder& b) -> std::vector<Value> {
      Value x = b.param(ty(from, {64}));
      std::vector<Value> out;
      for (DType to : all) out.push_back(b.convert(x, to));
      // Fused: a convert chain feeding an elementwise op.
      out.push_back(b.add(b.convert(b.convert(x, DType::kF64), DType::kF32), b.splat(1.0, b.convert(x, DType::kF32))));
      return out;
    });
    std::vector<HostTensor> args = random_args(*t.f, 13, -70000, 70000, true);
    if (from == DType::kF64) {
      // Values near the midpoints of bf16 and f16 (double rounding would go wrong).
      args[0].values[20] = 1.0 + 0x1p-8 + 0x1p-40;
      args[0].values[21] = 1.0 + 0x1p-11 + 0x1p-40;
      args[0].values[22] = 1.0 + 0x1p-8 - 0x1p-40;
      args[0].values[23] = 3e9;
      args[0].values[24] = -3e9;
    }
    SCOPED_TRACE(std::string(ir::dtype_name(from)));
    check(*t.f, args, 0.0);  // conversions are exact
  }
}

TEST(CodeGenElementwise, ConstantsIotaBroadcastReshape) {
  for (DType dtype : {DType::kF32, DType::kF64, DType::kS32}) {
    TestFunction t([&](Builder& b) -> std::vector<Value> {
      Value x = b.param(ty(dtype, {2, 3, 4}));
      Value row = b.param(ty(dtype, {3}));
      std::vector<double> literal(12);
      for (size_t i = 0; i < literal.size(); ++i) literal[i] = static_cast<double>(i) * 0.5 - 2;
      if (dtype == DType::kS32) for (double& v : literal) v = std::floor(v);
      Value table = b.constant(literal, ty(dtype, {3, 4}));
      Value iota = b.iota(ty(dtype, {2, 3, 4}), 1);
      Value wide = b.broadcast_in_dim(row, {2, 3, 4}, {1});
      Value tiled = b.broadcast_in_dim(table, {2, 3, 4}, {1, 2});
      Value flat = b.reshape(x, {6, 4});
      Value back = b.reshape(b.add(flat, b.splat(1, flat)), {2, 3, 4});
      Value sum = b.add(b.add(b.add(x, iota), b.add(wide, tiled)), back);
      return {sum, table, b.iota(ty(dtype, {5, 2}), 0), b.broadcast_in_dim(row, {3, 2}, {0}),
              b.reshape(sum, {4, 6}), b.constant(3.0, ty(dtype, {2, 2}))};
    });
    SCOPED_TRACE(std::string(ir::dtype_name(dtype)));
    check(*t.f, random_args(*t.f, 17));
  }
}

// A scalar computation read by every element of a loop (AdamW's bias correction 1 - b^t divides
// every moment) is computed once, in the kernel's entry block, not per element: the one pow call
// of the generated IR lies in the block labelled `entry`, and the results still equal the
// interpreter's on 1 and 2 threads.
TEST(CodeGenElementwise, ScalarOperandsAreComputedBeforeTheLoop) {
  TestFunction t([&](Builder& b) -> std::vector<Value> {
    Value x = b.param(ty(DType::kF32, {64, 33}));
    Value beta = b.param(ty(DType::kF32, {}));
    Value step = b.param(ty(DType::kF32, {}));
    Value correction = b.sub(b.scalar(1.0, DType::kF32), b.pow(beta, step));
    return {b.div(x, b.broadcast_in_dim(correction, {64, 33}, {}))};
  });
  std::vector<HostTensor> args = random_args(*t.f, 23);
  args[1] = HostTensor::filled(ty(DType::kF32, {}), 0.9);
  args[2] = HostTensor::filled(ty(DType::kF32, {}), 3.0);
  check(*t.f, args);
  CodeGenOptions options = split_everything();
  options.keep_llvm_ir = true;
  Expected<Compiled> c = compile(*t.f, options);
  ASSERT_TRUE(c.ok()) << c.error().message();
  const std::string& text = c->step.llvm_ir;
  const std::string call = "call float @llvm.pow.f32";
  size_t at = text.find(call);
  ASSERT_NE(at, std::string::npos) << text;
  EXPECT_EQ(text.find(call, at + 1), std::string::npos) << "pow is called more than once";
  // The label of the call's block: the nearest line above it that is not indented.
  std::string label;
  for (size_t end = text.rfind('\n', at); end != std::string::npos && end > 0 && label.empty();) {
    size_t begin = text.rfind('\n', end - 1);
    begin = begin == std::string::npos ? 0 : begin + 1;
    std::string line = text.substr(begin, end - begin);
    if (!line.empty() && line[0] != ' ') label = line;
    end = begin == 0 ? 0 : begin - 1;
  }
  EXPECT_EQ(label.substr(0, 6), "entry:") << label;
}

// ---- Reductions and contractions ------------------------------------------------------------------

TEST(CodeGenReductions, SumMaxMinOverDims) {
  for (DType dtype : {DType::kF32, DType::kF64, DType::kS32, DType::kU32, DType::kBF16}) {
    for (OpKind kind : {OpKind::kReduceSum, OpKind::kReduceMax, OpKind::kReduceMin}) {
      TestFunction t([&](Builder& b) -> std::vector<Value> {
        Value x = b.param(ty(dtype, {3, 5, 7}));
        Value y = b.param(ty(dtype, {3, 5, 7}));
        Value product = b.mul(x, y);  // fused into the reductions
        return {b.reduce(kind, x, {2}), b.reduce(kind, x, {0}), b.reduce(kind, product, {0, 2}),
                b.reduce(kind, x, {0, 1, 2}), b.reduce(kind, x, {})};
      });
      SCOPED_TRACE(std::string(ir::op_name(kind)) + " " + std::string(ir::dtype_name(dtype)));
      check(*t.f, random_args(*t.f, 19));
    }
  }
  // NaN propagation and empty reductions.
  TestFunction t([&](Builder& b) -> std::vector<Value> {
    Value x = b.param(ty(DType::kF32, {4, 10}));
    Value empty = b.param(ty(DType::kF32, {3, 0}));
    return {b.reduce_max(x, {1}), b.reduce(OpKind::kReduceMin, x, {1}), b.reduce_sum(empty, {1}),
            b.reduce_max(empty, {1})};
  });
  check(*t.f, random_args(*t.f, 23, -2, 2, true));
}

// Max and min over a last dimension of 37 (two runs of the 16 lane extrema, then 5 more), f32 and
// f64, a materialised and a fused operand: bit for bit the interpreter's sequential loop. Row 0
// random; row 1 a NaN in a lane, row 2 a NaN among the last 5; row 3 +0 at index 2 and -0 at
// index 17 (lane 1, so combining the lanes in order would meet it first) among negatives (max)
// or positives (min): the first zero in index order, +0; row 4 the same with -0 first; row 5 the
// extremum 1.5 (or -1.5) in 4 lanes.
TEST(CodeGenReductions, LastDimensionMaxMinHaveTheSequentialBits) {
  for (DType dtype : {DType::kF32, DType::kF64}) {
    for (OpKind kind : {OpKind::kReduceMax, OpKind::kReduceMin}) {
      SCOPED_TRACE(std::string(ir::op_name(kind)) + " " + std::string(ir::dtype_name(dtype)));
      TestFunction t([&](Builder& b) -> std::vector<Value> {
        Value x = b.param(ty(dtype, {6, 37}));
        Value one = b.param(ty(dtype, {6, 37}));
        return {b.reduce(kind, x, {1}), b.reduce(kind, b.mul(x, one), {1})};
      });
      std::vector<HostTensor> args = random_args(*t.f, 31, 0.5, 1.0);
      bool max = kind == OpKind::kReduceMax;
      double sign = max ? -1.0 : 1.0;  // the non-extremal elements: below the max, above the min
      std::vector<double>& x = args[0].values;
      auto at = [&](int64_t row, int64_t column) -> double& {
        return x[static_cast<size_t>(row * 37 + column)];
      };
      for (int64_t row = 1; row < 6; ++row)
        for (int64_t column = 0; column < 37; ++column) at(row, column) *= sign;
      at(1, 20) = std::numeric_limits<double>::quiet_NaN();
      at(2, 35) = std::numeric_limits<double>::quiet_NaN();
      at(3, 2) = 0.0;
      at(3, 17) = -0.0;
      at(4, 2) = -0.0;
      at(4, 17) = 0.0;
      for (int64_t column : {5, 6, 22, 36}) at(5, column) = -1.5 * sign;
      args[1] = HostTensor::filled(args[1].type, 1.0);
      Expected<Compiled> c = compile(*t.f, split_everything());
      ASSERT_TRUE(c.ok()) << c.error().message();
      RunResult got = run(*c, *t.f, args, nullptr);
      Expected<std::vector<HostTensor>> want = ir::interpret(*t.f, args);
      ASSERT_TRUE(want.ok()) << want.error().message();
      for (size_t k = 0; k < 2; ++k) {
        for (size_t row = 0; row < 6; ++row) {
          double g = got.results[k].values[row], w = (*want)[k].values[row];
          if (row == 1 || row == 2) {
            EXPECT_TRUE(std::isnan(g)) << "result " << k << " row " << row;
          } else {
            EXPECT_EQ(std::memcmp(&g, &w, sizeof g), 0)
                << "result " << k << " row " << row << ": " << g << " against " << w;
          }
        }
        EXPECT_EQ(std::signbit(got.results[k].values[3]), false) << "result " << k;
        EXPECT_EQ(std::signbit(got.results[k].values[4]), true) << "result " << k;
        EXPECT_EQ(got.results[k].values[5], -1.5 * sign) << "result " << k;
      }
    }
  }
}

struct DotCase {
  const char* name;
  std::vector<int64_t> lhs, rhs;
  ir::DotDims dims;
};

TEST(CodeGenDot, LayoutsBatchesAndDtypes) {
  const DotCase cases[] = {
      {"matmul", {5, 7}, {7, 6}, {{}, {}, {1}, {0}}},
      {"lhs transposed", {7, 5}, {7, 6}, {{}, {}, {0}, {0}}},
      {"rhs transposed", {5, 7}, {6, 7}, {{}, {}, {1}, {1}}},
      {"both transposed", {7, 5}, {6, 7}, {{}, {}, {0}, {1}}},
      {"batched", {3, 5, 7}, {3, 7, 6}, {{0}, {0}, {2}, {1}}},
      {"batch in the middle", {5, 3, 7}, {3, 7, 6}, {{1}, {0}, {2}, {1}}},
      {"two contract dims", {2, 5, 3, 4}, {3, 4, 6}, {{}, {}, {2, 3}, {0, 1}}},
      {"split contract dims", {3, 5, 4}, {3, 4, 6}, {{}, {}, {0, 2}, {0, 1}}},
      {"projection", {2, 4, 8}, {8, 3, 2}, {{}, {}, {2}, {0}}},
      {"vector", {7}, {7}, {{}, {}, {0}, {0}}},
      {"outer", {3, 1}, {1, 4}, {{}, {}, {1}, {0}}},
      {"gqa scores", {2, 4, 2, 3, 5}, {2, 6, 2, 5}, {{0, 2}, {0, 2}, {4}, {3}}},
      {"empty contraction", {3, 0}, {0, 4}, {{}, {}, {1}, {0}}},
  };
  for (DType dtype : {DType::kF32, DType::kF64}) {
    double worst = 0;
    for (const DotCase& c : cases) {
      TestFunction t([&](Builder& b) -> std::vector<Value> {
        Value x = b.param(ty(dtype, c.lhs));
        Value y = b.param(ty(dtype, c.rhs));
        return {b.dot_general(x, y, c.dims)};
      });
      SCOPED_TRACE(std::string(c.name) + " " + std::string(ir::dtype_name(dtype)));
      worst = std::max(worst, check(*t.f, random_args(*t.f, 29)));
    }
    std::printf("dot_general %s: worst relative error %.3g\n",
                std::string(ir::dtype_name(dtype)).c_str(), worst);
  }
  // Mixed and integer dtypes, and a constant operand (no buffer): the loop-nest kernel.
  TestFunction mixed([&](Builder& b) -> std::vector<Value> {
    Value x = b.param(ty(DType::kBF16, {4, 6}));
    Value y = b.param(ty(DType::kBF16, {6, 3}));
    Value i = b.param(ty(DType::kS32, {4, 6}));
    Value j = b.param(ty(DType::kS32, {6, 3}));
    Value w = b.param(ty(DType::kF32, {4, 6}));
    Value ones = b.constant(0.5, ty(DType::kF32, {6, 2}));
    return {b.dot_general(x, y, {{}, {}, {1}, {0}}, DType::kF32), b.dot_general(x, y, {{}, {}, {1}, {0}}),
            b.dot_general(i, j, {{}, {}, {1}, {0}}), b.dot_general(w, ones, {{}, {}, {1}, {0}})};
  });
  check(*mixed.f, random_args(*mixed.f, 31));
}

// ---- Data movement and indexing ---------------------------------------------------------------------

TEST(CodeGenDataMovement, TransposeSliceConcatenatePad) {
  for (DType dtype : {DType::kF32, DType::kF64, DType::kS32, DType::kPred, DType::kBF16}) {
    TestFunction t([&](Builder& b) -> std::vector<Value> {
      Value x = b.param(ty(dtype, {3, 4, 5}));
      Value y = b.param(ty(dtype, {3, 2, 5}));
      Value p = b.param(ty(dtype, {}));
      std::vector<Value> parts = {x, y, x};
      return {b.transpose(x, {2, 0, 1}),
              b.transpose(dtype == DType::kPred ? b.binary(OpKind::kXor, x, x) : b.add(x, x), {1, 0, 2}),
              b.slice(x, {1, 0, 2}, {3, 4, 5}),
              b.slice(x, {0, 1, 0}, {3, 4, 5}, {2, 2, 3}),
              b.concatenate(parts, 1),
              b.concatenate(std::vector<Value>{y, y}, 0),
              b.pad(x, p, {1, 0, 2}, {0, 2, 1}),
              b.pad(x, p, {-1, 1, 0}, {1, -2, -1}, {1, 0, 2})};
    });
    SCOPED_TRACE(std::string(ir::dtype_name(dtype)));
    check(*t.f, random_args(*t.f, 37));
  }
}

// Transposes that rotate the dimensions (a 2-D transpose of grouped dimensions, the weight
// gradients' [M, E] -> [E, M] and the attention kernels' [E, H, D] <-> [H, D, E]) are copied in
// tiles of 32 rows x 64 columns of the result: shapes with several tasks and partial last tiles
// in both directions, every dtype, equal to the interpreter bit for bit on 1 and 2 threads.
TEST(CodeGenDataMovement, RotationTransposesInTiles) {
  for (DType dtype : {DType::kF32, DType::kF64, DType::kS32, DType::kPred, DType::kBF16}) {
    TestFunction t([&](Builder& b) -> std::vector<Value> {
      Value m = b.param(ty(dtype, {130, 70}));  // [1, 0]: 3 tasks (70 = 2 x 32 + 6), 3 tiles
      Value c = b.param(ty(dtype, {3, 50, 40}));  // [1, 2, 0]: P 3, Q 2000
      Value d = b.param(ty(dtype, {40, 3, 37}));  // [2, 0, 1]: P 120, Q 37
      Value e = b.param(ty(dtype, {64, 32}));  // [1, 0]: whole tiles only
      return {b.transpose(m, {1, 0}), b.transpose(c, {1, 2, 0}), b.transpose(d, {2, 0, 1}),
              b.transpose(e, {1, 0})};
    });
    SCOPED_TRACE(std::string(ir::dtype_name(dtype)));
    check(*t.f, random_args(*t.f, 38), 0.0);
  }
}

TEST(CodeGenIndexing, TakeAndScatterAdd) {
  for (DType dtype : {DType::kF32, DType::kF64, DType::kS32}) {
    for (DType id_type : {DType::kS32, DType::kU32}) {
      TestFunction t([&](Builder& b) -> std::vector<Value> {
        Value table = b.param(ty(dtype, {6, 4}));
        Value ids = b.param(ty(id_type, {2, 5}));
        Value cube = b.param(ty(dtype, {2, 6, 3}));
        Value updates = b.param(ty(dtype, {2, 5, 4}));
        Value updates1 = b.param(ty(dtype, {2, 2, 5, 3}));
        Value zeros = b.constant(0.0, ty(dtype, {6, 4}));
        return {b.take(table, ids, 0), b.take(cube, ids, 1),
                b.take(b.mul(table, table), ids, 0),
                b.scatter_add(table, ids, updates, 0), b.scatter_add(zeros, ids, updates, 0),
                b.scatter_add(cube, ids, updates1, 1)};
      });
      std::vector<HostTensor> args = random_args(*t.f, 41);
      // Ids out of range (clamped by take, dropped by scatter_add) and duplicates.
      double id_values[] = {0, 5, 7, 2, 2, 1, 0, 3, 3, 3};
      for (size_t i = 0; i < 10; ++i) {
        args[1].values[i] = id_type == DType::kS32 && i == 2 ? -3 : id_values[i];
      }
      SCOPED_TRACE(std::string(ir::dtype_name(dtype)) + " ids " + std::string(ir::dtype_name(id_type)));
      check(*t.f, args);
    }
  }
}

// top_k against the interpreter: random rows, rows with ties (lower index first), NaN and
// infinities, k from 1 to the whole row.
TEST(CodeGenIndexing, TopK) {
  for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kS32}) {
    TestFunction t([&](Builder& b) -> std::vector<Value> {
      Value x = b.param(ty(dtype, {3, 4, 6}));
      return {b.top_k(x, 1), b.top_k(x, 2), b.top_k(x, 6), b.top_k(b.reshape(x, {12, 6}), 3)};
    });
    std::vector<HostTensor> args = random_args(*t.f, 43);
    // Row 0: ties; row 1: NaN and infinities (floats only).
    double row0[] = {2, 7, 2, 7, 1, 2};
    for (size_t i = 0; i < 6; ++i) args[0].values[i] = row0[i];
    if (ir::is_floating(dtype)) {
      double inf = std::numeric_limits<double>::infinity();
      double row1[] = {std::nan(""), 1, -inf, inf, std::nan(""), 0};
      for (size_t i = 0; i < 6; ++i) args[0].values[6 + i] = row1[i];
    }
    SCOPED_TRACE(std::string(ir::dtype_name(dtype)));
    check(*t.f, args);
  }
}

TEST(CodeGenRandom, BitwiseEqualToInterpreter) {
  for (DType seed_type : {DType::kU32, DType::kS32}) {
    TestFunction t([&](Builder& b) -> std::vector<Value> {
      Value seed = b.param(ty(seed_type, {}));
      return {b.rng_bits(seed, {5, 7}, 0), b.rng_bits(seed, {5, 7}, 3),
              b.rng_uniform(seed, ty(DType::kF32, {33}), 1),
              b.rng_uniform(seed, ty(DType::kF64, {33}), 1),
              b.rng_uniform(seed, ty(DType::kBF16, {33}), 2),
              b.rng_uniform(seed, ty(DType::kF16, {33}), 2),
              b.rng_normal(seed, ty(DType::kF32, {8, 9}), 4),
              b.rng_normal(seed, ty(DType::kF64, {8, 9}), 4),
              b.rng_normal(seed, ty(DType::kF16, {8, 9}), 5),
              b.rng_truncated_normal(seed, ty(DType::kF32, {40, 50}), 6, 2.0),
              b.rng_truncated_normal(seed, ty(DType::kBF16, {300}), 7, 1.5)};
    });
    std::vector<HostTensor> args = {HostTensor::scalar(seed_type == DType::kS32 ? -12345 : 4000000000.0, seed_type)};
    SCOPED_TRACE(std::string(ir::dtype_name(seed_type)));
    check(*t.f, args, 0.0);
  }
}

// ---- Attention ----------------------------------------------------------------------------------

struct AttentionCase {
  const char* name;
  int64_t queries, keys, heads, kv_heads;
  ir::AttentionOptions options;
  bool segments;
};

// The attention gradient's fallback for rows too many for its stack statistics (group x queries
// x 24 bytes over 128 KiB: here 2 x 2800 rows), where dk and dv accumulate in place in their
// dtype: in f64 the interpreter's values up to the order of 5600-term sums. (In bf16 or f16 that
// in-place accumulation loses the sum: the fallback is exact only in f32 and f64.)
TEST(CodeGenAttention, GradientOfVeryLongRowsMatchesTheInterpreter) {
  TestFunction t([&](Builder& b) -> std::vector<Value> {
    Value q = b.param(ty(DType::kF64, {1, 2800, 2, 2}));
    Value k = b.param(ty(DType::kF64, {1, 3, 1, 2}));
    Value v = b.param(ty(DType::kF64, {1, 3, 1, 3}));
    Value dout = b.param(ty(DType::kF64, {1, 2800, 2, 3}));
    ir::AttentionOptions options{0.5, false, 0, 0.0, false};
    Value out = b.attention(q, k, v, options);
    std::array<Value, 3> grads = b.attention_grad(q, k, v, out, dout, options);
    return {grads[0], grads[1], grads[2]};
  });
  CodeGenOptions options = split_everything();
  options.exact_kernels = true;
  double worst = check(*t.f, random_args(*t.f, 7), 1e-10, options, false);
  std::printf("attention_grad, 5600 rows per task (in-place fallback): worst relative error %.3g\n",
              worst);
}

TEST(CodeGenAttention, ForwardAndGradient) {
  const AttentionCase cases[] = {
      {"plain", 6, 6, 2, 2, {0.5, false, 0, 0.0, false}, false},
      {"causal gqa", 7, 7, 4, 2, {0.4, true, 0, 0.0, true}, false},
      {"window softcap", 9, 9, 2, 1, {0.3, true, 3, 5.0, true}, false},
      {"segments", 8, 8, 4, 2, {0.35, true, 0, 0.0, true}, true},
      {"cross lengths", 5, 7, 2, 2, {0.6, false, 2, 0.0, false}, true},
  };
  // f32 runs twice. With the exact kernels every sum is in double as in the interpreter:
  // elementwise within 1e-5. The default f32 kernels sum in float (scores, softmax, dq, dk, dv,
  // out): a sum whose terms cancel (dq's Σ p (dp - Δ) k, out's Σ p v) has a large elementwise
  // relative error in any f32 implementation (an exact 0 of the interpreter's comes out as
  // 1e-8), so they are compared relative to each result's largest element, at the same 1e-5,
  // as the train step compares its f32 GEMM results.
  struct Mode {
    DType dtype;
    bool exact;
  };
  for (Mode mode : {Mode{DType::kF32, false}, Mode{DType::kF32, true}, Mode{DType::kF64, false},
                    Mode{DType::kBF16, false}}) {
    DType dtype = mode.dtype;
    CodeGenOptions options = split_everything();
    options.exact_kernels = mode.exact;
    bool normwise = dtype == DType::kF32 && !mode.exact;
    double worst = 0;
    // Head and value dimensions: odd ones (loops), and for f32 multiples of 16 and of 8 (the
    // f32 kernels' vector code).
    std::vector<std::array<int64_t, 2>> heads = {{4, 3}};
    if (dtype == DType::kF32) heads.insert(heads.end(), {{16, 16}, {8, 24}});
    for (std::array<int64_t, 2> head : heads)
      for (const AttentionCase& c : cases) {
        TestFunction t([&](Builder& b) -> std::vector<Value> {
          Value q = b.param(ty(dtype, {2, c.queries, c.heads, head[0]}));
          Value k = b.param(ty(dtype, {2, c.keys, c.kv_heads, head[0]}));
          Value v = b.param(ty(dtype, {2, c.keys, c.kv_heads, head[1]}));
          Value dout = b.param(ty(dtype, {2, c.queries, c.heads, head[1]}));
          std::optional<Value> qs, ks;
          if (c.segments) {
            qs = b.param(ty(DType::kS32, {2, c.queries}));
            ks = b.param(ty(DType::kS32, {2, c.keys}));
          }
          Value out = c.segments ? b.attention(q, k, v, *qs, *ks, c.options)
                                 : b.attention(q, k, v, c.options);
          std::array<Value, 3> grads =
              c.segments ? b.attention_grad(q, k, v, out, dout, *qs, *ks, c.options)
                         : b.attention_grad(q, k, v, out, dout, c.options);
          return {out, grads[0], grads[1], grads[2]};
        });
        std::vector<HostTensor> args = random_args(*t.f, 43);
        if (c.segments) {
          // Row 0: segments 1,1,..,2,2,..; row 1: a fully masked query (segment 9 on the q side).
          for (size_t i = 0; i < args[4].values.size(); ++i)
            args[4].values[i] = i % static_cast<size_t>(c.queries) < 3 ? 1 : 2;
          for (size_t i = 0; i < args[5].values.size(); ++i)
            args[5].values[i] = i % static_cast<size_t>(c.keys) < 3 ? 1 : 2;
          args[4].values[static_cast<size_t>(c.queries)] = 9;
        }
        SCOPED_TRACE(std::string(c.name) + " " + std::string(ir::dtype_name(dtype)) +
                     " head dims " + std::to_string(head[0]) + "/" + std::to_string(head[1]));
        worst = std::max(worst, check(*t.f, args, -1, options, normwise));
      }
    std::printf("attention + attention_grad %s%s: worst %s relative error %.3g\n",
                std::string(ir::dtype_name(dtype)).c_str(), mode.exact ? " (exact kernels)" : "",
                normwise ? "normwise" : "elementwise", worst);
  }
}

// The runtime's query-block attention (runtime/kernels/Attention.h; f32, GEMM calls on, no
// softcap or segment ids): sequences of 150 queries, so two full blocks of 64 and a partial one,
// causal (blocks skip the keys past their last row), a causal window of 40 (blocks start past
// the first keys too), no mask, fewer or more keys than queries, and segment ids (two segments
// split at position 50, and one query of segment 9, which sees no key and weighs every key
// equally); against the interpreter at 1e-5 of each result's largest element (sums in float, as
// ForwardAndGradient's f32 kernels), 1 and 2 threads bitwise. The compiled step must call the
// runtime's attention_grad kernel.
TEST(CodeGenAttention, RuntimeQueryBlocksMatchTheInterpreter) {
  struct Case {
    const char* name;
    int64_t queries, keys;
    ir::AttentionOptions options;
    bool segments;
  };
  const Case cases[] = {
      {"causal", 150, 150, {0.125, true, 0, 0.0, false}, false},
      {"causal window 40", 150, 150, {0.2, true, 40, 0.0, false}, false},
      {"no mask", 150, 150, {0.3, false, 0, 0.0, false}, false},
      {"fewer keys", 150, 70, {0.25, true, 0, 0.0, false}, false},
      {"more keys", 70, 150, {0.25, false, 0, 0.0, false}, false},
      {"causal segments", 150, 150, {0.125, true, 0, 0.0, false}, true},
  };
  double worst = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TestFunction t([&](Builder& b) -> std::vector<Value> {
      Value q = b.param(ty(DType::kF32, {2, c.queries, 4, 16}));
      Value k = b.param(ty(DType::kF32, {2, c.keys, 2, 16}));
      Value v = b.param(ty(DType::kF32, {2, c.keys, 2, 8}));
      Value dout = b.param(ty(DType::kF32, {2, c.queries, 4, 8}));
      if (c.segments) {
        Value qs = b.param(ty(DType::kS32, {2, c.queries}));
        Value ks = b.param(ty(DType::kS32, {2, c.keys}));
        Value out = b.attention(q, k, v, qs, ks, c.options);
        std::array<Value, 3> grads = b.attention_grad(q, k, v, out, dout, qs, ks, c.options);
        return {out, grads[0], grads[1], grads[2]};
      }
      Value out = b.attention(q, k, v, c.options);
      std::array<Value, 3> grads = b.attention_grad(q, k, v, out, dout, c.options);
      return {out, grads[0], grads[1], grads[2]};
    });
    std::vector<HostTensor> args = random_args(*t.f, 61);
    if (c.segments) {
      for (size_t i = 0; i < args[4].values.size(); ++i)
        args[4].values[i] = i % static_cast<size_t>(c.queries) < 50 ? 1 : 2;
      for (size_t i = 0; i < args[5].values.size(); ++i)
        args[5].values[i] = i % static_cast<size_t>(c.keys) < 50 ? 1 : 2;
      args[4].values[static_cast<size_t>(c.queries) + 100] = 9;
    }
    worst = std::max(worst, check(*t.f, args, -1, split_everything(), true));
    CodeGenOptions options = split_everything();
    options.keep_llvm_ir = true;
    Expected<Compiled> compiled = compile(*t.f, options);
    ASSERT_TRUE(compiled.ok()) << compiled.error().message();
    EXPECT_NE(compiled->step.llvm_ir.find("call void @precast_attention_grad_f32("),
              std::string::npos);
  }
  std::printf(
      "runtime query-block attention + attention_grad f32: worst normwise relative error %.3g\n",
      worst);
}

// Context parallelism's forms: a piece of the sequence whose query and key positions are
// operands (positions=true; here the second half of the queries against every other key, and a
// query at position 0 that sees no key), and attention_stats' row max and softmax sum, with and
// without segments, against the interpreter. Both run the exact kernels (sums in double).
TEST(CodeGenAttention, PositionsAndStatistics) {
  for (DType dtype : {DType::kF32, DType::kF64}) {
    for (bool segments : {false, true}) {
      for (ir::AttentionOptions options : {ir::AttentionOptions{0.4, true, 0, 0.0, false, true},
                                           ir::AttentionOptions{0.3, true, 4, 5.0, true, true}}) {
        TestFunction t([&](Builder& b) -> std::vector<Value> {
          Value q = b.param(ty(dtype, {2, 5, 2, 4}));
          Value k = b.param(ty(dtype, {2, 7, 1, 4}));
          Value v = b.param(ty(dtype, {2, 7, 1, 3}));
          Value dout = b.param(ty(dtype, {2, 5, 2, 3}));
          Value q_positions = b.param(ty(DType::kS32, {5}));
          Value kv_positions = b.param(ty(DType::kS32, {7}));
          std::vector<Value> masks;
          if (segments) {
            masks.push_back(b.param(ty(DType::kS32, {2, 5})));
            masks.push_back(b.param(ty(DType::kS32, {2, 7})));
          }
          masks.push_back(q_positions);
          masks.push_back(kv_positions);
          std::vector<Value> operands = {q, k, v};
          operands.insert(operands.end(), masks.begin(), masks.end());
          std::array<Value, 3> stats = b.attention_stats(operands, options);
          Value out = b.attention(operands, options);
          std::vector<Value> grad_operands = {q, k, v, out, dout};
          grad_operands.insert(grad_operands.end(), masks.begin(), masks.end());
          std::array<Value, 3> grads = b.attention_grad(grad_operands, options);
          return {stats[0], stats[1], stats[2], out, grads[0], grads[1], grads[2]};
        });
        std::vector<HostTensor> args = random_args(*t.f, 17);
        args[4].values = {0, 3, 5, 6, 9};
        args[5].values = {1, 2, 4, 6, 8, 10, 12};
        if (segments) {
          args[6].values = {1, 1, 2, 2, 2, 1, 1, 1, 1, 1};
          args[7].values = {1, 1, 1, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1};
        }
        SCOPED_TRACE(std::string(ir::dtype_name(dtype)) + (segments ? " segments" : "") +
                     " window " + std::to_string(options.sliding_window));
        check(*t.f, args, -1, split_everything(), false);
      }
    }
  }
}

// ---- Memory plan, donation and errors ---------------------------------------------------------------

TEST(CodeGenPlan, DonatedResultsInPlaceAndCopied) {
  // w' = w - 0.1 * g (in place: w is not read afterwards); v' = v * 2 with v read after it is
  // computed (written to a temp, copied into v's buffer at the end); a result returned twice and
  // a parameter returned unchanged.
  TestFunction t([&](Builder& b) -> std::vector<Value> {
    Value w = b.param(ty(DType::kF32, {64, 33}), "w");
    Value g = b.param(ty(DType::kF32, {64, 33}), "g");
    Value v = b.param(ty(DType::kF32, {16}), "v");
    Value w2 = b.sub(w, b.mul(b.splat(0.1, g), g));
    Value v2 = b.mul(v, b.splat(2.0, v));
    Value total = b.reduce_sum(b.add(v2, v), {0});
    return {w2, v2, total, total, g};
  });
  t.f->set_result_alias(0, 0);
  t.f->set_result_alias(1, 2);
  check(*t.f, random_args(*t.f, 47));
  MemoryPlan plan = plan_memory(*t.f);
  EXPECT_EQ(plan.alias_bytes, 64 * 33 * 4 + 16 * 4);
}

TEST(CodeGenPlan, UnfusedPlanAndArenaSize) {
  TestFunction t([&](Builder& b) -> std::vector<Value> {
    Value x = b.param(ty(DType::kF32, {32, 48}));
    Value y = b.param(ty(DType::kF32, {48, 16}));
    Value h = b.tanh(b.dot_general(b.exp(b.neg(x)), y, {{}, {}, {1}, {0}}));
    Value s = b.reduce_sum(b.mul(h, h), {1});
    return {b.div(h, b.broadcast_in_dim(s, {32, 16}, {0}))};
  });
  BufferOptions unfused;
  unfused.fuse = false;
  for (const BufferOptions& options : {BufferOptions{}, unfused}) {
    Expected<Compiled> c = compile(*t.f, {}, options);
    ASSERT_TRUE(c.ok()) << c.error().message();
    // Positive operands: no cancellation in the product, whose f32 GEMM accumulates in f32.
    std::vector<HostTensor> args = random_args(*t.f, 53, 0.1, 1.0);
    RunResult r = run(*c, *t.f, args, nullptr);
    EXPECT_TRUE(r.guards_intact);
    Expected<std::vector<HostTensor>> want = ir::interpret(*t.f, args);
    ASSERT_TRUE(want.ok());
    EXPECT_LE(worst_error(r.results[0], (*want)[0], 1e-30), 1e-5);
    EXPECT_EQ(c->step.temp_bytes, c->plan.temp_bytes);
    EXPECT_GT(c->plan.temp_bytes, 0);
  }
}

// A donated parameter whose result comes from a transpose (which reads the parameter at other
// positions than it writes) is not updated in place: the plan gives the transpose its own buffer,
// copied into the parameter's at the end, and the code computes the right values.
TEST(CodeGenPlan, DonationThroughATransposeIsNotInPlace) {
  TestFunction t([&](Builder& b) -> std::vector<Value> {
    Value w = b.param(ty(DType::kF32, {8, 8}), "w");
    return {b.transpose(w, {1, 0})};
  });
  t.f->set_result_alias(0, 0);
  MemoryPlan plan = plan_memory(*t.f);
  EXPECT_EQ(plan.temp_bytes, 8 * 8 * 4);
  check(*t.f, random_args(*t.f, 59));
}

// A collective is a program call of its own, run by the runtime's communicator; the entry, which
// could not run it, is left out. (tests/runtime/multi_device_step_test.cpp runs such steps.)
TEST(CodeGenCollectives, AllReduceIsAProgramCallAndTheEntryIsAbsent) {
  TestFunction t([&](Builder& b) -> std::vector<Value> {
    Value x = b.param(ty(DType::kF32, {4}));
    return {b.all_reduce(x, Builder::DeviceGroup{{"data"}, 2, false})};
  });
  Expected<CompiledStep> step = generate_step(*t.f, plan_memory(*t.f));
  ASSERT_TRUE(step.ok()) << step.error().message();
  EXPECT_FALSE(step->has_entry);
  ASSERT_EQ(step->program.size(), 1u);
  const ProgramCall& call = step->program[0];
  EXPECT_EQ(call.kind, ProgramCall::Kind::kCollective);
  EXPECT_EQ(call.symbol, "");
  EXPECT_EQ(call.collective.kind, ir::OpKind::kAllReduce);
  EXPECT_EQ(call.collective.mesh_axes, std::vector<std::string>{"data"});
  EXPECT_EQ(call.collective.bytes, 16);
  ASSERT_EQ(call.reads.size(), 1u);
  ASSERT_EQ(call.writes.size(), 1u);
  EXPECT_EQ(call.reads[0].first.kind, StorageKind::kArgument);
  EXPECT_EQ(call.writes[0].first.kind, StorageKind::kOutput);
}

TEST(CodeGenErrors, UnplannedStagingAndBadPlans) {
  // A gather along dimension 1 needs a staging buffer the default plan does not have.
  TestFunction gather([&](Builder& b) -> std::vector<Value> {
    Value x = b.param(ty(DType::kF32, {2, 3}));
    return {b.all_gather(x, 1, Builder::DeviceGroup{{"fsdp"}, 2, false})};
  });
  Expected<CompiledStep> unstaged = generate_step(*gather.f, plan_memory(*gather.f));
  ASSERT_FALSE(unstaged.ok());
  EXPECT_EQ(unstaged.error().code(), ExitCode::kInternal);
  EXPECT_NE(unstaged.error().message().find("collective_staging"), std::string::npos)
      << unstaged.error().message();

  TestFunction other([&](Builder& b) -> std::vector<Value> {
    Value x = b.param(ty(DType::kF32, {4}));
    return {b.exp(b.exp(x))};
  });
  Expected<CompiledStep> mismatch = generate_step(*other.f, MemoryPlan{});
  ASSERT_FALSE(mismatch.ok());
  EXPECT_EQ(mismatch.error().code(), ExitCode::kInternal);
}

// The sparse MoE path's ragged all-to-all (expert parallelism with sparse_matmul=true) has no
// runtime collective yet: the cpu backend refuses it as a usage error naming the keys.
TEST(CodeGenErrors, RaggedAllToAllIsNotSupportedYet) {
  TestFunction t([&](Builder& b) -> std::vector<Value> {
    Value x = b.param(ty(DType::kF32, {1, 4, 2}));
    Value dest = b.param(ty(DType::kS32, {1, 4}));
    return {b.ragged_all_to_all(x, dest, 4, false, Builder::DeviceGroup{{"expert"}, 2, false})};
  });
  Expected<CompiledStep> step = generate_step(*t.f, plan_memory(*t.f));
  ASSERT_FALSE(step.ok());
  EXPECT_EQ(step.error().code(), ExitCode::kUsage);
  EXPECT_NE(step.error().message().find("sparse_matmul=true with expert parallelism "
                                        "(ici_expert_parallelism x dcn_expert_parallelism = 2) "
                                        "is not supported yet by the cpu backend"),
            std::string::npos)
      << step.error().message();
}

// ---- A whole train step ---------------------------------------------------------------------------

struct ModelSize {
  int64_t emb = 16, mlp = 24, layers = 2, head_dim = 4, vocab = 32, length = 8, rows = 2;
};

ModelSpec tiny_llama(const ModelSize& m = {}) {
  auto key = [](const char* name, int64_t value) { return std::string(name) + "=" + std::to_string(value); };
  std::vector<std::string> overrides = {
      "model_name=llama2-7b",       "override_model_config=true",
      key("base_emb_dim", m.emb),   key("base_mlp_dim", m.mlp),
      key("base_num_decoder_layers", m.layers), key("head_dim", m.head_dim),
      key("vocab_size", m.vocab),   key("max_target_length", m.length),
      key("per_device_batch_size", m.rows), "dtype=float32",
      "base_num_query_heads=4",     "base_num_kv_heads=2"};
  Config config = testing::load_derived(testing::base_yml(), overrides, 1);
  Expected<ModelSpec> spec = model_spec_from_config(config);
  EXPECT_TRUE(spec.ok()) << (spec.ok() ? "" : spec.error().message());
  return spec.ok() ? *spec : ModelSpec();
}

struct TrainStepFixture {
  std::optional<frontend::ForwardModel> forward;
  autodiff::TrainStepLayout layout;
  std::vector<HostTensor> args;
};

// The tiny llama2 train step (AdamW, f32) and its arguments: weights around their init scale,
// AdamW moments of a step in progress, a packed batch (two segments and padding in row 0), the
// run-time scalars.
void build_train_step(TrainStepFixture& out, const ModelSize& size = {}) {
  const int64_t kRows = size.rows, kLength = size.length, kVocab = size.vocab;
  frontend::ForwardOptions forward_options;
  forward_options.dtype_override = DType::kF32;
  forward_options.loss_sums = true;
  Expected<frontend::ForwardModel> forward =
      frontend::lower_forward(tiny_llama(size), kRows, kLength, forward_options);
  ASSERT_TRUE(forward.ok()) << forward.error().message();
  out.forward.emplace(std::move(*forward));
  autodiff::TrainStepSpec spec;
  spec.mu_dtype = spec.grad_dtype = DType::kF32;
  Expected<autodiff::TrainStepLayout> layout = autodiff::add_train_step(
      out.forward->module, out.forward->module.function(0), out.forward->weights.size(), spec);
  ASSERT_TRUE(layout.ok()) << layout.error().message();
  out.layout = *layout;
  const ir::Function& f = *layout->function;
  std::vector<HostTensor>& args = out.args;
  Random random{99};
  for (const frontend::WeightInfo& w : out.forward->weights) {
    HostTensor t = HostTensor::filled(ty(DType::kF32, w.dims), 0);
    double base = w.init == frontend::InitKind::kOnes ? 1.0 : 0.0;
    double scale = (w.init == frontend::InitKind::kNormal || w.init == frontend::InitKind::kTruncatedNormal) ? w.stddev : 0.1;
    for (double& v : t.values) v = static_cast<float>(base + scale * random.uniform(-1.7, 1.7));
    args.push_back(std::move(t));
  }
  // Zero first moments; second moments of 1e-6 (as after earlier steps): with zero second
  // moments AdamW's first update is m / (sqrt(v) + eps) = g / (|g| + eps), about ±lr for every
  // gradient element however small, so an element whose true gradient is ~0 would move its
  // parameter by up to lr on the last bits of its rounding alone, and the comparison with the
  // interpreter would measure rounding noise rather than the code.
  for (size_t i = args.size(); i < layout->first_batch_param; ++i) {
    Value p = f.params()[i];
    bool second_moment = f.value_name(p).starts_with("nu.") && ir::is_floating(f.type(p).dtype);
    args.push_back(HostTensor::filled(f.type(p), second_moment ? 1e-6 : 0.0));
  }
  for (size_t i = 0; i < 6; ++i) {
    HostTensor t = HostTensor::filled(ty(DType::kS32, {kRows, kLength}), 0);
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t p = 0; p < kLength; ++p) {
        size_t at = static_cast<size_t>(r * kLength + p);
        bool padding = r == 0 && p >= kLength - 2;
        int64_t segment = r == 0 ? (p < 3 ? 1 : 2) : 1;
        int64_t position = r == 0 && p >= 3 ? p - 3 : p;
        if (r > 1) padding = false, segment = 1, position = p;
        if (i == 0 || i == 3) t.values[at] = static_cast<double>(random.below(kVocab));
        if (i == 1 || i == 4) t.values[at] = padding ? 0 : static_cast<double>(position);
        if (i == 2 || i == 5) t.values[at] = padding ? 0 : static_cast<double>(segment);
      }
    }
    args.push_back(std::move(t));
  }
  for (double v : {1e-2, 0.9, 0.95, 1e-8, 0.0, 0.1, 1.0}) args.push_back(HostTensor::scalar(v));
  ASSERT_EQ(args.size(), f.params().size());
}

enum class StepMode {
  kOracle,   // loop-nest dots, exact kernels, transcendentals in double: the interpreter's bits
  kPrecise,  // GEMM calls and the f32 kernels, transcendentals in double
  kDefault,  // the default options: GEMM calls, f32 kernels, float transcendentals
};

// Generates the step, runs it three times (twice on one thread, once on two) and compares all
// results with the interpreter.
void check_train_step(StepMode mode) {
  bool use_gemm = mode != StepMode::kOracle;
  TrainStepFixture fixture;
  ASSERT_NO_FATAL_FAILURE(build_train_step(fixture));
  const ir::Function& f = *fixture.layout.function;
  const std::vector<HostTensor>& args = fixture.args;
  const autodiff::TrainStepLayout* layout = &fixture.layout;
  CodeGenOptions options = split_everything();
  options.use_gemm = use_gemm;
  // The loop-nest run is the oracle check: exact kernels (sums in double, the interpreter's
  // order) and transcendentals in double, rounded once.
  options.exact_kernels = !use_gemm;
  options.precise_transcendentals = mode != StepMode::kDefault;
  Expected<Compiled> c = compile(f, options);
  ASSERT_TRUE(c.ok()) << c.error().message();
  std::printf("train step: %zu ops, %zu kernels, %zu GEMM calls, %zu loop-nest dots, arena %lld "
              "bytes, object %zu bytes; generate %.1f ms, emit %.1f ms, load %.2f ms\n",
              f.num_ops(), c->step.num_kernels, c->step.num_gemm_calls, c->step.num_naive_dots,
              static_cast<long long>(c->plan.temp_bytes), c->step.object.size(),
              c->step.generate_ms, c->step.emit_ms, c->load_ms);

  RunResult first = run(*c, f, args, nullptr);
  RunResult second = run(*c, f, args, nullptr);
  RunResult pooled = run(*c, f, args, &two_threads());
  EXPECT_TRUE(first.guards_intact && second.guards_intact && pooled.guards_intact);
  EXPECT_TRUE(same_bits(first.results, second.results)) << "two runs differ";
  EXPECT_TRUE(same_bits(first.results, pooled.results)) << "1 and 2 threads differ";
  double best_ms = std::min({first.run_ms, second.run_ms});
  for (int i = 0; i < 5; ++i) best_ms = std::min(best_ms, run(*c, f, args, nullptr).run_ms);
  std::printf("train step run: best %.3f ms (1 thread, kernels split as for a pool), %.3f ms (2 "
              "threads, one run)\n",
              best_ms, pooled.run_ms);

  Expected<std::vector<HostTensor>> want = ir::interpret(f, args);
  ASSERT_TRUE(want.ok()) << want.error().message();
  double worst = 0, worst_normwise = 0;
  size_t worst_at = 0;
  for (size_t k = 0; k < want->size(); ++k) {
    double err = worst_error(first.results[k], (*want)[k], 1e-30);
    // Relative to the tensor's largest element: f32 GEMMs accumulate in f32, and a product
    // whose terms cancel has a large elementwise relative error in any f32 implementation.
    double normwise = worst_error(first.results[k], (*want)[k], max_abs((*want)[k]));
    if (err > worst) worst_at = k;
    worst = std::max(worst, err);
    worst_normwise = std::max(worst_normwise, normwise);
    EXPECT_LE(normwise, 1e-5) << "result " << k;
    // Without the f32 GEMM and with the exact kernels every sum is in double in the
    // interpreter's order: the same bits.
    if (!options.use_gemm) {
      EXPECT_EQ(err, 0.0) << "result " << k;
    }
  }
  std::printf(
      "train step vs interpreter (%s): worst elementwise relative error %.3g (result "
      "%zu), worst normwise %.3g\n",
      mode == StepMode::kOracle    ? "loop-nest dots, exact kernels"
      : mode == StepMode::kPrecise ? "GEMM, double transcendentals"
                                   : "default options",
      worst, worst_at, worst_normwise);
  for (size_t m = 0; m < autodiff::kNumMetrics; ++m) {
    size_t k = layout->first_metric_result + m;
    std::printf("  %-14s generated %.9g interpreter %.9g\n", autodiff::kMetricNames[m],
                first.results[k].values[0], (*want)[k].values[0]);
    EXPECT_LE(worst_error(first.results[k], (*want)[k], 1e-30), 1e-5) << autodiff::kMetricNames[m];
  }
}

TEST(CodeGenTrainStep, TinyLlama2MatchesInterpreter) {
  check_train_step(StepMode::kPrecise);
}

TEST(CodeGenTrainStep, TinyLlama2DefaultOptionsMatchInterpreter) {
  check_train_step(StepMode::kDefault);
}

// An oracle check of every kernel's semantics at once: with loop-nest dots the generated step
// equals the interpreter bit for bit.
TEST(CodeGenTrainStep, TinyLlama2BitwiseWithLoopNestDots) {
  check_train_step(StepMode::kOracle);
}

// Timing at a less tiny size (PRECAST_TEST_MEDIUM=1; no interpreter): emb 256, mlp 1024,
// 2 layers, 4 heads of 64, vocab 2048, 4 rows of 256 tokens.
TEST(CodeGenTrainStep, MediumTiming) {
  if (std::getenv("PRECAST_TEST_MEDIUM") == nullptr) GTEST_SKIP() << "set PRECAST_TEST_MEDIUM=1";
  TrainStepFixture fixture;
  ASSERT_NO_FATAL_FAILURE(build_train_step(fixture, ModelSize{256, 1024, 2, 64, 2048, 256, 4}));
  const ir::Function& f = *fixture.layout.function;
  Expected<Compiled> c = compile(f);
  ASSERT_TRUE(c.ok()) << c.error().message();
  std::printf("medium step: %zu ops, %zu kernels, arena %.1f MB; generate %.1f ms, emit %.1f ms\n",
              f.num_ops(), c->step.num_kernels, static_cast<double>(c->plan.temp_bytes) / 1e6,
              c->step.generate_ms, c->step.emit_ms);
  for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two_threads()}) {
    double best = 1e30;
    RunResult r;
    for (int i = 0; i < 3; ++i) {
      r = run(*c, f, fixture.args, pool);
      best = std::min(best, r.run_ms);
    }
    EXPECT_TRUE(r.guards_intact);
    std::printf("medium step run (%s): best %.1f ms, loss %.6f\n", pool ? "2 threads" : "1 thread",
                best, r.results[fixture.layout.first_metric_result].values[0]);
  }
}

// Diagnosis (PRECAST_TEST_DIVERGENCE=1): every value of the step returned as a result, compared
// with the interpreter's, to find where generated code and interpreter part.
TEST(CodeGenTrainStep, LocateDivergence) {
  if (std::getenv("PRECAST_TEST_DIVERGENCE") == nullptr) GTEST_SKIP() << "set PRECAST_TEST_DIVERGENCE=1";
  TrainStepFixture fixture;
  ASSERT_NO_FATAL_FAILURE(build_train_step(fixture));
  const ir::Function& f = *fixture.layout.function;
  ir::Module module;
  ir::Function& g = module.add_function("all_values");
  Builder b(g);
  std::vector<Value> map(f.num_values());
  for (Value p : f.params()) map[p.id] = b.param(f.type(p));
  std::vector<Value> results;
  std::vector<Value> originals;
  for (ir::OpIndex i = 0; i < f.num_ops(); ++i) {
    std::vector<Value> operands;
    for (Value u : f.operands(f.op(i))) operands.push_back(map[u.id]);
    std::vector<Value> cloned = b.clone(f, i, operands);
    for (uint32_t r = 0; r < cloned.size(); ++r) {
      map[f.result(f.op(i), r).id] = cloned[r];
      results.push_back(cloned[r]);
      originals.push_back(f.result(f.op(i), r));
    }
  }
  b.set_results(results);
  ASSERT_TRUE(b.ok());
  std::map<uint32_t, HostTensor> observed;
  ir::InterpreterOptions options;
  options.observer = [&](size_t, Value v, const HostTensor& t) { observed[v.id] = t; };
  ASSERT_TRUE(ir::interpret(f, fixture.args, options).ok());
  CodeGenOptions codegen;
  if (const char* gemm = std::getenv("PRECAST_TEST_USE_GEMM")) codegen.use_gemm = gemm[0] != '0';
  Expected<Compiled> c = compile(g, codegen);
  ASSERT_TRUE(c.ok()) << c.error().message();
  RunResult r = run(*c, g, fixture.args, nullptr);
  ir::ValueNames names(f);
  int shown = 0;
  for (size_t k = 0; k < results.size() && shown < 25; ++k) {
    const HostTensor& want = observed[originals[k].id];
    if (!ir::is_floating(want.type.dtype)) {
      if (r.results[k].values != want.values) {
        std::printf("MISMATCH %s\n", ir::print_op(f, names, f.defining_op(originals[k])).c_str());
        ++shown;
      }
      continue;
    }
    double err = worst_error(r.results[k], want, 1e-30);
    if (err > 2e-7) {
      std::printf("%.3g  %s\n", err, ir::print_op(f, names, f.defining_op(originals[k])).c_str());
      ++shown;
    }
  }
}

}  // namespace
}  // namespace precast
