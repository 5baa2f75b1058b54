// `precast compile` from a test, in process: configs/base.yml of the source tree with `overrides`
// (key=value), the topology table beside it, the artifact written to `output`.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "compiler/driver/Compile.h"
#include "ir/support/Error.h"

namespace precast::testing {

inline Status compile_artifact(const std::filesystem::path& source_dir,
                               const std::vector<std::string>& overrides,
                               const std::filesystem::path& output) {
  CompileRequest request;
  request.config.config_file = source_dir / "configs" / "base.yml";
  request.config.overrides = overrides;
  request.output = output.string();
  Expected<CompileResult> result = compile_step(request, source_dir / "configs" / "topologies.yml");
  if (!result.ok()) return result.error();
  return Status::success();
}

}  // namespace precast::testing
