// Human-readable rendering of an artifact for `precast inspect step.pcx`.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "compiler/artifact/ArtifactIo.h"

namespace precast::artifact {

// Header (magic, version, compiler version, checksum, sizes), compatibility key, signature
// table, buffer plan summary and buffers, one line per step, object code size, resolved config
// and the analysis report. `file_name` is shown in the title.
std::string format_artifact(const ArtifactFile& file, std::string_view file_name);

// The IR text alone (`precast inspect --ir`), ending in a newline.
std::string format_artifact_ir(const Artifact& artifact);

// "40: 9 parameter, 18 optimizer_state, ..." — a signature side's tensors counted by role, the
// roles in order of first appearance (the listing's Entry points table; `precast dump`).
std::string count_by_role(const std::vector<TensorSignature>& tensors);

// 1234567 → "1,234,567": byte counts in the listing are read by people.
std::string group_digits(int64_t value);

}  // namespace precast::artifact
