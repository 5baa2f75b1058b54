#include "runtime/train/Trainer.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "ir/Random.h"
#include "ir/support/ClosestNames.h"
#include "runtime/kernels/Gemm.h"
#include "runtime/kernels/ThreadPool.h"
#include "runtime/loader/ObjectLoader.h"

namespace precast::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// 64-byte aligned memory for the plan's buffers, released by the deleter. A buffer of
// kMappedBytes or more is an anonymous mapping: the kernel hands its pages out zero-filled on
// first touch, so zero inputs (the optimizer's moments, zeros-initialised weights) cost nothing
// until the step reads them, and no page is written twice. Smaller ones come from aligned_alloc
// and are zeroed when `zero`. The arena and the step's own outputs are written before they are
// read, so they need no zeroing either way.
constexpr size_t kMappedBytes = size_t{1} << 16;

struct Release {
  size_t mapped_bytes = 0;  // the mapping's length; 0 for aligned_alloc memory
  void operator()(void* p) const {
    if (mapped_bytes > 0) {
      munmap(p, mapped_bytes);
    } else {
      std::free(p);
    }
  }
};
using Memory = std::unique_ptr<void, Release>;

Expected<Memory> allocate(int64_t bytes, const std::string& what, bool zero) {
  size_t size = static_cast<size_t>(std::max<int64_t>(bytes, 1) + 63) / 64 * 64;
  auto out_of_memory = [&](const std::string& reason) {
    return Error(ExitCode::kFailure, fmt::format("cannot allocate {} bytes for {}: {}", bytes,
                                                 what, reason));
  };
  if (size >= kMappedBytes) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return out_of_memory(std::strerror(errno));
    return Memory(p, Release{size});
  }
  void* p = std::aligned_alloc(64, size);
  if (p == nullptr) return out_of_memory("out of host memory");
  if (zero) std::memset(p, 0, size);
  return Memory(p, Release{});
}

uint16_t to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

float from_bf16(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void store(void* base, int64_t index, const std::string& dtype, double v) {
  char* p = static_cast<char*>(base);
  if (dtype == "f32") {
    reinterpret_cast<float*>(p)[index] = static_cast<float>(v);
  } else if (dtype == "f64") {
    reinterpret_cast<double*>(p)[index] = v;
  } else if (dtype == "bf16") {
    reinterpret_cast<uint16_t*>(p)[index] = to_bf16(static_cast<float>(v));
  } else if (dtype == "f16") {
    reinterpret_cast<_Float16*>(p)[index] = static_cast<_Float16>(v);
  } else if (dtype == "s32") {
    reinterpret_cast<int32_t*>(p)[index] = static_cast<int32_t>(v);
  } else if (dtype == "u32") {
    reinterpret_cast<uint32_t*>(p)[index] = static_cast<uint32_t>(v);
  } else if (dtype == "pred") {
    reinterpret_cast<uint8_t*>(p)[index] = v != 0;
  }
}

double load(const void* base, const std::string& dtype) {
  if (dtype == "f32") return *static_cast<const float*>(base);
  if (dtype == "f64") return *static_cast<const double*>(base);
  if (dtype == "bf16") return from_bf16(*static_cast<const uint16_t*>(base));
  if (dtype == "f16") return static_cast<double>(*static_cast<const _Float16*>(base));
  if (dtype == "s32") return *static_cast<const int32_t*>(base);
  if (dtype == "u32") return *static_cast<const uint32_t*>(base);
  return *static_cast<const uint8_t*>(base);
}

// v rounded to the dtype, as a double.
double rounded(const std::string& dtype, double v) {
  alignas(8) unsigned char cell[8] = {};
  store(cell, 0, dtype, v);
  return load(cell, dtype);
}

int64_t elements(const artifact::TensorSignature& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  return n;
}

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
};

// As the IR's @init computes it: the draw in the weight's type times the stddev constant in that
// type, one rounding of the exact product — the same bits as the interpreter. Each element is a
// function of (seed, stream, index) alone, so how the range is cut does not change a bit.
template <class Format>
void draw_normal(const NormalDraw& d, int64_t begin, int64_t end) {
  auto* out = static_cast<typename Format::Cell*>(d.buffer);
  for (int64_t i = begin; i < end; ++i) {
    double z = d.bound > 0 ? ir::random_truncated_normal(d.seed, d.stream, static_cast<uint64_t>(i),
                                                          d.bound)
                           : ir::random_normal(d.seed, d.stream, static_cast<uint64_t>(i));
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

// The initialiser the compiler recorded: "normal <stddev>" or "truncated_normal <stddev>
// <bound>" (stream = the input's index, as the IR's @init draws it), "ones" or "zeros". `buffer`
// holds zeros on entry. The normal draws are split over the pool (ThreadPool's chunks depend
// only on the size and the thread count).
Status initialise(void* buffer, const artifact::TensorSignature& t, size_t index, uint32_t seed,
                  ThreadPool& pool) {
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
    NormalDraw draw{buffer, seed, static_cast<uint32_t>(index), rounded(t.dtype, stddev), bound};
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

// MaxText's synthetic batch: tokens [rows, T+1] drawn once, uniform in [0, vocab); inputs are
// tokens[:, :-1], targets tokens[:, 1:], positions 0..T-1 and 1..T, segmentation all ones. The
// same batch every step (MaxText draws it from PRNGKey(0); ours from data_shuffle_seed).
void synthetic_batch(std::vector<void*>& batch, const std::vector<artifact::TensorSignature>& inputs,
                     size_t first, int64_t vocab, uint32_t seed) {
  const artifact::TensorSignature& shape = inputs[first];
  int64_t rows = shape.shape.size() == 2 ? shape.shape[0] : 1;
  int64_t length = shape.shape.size() == 2 ? shape.shape[1] : elements(shape);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t t = 0; t < length; ++t) {
      int64_t i = r * length + t;
      auto token = [&](int64_t position) {
        uint64_t counter = static_cast<uint64_t>(r * (length + 1) + position);
        return static_cast<double>(ir::random_bits(seed, 0xda7a, counter) %
                                   static_cast<uint32_t>(vocab));
      };
      double values[6] = {token(t), static_cast<double>(t), 1.0, token(t + 1),
                          static_cast<double>(t + 1), 1.0};
      for (size_t k = 0; k < 6 && k < batch.size(); ++k) {
        store(batch[k], i, inputs[first + k].dtype, values[k]);
      }
    }
  }
}

std::string strip_quotes(std::string v) {
  if (v.size() >= 2 && (v.front() == '\'' || v.front() == '"') && v.back() == v.front()) {
    return v.substr(1, v.size() - 2);
  }
  return v;
}

}  // namespace

int64_t dtype_bytes(const std::string& dtype) {
  if (dtype == "f64") return 8;
  if (dtype == "f32" || dtype == "s32" || dtype == "u32") return 4;
  if (dtype == "bf16" || dtype == "f16") return 2;
  if (dtype == "pred") return 1;
  return 0;
}

Expected<std::map<std::string, std::string>> run_config(const artifact::Artifact& artifact,
                                                         const std::vector<std::string>& overrides) {
  std::map<std::string, std::string> config;
  std::map<std::string, artifact::ConfigPhase> phase;
  for (const artifact::ConfigEntry& e : artifact.config) {
    config[e.key] = e.value;
    phase[e.key] = e.phase;
  }
  for (const std::string& o : overrides) {
    size_t eq = o.find('=');
    if (eq == std::string::npos || eq == 0) {
      return usage_error(fmt::format("'{}' is not key=value; run-time keys are set as e.g. steps=50", o));
    }
    std::string key = o.substr(0, eq), value = strip_quotes(o.substr(eq + 1));
    auto it = config.find(key);
    if (it == config.end()) {
      std::vector<std::string> keys;
      for (const auto& [k, v] : config) keys.push_back(k);
      std::vector<std::string> close = closest_names(key, keys, 1);
      return usage_error(fmt::format("unknown key '{}'{}", key,
                                     close.empty() ? "" : fmt::format("; did you mean '{}'?", close[0])));
    }
    if (phase[key] == artifact::ConfigPhase::kCompile && it->second != value) {
      return Error(ExitCode::kIncompatible,
                   fmt::format("{} is a compile-time key: the artifact was built with {}={}; "
                               "recompile with `precast compile ... {}={}` to change it",
                               key, key, it->second, key, value));
    }
    it->second = value;
  }
  return config;
}

Expected<RunSettings> run_settings(const std::map<std::string, std::string>& config) {
  auto missing = [](const std::string& key) {
    return Error(ExitCode::kIncompatible,
                 fmt::format("the artifact's config lacks '{}'; recompile with this build", key));
  };
  auto text = [&](const std::string& key) -> Expected<std::string> {
    auto it = config.find(key);
    if (it == config.end()) return missing(key);
    return it->second;
  };
  auto number = [&](const std::string& key) -> Expected<double> {
    auto it = config.find(key);
    if (it == config.end()) return missing(key);
    const std::string& v = it->second;
    char* end = nullptr;
    double d = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0') {
      return usage_error(fmt::format("{}={}: expected a number", key, v));
    }
    return d;
  };
  auto flag = [&](const std::string& key) -> Expected<bool> {
    auto it = config.find(key);
    if (it == config.end()) return missing(key);
    const std::string& v = it->second;
    if (v == "True" || v == "true" || v == "1") return true;
    if (v == "False" || v == "false" || v == "0") return false;
    return usage_error(fmt::format("{}={}: expected true or false", key, v));
  };
  RunSettings s;
  PRECAST_ASSIGN_OR_RETURN(double steps, number("steps"));
  PRECAST_ASSIGN_OR_RETURN(double schedule_steps, number("learning_rate_schedule_steps"));
  PRECAST_ASSIGN_OR_RETURN(ResolvedSteps resolved,
                           resolve_steps(static_cast<int64_t>(steps),
                                         static_cast<int64_t>(schedule_steps)));
  s.steps = resolved.steps;
  s.schedule.schedule_steps = resolved.schedule_steps;
  PRECAST_ASSIGN_OR_RETURN(s.schedule.learning_rate, number("learning_rate"));
  PRECAST_ASSIGN_OR_RETURN(std::string type, text("lr_schedule_type"));
  PRECAST_ASSIGN_OR_RETURN(s.schedule.type, parse_schedule_type(type));
  PRECAST_ASSIGN_OR_RETURN(s.schedule.warmup_steps_fraction, number("warmup_steps_fraction"));
  PRECAST_ASSIGN_OR_RETURN(s.schedule.final_fraction, number("learning_rate_final_fraction"));
  PRECAST_ASSIGN_OR_RETURN(s.schedule.wsd_decay_steps_fraction, number("wsd_decay_steps_fraction"));
  PRECAST_ASSIGN_OR_RETURN(std::string style, text("wsd_decay_style"));
  PRECAST_ASSIGN_OR_RETURN(s.schedule.wsd_decay_style, parse_wsd_decay_style(style));
  PRECAST_RETURN_IF_ERROR(validate_schedule(s.schedule));
  PRECAST_ASSIGN_OR_RETURN(s.adam_b1, number("adam_b1"));
  PRECAST_ASSIGN_OR_RETURN(s.adam_b2, number("adam_b2"));
  PRECAST_ASSIGN_OR_RETURN(s.adam_eps, number("adam_eps"));
  PRECAST_ASSIGN_OR_RETURN(s.adam_eps_root, number("adam_eps_root"));
  PRECAST_ASSIGN_OR_RETURN(s.adam_weight_decay, number("adam_weight_decay"));
  PRECAST_ASSIGN_OR_RETURN(s.gradient_clipping_threshold, number("gradient_clipping_threshold"));
  PRECAST_ASSIGN_OR_RETURN(double init_seed, number("init_weights_seed"));
  PRECAST_ASSIGN_OR_RETURN(double data_seed, number("data_shuffle_seed"));
  s.init_weights_seed = static_cast<uint32_t>(static_cast<int64_t>(init_seed));
  s.data_seed = static_cast<uint32_t>(static_cast<int64_t>(data_seed));
  PRECAST_ASSIGN_OR_RETURN(double threads, number("num_threads"));
  if (threads < 0) return usage_error(fmt::format("num_threads={}: must be >= 0 (0 = all cores)", threads));
  s.num_threads = static_cast<int>(threads);
  PRECAST_ASSIGN_OR_RETURN(s.metrics_file, text("metrics_file"));
  PRECAST_ASSIGN_OR_RETURN(s.run_name, text("run_name"));
  PRECAST_ASSIGN_OR_RETURN(s.abort_on_nan_loss, flag("abort_on_nan_loss"));
  PRECAST_ASSIGN_OR_RETURN(s.abort_on_inf_loss, flag("abort_on_inf_loss"));
  return s;
}

Expected<RunSettings> run_settings(const artifact::Artifact& artifact,
                                   const std::vector<std::string>& overrides) {
  PRECAST_ASSIGN_OR_RETURN(auto config, run_config(artifact, overrides));
  return run_settings(config);
}

std::vector<std::string> run_time_overrides(const std::vector<artifact::ConfigEntry>& entries) {
  std::vector<std::string> out;
  for (const artifact::ConfigEntry& e : entries) {
    if (e.phase == artifact::ConfigPhase::kRun) out.push_back(e.key + "=" + e.value);
  }
  return out;
}

Expected<TrainReport> train(const artifact::Artifact& a, const RunSettings& settings,
                            const TrainOptions& options) {
  TrainReport report;
  std::ostream* log = options.log;
  if (a.program.empty()) {
    return Error(ExitCode::kIncompatible,
                 "the artifact's step program is empty; recompile with this build's precast "
                 "compile");
  }
  for (size_t i = 0; i < a.program.size(); ++i) {
    const artifact::Step& step = a.program[i];
    if (step.symbol.empty() || step.kind == artifact::StepKind::kCollective) {
      return Error(ExitCode::kIncompatible,
                   fmt::format("step {} of the artifact's program ({}) has no function in the "
                               "object code; this runtime runs single-device CPU artifacts; "
                               "recompile with this build's precast compile",
                               i, artifact::step_kind_name(step.kind)));
    }
  }
  // Link the object code, binding the runtime's entry points explicitly.
  auto load_start = Clock::now();
  SymbolTable symbols = {
      {"precast_gemm_f32", reinterpret_cast<const void*>(&precast_gemm_f32)},
      {"precast_gemm_f64", reinterpret_cast<const void*>(&precast_gemm_f64)},
      {"precast_parallel_for", reinterpret_cast<const void*>(&precast_parallel_for)},
  };
  std::vector<char> object(a.object_code.begin(), a.object_code.end());
  LoadOptions load_options;
  load_options.object_name = "the artifact's object code";
  PRECAST_ASSIGN_OR_RETURN(LoadedObject loaded, load_object(object, symbols, load_options));
  using Entry = void(void* const*, void* const*, char*, void*);
  // The step program: each step a function of the object code, called in order.
  std::vector<Entry*> program;
  for (const artifact::Step& step : a.program) {
    PRECAST_ASSIGN_OR_RETURN(Entry * function, loaded.function<Entry>(step.symbol));
    program.push_back(function);
  }
  report.load_seconds = seconds_since(load_start);

  ThreadPool pool(settings.num_threads);
  PRECAST_ASSIGN_OR_RETURN(GemmImpl impl, parse_gemm_impl(settings.gemm));
  set_active_gemm(GemmContext{impl, &pool});

  // Exactly the plan: the arena, one buffer per input, outputs in place when donated.
  const std::vector<artifact::TensorSignature>& inputs = a.signature.inputs;
  const std::vector<artifact::TensorSignature>& outputs = a.signature.outputs;
  std::vector<Memory> owned;
  std::vector<void*> args, results;
  PRECAST_ASSIGN_OR_RETURN(Memory arena, allocate(a.plan.arena_bytes, "the temp arena", false));
  report.arena_bytes = a.plan.arena_bytes;
  auto init_start = Clock::now();
  for (size_t i = 0; i < inputs.size(); ++i) {
    int64_t bytes = elements(inputs[i]) * dtype_bytes(inputs[i].dtype);
    PRECAST_ASSIGN_OR_RETURN(Memory m, allocate(bytes, "input '" + inputs[i].name + "'", true));
    args.push_back(m.get());
    owned.push_back(std::move(m));
    report.argument_bytes += bytes;
    if (inputs[i].role == "parameter") {
      PRECAST_RETURN_IF_ERROR(
          initialise(args.back(), inputs[i], i, settings.init_weights_seed, pool));
    }
  }
  for (const artifact::TensorSignature& o : outputs) {
    int64_t bytes = elements(o) * dtype_bytes(o.dtype);
    if (o.same_as_output >= 0 && static_cast<size_t>(o.same_as_output) < results.size()) {
      results.push_back(results[static_cast<size_t>(o.same_as_output)]);  // one buffer, counted once
      continue;
    }
    report.output_bytes += bytes;
    if (o.aliased_input >= 0) {
      results.push_back(args[static_cast<size_t>(o.aliased_input)]);
      report.alias_bytes += bytes;
      continue;
    }
    PRECAST_ASSIGN_OR_RETURN(Memory m, allocate(bytes, "output '" + o.name + "'", false));
    results.push_back(m.get());
    owned.push_back(std::move(m));
  }
  // The batch (six arrays after the state) and the scalars after it, by role.
  size_t first_batch = inputs.size(), first_scalar = inputs.size();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].role == "batch" && first_batch == inputs.size()) first_batch = i;
    if (inputs[i].role == "scalar" && first_scalar == inputs.size()) first_scalar = i;
  }
  int64_t vocab = 0;
  for (const artifact::ConfigEntry& e : a.config) {
    if (e.key == "vocab_size") vocab = std::strtoll(e.value.c_str(), nullptr, 10);
  }
  if (first_batch + 6 > inputs.size() || first_scalar + 7 > inputs.size() || vocab <= 0) {
    return Error(ExitCode::kIncompatible,
                 "the artifact's signature is not a train step (6 batch arrays, 7 scalars, "
                 "vocab_size); recompile with this build's precast compile");
  }
  std::vector<void*> batch(args.begin() + static_cast<std::ptrdiff_t>(first_batch),
                           args.begin() + static_cast<std::ptrdiff_t>(first_batch + 6));
  synthetic_batch(batch, inputs, first_batch, vocab, settings.data_seed);
  report.init_seconds = seconds_since(init_start);

  std::ofstream metrics;
  if (!settings.metrics_file.empty()) {
    metrics.open(settings.metrics_file, std::ios::trunc);
    if (!metrics) {
      return Error(ExitCode::kFailure, fmt::format("metrics_file={}: cannot open it for writing",
                                                   settings.metrics_file));
    }
  }
  if (log != nullptr) {
    int64_t used = report.arena_bytes + report.argument_bytes + report.output_bytes -
                   report.alias_bytes;
    *log << fmt::format("\nMemstats: After params initialized:\n\tUsing (GB) {:.2f} on cpu:0 "
                        "(arena {} bytes, arguments {} bytes, outputs {} bytes, {} donated)\n",
                        static_cast<double>(used) / (1 << 30), report.arena_bytes,
                        report.argument_bytes, report.output_bytes, report.alias_bytes);
  }

  size_t first_metric = outputs.size();
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (outputs[k].role == "metric") {
      first_metric = k;
      break;
    }
  }
  auto metric = [&](size_t m) {
    size_t k = first_metric + m;
    return k < outputs.size() ? load(results[k], outputs[k].dtype) : 0.0;
  };
  double optimizer[6] = {settings.adam_b1,          settings.adam_b2,
                         settings.adam_eps,         settings.adam_eps_root,
                         settings.adam_weight_decay, settings.gradient_clipping_threshold};
  for (size_t k = 0; k < 6; ++k) store(args[first_scalar + 1 + k], 0, inputs[first_scalar + 1 + k].dtype, optimizer[k]);
  for (int64_t step = 0; step < settings.steps; ++step) {
    double lr = learning_rate_at(settings.schedule, step);
    store(args[first_scalar], 0, inputs[first_scalar].dtype, lr);
    auto start = Clock::now();
    for (Entry* function : program) {
      function(args.data(), results.data(), static_cast<char*>(arena.get()), &pool);
    }
    StepMetrics m;
    m.step = step;
    m.loss = metric(0);  // the point where the loss is known ends the step
    m.seconds = seconds_since(start);
    m.lm_loss = metric(1);
    m.perplexity = metric(2);
    m.z_loss = metric(3);
    m.total_weights = metric(4);
    m.grad_norm = metric(5);
    m.raw_grad_norm = metric(6);
    m.param_norm = metric(7);
    m.learning_rate = lr;
    report.steps.push_back(m);

    auto log_start = Clock::now();
    if (log != nullptr) {
      double tflops = m.seconds > 0 ? a.model_tflops_per_device / m.seconds : 0;
      double tokens = m.seconds > 0 ? a.tokens_per_device / m.seconds : 0;
      *log << fmt::format(
          "completed step: {}, seconds: {:.3f}, TFLOP/s/device: {:.3f}, Tokens/s/device: {:.3f}, "
          "total_weights: {}, loss: {:.3f}, lm_loss: {:.3f}, perplexity: {:.3f}\n",
          step, m.seconds, tflops, tokens, static_cast<int64_t>(std::llround(m.total_weights)),
          m.loss, m.lm_loss, m.perplexity);
      log->flush();
    }
    if (metrics.is_open()) {
      metrics << fmt::format(
          "{{\"learning/loss\": {}, \"learning/lm_loss\": {}, \"learning/perplexity\": {}, "
          "\"learning/z_loss\": {}, \"learning/total_weights\": {}, \"learning/grad_norm\": {}, "
          "\"learning/raw_grad_norm\": {}, \"learning/param_norm\": {}, "
          "\"learning/current_learning_rate\": {}, \"perf/step_time_seconds\": {}, "
          "\"step\": {:.1f}, \"run_name\": \"{}\"}}\n",
          m.loss, m.lm_loss, m.perplexity, m.z_loss, m.total_weights, m.grad_norm,
          m.raw_grad_norm, m.param_norm, lr, m.seconds, static_cast<double>(step),
          settings.run_name);
      if (!metrics) {
        return Error(ExitCode::kFailure,
                     fmt::format("metrics_file={}: write failed", settings.metrics_file));
      }
    }
    report.logging_seconds += seconds_since(log_start);
    if ((std::isnan(m.loss) && settings.abort_on_nan_loss) ||
        (std::isinf(m.loss) && settings.abort_on_inf_loss)) {
      if (log != nullptr) {
        *log << (std::isnan(m.loss) ? "Aborting training due to NaN loss.\n"
                                    : "Aborting training due to Inf loss.\n");
      }
      report.aborted = true;
      break;
    }
  }
  if (options.keep_final_state) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      const uint8_t* p = static_cast<const uint8_t*>(args[i]);
      report.final_state.emplace_back(p, p + elements(inputs[i]) * dtype_bytes(inputs[i].dtype));
    }
  }
  return report;
}

}  // namespace precast::runtime
