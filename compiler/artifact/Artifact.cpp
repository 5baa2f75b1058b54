// Enum names and the schema rules both the writer and the reader enforce.
#include "compiler/artifact/Artifact.h"

#include <array>

#include <fmt/format.h>

namespace precast::artifact {
namespace {

// Indexed by the enum's value; an out-of-range value (only possible from a damaged or foreign
// file) has no name.
constexpr std::array<std::string_view, 5> kStepKindNames = {"kernel_call", "gemm", "attention",
                                                            "collective", "copy"};
constexpr std::array<std::string_view, 4> kBufferSpaceNames = {"argument", "output", "temp",
                                                               "constant"};
constexpr std::array<std::string_view, 2> kConfigPhaseNames = {"compile", "run"};
constexpr std::array<std::string_view, 5> kCollectiveKindNames = {
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute"};
constexpr std::array<std::string_view, 3> kReductionNames = {"none", "sum", "max"};

template <size_t N, typename Enum>
std::string_view name_of(const std::array<std::string_view, N>& names, Enum value) {
  auto index = static_cast<size_t>(value);
  return index < N ? names[index] : std::string_view("unknown");
}

template <size_t N, typename Enum>
bool in_range(const std::array<std::string_view, N>&, Enum value) {
  return static_cast<size_t>(value) < N;
}

std::optional<std::string> find_signature_violation(const Signature& signature) {
  for (size_t i = 0; i < signature.inputs.size(); ++i) {
    if (signature.inputs[i].aliased_input != -1) {
      return fmt::format("input {} ('{}') has aliased_input {}; only outputs alias inputs", i,
                         signature.inputs[i].name, signature.inputs[i].aliased_input);
    }
  }
  auto num_inputs = static_cast<int64_t>(signature.inputs.size());
  for (size_t i = 0; i < signature.outputs.size(); ++i) {
    int64_t alias = signature.outputs[i].aliased_input;
    if (alias < -1 || alias >= num_inputs) {
      return fmt::format("output {} ('{}') aliases input {}, but there are {} inputs", i,
                         signature.outputs[i].name, alias, num_inputs);
    }
    int64_t same = signature.outputs[i].same_as_output;
    if (same < -1 || same >= static_cast<int64_t>(i)) {
      return fmt::format("output {} ('{}') has same_as_output {}; it must name an earlier output",
                         i, signature.outputs[i].name, same);
    }
  }
  return std::nullopt;
}

// A collective's enums in range, the reduction given exactly where one is needed, the
// dimensions its kind uses, and an operand and a result buffer.
std::optional<std::string> find_collective_violation(const Step& step) {
  const Collective& c = step.collective;
  if (!in_range(kCollectiveKindNames, c.kind)) {
    return fmt::format("unknown collective kind {}", static_cast<int>(c.kind));
  }
  if (!in_range(kReductionNames, c.reduction)) {
    return fmt::format("unknown reduction {}", static_cast<int>(c.reduction));
  }
  bool reduces = c.kind == CollectiveKind::kAllReduce || c.kind == CollectiveKind::kReduceScatter;
  if (reduces != (c.reduction != Reduction::kNone)) {
    return fmt::format("{} with reduction {}", collective_kind_name(c.kind),
                       reduction_name(c.reduction));
  }
  size_t dims = c.kind == CollectiveKind::kAllToAll                                     ? 2
                : c.kind == CollectiveKind::kAllGather || c.kind == CollectiveKind::kReduceScatter ? 1
                                                                                        : 0;
  if (c.dimensions.size() != dims) {
    return fmt::format("{} takes {} dimension(s), not {}", collective_kind_name(c.kind), dims,
                       c.dimensions.size());
  }
  if (step.buffers.size() != 2) {
    return fmt::format("{} buffers; a collective reads one and writes one", step.buffers.size());
  }
  return std::nullopt;
}

std::optional<std::string> find_program_violation(const std::vector<Step>& program) {
  for (size_t i = 0; i < program.size(); ++i) {
    const Step& step = program[i];
    if (!in_range(kStepKindNames, step.kind)) {
      return fmt::format("step {} has unknown kind {}", i, static_cast<int>(step.kind));
    }
    for (const BufferRef& ref : step.buffers) {
      if (!in_range(kBufferSpaceNames, ref.space)) {
        return fmt::format("step {} refers to unknown buffer space {}", i,
                           static_cast<int>(ref.space));
      }
    }
    if (step.kind == StepKind::kCollective) {
      if (auto violation = find_collective_violation(step)) {
        return fmt::format("step {} (collective): {}", i, *violation);
      }
    }
  }
  return std::nullopt;
}

}  // namespace

std::string_view step_kind_name(StepKind kind) {
  return name_of(kStepKindNames, kind);
}
std::string_view buffer_space_name(BufferSpace space) {
  return name_of(kBufferSpaceNames, space);
}
std::string_view config_phase_name(ConfigPhase phase) {
  return name_of(kConfigPhaseNames, phase);
}
std::string_view collective_kind_name(CollectiveKind kind) {
  return name_of(kCollectiveKindNames, kind);
}
std::string_view reduction_name(Reduction reduction) {
  return name_of(kReductionNames, reduction);
}

std::optional<std::string> find_schema_violation(const Artifact& artifact) {
  if (auto violation = find_signature_violation(artifact.signature)) return violation;
  if (auto violation = find_program_violation(artifact.program)) return violation;
  for (const EntryPoint& entry : artifact.entry_points) {
    if (entry.name.empty() || entry.name == kTrainStepEntry) {
      return fmt::format("an entry point is named '{}' (train_step is the artifact's own step)",
                         entry.name);
    }
    if (auto violation = find_signature_violation(entry.signature)) {
      return fmt::format("entry point {}: {}", entry.name, *violation);
    }
    if (auto violation = find_program_violation(entry.program)) {
      return fmt::format("entry point {}: {}", entry.name, *violation);
    }
  }
  for (const ConfigEntry& entry : artifact.config) {
    if (!in_range(kConfigPhaseNames, entry.phase)) {
      return fmt::format("config key '{}' has unknown phase {}", entry.key,
                         static_cast<int>(entry.phase));
    }
  }
  return std::nullopt;
}

Expected<Artifact> entry_point_artifact(const Artifact& artifact, std::string_view name) {
  if (name == kTrainStepEntry) return artifact;
  for (const EntryPoint& entry : artifact.entry_points) {
    if (entry.name != name) continue;
    Artifact view;
    view.compiler_version = artifact.compiler_version;
    view.key = artifact.key;
    view.signature = entry.signature;
    view.plan = entry.plan;
    view.program = entry.program;
    view.object_code = entry.object_code;
    view.ir_text = entry.ir_text;
    view.config = artifact.config;
    return view;
  }
  std::string present(kTrainStepEntry);
  for (const EntryPoint& entry : artifact.entry_points) present += ", " + entry.name;
  std::string_view key = name == kEvalStepEntry     ? "eval_interval > 0"
                         : name == kSampleStepEntry ? "sample_tokens > 0"
                                                    : "";
  return Error(ExitCode::kIncompatible,
               fmt::format("the artifact has no entry point '{}' (it has: {}){}", name, present,
                           key.empty() ? std::string()
                                       : fmt::format("; recompile it with {} to include it", key)));
}

}  // namespace precast::artifact
