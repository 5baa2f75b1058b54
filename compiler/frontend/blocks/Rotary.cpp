#include <algorithm>
#include <cmath>
#include <numbers>

#include "compiler/frontend/blocks/Blocks.h"

namespace precast::frontend {
namespace {

using ir::Builder;
using ir::DType;
using ir::OpKind;
using ir::TensorType;
using ir::Value;

bool uses_llama31_rope(const ModelSpec& spec) {
  return spec.model_name.starts_with("llama3.1") || spec.rope.type.starts_with("llama3.1");
}

// MaxText's choice order: llama3.1 (by model name or type), then YaRN.
bool uses_yarn_rope(const ModelSpec& spec) {
  return !uses_llama31_rope(spec) && spec.rope.type.starts_with("yarn");
}

// YaRN's frequencies (MaxText's YarnRotaryEmbedding.freqs_cis): base_i = theta^(-2i/D); the
// correction range [low, high] holds the dimensions that rotate between beta_slow and beta_fast
// times within the original context; below it the base frequency is kept, above it the base
// divided by rope_factor, and a linear ramp blends the two inside it.
std::vector<double> yarn_frequencies(const ModelSpec& spec, int64_t d) {
  const YarnSpec& y = spec.rope.yarn;
  double theta = static_cast<double>(spec.rope.max_timescale);
  double dims = static_cast<double>(d);
  auto correction_dim = [&](double rotations) {
    return dims *
           std::log(static_cast<double>(y.original_max_position_embeddings) /
                    (rotations * 2 * std::numbers::pi)) /
           (2 * std::log(theta));
  };
  double low = correction_dim(static_cast<double>(y.beta_fast));
  double high = correction_dim(static_cast<double>(y.beta_slow));
  if (y.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dims - 1);
  if (low == high) high += 0.001;  // MaxText's guard against dividing by zero
  int64_t half = d / 2;
  std::vector<double> freqs(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    double base = 1.0 / std::pow(theta, 2.0 * static_cast<double>(i) / dims);
    double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    double smooth = 1 - ramp;
    freqs[static_cast<size_t>(i)] =
        base / static_cast<double>(y.factor) * (1 - smooth) + base * smooth;
  }
  return freqs;
}

// 1 / timescale_i for i < D/2, with llama3.1's frequency scaling when it applies.
std::vector<double> inverse_timescales(const ModelSpec& spec, int64_t d, bool local,
                                       bool scale_local) {
  if (uses_yarn_rope(spec)) return yarn_frequencies(spec, d);
  int64_t half = d / 2;
  bool llama31 = uses_llama31_rope(spec);
  double min_ts = static_cast<double>(spec.rope.min_timescale);
  // The default rotation's extras (llama3.1's ignores both): sliding-window layers may use their
  // own maximum timescale, and every timescale may be stretched linearly.
  int64_t max_timescale = spec.rope.max_timescale;
  if (!llama31 && local && spec.rope.local_max_timescale > 0) {
    max_timescale = spec.rope.local_max_timescale;
  }
  double max_ts = static_cast<double>(max_timescale);
  double linear_scale = llama31 || (local && !scale_local) ? 1.0 : spec.rope.linear_scaling_factor;
  std::vector<double> inv_timescale(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    double fraction = 2.0 * static_cast<double>(i) / static_cast<double>(d);
    double timescale = min_ts * std::pow(max_ts / min_ts, fraction) * linear_scale;
    double freq = 1.0 / timescale;
    if (llama31 && spec.rope.use_scale) {
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
    inv_timescale[static_cast<size_t>(i)] = freq;
  }
  return inv_timescale;
}

}  // namespace

Value rotary(Context& c, Value x, bool local, bool scale_local) {
  Builder& b = c.b();
  TensorType type = b.type(x);
  int64_t rows = c.rows(), length = c.length();
  int64_t n = type.dims[2], d = type.dims[3], half = d / 2;
  bool llama31 = uses_llama31_rope(c.spec());
  bool yarn = uses_yarn_rope(c.spec());
  // Input and output layouts: llama3.1 rotates pairs (x[2i], x[2i+1]) in place; YaRN reads
  // pairs (rope_interleave) or halves and always writes halves; the default rotates halves.
  bool pairs_in = llama31 || (yarn && c.spec().rope.yarn.interleave);
  bool pairs_out = llama31;
  std::vector<double> inv_timescale = inverse_timescales(c.spec(), d, local, scale_local);
  std::vector<int64_t> angle_dims{rows, length, half};
  Value positions = b.convert(c.batch(1), c.stat());
  Value angle = b.mul(
      b.broadcast_in_dim(positions, angle_dims, {0, 1}),
      b.broadcast_in_dim(b.constant(inv_timescale, TensorType{c.stat(), {half}}), angle_dims, {2}));
  // llama3.1 and YaRN (complex64 products) rotate in the statistics dtype and round once; the
  // default rotates in the activation dtype with rounded sin/cos, as MaxText does.
  DType rot = llama31 || yarn ? c.stat() : c.act();
  std::vector<int64_t> half_dims{rows, length, n, half};
  auto spread = [&](Value v) {
    if (b.type(v).dtype != rot) v = b.convert(v, rot);
    return b.broadcast_in_dim(v, half_dims, {0, 1, 3});
  };
  Value sin = spread(b.unary(OpKind::kSin, angle));
  Value cos = spread(b.unary(OpKind::kCos, angle));
  Value xr = type.dtype == rot ? x : b.convert(x, rot);
  Value first, second;
  if (pairs_in) {
    Value pairs = b.reshape(xr, {rows, length, n, half, 2});
    first = b.reshape(b.slice(pairs, {0, 0, 0, 0, 0}, {rows, length, n, half, 1}), half_dims);
    second = b.reshape(b.slice(pairs, {0, 0, 0, 0, 1}, {rows, length, n, half, 2}), half_dims);
  } else {
    first = b.slice(xr, {0, 0, 0, 0}, half_dims);
    second = b.slice(xr, {0, 0, 0, half}, {rows, length, n, d});
  }
  Value out1 = b.sub(b.mul(first, cos), b.mul(second, sin));
  Value out2 = b.add(b.mul(second, cos), b.mul(first, sin));
  Value out;
  if (pairs_out) {
    std::vector<int64_t> one{rows, length, n, half, 1};
    Value parts[] = {b.reshape(out1, one), b.reshape(out2, one)};
    out = b.reshape(b.concatenate(parts, 4), {rows, length, n, d});
  } else {
    Value parts[] = {out1, out2};
    out = b.concatenate(parts, 3);
  }
  const YarnSpec& y = c.spec().rope.yarn;
  if (yarn && y.attention_scaling && y.factor > 1) {
    double scale = 0.1 * std::log(static_cast<double>(y.factor)) + 1.0;
    out = b.mul(out, b.splat(scale, out));
  }
  return rot == c.act() ? out : b.convert(out, c.act());
}

}  // namespace precast::frontend
