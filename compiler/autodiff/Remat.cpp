#include "compiler/autodiff/Remat.h"

#include <fmt/format.h>

#include <initializer_list>
#include <string_view>
#include <unordered_map>

#include "compiler/autodiff/Autodiff.h"
#include "ir/Builder.h"

namespace precast::autodiff {
namespace {

using ir::Function;
using ir::Op;
using ir::OpIndex;
using ir::Value;

constexpr std::string_view kLayerInput = "decoder_layer_input";
constexpr std::initializer_list<const char*> kQkv = {"query_proj", "value_proj", "key_proj",
                                                     "kv_proj", "qkv_proj"};
constexpr std::initializer_list<const char*> kMinimal = {
    "query_proj", "value_proj", "key_proj", "kv_proj", "qkv_proj",
    "out_proj",   "mlpwi_0",    "mlpwi_1",  "mlpwi",   "mlpwo"};

const char* const kPolicyNames[] = {"full",
                                    "none",
                                    "minimal",
                                    "minimal_with_context",
                                    "minimal_flash",
                                    "minimal_with_quantization",
                                    "minimal_with_context_and_quantization",
                                    "save_dot_with_context_except_mlp",
                                    "save_dot_except_mlpwi",
                                    "save_dot_except_mlp",
                                    "save_qkv_proj",
                                    "save_out_proj",
                                    "qkv_proj_offloaded",
                                    "minimal_offloaded",
                                    "custom"};

void put(RematPolicy& policy, std::initializer_list<const char*> names, Placement placement) {
  for (const char* n : names) policy.names[n] = placement;
}

class Rematerializer {
 public:
  Rematerializer(const Function& source, Function& target, const RematPolicy& policy)
      : f_(source), b_(target), policy_(policy), map_(source.num_values()) {}

  Expected<RematResult> run() {
    Function& target = b_.function();
    for (Value p : f_.params()) {
      map_[p.id] = target.add_param_like(f_, p);
    }
    int16_t current_block = ir::kNoLayer;  // layer of the backward block being emitted
    std::vector<Value> operands;
    for (OpIndex i = 0; i < f_.num_ops(); ++i) {
      const Op& op = f_.op(i);
      bool backward = op.facts.phase == ir::OpPhase::kBackward;
      int16_t layer = op.facts.layer;
      if (backward && layer != ir::kNoLayer) {
        if (layer != current_block) {
          recomputed_.clear();  // each block recomputes what it needs; nothing lives across
          current_block = layer;
        }
      } else if (!backward) {
        current_block = ir::kNoLayer;
        recomputed_.clear();
      }
      operands.clear();
      for (Value v : f_.operands(op)) {
        if (backward && layer != ir::kNoLayer && needs_recompute(v)) {
          PRECAST_ASSIGN_OR_RETURN(Value r, recompute(v));
          operands.push_back(r);
        } else {
          operands.push_back(map_[v.id]);
        }
      }
      std::vector<Value> results = b_.clone(f_, i, operands);
      if (!b_.ok()) return b_.status().error();
      for (uint32_t r = 0; r < op.num_results; ++r) map_[f_.result(op, r).id] = results[r];
    }
    std::vector<Value> results;
    for (Value v : f_.results()) results.push_back(map_[v.id]);
    b_.set_results(results);
    for (size_t k = 0; k < results.size(); ++k) {
      if (f_.result_alias(k) >= 0) target.set_result_alias(k, f_.result_alias(k));
    }
    if (!b_.ok()) return b_.status().error();
    for (Value v : saved_) result_.saved.push_back(map_[v.id]);
    for (Value v : offloaded_) result_.offloaded.push_back(map_[v.id]);
    return result_;
  }

 private:
  // Placement of a forward value for the backward pass of its layer.
  Placement placement(Value v) const {
    OpIndex def = f_.defining_op(v);
    if (def == ir::kNoOp) return Placement::kDevice;
    std::string_view checkpoint = f_.checkpoint(f_.op(def));
    if (checkpoint.empty()) return Placement::kRemat;
    auto it = policy_.names.find(std::string(checkpoint));
    if (it != policy_.names.end()) return it->second;
    return checkpoint == kLayerInput ? Placement::kDevice : Placement::kRemat;
  }

  // A forward value of a decoder layer that the policy does not keep.
  bool needs_recompute(Value v) {
    OpIndex def = f_.defining_op(v);
    if (def == ir::kNoOp) return false;
    const ir::OpFacts& facts = f_.op(def).facts;
    if (!facts.in_layer() || facts.phase == ir::OpPhase::kBackward) return false;
    Placement where = placement(v);
    if (where == Placement::kRemat) return true;
    if (noted_.insert_or_assign(v.id, true).second) {
      (where == Placement::kOffload ? offloaded_ : saved_).push_back(v);
    }
    return false;
  }

  // Clones v's defining op (and, recursively, what it needs that is not kept) into the target.
  Expected<Value> recompute(Value v) {
    if (auto it = recomputed_.find(v.id); it != recomputed_.end()) return it->second;
    OpIndex def = f_.defining_op(v);
    const Op& op = f_.op(def);
    std::vector<Value> operands;
    for (Value u : f_.operands(op)) {
      if (needs_recompute(u)) {
        PRECAST_ASSIGN_OR_RETURN(Value r, recompute(u));
        operands.push_back(r);
      } else {
        operands.push_back(map_[u.id]);
      }
    }
    std::vector<Value> results = b_.clone(f_, def, operands);
    if (!b_.ok()) return b_.status().error();
    // A clone is scratch of the backward pass: the recomputation phase (its layer and region
    // kept), its own scope name, no checkpoint name, no value name.
    Function& target = b_.function();
    ir::Op& copy = target.mutable_op(target.defining_op(results[0]));
    copy.scope = target.context().intern_string(fmt::format("{}/{}", f_.scope(op), kRematScope));
    copy.checkpoint = 0;
    copy.facts.phase = ir::OpPhase::kRecompute;
    for (uint32_t r = 0; r < op.num_results; ++r) {
      target.set_value_name(results[r], 0);
      recomputed_[f_.result(op, r).id] = results[r];
    }
    ++result_.recomputed_ops;
    return recomputed_.at(v.id);
  }

  const Function& f_;
  ir::Builder b_;
  const RematPolicy& policy_;
  std::vector<Value> map_;
  std::unordered_map<uint32_t, Value> recomputed_;
  std::unordered_map<uint32_t, bool> noted_;
  std::vector<Value> saved_, offloaded_;
  RematResult result_;
};

}  // namespace

Expected<RematPolicy> remat_policy(const std::string& name,
                                   const std::map<std::string, std::string>& custom) {
  RematPolicy policy;
  policy.name = name;
  if (name == "full" || name == "none" || name.empty()) return policy;
  if (name == "minimal" || name == "minimal_with_quantization") {
    put(policy, kMinimal, Placement::kDevice);
  } else if (name == "minimal_with_context" || name == "minimal_flash" ||
             name == "minimal_with_context_and_quantization") {
    put(policy, kMinimal, Placement::kDevice);
    put(policy, {"context"}, Placement::kDevice);
  } else if (name == "save_dot_with_context_except_mlp") {
    put(policy, kQkv, Placement::kDevice);
    put(policy, {"context", "out_proj"}, Placement::kDevice);
  } else if (name == "save_dot_except_mlpwi") {
    put(policy, kQkv, Placement::kDevice);
    put(policy, {"out_proj", "mlpwo"}, Placement::kDevice);
  } else if (name == "save_dot_except_mlp") {
    put(policy, kQkv, Placement::kDevice);
    put(policy, {"out_proj"}, Placement::kDevice);
  } else if (name == "save_qkv_proj") {
    put(policy, kQkv, Placement::kDevice);
  } else if (name == "save_out_proj") {
    put(policy, {"out_proj"}, Placement::kDevice);
  } else if (name == "qkv_proj_offloaded") {
    put(policy, {"query_proj", "value_proj", "key_proj", "kv_proj"}, Placement::kOffload);
  } else if (name == "minimal_offloaded") {
    put(policy, kMinimal, Placement::kOffload);
  } else if (name == "custom") {
    for (const auto& [key, value] : custom) {
      if (value == "remat") {
        policy.names[key] = Placement::kRemat;
      } else if (value == "device") {
        policy.names[key] = Placement::kDevice;
      } else if (value == "offload") {
        policy.names[key] = Placement::kOffload;
      } else {
        return usage_error(fmt::format(
            "{}='{}' is not a remat placement; use remat, device or offload", key, value));
      }
    }
    auto input = policy.names.find(std::string(kLayerInput));
    if (input != policy.names.end() && input->second == Placement::kRemat) {
      return usage_error(
          "decoder_layer_input='remat' is not allowed with remat_policy=custom: the layer input "
          "is what the layer is recomputed from; use device or offload");
    }
  } else {
    std::string known;
    for (const char* n : kPolicyNames) known += fmt::format("{}{}", known.empty() ? "" : ", ", n);
    return usage_error(fmt::format(
        "remat_policy='{}' is not a remat policy MaxText knows; use one of: {}", name, known));
  }
  return policy;
}

Expected<RematResult> apply_remat(ir::Module& module, size_t index, const RematPolicy& policy) {
  const Function& source = module.function(index);
  std::unique_ptr<Function> rebuilt = module.new_function(source.name());
  PRECAST_ASSIGN_OR_RETURN(RematResult result, Rematerializer(source, *rebuilt, policy).run());
  module.replace_function(index, std::move(rebuilt));
  return result;
}

}  // namespace precast::autodiff
