#include "runtime/train/StepSignature.h"

#include <fmt/format.h>

#include <map>
#include <span>
#include <string>

namespace precast::runtime {
namespace {

Error mismatch(const std::string& what) {
  return Error(ExitCode::kIncompatible,
               fmt::format("the artifact's step signature {}; recompile with this build's "
                           "precast compile",
                           what));
}

// Binds every tensor of `role` among `tensors` to its entry of `names`; `kind` names the side
// ("input", "output") in messages.
template <size_t N>
Status bind_role(const std::vector<artifact::TensorSignature>& tensors, const std::string& role,
                 const std::string& kind, const std::array<const char*, N>& names,
                 std::array<size_t, N>& positions, const std::string& optional_name = "",
                 std::optional<size_t>* optional_position = nullptr) {
  std::map<std::string, size_t> wanted;
  for (size_t k = 0; k < N; ++k) wanted[names[k]] = k;
  std::array<bool, N> bound{};
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].role != role) continue;
    if (optional_position != nullptr && tensors[i].name == optional_name) {
      if (optional_position->has_value()) {
        return mismatch(fmt::format("has two {} {}s named '{}'", role, kind, tensors[i].name));
      }
      *optional_position = i;
      continue;
    }
    auto it = wanted.find(tensors[i].name);
    if (it == wanted.end()) {
      return mismatch(fmt::format("has a {} {} '{}' (position {}) this runtime does not know",
                                  role, kind, tensors[i].name, i));
    }
    if (bound[it->second]) {
      return mismatch(fmt::format("has two {} {}s named '{}'", role, kind, tensors[i].name));
    }
    bound[it->second] = true;
    positions[it->second] = i;
  }
  for (size_t k = 0; k < N; ++k) {
    if (!bound[k]) return mismatch(fmt::format("has no {} {} named '{}'", role, kind, names[k]));
  }
  return Status::success();
}

bool is_state(const std::string& role) { return role == "parameter" || role == "optimizer_state"; }

}  // namespace

Expected<StepBinding> bind_signature(const artifact::Signature& signature) {
  StepBinding binding;
  std::map<std::string, size_t> state_inputs;
  for (size_t i = 0; i < signature.inputs.size(); ++i) {
    const artifact::TensorSignature& t = signature.inputs[i];
    if (is_state(t.role)) {
      if (!state_inputs.emplace(t.name, i).second) {
        return mismatch(fmt::format("has two state inputs named '{}'", t.name));
      }
      if (t.role == "parameter") binding.parameters.push_back(i);
    } else if (t.role != "batch" && t.role != "scalar") {
      return mismatch(fmt::format("has input '{}' with role '{}' this runtime does not know",
                                  t.name, t.role));
    }
  }
  for (const artifact::TensorSignature& t : signature.outputs) {
    if (is_state(t.role)) {
      auto it = state_inputs.find(t.name);
      if (it == state_inputs.end() || signature.inputs[it->second].role != t.role) {
        return mismatch(fmt::format("has a {} output '{}' that no {} input is named", t.role,
                                    t.name, t.role));
      }
      // The next step reads the new state where this one read the old: in place.
      if (t.aliased_input != static_cast<int64_t>(it->second)) {
        return mismatch(fmt::format("has a {} output '{}' that is not written in place of input "
                                    "'{}' (it aliases input {})",
                                    t.role, t.name, t.name, t.aliased_input));
      }
    } else if (t.role != "metric") {
      return mismatch(fmt::format("has output '{}' with role '{}' this runtime does not know",
                                  t.name, t.role));
    }
  }
  PRECAST_RETURN_IF_ERROR(
      bind_role(signature.inputs, "batch", "input", kBatchNames, binding.batch));
  PRECAST_RETURN_IF_ERROR(
      bind_role(signature.inputs, "scalar", "input", kScalarNames, binding.scalars));
  PRECAST_RETURN_IF_ERROR(
      bind_role(signature.outputs, "metric", "output", kMetricNames, binding.metrics,
                "moe_lb_loss", &binding.moe_lb_loss));
  return binding;
}

}  // namespace precast::runtime
