#include "compiler/driver/Dump.h"

#include <fmt/format.h>

#include <regex>
#include <system_error>

#include "compiler/driver/Analyze.h"
#include "compiler/driver/TrainProgram.h"
#include "compiler/frontend/Frontend.h"
#include "ir/passes/IrPasses.h"

namespace precast {

Expected<ir::PassRegistry> dump_pass_registry(const autodiff::RematPolicy* remat) {
  ir::PassRegistry registry;
  PRECAST_RETURN_IF_ERROR(ir::register_ir_passes(registry));
  if (remat != nullptr) {
    autodiff::RematPolicy policy = *remat;
    PRECAST_RETURN_IF_ERROR(registry.add(ir::Pass{
        "remat", "apply the config's remat_policy to @train_step (recompute clones, offload)",
        [policy](ir::Module& module) -> Expected<bool> {
          for (size_t i = 0; i < module.num_functions(); ++i) {
            if (module.function(i).name() != "train_step") continue;
            PRECAST_ASSIGN_OR_RETURN(autodiff::RematResult result,
                                     autodiff::apply_remat(module, i, policy));
            return result.recomputed_ops > 0;
          }
          return false;
        }}));
  }
  return registry;
}

Expected<DumpResult> dump_ir(const DumpRequest& request,
                             const std::filesystem::path& topologies_file) {
  if (request.dump_dir.empty()) {
    return usage_error("--dump-ir DIR is required: the directory the IR stages are written to");
  }
  PRECAST_ASSIGN_OR_RETURN(ResolvedConfig resolved,
                           resolve_config(request.config, topologies_file));
  PRECAST_ASSIGN_OR_RETURN(ModelSpec spec, model_spec_from_config(resolved.config));
  BatchSpec batch = batch_spec_from_config(resolved.config);
  // Remat runs as a stage of the pipeline so the dump shows the step before and after it.
  TrainProgramOptions lowering;
  lowering.apply_remat = false;
  PRECAST_ASSIGN_OR_RETURN(TrainProgram program,
                           lower_train_program(resolved.config, spec, batch, lowering));
  frontend::ForwardModel& model = program.model;

  std::error_code ec;
  std::filesystem::create_directories(request.dump_dir, ec);
  if (ec) {
    return Error(ExitCode::kFailure, fmt::format("cannot create the dump directory '{}': {}",
                                                 request.dump_dir, ec.message()));
  }
  ir::PassManagerOptions options;
  options.verify_each = request.verify_each;
  options.dump_dir = request.dump_dir;
  options.dump_after = request.dump_after;
  PRECAST_ASSIGN_OR_RETURN(ir::PassManager manager, ir::PassManager::create(options));
  PRECAST_ASSIGN_OR_RETURN(ir::PassRegistry registry, dump_pass_registry(&program.remat));
  PRECAST_RETURN_IF_ERROR(manager.add_pipeline(registry, request.pipeline));
  PRECAST_RETURN_IF_ERROR(manager.run(model.module));

  DumpResult result;
  result.timings = manager.timings();
  result.timing_report = manager.timing_report();
  result.num_ops = model.module.function(0).num_ops();
  // The stages this run wrote (an earlier run's files in the same directory are not listed).
  std::filesystem::path dir(request.dump_dir);
  result.files.push_back(dir / "00-input.ir");
  std::regex filter(request.dump_after.empty() ? std::string(".") : request.dump_after);
  for (size_t i = 0; i < result.timings.size(); ++i) {
    const std::string& name = result.timings[i].name;
    if (std::regex_search(name, filter)) {
      result.files.push_back(dir / fmt::format("{:02}-{}.ir", i + 1, name));
    }
  }
  return result;
}

}  // namespace precast
