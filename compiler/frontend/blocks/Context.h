// Context: what every block and family builder shares while lowering one forward function — the
// builder, the model, the dtypes, the batch arrays, and the weights, which a block declares at
// the point where it uses them (MaxText's name, shape, logical axes and initialiser).
//
// The forward function is built twice: a declaring pass on a scratch function records the
// weights in the order the model first uses them, then the real pass makes them the function's
// leading parameters (followed by the batch) and builds the same ops again. So the weight order
// is the use order, and no block keeps a separate list of its weights.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "compiler/config/ModelSpec.h"
#include "compiler/frontend/Frontend.h"
#include "ir/Builder.h"

namespace precast::frontend {

class Context {
 public:
  Context(const ModelSpec& spec, int64_t rows, int64_t length, const ForwardOptions& options,
          ir::Function& function);

  // Sets the dtypes from the config (or the override); fails on a dtype it cannot lower.
  Status set_dtypes();
  // Real pass: the weights of a declaring pass become the leading parameters, in its order.
  void predeclare(const std::vector<WeightInfo>& weights);
  // Adds the six batch arrays as parameters (after every predeclared weight).
  void add_batch();

  // The weight `info.name`, declared on first use, in the activation dtype (converted once).
  ir::Value weight(WeightInfo info);
  // A weight declared earlier (e.g. the embedding, reused by tied logits), or invalid.
  ir::Value declared(const std::string& name);
  bool is_declared(const std::string& name) const { return values_.contains(name); }

  const ModelSpec& spec() const { return spec_; }
  const ForwardOptions& options() const { return options_; }
  ir::Builder& b() { return b_; }
  ir::Function& function() { return function_; }
  int64_t rows() const { return rows_; }
  int64_t length() const { return length_; }
  ir::DType act() const { return act_; }    // activations
  ir::DType stat() const { return stat_; }  // norm statistics, logits, loss
  ir::Value batch(int i) const { return batch_[i]; }
  const std::vector<WeightInfo>& weights() const { return weights_; }
  // The builder's status, or an internal error if the real pass used a weight the declaring
  // pass did not declare (the two passes must build the same model).
  Status status() const;

  std::vector<int64_t> act_dims(int64_t last) const { return {rows_, length_, last}; }
  ir::Value axes(ir::Value v, std::initializer_list<std::string_view> names) {
    return b_.with_axes(v, names);
  }
  // The residual stream's axes, which every layer and most blocks return.
  ir::Value residual_axes(ir::Value v) {
    return b_.with_axes(v, {"activation_batch", "activation_norm_length", "activation_embed"});
  }
  // Each MoE layer's load-balancing loss (a scalar in stat()), in layer order; the loss block
  // averages them (MaxText's mean over the sown moe_lb_loss intermediates).
  void add_moe_lb_loss(ir::Value loss) { moe_lb_losses_.push_back(loss); }
  const std::vector<ir::Value>& moe_lb_losses() const { return moe_lb_losses_; }
  // Each MoE layer's routing-bias update (routed_bias_update_rate), with the name of the
  // gate.bias weight it moves, in layer order; the loss block returns them.
  void add_routed_bias_update(std::string bias, ir::Value update) {
    routed_bias_updates_.emplace_back(std::move(bias), update);
  }
  const std::vector<std::pair<std::string, ir::Value>>& routed_bias_updates() const {
    return routed_bias_updates_;
  }
  // "decoder.layers_3.self_attention." -> "decoder/layers_3/self_attention".
  static std::string scope_of(const std::string& weight_prefix);

 private:
  ir::Value declare(const WeightInfo& info);

  const ModelSpec& spec_;
  int64_t rows_, length_;
  const ForwardOptions& options_;
  ir::Function& function_;
  ir::Builder b_;
  bool predeclared_ = false;
  std::string undeclared_;  // the first weight the real pass asked for that was not declared
  std::vector<WeightInfo> weights_;
  std::unordered_map<std::string, ir::Value> values_;
  std::unordered_map<std::string, ir::Value> converted_;
  ir::Value batch_[kNumBatchArrays];
  std::vector<ir::Value> moe_lb_losses_;
  std::vector<std::pair<std::string, ir::Value>> routed_bias_updates_;

  ir::DType act_ = ir::DType::kBF16;
  ir::DType weight_ = ir::DType::kF32;
  ir::DType stat_ = ir::DType::kF32;
};

// MaxText's kernel initialisers, variance_scaling(1, fan_in): "normal" in the attention
// projections, "truncated_normal" elsewhere (the stddev is divided by the truncated normal's).
double normal_fan_in(int64_t fan_in);
double truncated_normal_fan_in(int64_t fan_in);

}  // namespace precast::frontend
