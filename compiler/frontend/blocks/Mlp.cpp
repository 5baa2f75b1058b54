#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "compiler/frontend/blocks/Blocks.h"

namespace precast::frontend {

using ir::Builder;
using ir::Value;

Value mlp_activation(Builder& b, std::string_view name, Value x) {
  if (name == "linear") return x;
  if (name == "silu") return b.mul(x, b.logistic(x));
  if (name == "sigmoid") return b.logistic(x);
  if (name == "relu") return b.max(x, b.splat(0.0, x));
  if (name == "tanh") return b.tanh(x);
  if (name == "gelu") {
    // jax.nn.gelu's default tanh approximation.
    Value x3 = b.mul(b.mul(x, x), x);
    Value inner = b.mul(b.splat(std::sqrt(2.0 / std::numbers::pi), x),
                        b.add(x, b.mul(b.splat(0.044715, x), x3)));
    Value one_plus = b.add(b.splat(1.0, x), b.tanh(inner));
    return b.mul(b.mul(b.splat(0.5, x), x), one_plus);
  }
  return Value{};  // rejected before lowering (check_activations)
}

Value clamped_glu(Builder& b, std::string_view activation, double limit, Value gate, Value up) {
  Value g = b.min(gate, b.splat(limit, gate));
  Value u = b.max(b.min(up, b.splat(limit, up)), b.splat(-limit, up));
  Value act = mlp_activation(b, activation, b.mul(g, b.splat(1.702, g)));
  return b.mul(b.mul(g, act), b.add(u, b.splat(1.0, u)));
}

Value mlp(Context& c, Value x, const MlpBlock& block) {
  const ModelSpec& s = c.spec();
  Builder& b = c.b();
  std::string p = block.prefix + ".";
  Builder::ScopeGuard guard(b, "");
  if (block.layer_norm) x = layer_norm_block(c, x, p + "mlp_layer_norm");
  int64_t e = s.emb_dim, m = block.width > 0 ? block.width : s.mlp_dim;
  size_t num_acts = s.mlp.activations.size();
  Value hidden;
  for (size_t a = 0; a < num_acts; ++a) {
    std::string wi = num_acts == 1 ? "wi" : fmt::format("wi_{}", a);
    WeightInfo bias;
    if (block.biases) bias = {p + wi + ".bias", {m}, {"mlp"}};
    Value h = dense(c, x,
                    {p + wi + ".kernel",
                     {e, m},
                     {"embed", "mlp"},
                     InitKind::kTruncatedNormal,
                     truncated_normal_fan_in(e)},
                    1, bias);
    b.with_checkpoint(h, num_acts == 1 ? "mlpwi" : fmt::format("mlpwi_{}", a));
    c.axes(h, {"activation_batch", "activation_length", "activation_mlp"});
    b.set_scope(Context::scope_of(p));
    h = mlp_activation(b, s.mlp.activations[a], h);
    hidden = a == 0 ? h : b.mul(hidden, h);
  }
  WeightInfo out_bias;
  if (block.biases) out_bias = {p + "wo.bias", {e}, {"embed"}};
  Value out = dense(c, hidden,
                    {p + "wo.kernel",
                     {m, e},
                     {"mlp", "embed"},
                     InitKind::kTruncatedNormal,
                     truncated_normal_fan_in(m)},
                    1, out_bias);
  b.with_checkpoint(out, "mlpwo");
  return c.residual_axes(out);
}

}  // namespace precast::frontend
