// Plain-text sections, each from one small function; tables are aligned by column width.
#include "compiler/artifact/ArtifactText.h"

#include <algorithm>
#include <cstdlib>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace precast::artifact {
namespace {

using Row = std::vector<std::string>;

// Left-aligned columns separated by two spaces, each row indented by two; no trailing blanks.
std::string format_table(const std::vector<Row>& rows) {
  std::vector<size_t> widths;
  for (const Row& row : rows) {
    widths.resize(std::max(widths.size(), row.size()), 0);
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  std::string text;
  for (const Row& row : rows) {
    std::string line = " ";
    for (size_t c = 0; c < row.size(); ++c) line += fmt::format(" {:<{}}", row[c], widths[c]);
    line.erase(line.find_last_not_of(' ') + 1);
    text += line + "\n";
  }
  return text;
}

std::string bytes_text(int64_t bytes) {
  return group_digits(bytes) + " bytes";
}

std::string printable(std::string_view bytes) {
  std::string text;
  for (char c : bytes) {
    auto byte = static_cast<unsigned char>(c);
    text += (byte >= 0x20 && byte < 0x7f) ? std::string(1, c) : fmt::format("\\x{:02x}", byte);
  }
  return text;
}

std::string format_header(const ArtifactFile& file, std::string_view file_name) {
  std::vector<Row> rows = {
      {"magic", printable(std::string_view(kMagic.data(), kMagic.size()))},
      {"format version", std::to_string(file.header.format_version)},
      {"compiler version", file.artifact.compiler_version},
      {"payload sha256", to_hex(file.header.payload_sha256)},
      {"file size",
       fmt::format("{} (header {}, payload {})", bytes_text(static_cast<int64_t>(file.file_bytes)),
                   kHeaderBytes, group_digits(static_cast<int64_t>(file.header.payload_bytes)))},
  };
  return fmt::format("Precast artifact {}\n{}", file_name, format_table(rows));
}

std::string format_mesh(const std::vector<MeshAxis>& mesh) {
  std::vector<std::string> axes;
  for (const MeshAxis& axis : mesh) axes.push_back(fmt::format("{}={}", axis.name, axis.size));
  return axes.empty() ? "(none)" : fmt::format("{}", fmt::join(axes, " "));
}

std::string format_key(const CompatibilityKey& key) {
  std::vector<Row> rows = {
      {"target triple", key.target_triple},
      {"cpu features",
       key.cpu_features.empty() ? "(none)" : fmt::format("{}", fmt::join(key.cpu_features, " "))},
      {"topology", key.topology_name},
      {"mesh", format_mesh(key.mesh)},
      {"devices", std::to_string(key.num_devices)},
      {"ir hash", key.ir_hash},
  };
  return "\nCompatibility key\n" + format_table(rows);
}

std::string format_shape(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

Row signature_row(std::string_view direction, size_t index, const TensorSignature& tensor) {
  std::string alias = tensor.aliased_input >= 0
                          ? fmt::format("donates input {}", tensor.aliased_input)
                      : tensor.same_as_output >= 0
                          ? fmt::format("same buffer as output {}", tensor.same_as_output)
                          : std::string();
  return {std::string(direction),
          std::to_string(index),
          tensor.name,
          format_shape(tensor.shape),
          tensor.dtype,
          tensor.sharding.empty() ? "replicated" : tensor.sharding,
          tensor.role,
          alias};
}

std::string format_signature(const Signature& signature) {
  std::vector<Row> rows = {{"", "#", "name", "shape", "dtype", "sharding", "role", "alias"}};
  for (size_t i = 0; i < signature.inputs.size(); ++i) {
    rows.push_back(signature_row("in", i, signature.inputs[i]));
  }
  for (size_t i = 0; i < signature.outputs.size(); ++i) {
    rows.push_back(signature_row("out", i, signature.outputs[i]));
  }
  return fmt::format("\nSignature ({} inputs, {} outputs)\n{}", signature.inputs.size(),
                     signature.outputs.size(), format_table(rows));
}

std::string format_plan(const BufferPlan& plan) {
  std::vector<Row> totals = {
      {"arena", bytes_text(plan.arena_bytes), fmt::format("alignment {}", plan.alignment)},
      {"argument", bytes_text(plan.argument_bytes)},
      {"output", bytes_text(plan.output_bytes)},
      {"alias", bytes_text(plan.alias_bytes)},
      {"temp", bytes_text(plan.temp_bytes)},
  };
  std::vector<Row> buffers = {{"offset", "bytes", "live", "category", "value"}};
  for (const PlannedBuffer& buffer : plan.buffers) {
    buffers.push_back({group_digits(buffer.offset), group_digits(buffer.bytes),
                       fmt::format("{}..{}", buffer.live_start, buffer.live_end), buffer.category,
                       buffer.value_name});
  }
  return fmt::format("\nBuffer plan\n{}\nBuffers ({})\n{}", format_table(totals),
                     plan.buffers.size(), format_table(buffers));
}

// "argument[2] 4,096 B" for signature positions, "temp@128 4,096 B" for offsets.
std::string format_ref(const BufferRef& ref) {
  bool by_index = ref.space == BufferSpace::kArgument || ref.space == BufferSpace::kOutput;
  std::string location = by_index ? fmt::format("[{}]", ref.index_or_offset)
                                  : fmt::format("@{}", group_digits(ref.index_or_offset));
  return fmt::format("{}{} {} B", buffer_space_name(ref.space), location, group_digits(ref.bytes));
}

// "all_reduce sum over {fsdp} dims [] shift 0 f32 4,096 B"; replica groups when given.
std::string format_collective(const Collective& c) {
  std::string out = std::string(collective_kind_name(c.kind));
  if (c.reduction != Reduction::kNone) out += " " + std::string(reduction_name(c.reduction));
  out += fmt::format(" over {{{}}}", fmt::join(c.mesh_axes, ", "));
  if (!c.replica_groups.empty()) {
    std::vector<std::string> groups;
    for (const std::vector<int64_t>& g : c.replica_groups) {
      groups.push_back(fmt::format("{{{}}}", fmt::join(g, ",")));
    }
    out += fmt::format(" groups {}", fmt::join(groups, ""));
  }
  if (!c.dimensions.empty()) out += fmt::format(" dims [{}]", fmt::join(c.dimensions, ", "));
  if (c.kind == CollectiveKind::kCollectivePermute) out += fmt::format(" shift {}", c.shift);
  return out + fmt::format(" {} {} B", c.dtype, group_digits(c.bytes));
}

Row step_row(size_t index, const Step& step) {
  std::vector<std::string> refs;
  for (const BufferRef& ref : step.buffers) refs.push_back(format_ref(ref));
  std::string params;
  if (!step.int_params.empty())
    params += fmt::format("ints [{}]", fmt::join(step.int_params, ", "));
  if (!step.float_params.empty()) {
    params +=
        fmt::format("{}floats [{}]", params.empty() ? "" : " ", fmt::join(step.float_params, ", "));
  }
  if (step.kind == StepKind::kCollective) params += (params.empty() ? "" : " ") + format_collective(step.collective);
  return {std::to_string(index), std::string(step_kind_name(step.kind)), step.symbol,
          fmt::format("{}", fmt::join(refs, ", ")), params};
}

std::string format_program(const std::vector<Step>& program) {
  std::vector<Row> rows;
  for (size_t i = 0; i < program.size(); ++i) rows.push_back(step_row(i, program[i]));
  return fmt::format("\nStep program ({} steps)\n{}", program.size(), format_table(rows));
}

std::string format_config(const std::vector<ConfigEntry>& config) {
  std::vector<Row> rows;
  for (const ConfigEntry& entry : config) {
    rows.push_back({entry.key, entry.value, std::string(config_phase_name(entry.phase))});
  }
  return fmt::format("\nResolved config ({} keys)\n{}", config.size(), format_table(rows));
}

std::string with_final_newline(std::string text) {
  if (!text.empty() && text.back() != '\n') text += '\n';
  return text;
}

}  // namespace

std::string group_digits(int64_t value) {
  // Unsigned negation keeps INT64_MIN representable.
  uint64_t magnitude = value < 0 ? 0 - static_cast<uint64_t>(value) : static_cast<uint64_t>(value);
  std::string digits = std::to_string(magnitude);
  std::string grouped;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) grouped += ',';
    grouped += digits[i];
  }
  return value < 0 ? "-" + grouped : grouped;
}

Row entry_point_row(std::string_view name, const Signature& signature, const BufferPlan& plan,
                    size_t object_bytes) {
  return {std::string(name), count_by_role(signature.inputs), count_by_role(signature.outputs),
          bytes_text(plan.arena_bytes), bytes_text(static_cast<int64_t>(object_bytes))};
}

// One line per entry point, train_step first: its inputs and outputs by role, its temp arena and
// its object code.
std::string format_entry_point_summary(const Artifact& artifact) {
  std::vector<Row> rows = {{"name", "inputs", "outputs", "arena", "object code"}};
  rows.push_back(entry_point_row(kTrainStepEntry, artifact.signature, artifact.plan,
                                 artifact.object_code.size()));
  for (const EntryPoint& entry : artifact.entry_points) {
    rows.push_back(
        entry_point_row(entry.name, entry.signature, entry.plan, entry.object_code.size()));
  }
  return fmt::format("\nEntry points ({})\n{}", rows.size() - 1, format_table(rows));
}

// Every entry point after train_step: its own signature, plan, program and object code.
std::string format_entry_points(const Artifact& artifact) {
  if (artifact.entry_points.empty()) return "";
  std::string text = fmt::format("\nEntry points: {}", kTrainStepEntry);
  for (const EntryPoint& entry : artifact.entry_points) text += ", " + entry.name;
  text += " (train_step's listing above; the others follow)\n";
  for (const EntryPoint& entry : artifact.entry_points) {
    text += fmt::format("\n=== entry point {} ===\n", entry.name) +
            format_signature(entry.signature) + format_plan(entry.plan) +
            format_program(entry.program) +
            fmt::format("\nObject code\n  {}\n",
                        bytes_text(static_cast<int64_t>(entry.object_code.size())));
  }
  return text;
}

std::string count_by_role(const std::vector<TensorSignature>& tensors) {
  std::vector<std::pair<std::string, int>> counts;
  for (const TensorSignature& tensor : tensors) {
    auto it = std::find_if(counts.begin(), counts.end(),
                           [&](const auto& count) { return count.first == tensor.role; });
    if (it == counts.end()) {
      counts.emplace_back(tensor.role, 1);
    } else {
      ++it->second;
    }
  }
  std::vector<std::string> parts;
  for (const auto& [role, n] : counts) parts.push_back(fmt::format("{} {}", n, role));
  return fmt::format("{}: {}", tensors.size(), fmt::join(parts, ", "));
}

std::string format_artifact(const ArtifactFile& file, std::string_view file_name) {
  const Artifact& artifact = file.artifact;
  return format_header(file, file_name) + format_key(artifact.key) +
         format_entry_point_summary(artifact) + format_signature(artifact.signature) + format_plan(artifact.plan) +
         format_program(artifact.program) +
         fmt::format("\nObject code\n  {}\n",
                     bytes_text(static_cast<int64_t>(artifact.object_code.size()))) +
         format_config(artifact.config) + "\nAnalysis report\n" +
         with_final_newline(artifact.report_text) +
         fmt::format("\nIR: {} (show it with --ir)\n",
                     bytes_text(static_cast<int64_t>(artifact.ir_text.size()))) +
         format_entry_points(artifact);
}

std::string format_artifact_ir(const Artifact& artifact) {
  std::string text = with_final_newline(artifact.ir_text);
  for (const EntryPoint& entry : artifact.entry_points) {
    text += fmt::format("\n// entry point {}\n", entry.name) + with_final_newline(entry.ir_text);
  }
  return text;
}

}  // namespace precast::artifact
