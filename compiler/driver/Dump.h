// `precast dump`: runs the compilation pipeline (compiler/Pipeline.h) for a config and writes
// the module after every stage (DIR/NN-<stage>.ir; the assign-buffers stage annotated with the
// buffer plan), so users read exactly what `analyze` reports and `compile` generates code for.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "compiler/Pipeline.h"
#include "compiler/config/Config.h"

namespace precast {

struct DumpRequest {
  ConfigRequest config;
  std::string dump_dir;    // required
  std::string dump_after;  // regex over stage names; empty = every stage
  std::string stop_after;  // the last stage; empty = every stage
  bool verify_each = true;
};

struct DumpResult {
  std::vector<ir::PassTiming> timings;
  std::string timing_report;
  std::vector<std::string> stages;           // this config's pipeline, in order
  std::vector<std::filesystem::path> files;  // written, in order
};

Expected<DumpResult> dump_ir(const DumpRequest& request,
                             const std::filesystem::path& topologies_file);

}  // namespace precast
