#include "compiler/frontend/Frontend.h"

#include <fmt/format.h>

#include <limits>

#include "compiler/frontend/blocks/Context.h"
#include "compiler/frontend/families/Family.h"
#include "ir/Builder.h"

namespace precast::frontend {
namespace {

// What no family lowers, checked before the family's own refusals.
Status check_common(const ModelSpec& spec) {
  for (const std::string& a : spec.mlp.activations) {
    if (a != "linear" && a != "silu" && a != "gelu" && a != "relu" && a != "sigmoid" &&
        a != "tanh") {
      return usage_error(fmt::format(
          "mlp_activations: '{}' is not an activation the frontend lowers; use silu, gelu, "
          "relu, sigmoid, tanh or linear",
          a));
    }
  }
  if (spec.num_decoder_layers > std::numeric_limits<int16_t>::max()) {
    return usage_error(fmt::format(
        "num_decoder_layers {} is more than the IR's layer index holds ({}); use fewer layers",
        spec.num_decoder_layers, std::numeric_limits<int16_t>::max()));
  }
  if (spec.mlp.activations.empty()) {
    return usage_error("mlp_activations: empty; name at least one activation, e.g. ['silu']");
  }
  if (spec.num_query_heads % spec.num_kv_heads != 0) {
    return usage_error(fmt::format(
        "num_query_heads {} is not a multiple of num_kv_heads {}; GQA needs whole groups",
        spec.num_query_heads, spec.num_kv_heads));
  }
  return Status::success();
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
  const FamilyHooks& family = family_hooks(spec.family);

  // Declaring pass (see blocks/Context.h): the weights in the order the model uses them.
  ir::Module scratch;
  Context declaring(spec, batch_rows, length, options, scratch.add_function("forward"));
  PRECAST_RETURN_IF_ERROR(declaring.set_dtypes());
  PRECAST_RETURN_IF_ERROR(check_common(spec));
  PRECAST_RETURN_IF_ERROR(family.check(spec));
  declaring.add_batch();
  PRECAST_RETURN_IF_ERROR(family.build(declaring));
  PRECAST_RETURN_IF_ERROR(declaring.status());

  ForwardModel model;
  model.batch_rows = batch_rows;
  model.length = length;
  Context c(spec, batch_rows, length, options, model.module.add_function("forward"));
  PRECAST_RETURN_IF_ERROR(c.set_dtypes());
  c.predeclare(declaring.weights());
  c.add_batch();
  PRECAST_RETURN_IF_ERROR(family.build(c));
  PRECAST_RETURN_IF_ERROR(c.status());
  model.weights = c.weights();
  return model;
}

Expected<ForwardModel> lower_forward(const ModelSpec& spec, const BatchSpec& batch,
                                     const ForwardOptions& options) {
  int64_t rows = options.batch_rows > 0 ? options.batch_rows : batch.micro_batch_size_to_train_on;
  return lower_forward(spec, rows, batch.max_target_length, options);
}

Status add_init_function(ForwardModel& model) {
  using ir::Builder;
  using ir::DType;
  using ir::TensorType;
  using ir::Value;
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
