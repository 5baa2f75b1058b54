#include "compiler/driver/Dump.h"

#include <fmt/format.h>

#include <system_error>

#include "compiler/driver/Analyze.h"

namespace precast {

Expected<DumpResult> dump_ir(const DumpRequest& request,
                             const std::filesystem::path& topologies_file) {
  if (request.dump_dir.empty()) {
    return usage_error("--dump-ir DIR is required: the directory the IR stages are written to");
  }
  PRECAST_ASSIGN_OR_RETURN(ResolvedConfig resolved,
                           resolve_config(request.config, topologies_file));
  std::error_code ec;
  std::filesystem::create_directories(request.dump_dir, ec);
  if (ec) {
    return Error(ExitCode::kFailure, fmt::format("cannot create the dump directory '{}': {}",
                                                 request.dump_dir, ec.message()));
  }
  PipelineOptions options;
  options.dump_dir = request.dump_dir;
  options.dump_after = request.dump_after;
  options.stop_after = request.stop_after;
  options.verify_each = request.verify_each;
  PRECAST_ASSIGN_OR_RETURN(
      TrainProgram program,
      run_pipeline(resolved.config, resolved.topology, resolved.mesh, options));
  DumpResult result;
  result.timings = program.stages;
  result.timing_report = program.timing_report;
  result.stages = pipeline_stages(resolved.topology, options);
  // The stages this run wrote (an earlier run's files in the same directory are not listed).
  for (const ir::PassTiming& stage : program.stages) {
    if (!stage.dump_file.empty()) result.files.emplace_back(stage.dump_file);
  }
  return result;
}

}  // namespace precast
