#include "compiler/autodiff/TrainStep.h"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>

#include "compiler/autodiff/Autodiff.h"
#include "ir/Builder.h"

namespace precast::autodiff {
namespace {

using ir::Builder;
using ir::ComparisonDirection;
using ir::DType;
using ir::Function;
using ir::TensorType;
using ir::Value;

constexpr int kNumBatchArrays = 6;
constexpr double kLossEpsilon = 1e-8;  // MaxText's EPS in loss = xent_sum / (weights + EPS)

std::string scope_path(std::string_view weight_name) {
  std::string path(weight_name);
  std::replace(path.begin(), path.end(), '.', '/');
  return path;
}

std::vector<int64_t> all_dims(const TensorType& type) {
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < type.rank(); ++d) dims.push_back(d);
  return dims;
}

// Sum of squares of every element of every tensor, in `dtype`.
Value sum_of_squares(Builder& b, const std::vector<Value>& tensors, DType dtype) {
  Value total = b.scalar(0.0, dtype);
  for (Value t : tensors) {
    Value x = b.type(t).dtype == dtype ? t : b.convert(t, dtype);
    Value squares = b.mul(x, x);
    Value sum =
        b.type(squares).is_scalar() ? squares : b.reduce_sum(squares, all_dims(b.type(squares)));
    total = b.add(total, sum);
  }
  return total;
}

Value global_norm(Builder& b, const std::vector<Value>& tensors, DType dtype) {
  return b.sqrt(sum_of_squares(b, tensors, dtype));
}

// A scalar broadcast to `like`'s shape, converted to its dtype.
Value spread(Builder& b, Value scalar, Value like) {
  const TensorType& type = b.type(like);
  Value s = b.type(scalar).dtype == type.dtype ? scalar : b.convert(scalar, type.dtype);
  return type.is_scalar() ? s : b.broadcast_in_dim(s, type.dims, {});
}

Value as(Builder& b, Value v, DType dtype) {
  return b.type(v).dtype == dtype ? v : b.convert(v, dtype);
}

// deepseek's routing-bias updates: a forward result (past the three sums) named
// kRoutedBiasUpdatePrefix + a weight's name, shaped like that weight.
struct BiasUpdate {
  size_t result = 0;  // of the forward
  size_t weight = 0;
  Value sum;  // over the micro-batches
};

Expected<std::vector<BiasUpdate>> routed_bias_updates(const Function& forward, size_t num_weights) {
  std::vector<BiasUpdate> updates;
  for (size_t k = 3; k < forward.results().size(); ++k) {
    std::string_view name = forward.value_name(forward.results()[k]);
    if (!name.starts_with(kRoutedBiasUpdatePrefix)) continue;
    name.remove_prefix(kRoutedBiasUpdatePrefix.size());
    size_t i = 0;
    while (i < num_weights && forward.value_name(forward.params()[i]) != name) ++i;
    if (i == num_weights ||
        forward.type(forward.results()[k]).dims != forward.type(forward.params()[i]).dims) {
      return internal_error(fmt::format(
          "train step: result {} of @{} updates weight '{}', which @{} has no weight of its shape",
          k, forward.name(), name, forward.name()));
    }
    updates.push_back(BiasUpdate{k, i, Value{}});
  }
  return updates;
}

Status check_forward(const Function& forward, size_t num_weights) {
  if (forward.params().size() != num_weights + kNumBatchArrays) {
    return internal_error(fmt::format(
        "train step: @{} must take {} weights then the 6 batch arrays, but has {} parameters",
        forward.name(), num_weights, forward.params().size()));
  }
  if (forward.results().size() < 3) {
    return internal_error(fmt::format(
        "train step: @{} must return (xent_sum, z_loss_sum, total_weights, ...)", forward.name()));
  }
  for (size_t i = 0; i < 3; ++i) {
    if (!forward.type(forward.results()[i]).is_scalar()) {
      return internal_error(
          fmt::format("train step: result {} of @{} must be a scalar", i, forward.name()));
    }
  }
  for (size_t i = 0; i < num_weights; ++i) {
    if (!ir::is_floating(forward.type(forward.params()[i]).dtype)) {
      return internal_error(
          fmt::format("train step: weight {} of @{} is not floating point", i, forward.name()));
    }
  }
  for (int i = 0; i < kNumBatchArrays; ++i) {
    const TensorType& t = forward.type(forward.params()[num_weights + static_cast<size_t>(i)]);
    if (t.dtype != DType::kS32 || t.rank() != 2) {
      return internal_error(
          fmt::format("train step: batch array {} of @{} must be s32[rows, T]", i, forward.name()));
    }
  }
  return Status::success();
}

}  // namespace

Expected<OptimizerKind> optimizer_from_name(const std::string& name) {
  if (name == "adamw") return OptimizerKind::kAdamW;
  if (name == "adam_pax") return OptimizerKind::kAdamPax;
  if (name == "sgd") return OptimizerKind::kSgd;
  return usage_error(fmt::format(
      "opt_type='{}' is not supported; use adamw, adam_pax or sgd (muon is not implemented)",
      name));
}

Expected<TrainStepLayout> add_train_step(ir::Module& module, const Function& forward,
                                         size_t num_weights, const TrainStepSpec& spec) {
  PRECAST_RETURN_IF_ERROR(check_forward(forward, num_weights));
  const int64_t g_steps = spec.gradient_accumulation_steps;
  if (g_steps < 1) {
    return usage_error(fmt::format("gradient_accumulation_steps={} must be at least 1", g_steps));
  }
  if (!spec.weight_decay.empty() && spec.weight_decay.size() != num_weights) {
    return internal_error("train step: weight_decay must have one entry per weight");
  }
  const bool adam = spec.optimizer != OptimizerKind::kSgd;

  Function& function = module.add_function("train_step");
  Builder b(function);
  TrainStepLayout layout;
  layout.function = &function;
  layout.num_weights = num_weights;

  // Parameters.
  std::vector<Value> weights, mu, nu;
  for (size_t i = 0; i < num_weights; ++i) {
    Value p = forward.params()[i];
    Value w = b.param(forward.type(p), forward.value_name(p));
    std::vector<std::string_view> axes = forward.axis_names(p);
    if (!axes.empty()) b.with_axes(w, axes);
    weights.push_back(w);
  }
  Value count;
  if (adam) {
    for (int moment = 0; moment < 2; ++moment) {
      for (size_t i = 0; i < num_weights; ++i) {
        Value p = forward.params()[i];
        TensorType type = forward.type(p);
        if (moment == 0) type.dtype = spec.mu_dtype;
        Value m =
            b.param(type, fmt::format("{}.{}", moment == 0 ? "mu" : "nu", forward.value_name(p)));
        std::vector<std::string_view> axes = forward.axis_names(p);
        if (!axes.empty()) b.with_axes(m, axes);
        (moment == 0 ? mu : nu).push_back(m);
      }
    }
    count = b.param(TensorType{DType::kS32, {}}, "count");
    // The moments and the count: what the memory report counts as optimizer state.
    for (size_t k = num_weights; k < function.params().size(); ++k)
      function.set_param_role(k, ir::ParamRole::kOptimizerState);
  }
  layout.num_state = function.params().size();
  layout.first_batch_param = layout.num_state;
  std::vector<Value> batch;
  int64_t rows = forward.type(forward.params()[num_weights]).dims[0];
  int64_t length = forward.type(forward.params()[num_weights]).dims[1];
  layout.rows_per_step = rows * g_steps;
  for (int i = 0; i < kNumBatchArrays; ++i) {
    Value p = forward.params()[num_weights + static_cast<size_t>(i)];
    Value v = b.param(TensorType{DType::kS32, {rows * g_steps, length}}, forward.value_name(p));
    std::vector<std::string_view> axes = forward.axis_names(p);
    if (!axes.empty()) b.with_axes(v, axes);
    batch.push_back(v);
  }
  layout.first_scalar_param = function.params().size();
  std::vector<Value> scalars;
  for (const char* name : kRunTimeScalars)
    scalars.push_back(b.param(TensorType{DType::kF32, {}}, name));
  if (!b.ok()) return b.status().error();
  Value learning_rate = scalars[0], b1 = scalars[1], b2 = scalars[2], eps = scalars[3],
        eps_root = scalars[4], weight_decay = scalars[5], clip_threshold = scalars[6];

  const DType loss_dtype = forward.type(forward.results()[0]).dtype;
  const DType norm_dtype = forward.type(forward.params()[0]).dtype;

  // Forward and backward of each micro-batch; gradients summed unnormalised when G > 1.
  std::vector<size_t> wrt(num_weights);
  for (size_t i = 0; i < num_weights; ++i) wrt[i] = i;
  std::vector<Value> grads(num_weights);
  Value xent_sum, z_sum, total_weights, lb_sum;
  size_t lb_result = 0;  // the forward's moe_lb_loss result, 0 if none
  for (size_t k = 3; k < forward.results().size(); ++k)
    if (forward.value_name(forward.results()[k]) == kMoeLbLossMetric) lb_result = k;
  PRECAST_ASSIGN_OR_RETURN(std::vector<BiasUpdate> bias_updates,
                           routed_bias_updates(forward, num_weights));
  for (int64_t micro = 0; micro < g_steps; ++micro) {
    std::vector<Value> arguments = weights;
    b.set_scope("batch");
    b.set_region(ir::OpRegion::kNone);
    for (Value array : batch) {
      if (g_steps == 1) {
        arguments.push_back(array);
        continue;
      }
      // Rows micro, micro + G, micro + 2G, ...: MaxText's reshape (rows, G, T) + swapaxes.
      Value grouped = b.reshape(array, {rows, g_steps, length});
      Value picked = b.slice(grouped, {0, micro, 0}, {rows, micro + 1, length}, {});
      arguments.push_back(b.reshape(picked, {rows, length}));
    }
    Value seed;
    if (g_steps == 1) {
      // d loss/d xent_sum with loss = xent_sum / (total_weights + EPS), as MaxText
      // differentiates it; total_weights depends only on the batch.
      b.set_scope("loss");
      b.set_region(ir::OpRegion::kLogits);
      Value real =
          b.compare(arguments[num_weights + 5], b.constant(0.0, b.type(arguments[num_weights + 5])),
                    ComparisonDirection::kNe);
      Value tokens = b.reduce_sum(b.convert(real, loss_dtype), {0, 1});
      seed = b.div(b.scalar(1.0, loss_dtype), b.add(tokens, b.scalar(kLossEpsilon, loss_dtype)));
    } else {
      seed = b.scalar(1.0, loss_dtype);
    }
    std::vector<Value> cotangents(forward.results().size());
    cotangents[0] = seed;
    if (lb_result > 0) cotangents[lb_result] = b.scalar(1.0, loss_dtype);
    PRECAST_ASSIGN_OR_RETURN(VjpResult vjp, inline_vjp(b, forward, arguments, cotangents, wrt));
    b.set_scope("loss");
    b.set_region(ir::OpRegion::kLogits);
    xent_sum = xent_sum.valid() ? b.add(xent_sum, vjp.results[0]) : vjp.results[0];
    z_sum = z_sum.valid() ? b.add(z_sum, vjp.results[1]) : vjp.results[1];
    total_weights = total_weights.valid() ? b.add(total_weights, vjp.results[2]) : vjp.results[2];
    if (lb_result > 0) {
      Value lb = vjp.results[lb_result];
      lb_sum = lb_sum.valid() ? b.add(lb_sum, lb) : lb;
    }
    for (BiasUpdate& u : bias_updates) {
      b.set_scope("optimizer/" + scope_path(forward.value_name(forward.params()[u.weight])));
      b.set_region(ir::OpRegion::kOptimizer);
      Value update = vjp.results[u.result];
      u.sum = u.sum.valid() ? b.add(u.sum, update) : update;
    }
    for (size_t i = 0; i < num_weights; ++i) {
      b.set_scope("gradients/" + scope_path(forward.value_name(forward.params()[i])));
      b.set_region(ir::OpRegion::kOptimizer);
      Value gradient = as(b, vjp.gradients[i], spec.grad_dtype);
      grads[i] = grads[i].valid() ? b.add(grads[i], gradient) : gradient;
    }
  }

  // Loss normalisation.
  b.set_scope("loss");
  b.set_region(ir::OpRegion::kLogits);
  Value loss, z_loss;
  if (g_steps == 1) {
    Value denominator = b.add(total_weights, b.scalar(kLossEpsilon, loss_dtype));
    loss = b.div(xent_sum, denominator);
    z_loss = b.div(z_sum, denominator);
  } else {
    Value denominator = b.max(total_weights, b.scalar(1.0, loss_dtype));
    loss = b.div(xent_sum, denominator);
    z_loss = b.div(z_sum, denominator);
    // MaxText divides the summed gradients by the total real-token count.
    for (size_t i = 0; i < num_weights; ++i) {
      b.set_scope("gradients/" + scope_path(forward.value_name(forward.params()[i])));
      b.set_region(ir::OpRegion::kOptimizer);
      grads[i] = b.div(grads[i], spread(b, total_weights, grads[i]));
    }
  }

  // MaxText's loss adds the load-balancing loss (averaged over micro-batches); lm_loss does not.
  Value lm_loss = loss, lb_loss;
  if (lb_result > 0) {
    lb_loss = g_steps == 1 ? lb_sum
                           : b.div(lb_sum, b.scalar(static_cast<double>(g_steps), loss_dtype));
    loss = b.add(lm_loss, lb_loss);
  }

  // Global-norm clipping: scale by threshold / norm when norm >= threshold > 0 (optax keeps the
  // gradient when norm < threshold).
  b.set_scope("optimizer/clip");
  b.set_region(ir::OpRegion::kOptimizer);
  Value raw_norm = global_norm(b, grads, norm_dtype);
  Value threshold = as(b, clip_threshold, norm_dtype);
  Value zero = b.scalar(0.0, norm_dtype);
  Value clipping = b.binary(ir::OpKind::kAnd, b.compare(threshold, zero, ComparisonDirection::kGt),
                            b.compare(raw_norm, threshold, ComparisonDirection::kGe));
  Value factor = b.select(clipping, b.div(threshold, raw_norm), b.scalar(1.0, norm_dtype));
  std::vector<Value> clipped;
  for (size_t i = 0; i < num_weights; ++i)
    clipped.push_back(b.mul(grads[i], spread(b, factor, grads[i])));
  Value clipped_norm = global_norm(b, clipped, norm_dtype);

  // The update. Optimizer scalars are computed once, in the weights' type (f32 as optax does;
  // f64 in reference checks).
  std::vector<Value> new_weights, new_mu, new_nu;
  Value new_count, m_decay, v_decay, c1, c2;  // decays: weight of the old moment
  if (adam) {
    b.set_scope("optimizer");
    new_count = b.add(count, b.constant(1.0, TensorType{DType::kS32, {}}));
    Value t = b.convert(new_count, norm_dtype);  // the step number this update completes
    Value one = b.scalar(1.0, norm_dtype);
    Value beta1 = as(b, b1, norm_dtype), beta2 = as(b, b2, norm_dtype);
    if (spec.optimizer == OptimizerKind::kAdamW) {
      m_decay = beta1;
      v_decay = beta2;
      c1 = b.sub(one, b.pow(beta1, t));  // bias corrections 1 - b^t
      c2 = b.sub(one, b.pow(beta2, t));
    } else {
      // adam_pax folds bias correction into the decay: b (1 - b^(t-1)) / (1 - b^t).
      auto corrected = [&](Value beta) {
        Value previous = b.pow(beta, b.sub(t, one));
        return b.div(b.mul(beta, b.sub(one, previous)), b.sub(one, b.pow(beta, t)));
      };
      m_decay = corrected(beta1);
      v_decay = corrected(beta2);
    }
  }
  for (size_t i = 0; i < num_weights; ++i) {
    b.set_scope("optimizer/" + scope_path(forward.value_name(forward.params()[i])));
    Value w = weights[i];
    DType wd = b.type(w).dtype;
    Value g = as(b, clipped[i], wd);
    Value lr = spread(b, learning_rate, w);
    Value next;
    if (spec.optimizer == OptimizerKind::kSgd) {
      next = b.sub(w, b.mul(lr, g));
    } else {
      Value m_old = as(b, mu[i], wd);
      Value v_old = nu[i];
      Value md = spread(b, m_decay, w), vd = spread(b, v_decay, w);
      Value one_w = b.splat(1.0, w);
      Value m = b.add(b.mul(b.sub(one_w, md), g), b.mul(md, m_old));
      Value v = b.add(b.mul(b.sub(one_w, vd), b.mul(g, g)), b.mul(vd, v_old));
      Value m_hat = m, v_hat = v;
      if (spec.optimizer == OptimizerKind::kAdamW) {
        m_hat = b.div(m, spread(b, c1, w));
        v_hat = b.div(v, spread(b, c2, w));
      }
      Value update =
          b.div(m_hat, b.add(b.sqrt(b.add(v_hat, spread(b, eps_root, w))), spread(b, eps, w)));
      bool decays = spec.optimizer == OptimizerKind::kAdamPax || spec.weight_decay.empty() ||
                    spec.weight_decay[i];
      if (decays) update = b.add(update, b.mul(spread(b, weight_decay, w), w));
      next = b.sub(w, b.mul(lr, update));
      new_mu.push_back(as(b, m, spec.mu_dtype));
      new_nu.push_back(v);
    }
    for (const BiasUpdate& u : bias_updates) {
      if (u.weight == i) next = b.add(next, as(b, u.sum, wd));
    }
    std::string_view name = forward.value_name(forward.params()[i]);
    b.with_name(next, fmt::format("next.{}", name));
    std::vector<std::string_view> axes = forward.axis_names(forward.params()[i]);
    if (!axes.empty()) b.with_axes(next, axes);
    new_weights.push_back(next);
    if (adam) {
      b.with_name(new_mu.back(), fmt::format("next.mu.{}", name));
      b.with_name(new_nu.back(), fmt::format("next.nu.{}", name));
      if (!axes.empty()) {
        b.with_axes(new_mu.back(), axes);
        b.with_axes(new_nu.back(), axes);
      }
    }
  }
  if (adam) b.with_name(new_count, "next.count");

  // Metrics.
  b.set_scope("metrics");
  b.set_region(ir::OpRegion::kNone);
  Value param_norm = global_norm(b, new_weights, norm_dtype);
  std::vector<Value> metrics = {loss,          lm_loss,      b.exp(lm_loss), z_loss,
                                total_weights, clipped_norm, raw_norm,       param_norm};
  if (lb_result > 0) metrics.push_back(lb_loss);
  layout.num_metrics = metrics.size();
  std::vector<Value> results = new_weights;
  results.insert(results.end(), new_mu.begin(), new_mu.end());
  results.insert(results.end(), new_nu.begin(), new_nu.end());
  if (adam) results.push_back(new_count);
  layout.first_metric_result = results.size();
  for (size_t i = 0; i < metrics.size(); ++i) {
    Value m = as(b, metrics[i], loss_dtype);
    // Without auxiliary losses lm_loss is loss; total_weights and moe_lb_loss may be the
    // forward's own values (which carry its names): name only the values made here.
    bool own = i != 4 && i < kNumMetrics && (i != 1 || lb_result > 0);
    if (own) b.with_name(m, kMetricNames[i]);
    results.push_back(m);
  }
  b.set_scope("");
  b.set_results(results);
  if (!b.ok()) return b.status().error();
  // Params and optimizer state are donated: each new value may take its old value's buffer.
  for (size_t k = 0; k < layout.num_state; ++k)
    function.set_result_alias(k, static_cast<int32_t>(k));
  return layout;
}

}  // namespace precast::autodiff
