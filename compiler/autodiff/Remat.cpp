#include "compiler/autodiff/Remat.h"

#include <fmt/format.h>

#include <initializer_list>
#include <string_view>
#include <unordered_map>

#include "compiler/autodiff/Autodiff.h"
#include "compiler/config/RematPolicies.h"
#include "ir/Builder.h"
#include "ir/Rewriter.h"

namespace precast::autodiff {
namespace {

using ir::Function;
using ir::Op;
using ir::OpIndex;
using ir::Value;

void put(RematPolicy& policy, const std::vector<std::string_view>& names, Placement placement) {
  for (std::string_view n : names) policy.names[std::string(n)] = placement;
}

class Rematerializer {
 public:
  Rematerializer(ir::Rewriter& rewriter, const RematPolicy& policy)
      : f_(rewriter.source()), b_(rewriter.builder()), rewriter_(rewriter), policy_(policy) {}

  // Rebuilds the function into the rewriter's target; the caller commits it. `saved` and
  // `offloaded` of the result are values of the target.
  Expected<RematResult> run() {
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
          operands.push_back(rewriter_[v]);
        }
      }
      std::vector<Value> results = b_.clone(f_, i, operands);
      if (!b_.ok()) return b_.status().error();
      for (uint32_t r = 0; r < op.num_results; ++r) rewriter_.map(f_.result(op, r), results[r]);
    }
    for (Value v : saved_) result_.saved.push_back(rewriter_[v]);
    for (Value v : offloaded_) result_.offloaded.push_back(rewriter_[v]);
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
    return checkpoint == kRematLayerInput ? Placement::kDevice : Placement::kRemat;
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
        operands.push_back(rewriter_[u]);
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
  ir::Builder& b_;
  ir::Rewriter& rewriter_;
  const RematPolicy& policy_;
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
  if (name.empty()) return policy;  // MaxText's unset policy: recompute all but the layer input
  const RematPolicyRow* row = find_remat_policy(name);
  if (row == nullptr) {
    return usage_error(fmt::format(
        "remat_policy='{}' is not a remat policy MaxText knows; use one of: {}", name,
        remat_policy_names()));
  }
  put(policy, row->device, Placement::kDevice);
  put(policy, row->offload, Placement::kOffload);
  if (name != "custom") return policy;
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
  auto input = policy.names.find(std::string(kRematLayerInput));
  if (input != policy.names.end() && input->second == Placement::kRemat) {
    return usage_error(
        "decoder_layer_input='remat' is not allowed with remat_policy=custom: the layer input "
        "is what the layer is recomputed from; use device or offload");
  }
  return policy;
}

Expected<RematResult> apply_remat(ir::Module& module, size_t index, const RematPolicy& policy) {
  ir::Rewriter rewriter(module, index);
  PRECAST_ASSIGN_OR_RETURN(RematResult result, Rematerializer(rewriter, policy).run());
  PRECAST_RETURN_IF_ERROR(rewriter.commit(kRematPass));
  return result;
}

ir::Pass remat_pass(RematPolicy policy, std::string function) {
  std::string summary = fmt::format("remat_policy={} on @{}: recompute what the policy does not keep",
                                    policy.name, function);
  return ir::Pass(kRematPass, std::move(summary),
                  [policy = std::move(policy), function](ir::Module& module) -> Expected<bool> {
                    PRECAST_ASSIGN_OR_RETURN(size_t i,
                                             ir::function_for_pass(module, kRematPass, function));
                    PRECAST_ASSIGN_OR_RETURN(RematResult result, apply_remat(module, i, policy));
                    return result.recomputed_ops > 0;
                  });
}

}  // namespace precast::autodiff
