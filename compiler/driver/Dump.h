// `precast dump`: lowers a config to IR and runs the pass pipeline, writing the module after
// every stage (DIR/00-input.ir, DIR/NN-<pass>.ir) so users can read what their config became.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "compiler/autodiff/Remat.h"
#include "compiler/config/Config.h"
#include "compiler/topology/Mesh.h"
#include "ir/PassManager.h"

namespace precast {

struct DumpRequest {
  ConfigRequest config;
  std::string dump_dir;    // required
  std::string dump_after;  // regex over pass names; empty = every pass
  std::string pipeline = "remat,simplify,cse,dce";  // e.g. add ",spmd-partition,assign-buffers"
  bool verify_each = true;
};

struct DumpResult {
  std::vector<ir::PassTiming> timings;
  std::string timing_report;
  size_t num_ops = 0;                        // of the final forward function
  std::vector<std::filesystem::path> files;  // written, in order
};

// The passes `precast dump --passes` may name: the IR passes, plus, on @train_step, `remat` (the
// config's policy) when `remat` is given, `schedule` (the memory-aware order), and when `mesh`
// is given `spmd-partition` (the per-device step for the config's logical_axis_rules on that
// mesh; context_parallel_strategy=ring gives ring attention) and `assign-buffers` (the
// buffer plan, dumped as the module annotated with one comment per op: offset, bytes, live
// range, category; the comments parse back as the same module).
struct DumpPassContext {
  const autodiff::RematPolicy* remat = nullptr;
  const Config* config = nullptr;
  const Mesh* mesh = nullptr;
};
Expected<ir::PassRegistry> dump_pass_registry(const DumpPassContext& context = {});

// The module with each function's buffer plan (plan_memory, loop fusion on) as comments.
std::string buffer_assignment_text(const ir::Module& module);

Expected<DumpResult> dump_ir(const DumpRequest& request,
                             const std::filesystem::path& topologies_file);

}  // namespace precast
