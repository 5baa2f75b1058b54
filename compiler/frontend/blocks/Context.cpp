#include "compiler/frontend/blocks/Context.h"

#include <fmt/format.h>

#include <cmath>

namespace precast::frontend {
namespace {

using ir::DType;
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

}  // namespace

double normal_fan_in(int64_t fan_in) {
  return 1.0 / std::sqrt(static_cast<double>(fan_in));
}

double truncated_normal_fan_in(int64_t fan_in) {
  return normal_fan_in(fan_in) / kTruncatedNormalStddev;
}

Context::Context(const ModelSpec& spec, int64_t rows, int64_t length, const ForwardOptions& options,
                 ir::Function& function)
    : spec_(spec),
      rows_(rows),
      length_(length),
      options_(options),
      function_(function),
      b_(function) {}

Status Context::set_dtypes() {
  if (options_.dtype_override) {
    act_ = weight_ = stat_ = *options_.dtype_override;
    return Status::success();
  }
  PRECAST_ASSIGN_OR_RETURN(act_, dtype_from_config("dtype", spec_.dtype));
  PRECAST_ASSIGN_OR_RETURN(weight_, dtype_from_config("weight_dtype", spec_.weight_dtype));
  return Status::success();
}

Value Context::declare(const WeightInfo& info) {
  std::vector<std::string_view> axis_views(info.axes.begin(), info.axes.end());
  Value v = b_.param(TensorType{weight_, info.dims}, info.name);
  b_.with_axes(v, axis_views);
  values_.emplace(info.name, v);
  weights_.push_back(info);
  return v;
}

void Context::predeclare(const std::vector<WeightInfo>& weights) {
  for (const WeightInfo& info : weights) declare(info);
  predeclared_ = true;
}

void Context::add_batch() {
  for (int i = 0; i < kNumBatchArrays; ++i) {
    batch_[i] = b_.param(TensorType{DType::kS32, {rows_, length_}}, kBatchNames[i]);
    axes(batch_[i], {"activation_embed_and_logits_batch", "activation_norm_length"});
  }
}

Value Context::weight(WeightInfo info) {
  if (!values_.contains(info.name)) {
    // The real pass declares nothing new: its weights come from the declaring pass.
    if (predeclared_) {
      if (undeclared_.empty()) undeclared_ = info.name;
      return Value{};
    }
    declare(info);
  }
  return declared(info.name);
}

Value Context::declared(const std::string& name) {
  auto it = values_.find(name);
  if (it == values_.end()) return Value{};
  Value v = it->second;
  if (weight_ == act_) return v;
  auto c = converted_.find(name);
  if (c != converted_.end()) return c->second;
  Value converted = b_.convert(v, act_);
  converted_.emplace(name, converted);
  return converted;
}

Status Context::status() const {
  if (!undeclared_.empty()) {
    return internal_error("the frontend's real pass used weight '" + undeclared_ +
                          "', which its declaring pass did not declare");
  }
  return b_.status();
}

std::string Context::scope_of(const std::string& weight_prefix) {
  std::string s = weight_prefix;
  if (!s.empty() && s.back() == '.') s.pop_back();
  for (char& c : s) {
    if (c == '.') c = '/';
  }
  return s;
}

}  // namespace precast::frontend
