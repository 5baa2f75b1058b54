#include "compiler/frontend/Frontend.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <string_view>
#include <unordered_map>

#include "ir/Builder.h"

namespace precast::frontend {
namespace {

using ir::Builder;
using ir::DotDims;
using ir::DType;
using ir::OpKind;
using ir::TensorType;
using ir::Value;

Expected<DType> dtype_from_config(std::string_view key, std::string_view value) {
  if (value == "float32") return DType::kF32;
  if (value == "bfloat16") return DType::kBF16;
  if (value == "float16") return DType::kF16;
  if (value == "float64") return DType::kF64;
  return usage_error(
      fmt::format("{}: '{}' is not a dtype the frontend lowers; use float32, "
                  "bfloat16, float16 or float64",
                  key, value));
}

bool uses_llama31_rope(const ModelSpec& spec) {
  return spec.model_name.starts_with("llama3.1") || spec.rope_type.starts_with("llama3.1");
}

// One decoder sub-block's weight names: "decoder.layers_3" + suffix ("" or "_local").
struct BlockNames {
  std::string prefix;  // "decoder.layers_3."
  std::string suffix;  // gemma2: "_local" / "_global"
};

class Lowering {
 public:
  Lowering(const ModelSpec& spec, int64_t rows, int64_t length, const ForwardOptions& options,
           ir::Function& function, std::vector<WeightInfo>& weights)
      : spec_(spec),
        rows_(rows),
        length_(length),
        options_(options),
        function_(function),
        b_(function),
        weights_(weights) {}

  Status run();

 private:
  // Declaration (first pass: every weight, in README order).
  void declare(std::string name, std::vector<int64_t> dims, std::vector<std::string> axes,
               InitKind init, double stddev = 0);
  void declare_attention(const BlockNames& n);
  void declare_mlp(const BlockNames& n);
  void declare_norm(const std::string& name);
  void declare_weights();
  Value w(const std::string& name) const;
  Value use(const std::string& name);  // the weight in the activation dtype

  // Building blocks.
  Value dense(Value x, const std::string& kernel, int64_t contract);
  Value rms_norm(Value x, const std::string& scale);
  Value layer_norm(Value x, const std::string& prefix);  // gpt3: prefix.scale, prefix.bias
  Value norm(Value x, const std::string& prefix);        // the family's norm
  Value rope(Value x, bool local);
  Value attention(Value x, const BlockNames& n, int64_t window);
  Value mlp(Value x, const BlockNames& n);
  Value activation(std::string_view name, Value x);
  Value layer(Value x, int64_t index);
  Value half_layer(Value x, const BlockNames& n, int64_t window);  // gemma2
  Status output_and_loss(Value x);

  std::string scope_of(const std::string& weight_prefix) const;
  std::vector<int64_t> act_dims(int64_t last) const { return {rows_, length_, last}; }
  Value axes(Value v, std::initializer_list<std::string_view> names) {
    return b_.with_axes(v, names);
  }

  const ModelSpec& spec_;
  int64_t rows_, length_;
  const ForwardOptions& options_;
  ir::Function& function_;
  Builder b_;
  std::vector<WeightInfo>& weights_;
  std::unordered_map<std::string, Value> weight_values_;
  std::unordered_map<std::string, Value> converted_;
  Value batch_[kNumBatchArrays];

  DType act_ = DType::kBF16;    // activations
  DType weight_ = DType::kF32;  // weights as stored
  DType stat_ = DType::kF32;    // norm statistics, logits, loss
};

void Lowering::declare(std::string name, std::vector<int64_t> dims, std::vector<std::string> axes,
                       InitKind init, double stddev) {
  WeightInfo info{std::move(name), std::move(dims), std::move(axes), init, stddev};
  std::vector<std::string_view> axis_views(info.axes.begin(), info.axes.end());
  Value v = b_.param(TensorType{weight_, info.dims}, info.name);
  b_.with_axes(v, axis_views);
  weight_values_.emplace(info.name, v);
  weights_.push_back(std::move(info));
}

void Lowering::declare_norm(const std::string& name) {
  int64_t e = spec_.emb_dim;
  if (spec_.family == DecoderFamily::kGpt3) {
    declare(name + ".scale", {e}, {"norm"}, InitKind::kZeros);
    declare(name + ".bias", {e}, {"norm"}, InitKind::kZeros);
  } else {
    declare(name + ".scale", {e}, {"norm"}, InitKind::kOnes);
  }
}

void Lowering::declare_attention(const BlockNames& n) {
  int64_t e = spec_.emb_dim, h = spec_.num_query_heads, k = spec_.num_kv_heads, d = spec_.head_dim;
  std::string p = n.prefix + "self_attention" + n.suffix + ".";
  double fan_e = 1.0 / std::sqrt(static_cast<double>(e));
  if (spec_.family == DecoderFamily::kGpt3) {
    declare(p + "qkv_proj.kernel", {e, 3, h, d}, {"embed", "qkv", "heads", "kv"}, InitKind::kNormal,
            fan_e);
    declare(p + "qkv_proj.bias", {3, h, d}, {"qkv", "heads", "kv"}, InitKind::kZeros);
  } else {
    declare(p + "query.kernel", {e, h, d}, {"embed", "q_heads", "kv"}, InitKind::kNormal,
            fan_e / std::sqrt(static_cast<double>(d)));
    declare(p + "key.kernel", {e, k, d}, {"embed", "kv_heads", "kv_head_dim"}, InitKind::kNormal,
            fan_e);
    declare(p + "value.kernel", {e, k, d}, {"embed", "kv_heads", "kv_head_dim"}, InitKind::kNormal,
            fan_e);
  }
  declare(p + "out.kernel", {h, d, e}, {"heads", "kv", "embed"}, InitKind::kNormal,
          1.0 / std::sqrt(static_cast<double>(h * d)));
  if (spec_.family == DecoderFamily::kGpt3) {
    declare(p + "out.bias", {e}, {"embed"}, InitKind::kZeros);
  }
}

void Lowering::declare_mlp(const BlockNames& n) {
  int64_t e = spec_.emb_dim, m = spec_.mlp_dim;
  bool gpt3 = spec_.family == DecoderFamily::kGpt3;
  std::string p = n.prefix + "mlp" + n.suffix + ".";
  if (gpt3) declare_norm(p + "mlp_layer_norm");
  size_t num_acts = spec_.mlp_activations.size();
  for (size_t a = 0; a < num_acts; ++a) {
    std::string wi = num_acts == 1 ? "wi" : fmt::format("wi_{}", a);
    declare(p + wi + ".kernel", {e, m}, {"embed", "mlp"}, InitKind::kTruncatedNormal,
            1.0 / std::sqrt(static_cast<double>(e)) / kTruncatedNormalStddev);
    if (gpt3) declare(p + wi + ".bias", {m}, {"mlp"}, InitKind::kZeros);
  }
  declare(p + "wo.kernel", {m, e}, {"mlp", "embed"}, InitKind::kTruncatedNormal,
          1.0 / std::sqrt(static_cast<double>(m)) / kTruncatedNormalStddev);
  if (gpt3) declare(p + "wo.bias", {e}, {"embed"}, InitKind::kZeros);
}

void Lowering::declare_weights() {
  int64_t e = spec_.emb_dim, v = spec_.vocab_size;
  declare("token_embedder.embedding", {v, e}, {"vocab", "embed_vocab"}, InitKind::kNormal, 1.0);
  if (spec_.family == DecoderFamily::kGpt3 && spec_.trainable_position_size > 0) {
    declare("decoder.position_embedder.embedding", {spec_.trainable_position_size, e},
            {"vocab", "embed"}, InitKind::kNormal, 1.0);
  }
  for (int64_t i = 0; i < spec_.num_decoder_layers; ++i) {
    std::string prefix = fmt::format("decoder.layers_{}.", i);
    switch (spec_.family) {
      case DecoderFamily::kLlama2:
      case DecoderFamily::kMistral: {
        BlockNames n{prefix, ""};
        declare_norm(prefix + "pre_self_attention_layer_norm");
        declare_attention(n);
        declare_norm(prefix + "post_self_attention_layer_norm");
        declare_mlp(n);
        break;
      }
      case DecoderFamily::kGemma: {
        BlockNames n{prefix, ""};
        declare_norm(prefix + "pre_self_attention_norm");
        declare_attention(n);
        declare_norm(prefix + "pre_ffw_norm");
        declare_mlp(n);
        break;
      }
      case DecoderFamily::kGemma2:
        for (const char* suffix : {"_local", "_global"}) {
          BlockNames n{prefix, suffix};
          declare_norm(prefix + "pre_self_attention_norm" + suffix);
          declare_attention(n);
          if (spec_.use_post_attn_norm) declare_norm(prefix + "post_self_attention_norm" + suffix);
          declare_norm(prefix + "pre_ffw_norm" + suffix);
          declare_mlp(n);
          if (spec_.use_post_ffw_norm) declare_norm(prefix + "post_ffw_norm" + suffix);
        }
        break;
      case DecoderFamily::kGpt3: {
        BlockNames n{prefix, ""};
        declare_norm(prefix + "pre_self_attention_norm");
        declare_attention(n);
        declare_mlp(n);
        break;
      }
    }
  }
  declare_norm("decoder.decoder_norm");
  if (!spec_.logits_via_embedding) {
    declare("decoder.logits_dense.kernel", {e, v}, {"embed_vocab", "vocab"},
            InitKind::kTruncatedNormal,
            1.0 / std::sqrt(static_cast<double>(e)) / kTruncatedNormalStddev);
  }
}

Value Lowering::w(const std::string& name) const {
  auto it = weight_values_.find(name);
  return it == weight_values_.end() ? Value{} : it->second;
}

Value Lowering::use(const std::string& name) {
  Value v = w(name);
  if (!v.valid() || weight_ == act_) return v;
  auto it = converted_.find(name);
  if (it != converted_.end()) return it->second;
  Value c = b_.convert(v, act_);
  converted_.emplace(name, c);
  return c;
}

// "decoder.layers_3.self_attention.query.kernel" -> "decoder/layers_3/self_attention/query".
std::string Lowering::scope_of(const std::string& weight_prefix) const {
  std::string s = weight_prefix;
  if (!s.empty() && s.back() == '.') s.pop_back();
  for (char& c : s) {
    if (c == '.') c = '/';
  }
  return s;
}

// Contracts x's last `contract` dimensions with the kernel's first ones; gpt3-style biases
// (name.bias next to name.kernel) are added when declared.
Value Lowering::dense(Value x, const std::string& kernel_name, int64_t contract) {
  std::string base = kernel_name.substr(0, kernel_name.size() - std::string_view(".kernel").size());
  Builder::ScopeGuard scope(b_, "");
  b_.set_scope(scope_of(base));
  Value kernel = use(kernel_name);
  if (!x.valid() || !kernel.valid()) return Value{};
  int64_t rank = b_.type(x).rank();
  DotDims dims;
  for (int64_t i = 0; i < contract; ++i) {
    dims.lhs_contract.push_back(rank - contract + i);
    dims.rhs_contract.push_back(i);
  }
  Value y = b_.dot_general(x, kernel, dims);
  Value bias = use(base + ".bias");
  if (bias.valid()) {
    std::vector<int64_t> result = b_.type(y).dims;
    y = b_.add(y, b_.broadcast_to(bias, result));
  }
  return y;
}

Value Lowering::rms_norm(Value x, const std::string& scale_name) {
  int64_t e = spec_.emb_dim;
  Value xf = b_.type(x).dtype == stat_ ? x : b_.convert(x, stat_);
  Value mean2 = b_.div(b_.reduce_sum(b_.mul(xf, xf), {2}),
                       b_.constant(static_cast<double>(e), TensorType{stat_, {rows_, length_}}));
  Value inv = b_.rsqrt(b_.add(mean2, b_.splat(spec_.normalization_layer_epsilon, mean2)));
  Value y = b_.mul(xf, b_.broadcast_in_dim(inv, act_dims(e), {0, 1}));
  if (stat_ != act_) y = b_.convert(y, act_);
  return b_.mul(y, b_.broadcast_in_dim(use(scale_name), act_dims(e), {2}));
}

Value Lowering::layer_norm(Value x, const std::string& prefix) {
  int64_t e = spec_.emb_dim;
  TensorType stat_type{act_, {rows_, length_}};
  Value n = b_.constant(static_cast<double>(e), stat_type);
  Value mean = b_.div(b_.reduce_sum(x, {2}), n);
  Value centered = b_.sub(x, b_.broadcast_in_dim(mean, act_dims(e), {0, 1}));
  Value var = b_.div(b_.reduce_sum(b_.mul(centered, centered), {2}), n);
  Value inv = b_.rsqrt(b_.add(var, b_.splat(spec_.normalization_layer_epsilon, var)));
  Value normed = b_.mul(centered, b_.broadcast_in_dim(inv, act_dims(e), {0, 1}));
  Value scale = use(prefix + ".scale");
  Value one_plus = b_.add(scale, b_.splat(1.0, scale));
  Value y = b_.mul(normed, b_.broadcast_in_dim(one_plus, act_dims(e), {2}));
  return b_.add(y, b_.broadcast_in_dim(use(prefix + ".bias"), act_dims(e), {2}));
}

Value Lowering::norm(Value x, const std::string& prefix) {
  Builder::ScopeGuard scope(b_, "");
  b_.set_scope(scope_of(prefix));
  Value y =
      spec_.family == DecoderFamily::kGpt3 ? layer_norm(x, prefix) : rms_norm(x, prefix + ".scale");
  return axes(y, {"activation_batch", "activation_norm_length", "activation_embed"});
}

// Rotary position embedding of x [R, T, N, D] at positions inputs_position.
Value Lowering::rope(Value x, bool local) {
  const TensorType& type = b_.type(x);
  int64_t n = type.dims[2], d = type.dims[3], half = d / 2;
  double min_ts = static_cast<double>(spec_.rope_min_timescale);
  bool llama31 = uses_llama31_rope(spec_);
  // The default rotation's extras (llama3.1's ignores both): sliding-window layers may use their
  // own maximum timescale, and every timescale may be stretched linearly.
  int64_t max_timescale = spec_.rope_max_timescale;
  if (!llama31 && local && spec_.local_rope_max_timescale > 0) {
    max_timescale = spec_.local_rope_max_timescale;
  }
  double max_ts = static_cast<double>(max_timescale);
  double linear_scale = llama31 ? 1.0 : spec_.rope_linear_scaling_factor;
  std::vector<double> inv_timescale(half);
  for (int64_t i = 0; i < half; ++i) {
    double fraction = 2.0 * static_cast<double>(i) / static_cast<double>(d);
    double timescale = min_ts * std::pow(max_ts / min_ts, fraction) * linear_scale;
    double freq = 1.0 / timescale;
    if (llama31 && spec_.rope_use_scale) {
      // llama3.1's frequency scaling: factor 8, low 1, high 4, original context 8192.
      constexpr double kFactor = 8, kLow = 1, kHigh = 4, kContext = 8192;
      double wavelength = 2 * std::numbers::pi / freq;
      if (wavelength < kContext / kHigh) {
        // high frequencies unchanged
      } else if (wavelength > kContext / kLow) {
        freq = freq / kFactor;
      } else {
        double smooth = (kContext / wavelength - kLow) / (kHigh - kLow);
        freq = (1 - smooth) * freq / kFactor + smooth * freq;
      }
    }
    inv_timescale[i] = freq;
  }
  std::vector<int64_t> angle_dims{rows_, length_, half};
  Value positions = b_.convert(batch_[1], stat_);
  Value angle = b_.mul(
      b_.broadcast_in_dim(positions, angle_dims, {0, 1}),
      b_.broadcast_in_dim(b_.constant(inv_timescale, TensorType{stat_, {half}}), angle_dims, {2}));
  // llama3.1 rotates in the statistics dtype and rounds once; the default rotates in the
  // activation dtype with rounded sin/cos, as MaxText does.
  DType rot = llama31 ? stat_ : act_;
  std::vector<int64_t> half_dims{rows_, length_, n, half};
  auto spread = [&](Value v) {
    if (b_.type(v).dtype != rot) v = b_.convert(v, rot);
    return b_.broadcast_in_dim(v, half_dims, {0, 1, 3});
  };
  Value sin = spread(b_.unary(OpKind::kSin, angle));
  Value cos = spread(b_.unary(OpKind::kCos, angle));
  Value xr = type.dtype == rot ? x : b_.convert(x, rot);
  Value first, second;
  if (llama31) {
    Value pairs = b_.reshape(xr, {rows_, length_, n, half, 2});
    first = b_.reshape(b_.slice(pairs, {0, 0, 0, 0, 0}, {rows_, length_, n, half, 1}), half_dims);
    second = b_.reshape(b_.slice(pairs, {0, 0, 0, 0, 1}, {rows_, length_, n, half, 2}), half_dims);
  } else {
    first = b_.slice(xr, {0, 0, 0, 0}, half_dims);
    second = b_.slice(xr, {0, 0, 0, half}, {rows_, length_, n, d});
  }
  Value out1 = b_.sub(b_.mul(first, cos), b_.mul(second, sin));
  Value out2 = b_.add(b_.mul(second, cos), b_.mul(first, sin));
  Value out;
  if (llama31) {
    std::vector<int64_t> one{rows_, length_, n, half, 1};
    Value parts[] = {b_.reshape(out1, one), b_.reshape(out2, one)};
    out = b_.reshape(b_.concatenate(parts, 4), {rows_, length_, n, d});
  } else {
    Value parts[] = {out1, out2};
    out = b_.concatenate(parts, 3);
  }
  return rot == act_ ? out : b_.convert(out, act_);
}

Value Lowering::attention(Value x, const BlockNames& n, int64_t window) {
  std::string p = n.prefix + "self_attention" + n.suffix + ".";
  Builder::ScopeGuard scope(b_, "");
  b_.set_scope(scope_of(p));
  int64_t h = spec_.num_query_heads, d = spec_.head_dim;
  Value q, k, v;
  if (spec_.family == DecoderFamily::kGpt3) {
    Value qkv = dense(x, p + "qkv_proj.kernel", 1);  // [R, T, 3, H, D]
    b_.set_scope(scope_of(p));
    b_.with_checkpoint(qkv, "qkv_proj");
    std::vector<int64_t> part_dims{rows_, length_, h, d};
    auto part = [&](int64_t i) {
      return b_.reshape(b_.slice(qkv, {0, 0, i, 0, 0}, {rows_, length_, i + 1, h, d}), part_dims);
    };
    q = b_.div(part(0),
               b_.constant(std::sqrt(static_cast<double>(d)), TensorType{act_, part_dims}));
    k = part(1);
    v = part(2);
  } else {
    q = dense(x, p + "query.kernel", 1);
    k = dense(x, p + "key.kernel", 1);
    v = dense(x, p + "value.kernel", 1);
    b_.set_scope(scope_of(p));
    q = rope(q, window > 0);
    k = rope(k, window > 0);
  }
  for (Value* t : {&q, &k, &v}) {
    axes(*t, {"activation_kv_batch", "activation_length_attn", "activation_kv_heads",
              "activation_kv_head_dim"});
  }
  b_.with_checkpoint(q, "query_proj");
  b_.with_checkpoint(k, "key_proj");
  b_.with_checkpoint(v, "value_proj");

  ir::AttentionOptions options;
  options.scale = 1.0;
  options.causal = true;
  options.sliding_window = window;
  options.softcap = spec_.attn_logits_soft_cap.value_or(0.0);
  options.flash = spec_.attention_kernel.find("flash") != std::string::npos;
  Value context = b_.attention(q, k, v, batch_[2], batch_[2], options);
  axes(context,
       {"activation_batch_attn", "activation_length_attn", "activation_heads", "activation_kv"});
  b_.with_checkpoint(context, "context");
  Value out = dense(context, p + "out.kernel", 2);
  b_.with_checkpoint(out, "out_proj");
  return axes(out, {"activation_batch", "activation_norm_length", "activation_embed"});
}

Value Lowering::activation(std::string_view name, Value x) {
  if (name == "linear") return x;
  if (name == "silu") return b_.mul(x, b_.logistic(x));
  if (name == "sigmoid") return b_.logistic(x);
  if (name == "relu") return b_.max(x, b_.splat(0.0, x));
  if (name == "tanh") return b_.tanh(x);
  if (name == "gelu") {
    // jax.nn.gelu's default tanh approximation.
    Value x3 = b_.mul(b_.mul(x, x), x);
    Value inner = b_.mul(b_.splat(std::sqrt(2.0 / std::numbers::pi), x),
                         b_.add(x, b_.mul(b_.splat(0.044715, x), x3)));
    Value one_plus = b_.add(b_.splat(1.0, x), b_.tanh(inner));
    return b_.mul(b_.mul(b_.splat(0.5, x), x), one_plus);
  }
  return Value{};  // rejected up front in run()
}

Value Lowering::mlp(Value x, const BlockNames& n) {
  std::string p = n.prefix + "mlp" + n.suffix + ".";
  Builder::ScopeGuard scope(b_, "");
  if (spec_.family == DecoderFamily::kGpt3) x = norm(x, p + "mlp_layer_norm");
  size_t num_acts = spec_.mlp_activations.size();
  Value hidden;
  for (size_t a = 0; a < num_acts; ++a) {
    std::string wi = num_acts == 1 ? "wi" : fmt::format("wi_{}", a);
    Value h = dense(x, p + wi + ".kernel", 1);
    b_.with_checkpoint(h, num_acts == 1 ? "mlpwi" : fmt::format("mlpwi_{}", a));
    axes(h, {"activation_batch", "activation_length", "activation_mlp"});
    b_.set_scope(scope_of(p));
    h = activation(spec_.mlp_activations[a], h);
    hidden = a == 0 ? h : b_.mul(hidden, h);
  }
  Value out = dense(hidden, p + "wo.kernel", 1);
  b_.with_checkpoint(out, "mlpwo");
  return axes(out, {"activation_batch", "activation_norm_length", "activation_embed"});
}

Value Lowering::half_layer(Value x, const BlockNames& n, int64_t window) {
  const std::string& s = n.suffix;
  Value a = attention(norm(x, n.prefix + "pre_self_attention_norm" + s), n, window);
  if (spec_.use_post_attn_norm) a = norm(a, n.prefix + "post_self_attention_norm" + s);
  Value h = b_.add(a, x);
  Value m = mlp(norm(h, n.prefix + "pre_ffw_norm" + s), n);
  if (spec_.use_post_ffw_norm) m = norm(m, n.prefix + "post_ffw_norm" + s);
  return b_.add(m, h);
}

Value Lowering::layer(Value x, int64_t index) {
  std::string prefix = fmt::format("decoder.layers_{}.", index);
  b_.set_scope(scope_of(prefix));
  b_.set_layer(static_cast<int16_t>(index));
  if (function_.defining_op(x) != ir::kNoOp) b_.with_checkpoint(x, "decoder_layer_input");
  BlockNames n{prefix, ""};
  // MaxText's llama2 and mistral layers take attention_type from the config; gemma's and gpt3's
  // always attend globally.
  bool windowed_family =
      spec_.family == DecoderFamily::kLlama2 || spec_.family == DecoderFamily::kMistral;
  int64_t window =
      windowed_family && spec_.attention_type == "local_sliding" ? spec_.sliding_window_size : 0;
  Value out;
  switch (spec_.family) {
    case DecoderFamily::kLlama2:
    case DecoderFamily::kMistral: {
      Value h = b_.add(attention(norm(x, prefix + "pre_self_attention_layer_norm"), n, window), x);
      out = b_.add(mlp(norm(h, prefix + "post_self_attention_layer_norm"), n), h);
      break;
    }
    case DecoderFamily::kGemma: {
      Value h = b_.add(attention(norm(x, prefix + "pre_self_attention_norm"), n, window), x);
      out = b_.add(mlp(norm(h, prefix + "pre_ffw_norm"), n), h);
      break;
    }
    case DecoderFamily::kGemma2:
      out = half_layer(x, BlockNames{prefix, "_local"}, spec_.sliding_window_size);
      b_.set_scope(scope_of(prefix));
      out = half_layer(out, BlockNames{prefix, "_global"}, 0);
      break;
    case DecoderFamily::kGpt3: {
      Value h = b_.add(attention(norm(x, prefix + "pre_self_attention_norm"), n, window), x);
      out = b_.add(mlp(h, n), h);
      break;
    }
  }
  b_.set_scope(scope_of(prefix));
  b_.set_layer(ir::kNoLayer);
  return axes(out, {"activation_batch", "activation_norm_length", "activation_embed"});
}

Status Lowering::output_and_loss(Value x) {
  int64_t e = spec_.emb_dim, v = spec_.vocab_size;
  Value y = norm(x, "decoder.decoder_norm");
  std::vector<int64_t> logit_dims{rows_, length_, v};
  Value logits;
  b_.set_region(ir::OpRegion::kLogits);  // the logits and the loss
  if (spec_.logits_via_embedding) {
    b_.set_scope("decoder/logits_via_embedding");
    DotDims dims;
    dims.lhs_contract = {2};
    dims.rhs_contract = {1};
    logits = b_.dot_general(y, use("token_embedder.embedding"), dims);
    if (spec_.normalize_embedding_logits) {
      logits = b_.div(logits,
                      b_.constant(std::sqrt(static_cast<double>(e)), TensorType{act_, logit_dims}));
    }
  } else {
    logits = dense(y, "decoder.logits_dense.kernel", 1);
  }
  b_.set_scope("decoder/logits");
  if (spec_.final_logits_soft_cap && *spec_.final_logits_soft_cap > 0) {
    Value cap = b_.splat(*spec_.final_logits_soft_cap, logits);
    logits = b_.mul(b_.tanh(b_.div(logits, cap)), cap);
  }
  if (b_.type(logits).dtype != stat_) logits = b_.convert(logits, stat_);
  axes(logits, {"activation_embed_and_logits_batch", "activation_length", "activation_vocab"});

  b_.set_scope("loss");
  TensorType token_type{stat_, {rows_, length_}};
  Value max = b_.reduce_max(logits, {2});
  Value shifted = b_.sub(logits, b_.broadcast_in_dim(max, logit_dims, {0, 1}));
  Value lse = b_.add(b_.log(b_.reduce_sum(b_.exp(shifted), {2})), max);
  Value classes = b_.iota(TensorType{DType::kS32, logit_dims}, 2);
  Value is_target = b_.compare(classes, b_.broadcast_in_dim(batch_[3], logit_dims, {0, 1}),
                               ir::ComparisonDirection::kEq);
  Value target_logit = b_.reduce_sum(b_.select(is_target, logits, b_.splat(0.0, logits)), {2});
  Value xent = b_.sub(lse, target_logit);
  Value z = b_.mul(b_.constant(spec_.z_loss_multiplier, token_type), b_.mul(lse, lse));
  if (spec_.z_loss_multiplier != 0) xent = b_.add(xent, z);
  Value real = b_.compare(batch_[5], b_.constant(0, TensorType{DType::kS32, {rows_, length_}}),
                          ir::ComparisonDirection::kNe);
  Value weights = b_.convert(real, stat_);
  Value total_weights = b_.reduce_sum(weights, {0, 1});
  Value loss = b_.reduce_sum(b_.mul(xent, weights), {0, 1});
  Value z_loss = b_.reduce_sum(b_.mul(z, weights), {0, 1});
  if (options_.loss_sums) {
    b_.with_name(loss, "xent_sum");
    b_.with_name(z_loss, "z_loss_sum");
  } else {
    Value denominator = b_.add(total_weights, b_.scalar(1e-8, stat_));
    loss = b_.with_name(b_.div(loss, denominator), "loss");
    z_loss = b_.with_name(b_.div(z_loss, denominator), "z_loss");
  }
  b_.with_name(total_weights, "total_weights");
  if (options_.return_logits) {
    b_.with_name(logits, "logits");
    b_.set_results({loss, z_loss, total_weights, logits});
  } else {
    b_.set_results({loss, z_loss, total_weights});
  }
  return b_.status();
}

Status Lowering::run() {
  if (options_.dtype_override) {
    act_ = weight_ = stat_ = *options_.dtype_override;
  } else {
    PRECAST_ASSIGN_OR_RETURN(act_, dtype_from_config("dtype", spec_.dtype));
    PRECAST_ASSIGN_OR_RETURN(weight_, dtype_from_config("weight_dtype", spec_.weight_dtype));
  }
  for (const std::string& a : spec_.mlp_activations) {
    if (a != "linear" && a != "silu" && a != "gelu" && a != "relu" && a != "sigmoid" &&
        a != "tanh") {
      return usage_error(fmt::format(
          "mlp_activations: '{}' is not an activation the frontend lowers; use silu, gelu, "
          "relu, sigmoid, tanh or linear",
          a));
    }
  }
  if (spec_.num_decoder_layers > std::numeric_limits<int16_t>::max()) {
    return usage_error(fmt::format(
        "num_decoder_layers {} is more than the IR's layer index holds ({}); use fewer layers",
        spec_.num_decoder_layers, std::numeric_limits<int16_t>::max()));
  }
  if (spec_.mlp_activations.empty()) {
    return usage_error("mlp_activations: empty; name at least one activation, e.g. ['silu']");
  }
  if (spec_.num_query_heads % spec_.num_kv_heads != 0) {
    return usage_error(fmt::format(
        "num_query_heads {} is not a multiple of num_kv_heads {}; GQA needs whole groups",
        spec_.num_query_heads, spec_.num_kv_heads));
  }
  if (spec_.family == DecoderFamily::kGpt3 && spec_.num_query_heads != spec_.num_kv_heads) {
    return usage_error(fmt::format("gpt3 needs num_kv_heads == num_query_heads, got {} and {}",
                                   spec_.num_kv_heads, spec_.num_query_heads));
  }
  if (spec_.family != DecoderFamily::kGpt3 && spec_.head_dim % 2 != 0) {
    return usage_error(
        fmt::format("head_dim {} must be even for rotary embeddings", spec_.head_dim));
  }
  if (spec_.family == DecoderFamily::kGemma2 && spec_.sliding_window_size <= 0) {
    return usage_error(fmt::format("sliding_window_size {} must be positive for gemma2",
                                   spec_.sliding_window_size));
  }

  declare_weights();
  for (int i = 0; i < kNumBatchArrays; ++i) {
    batch_[i] = b_.param(TensorType{DType::kS32, {rows_, length_}}, kBatchNames[i]);
    axes(batch_[i], {"activation_embed_and_logits_batch", "activation_norm_length"});
  }

  b_.set_scope("token_embedder");
  Value x = b_.take(use("token_embedder.embedding"), batch_[0], 0);
  if (w("decoder.position_embedder.embedding").valid()) {
    b_.set_scope("decoder/position_embedder");
    x = b_.add(x, b_.take(use("decoder.position_embedder.embedding"), batch_[1], 0));
  }
  axes(x, {"activation_batch", "activation_norm_length", "activation_embed"});
  for (int64_t i = 0; i < spec_.num_decoder_layers; ++i) x = layer(x, i);
  return output_and_loss(x);
}

}  // namespace

Expected<ForwardModel> lower_forward(const ModelSpec& spec, int64_t batch_rows, int64_t length,
                                     const ForwardOptions& options) {
  if (batch_rows <= 0) {
    return usage_error(fmt::format(
        "the batch has {} rows; per_device_batch_size x devices must give at least one row",
        batch_rows));
  }
  if (length <= 0) {
    return usage_error(fmt::format("max_target_length {} must be positive", length));
  }
  ForwardModel model;
  model.batch_rows = batch_rows;
  model.length = length;
  ir::Function& function = model.module.add_function("forward");
  Lowering lowering(spec, batch_rows, length, options, function, model.weights);
  PRECAST_RETURN_IF_ERROR(lowering.run());
  return model;
}

Expected<ForwardModel> lower_forward(const ModelSpec& spec, const BatchSpec& batch,
                                     const ForwardOptions& options) {
  int64_t rows = options.batch_rows > 0 ? options.batch_rows : batch.micro_batch_size_to_train_on;
  return lower_forward(spec, rows, batch.max_target_length, options);
}

Status add_init_function(ForwardModel& model) {
  ir::Function& forward = *model.module.find_function("forward");
  ir::Function& init = model.module.add_function("init");
  Builder b(init);
  b.set_scope("init");
  Value seed = b.param(TensorType{DType::kU32, {}}, "seed");
  std::vector<Value> results;
  for (size_t i = 0; i < model.weights.size(); ++i) {
    const WeightInfo& info = model.weights[i];
    const TensorType& type = forward.type(forward.params()[i]);
    Value v;
    switch (info.init) {
      case InitKind::kOnes:
        v = b.constant(1.0, type);
        break;
      case InitKind::kZeros:
        v = b.constant(0.0, type);
        break;
      case InitKind::kNormal:
        v = b.mul(b.rng_normal(seed, type, static_cast<int64_t>(i)), b.constant(info.stddev, type));
        break;
      case InitKind::kTruncatedNormal:
        v = b.mul(b.rng_truncated_normal(seed, type, static_cast<int64_t>(i), kTruncationBound),
                  b.constant(info.stddev, type));
        break;
    }
    std::vector<std::string_view> axes(info.axes.begin(), info.axes.end());
    b.with_axes(v, axes);
    b.with_name(v, info.name);
    results.push_back(v);
  }
  b.set_results(results);
  return b.status();
}

}  // namespace precast::frontend
