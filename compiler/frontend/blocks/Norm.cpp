#include "compiler/frontend/blocks/Blocks.h"

namespace precast::frontend {

using ir::Builder;
using ir::TensorType;
using ir::Value;

Value rms_norm(Context& c, Value x, const std::string& scale_name) {
  Builder& b = c.b();
  if (!x.valid()) return Value{};
  std::vector<int64_t> dims = b.type(x).dims;
  int64_t last = static_cast<int64_t>(dims.size()) - 1;
  int64_t features = dims.back();
  std::vector<int64_t> leading(dims.begin(), dims.end() - 1);
  std::vector<int64_t> leading_axes;
  for (int64_t i = 0; i < last; ++i) leading_axes.push_back(i);

  Value xf = b.type(x).dtype == c.stat() ? x : b.convert(x, c.stat());
  Value mean2 = b.div(b.reduce_sum(b.mul(xf, xf), {last}),
                      b.constant(static_cast<double>(features), TensorType{c.stat(), leading}));
  Value inv = b.rsqrt(b.add(mean2, b.splat(c.spec().normalization_layer_epsilon, mean2)));
  Value y = b.mul(xf, b.broadcast_in_dim(inv, dims, leading_axes));
  if (c.stat() != c.act()) y = b.convert(y, c.act());
  Value scale = c.weight({scale_name, {features}, {"norm"}, InitKind::kOnes});
  return b.mul(y, b.broadcast_in_dim(scale, dims, {last}));
}

Value rms_norm_block(Context& c, Value x, const std::string& prefix) {
  Builder::ScopeGuard scope(c.b(), "");
  c.b().set_scope(Context::scope_of(prefix));
  return c.residual_axes(rms_norm(c, x, prefix + ".scale"));
}

Value layer_norm_block(Context& c, Value x, const std::string& prefix) {
  Builder& b = c.b();
  Builder::ScopeGuard guard(b, "");
  b.set_scope(Context::scope_of(prefix));
  int64_t e = c.spec().emb_dim;
  std::vector<int64_t> dims = c.act_dims(e);
  TensorType stat_type{c.act(), {c.rows(), c.length()}};
  Value n = b.constant(static_cast<double>(e), stat_type);
  Value mean = b.div(b.reduce_sum(x, {2}), n);
  Value centered = b.sub(x, b.broadcast_in_dim(mean, dims, {0, 1}));
  Value var = b.div(b.reduce_sum(b.mul(centered, centered), {2}), n);
  Value inv = b.rsqrt(b.add(var, b.splat(c.spec().normalization_layer_epsilon, var)));
  Value normed = b.mul(centered, b.broadcast_in_dim(inv, dims, {0, 1}));
  Value scale = c.weight({prefix + ".scale", {e}, {"norm"}, InitKind::kZeros});
  Value one_plus = b.add(scale, b.splat(1.0, scale));
  Value y = b.mul(normed, b.broadcast_in_dim(one_plus, dims, {2}));
  Value bias = c.weight({prefix + ".bias", {e}, {"norm"}, InitKind::kZeros});
  y = b.add(y, b.broadcast_in_dim(bias, dims, {2}));
  return c.residual_axes(y);
}

}  // namespace precast::frontend
