// `precast dump`: lowers a config to IR and runs the pass pipeline, writing the module after
// every stage (DIR/00-input.ir, DIR/NN-<pass>.ir) so users can read what their config became.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "compiler/autodiff/Remat.h"
#include "compiler/config/Config.h"
#include "ir/PassManager.h"

namespace precast {

struct DumpRequest {
  ConfigRequest config;
  std::string dump_dir;    // required
  std::string dump_after;  // regex over pass names; empty = every pass
  std::string pipeline = "remat,simplify,cse,dce";
  bool verify_each = true;
};

struct DumpResult {
  std::vector<ir::PassTiming> timings;
  std::string timing_report;
  size_t num_ops = 0;                        // of the final forward function
  std::vector<std::filesystem::path> files;  // written, in order
};

// The passes `precast dump --passes` may name.
// The IR passes, plus `remat` (the config's policy on @train_step) when `remat` is given.
Expected<ir::PassRegistry> dump_pass_registry(const autodiff::RematPolicy* remat = nullptr);

Expected<DumpResult> dump_ir(const DumpRequest& request,
                             const std::filesystem::path& topologies_file);

}  // namespace precast
