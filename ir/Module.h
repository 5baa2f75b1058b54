// Module, Function and Op: the IR's storage. A function owns its values (parameters and op
// results), its ops in SSA order and one operand pool; ops are 36-byte records whose names,
// types and attributes are ids into the module's Context.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/Context.h"
#include "ir/Ops.h"
#include "ir/Value.h"

namespace precast::ir {

using OpIndex = uint32_t;
inline constexpr OpIndex kNoOp = UINT32_MAX;

// Facts later stages read about where an op belongs, set by whoever creates it (the frontend,
// autodiff, remat) and carried by every rebuild. Scope strings are names for people; these are
// what passes and analyses ask.
enum class OpPhase : uint8_t {
  kForward,    // the model's forward computation (and anything outside a train step)
  kBackward,   // autodiff's reverse pass
  kRecompute,  // a forward op cloned by remat to run again during the backward pass
  kCount,
};
enum class OpRegion : uint8_t {
  kNone,
  kLogits,     // the output head: logits and the loss (with their backward)
  kOptimizer,  // gradient post-processing (clipping, norms) and the optimizer update
  kCount,
};
inline constexpr int16_t kNoLayer = -1;
struct OpFacts {
  OpPhase phase = OpPhase::kForward;
  OpRegion region = OpRegion::kNone;
  int16_t layer = kNoLayer;  // decoder layer index, or kNoLayer outside the layers
  // The module instance the op belongs to (the ops of "decoder/layers_3/self_attention":
  // query, key, value and their attention), numbered per module; 0 = none. Backward and
  // recomputed ops keep their forward op's block. The partitioner shares one reshard among
  // the ops of a block and phase.
  uint16_t block = 0;
  // The op's place within its decoder layer, the same in every layer ("mlp/wo" of layer 3 and
  // of layer 40), numbered per module; 0 = none (outside the layers). Buffer assignment
  // stacks a gradient buffer of every layer at one place into one scan buffer.
  uint16_t site = 0;
  bool in_layer() const { return layer != kNoLayer; }
  friend bool operator==(const OpFacts&, const OpFacts&) = default;
};
std::string_view phase_name(OpPhase phase);
std::string_view region_name(OpRegion region);

// The role of a function parameter a later stage needs to know (the memory report's category).
enum class ParamRole : uint8_t {
  kNone,
  kOptimizerState,  // Adam's moments and the step count
  kCount,
};
std::string_view param_role_name(ParamRole role);

struct Op {
  OpKind kind;
  uint16_t num_results;
  uint32_t num_operands;
  uint32_t operand_begin;  // into the function's operand pool
  uint32_t result_begin;   // results are values result_begin .. result_begin + num_results - 1
  AttrSetId attrs;
  StringId scope;       // e.g. "decoder/layers_3/self_attention/query"; 0 = none
  StringId checkpoint;  // remat name, e.g. "query_proj"; 0 = none
  uint32_t line;        // line in the parsed text, 0 when built in code
  OpFacts facts;        // phase, region, decoder layer, block, site
};
static_assert(sizeof(Op) == 40, "ops stay small: a 100k-op module is a few MB");

struct ValueInfo {
  TypeId type;
  AxesId axes;      // per-dimension logical axis names; 0 = none
  StringId name;    // 0 = unnamed (printed as %N)
  OpIndex def;      // defining op, or kNoOp for a parameter
  uint32_t number;  // result number in the defining op, or parameter number
  ShardingId sharding = 0;  // per-device layout (a partitioned function's values); 0 = none
};

class Function {
 public:
  Function(Context& context, std::string_view name);
  Function(const Function&) = delete;
  Function& operator=(const Function&) = delete;

  Context& context() const { return *context_; }
  std::string_view name() const { return context_->string(name_); }

  // Values.
  size_t num_values() const { return values_.size(); }
  const ValueInfo& value_info(Value v) const { return values_[v.id]; }
  const TensorType& type(Value v) const { return context_->type(values_[v.id].type); }
  TypeId type_id(Value v) const { return values_[v.id].type; }
  std::string_view value_name(Value v) const { return context_->string(values_[v.id].name); }
  // Per-dimension names; an empty span when the value has none, "" for an unnamed dimension.
  std::span<const StringId> axes(Value v) const { return context_->axes(values_[v.id].axes); }
  std::vector<std::string_view> axis_names(Value v) const;
  // Per dimension, the mesh axes it is split over; empty span when the value has no sharding.
  std::span<const std::vector<StringId>> sharding(Value v) const {
    return context_->sharding(values_[v.id].sharding);
  }
  bool has_sharding(Value v) const { return values_[v.id].sharding != 0; }
  bool is_param(Value v) const { return values_[v.id].def == kNoOp; }
  OpIndex defining_op(Value v) const { return values_[v.id].def; }

  // Ops.
  size_t num_ops() const { return ops_.size(); }
  const Op& op(OpIndex i) const { return ops_[i]; }
  std::span<const Op> ops() const { return ops_; }
  std::span<const Value> operands(const Op& op) const {
    return {operand_pool_.data() + op.operand_begin, op.num_operands};
  }
  Value result(const Op& op, uint32_t i = 0) const { return Value{op.result_begin + i}; }
  const AttrSet& attrs(const Op& op) const { return context_->attrs(op.attrs); }
  std::string_view scope(const Op& op) const { return context_->string(op.scope); }
  std::string_view checkpoint(const Op& op) const { return context_->string(op.checkpoint); }
  const OpFacts& facts(OpIndex i) const { return ops_[i].facts; }

  std::span<const Value> params() const { return params_; }
  std::span<const Value> results() const { return results_; }
  // Donation: result k may reuse the buffer of parameter result_alias(k) (XLA's
  // input_output_alias; a train step's new weights alias the old). -1 = none.
  int32_t result_alias(size_t k) const {
    return k < result_aliases_.size() ? result_aliases_[k] : -1;
  }
  bool has_aliases() const { return !result_aliases_.empty(); }
  void set_result_alias(size_t k, int32_t param);
  // Parameter i's role (kNone unless set).
  ParamRole param_role(size_t i) const {
    return i < param_roles_.size() ? param_roles_[i] : ParamRole::kNone;
  }
  void set_param_role(size_t i, ParamRole role);

  // Low-level construction; Builder and Parser are the usual entry points. Nothing here
  // checks shapes: run the verifier.
  Value add_param(TypeId type, AxesId axes = 0, StringId name = 0);
  // A copy of parameter p of `source` (a function on the same context): type, axis names, name,
  // sharding and role. Passes that rebuild a function start with these.
  Value add_param_like(const Function& source, Value p);
  OpIndex append_op(OpKind kind, std::span<const Value> operands,
                    std::span<const TypeId> result_types, AttrSetId attrs, StringId scope = 0,
                    StringId checkpoint = 0, uint32_t line = 0, OpFacts facts = {});
  void set_results(std::span<const Value> results) {
    results_.assign(results.begin(), results.end());
  }
  void set_axes(Value v, AxesId axes) { values_[v.id].axes = axes; }
  void set_value_name(Value v, StringId name) { values_[v.id].name = name; }
  void set_sharding(Value v, ShardingId sharding) { values_[v.id].sharding = sharding; }

  // In-place edits used by passes.
  Op& mutable_op(OpIndex i) { return ops_[i]; }
  void set_operand(OpIndex i, uint32_t operand, Value v) {
    operand_pool_[ops_[i].operand_begin + operand] = v;
  }
  // Replaces op i's operand list (any length).
  void reset_operands(OpIndex i, std::span<const Value> operands);
  // Rewrites every use (operands and function results) of v into replacement[v.id] when that
  // is valid. One pass over the operand pool, so batch replacements.
  void replace_uses(const std::vector<Value>& replacement);
  // Drops the ops with erase[i] set and renumbers values and ops densely. Invalidates Value
  // and OpIndex handles held outside. The erased ops' results must be unused.
  void erase_ops(const std::vector<bool>& erase);

 private:
  Context* context_;
  StringId name_;
  std::vector<ValueInfo> values_;
  std::vector<Op> ops_;
  std::vector<Value> operand_pool_;
  std::vector<Value> params_;
  std::vector<Value> results_;
  std::vector<int32_t> result_aliases_;  // empty, or one entry per result
  std::vector<ParamRole> param_roles_;   // empty, or one entry per parameter so far
};

class Module {
 public:
  Module();
  Module(Module&&) = default;
  Module& operator=(Module&&) = default;

  Context& context() const { return *context_; }

  Function& add_function(std::string_view name);
  // Swaps in a rebuilt function (it must have been created on this module's context).
  void replace_function(size_t index, std::unique_ptr<Function> function);
  size_t num_functions() const { return functions_.size(); }
  Function& function(size_t i) const { return *functions_[i]; }
  Function* find_function(std::string_view name) const;
  std::unique_ptr<Function> new_function(std::string_view name) const {
    return std::make_unique<Function>(*context_, name);
  }

  // Name of the text the module was parsed from (for messages); empty when built in code.
  const std::string& source_name() const { return source_name_; }
  void set_source_name(std::string name) { source_name_ = std::move(name); }

 private:
  std::unique_ptr<Context> context_;
  std::vector<std::unique_ptr<Function>> functions_;
  std::string source_name_;
};

}  // namespace precast::ir
