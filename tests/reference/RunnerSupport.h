// What the reference suite's runners (forward_runner, train_runner) share: a platform-independent
// noise stream, the weight perturbation, the packed batch, .npy files written through a temporary
// name, and config.txt's description of a ModelSpec for the PyTorch side (tests/reference/).
#pragma once

#include <fmt/format.h>

#include <bit>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numbers>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/config/ModelSpec.h"
#include "compiler/frontend/Frontend.h"
#include "ir/Interpreter.h"
#include "ir/support/Error.h"

namespace precast::reference {

namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little, "the .npy writer assumes little endian");

// A small deterministic generator (splitmix64 and Box-Muller), so the perturbation and the batch
// are the same on every platform and standard library.
class NoiseStream {
 public:
  explicit NoiseStream(uint64_t seed) : state_(seed) {}

  uint64_t next_bits() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1).
  double uniform() { return (static_cast<double>(next_bits() >> 11) + 0.5) / 9007199254740992.0; }
  double normal() {
    return std::sqrt(-2.0 * std::log(uniform())) * std::cos(2.0 * std::numbers::pi * uniform());
  }
  int64_t below(int64_t n) { return static_cast<int64_t>(next_bits() % static_cast<uint64_t>(n)); }

 private:
  uint64_t state_;
};

// Parses the value of a flag such as --seed as an unsigned integer of type T.
template <typename T>
Expected<T> parse_unsigned_flag(std::string_view flag, std::string_view text) {
  T value{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.starts_with('-')) {
    return usage_error(
        fmt::format("{}: '{}' is not an unsigned {}-bit integer", flag, text, 8 * sizeof(T)));
  }
  return value;
}

inline Expected<ir::DType> parse_dtype_flag(std::string_view text) {
  if (text != "f32" && text != "f64") return usage_error("--dtype must be f32 or f64");
  return text == "f32" ? ir::DType::kF32 : ir::DType::kF64;
}

inline double round_to(ir::DType dtype, double value) {
  return dtype == ir::DType::kF32 ? static_cast<double>(static_cast<float>(value)) : value;
}

// Adds 0.1 N(0, 1) to every element, so norm scales and gpt3's zero-initialised biases and
// LayerNorm parameters take part in the check instead of being exactly 1 or 0.
inline void perturb(std::vector<ir::HostTensor>& weights, uint32_t seed) {
  NoiseStream noise(0x5eed0000ull + seed);
  for (ir::HostTensor& w : weights) {
    for (double& v : w.values) v = round_to(w.type.dtype, v + 0.1 * noise.normal());
  }
}

// The packed batch: even rows hold two segments (ids 1 and 2) and two padding tokens (id 0) at
// the end, odd rows one segment over the whole length. Positions restart at 0 per segment;
// targets are the inputs shifted by one within each segment.
inline std::vector<ir::HostTensor> packed_batch(int64_t rows, int64_t length, int64_t vocab,
                                                uint32_t seed) {
  ir::TensorType type{ir::DType::kS32, {rows, length}};
  std::vector<ir::HostTensor> batch;
  for (int i = 0; i < frontend::kNumBatchArrays; ++i)
    batch.push_back(ir::HostTensor::filled(type, 0));
  ir::HostTensor &inputs = batch[0], &positions = batch[1], &segments = batch[2];
  ir::HostTensor &targets = batch[3], &target_positions = batch[4], &target_segments = batch[5];
  NoiseStream noise(0xba7c0000ull + seed);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int64_t> segment_lengths;
    if (r % 2 == 0) {
      int64_t first = (length * 9) / 16;
      segment_lengths = {first, length - first - 2};
    } else {
      segment_lengths = {length};
    }
    int64_t t = 0;
    for (size_t s = 0; s < segment_lengths.size(); ++s) {
      int64_t n = segment_lengths[s];
      std::vector<int64_t> tokens(static_cast<size_t>(n + 1));
      for (int64_t& token : tokens) token = noise.below(vocab);
      for (int64_t j = 0; j < n; ++j, ++t) {
        size_t at = static_cast<size_t>(r * length + t);
        inputs.values[at] = static_cast<double>(tokens[static_cast<size_t>(j)]);
        targets.values[at] = static_cast<double>(tokens[static_cast<size_t>(j + 1)]);
        positions.values[at] = target_positions.values[at] = static_cast<double>(j);
        segments.values[at] = target_segments.values[at] = static_cast<double>(s + 1);
      }
    }
  }
  return batch;
}

// Writes via a temporary name and a rename, so a reader never sees half a file.
inline Status write_file(const fs::path& path, const std::string& bytes) {
  fs::path temporary = path;
  temporary += ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) return Error(ExitCode::kFailure, fmt::format("cannot write {}", temporary.string()));
  }
  std::error_code ec;
  fs::rename(temporary, path, ec);
  if (ec) {
    return Error(ExitCode::kFailure, fmt::format("cannot rename {} to {}: {}", temporary.string(),
                                                 path.string(), ec.message()));
  }
  return Status::success();
}

inline std::string npy_descr(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kF64:
      return "<f8";
    case ir::DType::kF32:
      return "<f4";
    default:
      return "<i4";
  }
}

template <typename T>
void append_raw(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

// NPY format 1.0: magic, version, a little-endian u16 header length, a Python dict literal
// padded with spaces to a multiple of 64 bytes and ended by '\n', then the raw C-order data.
inline std::string npy_bytes(const ir::HostTensor& t) {
  std::string shape = "(";
  for (int64_t d : t.type.dims) shape += fmt::format("{}, ", d);
  if (t.type.dims.size() > 1) shape.resize(shape.size() - 2);
  if (t.type.dims.size() == 1) shape.resize(shape.size() - 1);
  shape += ")";
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
                                   npy_descr(t.type.dtype), shape);
  constexpr size_t kPrefix = 10;  // magic (6) + version (2) + header length (2)
  size_t total = kPrefix + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';

  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  append_raw(out, static_cast<uint16_t>(header.size()));
  out += header;
  for (double v : t.values) {
    if (t.type.dtype == ir::DType::kF64) {
      append_raw(out, v);
    } else if (t.type.dtype == ir::DType::kF32) {
      append_raw(out, static_cast<float>(v));
    } else {
      append_raw(out, static_cast<int32_t>(v));
    }
  }
  return out;
}

inline std::string manifest_line(const std::string& name, const ir::HostTensor& t) {
  std::string line = name + " " + std::string(ir::dtype_name(t.type.dtype));
  for (int64_t d : t.type.dims) line += fmt::format(" {}", d);
  return line + "\n";
}

// A run's output directory: .npy files listed in manifest.txt (`name dtype dims...`), which is
// written last, so its presence says the directory is complete.
class OutputDirectory {
 public:
  explicit OutputDirectory(fs::path path) : path_(std::move(path)) {}

  Status create() const {
    std::error_code ec;
    fs::create_directories(path_, ec);
    if (ec) {
      return Error(ExitCode::kFailure,
                   fmt::format("cannot create {}: {}", path_.string(), ec.message()));
    }
    return Status::success();
  }
  Status emit(const std::string& name, const ir::HostTensor& t) {
    manifest_ += manifest_line(name, t);
    return write_file(path_ / (name + ".npy"), npy_bytes(t));
  }
  Status write_text(const std::string& file_name, const std::string& text) const {
    return write_file(path_ / file_name, text);
  }
  Status finish() const { return write_file(path_ / "manifest.txt", manifest_); }

 private:
  fs::path path_;
  std::string manifest_;
};

inline bool uses_llama31_rope(const ModelSpec& spec) {
  return spec.model_name.starts_with("llama3.1") || spec.rope.type.starts_with("llama3.1");
}

// The hyperparameters torch_reference.py needs, as `key value` lines, from the ModelSpec.
inline std::string model_description(const ModelSpec& spec, ir::DType dtype, int64_t rows,
                                     int64_t length) {
  auto flag = [](bool b) { return b ? "true" : "false"; };
  std::string acts;
  for (const std::string& a : spec.mlp.activations) acts += (acts.empty() ? "" : ",") + a;
  std::string out;
  out += fmt::format("family {}\n", decoder_family_name(spec.family));
  out += fmt::format("model_name {}\n", spec.model_name);
  out += fmt::format("dtype {}\n", ir::dtype_name(dtype));
  out += fmt::format("rows {}\nlength {}\n", rows, length);
  out += fmt::format("emb_dim {}\nnum_query_heads {}\nnum_kv_heads {}\nhead_dim {}\n", spec.emb_dim,
                     spec.num_query_heads, spec.num_kv_heads, spec.head_dim);
  out += fmt::format("mlp_dim {}\nvocab_size {}\nnum_decoder_layers {}\n", spec.mlp_dim,
                     spec.vocab_size, spec.num_decoder_layers);
  out += fmt::format("mlp_activations {}\n", acts);
  out += fmt::format("normalization_layer_epsilon {:.17g}\n", spec.normalization_layer_epsilon);
  out += fmt::format("rope_min_timescale {}\nrope_max_timescale {}\n", spec.rope.min_timescale,
                     spec.rope.max_timescale);
  bool yarn = !uses_llama31_rope(spec) && spec.rope.type.starts_with("yarn");
  out += fmt::format("rope_style {}\n",
                     uses_llama31_rope(spec) ? "llama3.1" : (yarn ? "yarn" : "halves"));
  out += fmt::format("rope_factor {}\noriginal_max_position_embeddings {}\n", spec.rope.yarn.factor,
                     spec.rope.yarn.original_max_position_embeddings);
  out += fmt::format("beta_fast {}\nbeta_slow {}\n", spec.rope.yarn.beta_fast,
                     spec.rope.yarn.beta_slow);
  out += fmt::format("rope_interleave {}\nrope_truncate {}\nrope_attention_scaling {}\n",
                     flag(spec.rope.yarn.interleave), flag(spec.rope.yarn.truncate),
                     flag(spec.rope.yarn.attention_scaling));
  out += fmt::format("rope_use_scale {}\n", flag(spec.rope.use_scale));
  out += fmt::format("rope_linear_scaling_factor {:.17g}\n", spec.rope.linear_scaling_factor);
  out += fmt::format("local_rope_max_timescale {}\n", spec.rope.local_max_timescale);
  out += fmt::format("attention_type {}\nsliding_window_size {}\n", spec.attention.type,
                     spec.attention.sliding_window_size);
  out +=
      fmt::format("attn_logits_soft_cap {:.17g}\n", spec.attention.logits_soft_cap.value_or(0.0));
  out += fmt::format("final_logits_soft_cap {:.17g}\n", spec.final_logits_soft_cap.value_or(0.0));
  out += fmt::format("logits_via_embedding {}\n", flag(spec.logits_via_embedding));
  out += fmt::format("normalize_embedding_logits {}\n", flag(spec.normalize_embedding_logits));
  out += fmt::format("z_loss_multiplier {:.17g}\n", spec.z_loss_multiplier);
  out += fmt::format("use_post_attn_norm {}\n", flag(spec.use_post_attn_norm));
  out += fmt::format("use_post_ffw_norm {}\n", flag(spec.use_post_ffw_norm));
  out += fmt::format("trainable_position_size {}\n", spec.trainable_position_size);
  out += fmt::format("use_qk_norm {}\n", flag(spec.attention.qk_norm));
  out += fmt::format("attention_bias {}\n", flag(spec.attention.bias));
  const MlaSpec& mla = spec.mla;
  out += fmt::format("q_lora_rank {}\nkv_lora_rank {}\nqk_nope_head_dim {}\n", mla.q_lora_rank,
                     mla.kv_lora_rank, mla.qk_nope_head_dim);
  out += fmt::format("qk_rope_head_dim {}\nv_head_dim {}\nmscale {:.17g}\n", mla.qk_rope_head_dim,
                     mla.v_head_dim, mla.mscale);
  out += fmt::format("max_position_embeddings {}\n", spec.rope.yarn.max_position_embeddings);
  const MoeSpec& moe = spec.moe;
  out += fmt::format("num_experts {}\nnum_experts_per_tok {}\nmoe_mlp_dim {}\n", moe.num_experts,
                     moe.experts_per_token, moe.moe_mlp_dim);
  out += fmt::format("shared_experts {}\nfirst_num_dense_layers {}\n", moe.shared_experts,
                     moe.first_num_dense_layers);
  out += fmt::format("routed_score_func {}\nrouted_bias {}\nnorm_topk_prob {}\n",
                     moe.score_func.empty() ? "none" : moe.score_func, flag(moe.routed_bias),
                     flag(moe.norm_topk_prob));
  out += fmt::format("routed_scaling_factor {:.17g}\n", moe.routed_scaling_factor);
  out += fmt::format("n_routing_groups {}\ntopk_routing_group {}\n", moe.n_routing_groups,
                     moe.topk_routing_group);
  out += fmt::format("load_balance_loss_weight {:.17g}\n", moe.load_balance_loss_weight);
  out += fmt::format("capacity_factor {:.17g}\n", moe.drops_tokens() ? moe.capacity_factor : -1.0);
  out += fmt::format("attention_sink {}\nmlp_bias {}\nmlp_activations_limit {:.17g}\n",
                     flag(spec.attention.sink), flag(spec.mlp.bias), spec.mlp.activations_limit);
  const Llama4Spec& llama4 = spec.llama4;
  out += fmt::format("interleave_moe_layer_step {}\nnope_layer_interval {}\n",
                     llama4.interleave_moe_layer_step, llama4.nope_layer_interval);
  out += fmt::format("chunk_attn_window_size {}\ntemperature_tuning {}\n",
                     llama4.chunk_attn_window_size, flag(llama4.temperature_tuning));
  return out;
}

// What a runner's command line says: OUT_DIR [--dtype f32|f64] [--seed N] [--steps N] CONFIG.yml
// [key=value ...] (--steps only where `takes_steps`).
struct RunnerArguments {
  fs::path out_dir;
  ir::DType dtype = ir::DType::kF64;
  uint32_t seed = 1234;
  uint32_t steps = 5;
  ConfigRequest config;
};

inline Expected<RunnerArguments> parse_runner_arguments(int argc, char** argv, bool takes_steps) {
  RunnerArguments options;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    bool has_value = i + 1 < argc;
    if (arg == "--dtype" && has_value) {
      PRECAST_ASSIGN_OR_RETURN(options.dtype, parse_dtype_flag(argv[++i]));
    } else if (arg == "--seed" && has_value) {
      PRECAST_ASSIGN_OR_RETURN(options.seed, parse_unsigned_flag<uint32_t>("--seed", argv[++i]));
    } else if (takes_steps && arg == "--steps" && has_value) {
      PRECAST_ASSIGN_OR_RETURN(options.steps,
                               parse_unsigned_flag<uint32_t>("--steps", argv[++i]));
      if (options.steps == 0) return usage_error("--steps must be at least 1");
    } else if (arg.starts_with("--")) {
      return usage_error(fmt::format("unknown flag '{}'", arg));
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.size() < 2) return usage_error("OUT_DIR and CONFIG.yml are required");
  options.out_dir = positional[0];
  options.config.config_file = positional[1];
  options.config.overrides.assign(positional.begin() + 2, positional.end());
  options.config.first_override_position = 1;
  options.config.read_environment = false;  // the test's arguments are the whole config
  return options;
}

// A runner's main(): parses the command line, runs, and reports an error as "<name>: error:
// <message>" (the usage after a command-line error) with the error's exit code.
template <typename Options>
int runner_main(const char* name, const char* usage, int argc, char** argv,
                Expected<Options> (*parse)(int, char**), Status (*run)(const Options&)) {
  Expected<Options> options = parse(argc, argv);
  if (!options.ok()) {
    std::cerr << name << ": error: " << options.error().message() << "\n" << usage << "\n";
    return options.error().exit_code();
  }
  Status status = run(*options);
  if (!status.ok()) {
    std::cerr << name << ": error: " << status.error().message() << "\n";
    return status.error().exit_code();
  }
  return 0;
}

}  // namespace precast::reference
