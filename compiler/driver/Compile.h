// `precast compile`: config -> train step IR -> passes -> buffer plan -> LLVM object code ->
// one `.pcx` artifact that `precast-run` loads. The plan written into the artifact is the one
// the code was generated for and the one the runtime allocates (DESIGN.md invariant 2).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

#include "compiler/Pipeline.h"
#include "compiler/artifact/Artifact.h"
#include "compiler/config/Config.h"
#include "compiler/config/ResolvedConfig.h"
#include "ir/support/Error.h"

namespace precast::backend {
struct CompiledStep;  // compiler/backend/cpu/CodeGen.h
struct CollectiveCall;
}

namespace precast {

inline constexpr const char* kCompilerVersion = "0.1.0";

struct CompileRequest {
  ConfigRequest config;
  // The artifact path (compiled_trainstep_file); empty = only compile, write nothing.
  std::string output;
  // Dump directory and filter, verification (stop_after must stay empty).
  PipelineOptions pipeline;
  // Told of each stage (analysis, LLVM kernels counted, LLVM O3 and object code, writing);
  // null: nothing is told.
  std::function<void(std::string_view stage, int64_t done, int64_t total)> progress;
};

struct CompileResult {
  artifact::Artifact artifact;
  std::string analysis_text;  // `precast analyze`'s report of the same config
  std::string timing_report;  // the pipeline's stages, for --pass-timing
  std::string summary;        // what `precast compile` prints after the analysis
  double lower_seconds = 0, codegen_seconds = 0, emit_seconds = 0,
         write_seconds = 0;
};

// One input or output of a step's signature: its per-device shape, dtype and global sharding.
artifact::TensorSignature tensor_of(const ir::Function& f, ir::Value v, std::string name,
                                    std::string role);
// The artifact's buffer plan of `f`'s plan.
artifact::BufferPlan plan_of(const ir::Function& f, const MemoryPlan& plan);
// The artifact's step program of a generated step: one step per ProgramCall, in order, with the
// buffers it reads and then those it writes (a kCollective call becomes a typed collective step).
std::vector<artifact::Step> program_of(const backend::CompiledStep& compiled);
// The artifact's typed collective of a generated collective call.
artifact::Collective collective_of(const backend::CollectiveCall& call);

// CPU topologies only, of any number of devices and slices (one rank per device); other
// targets are analysed with `precast analyze`. Usage errors name the key and value.
Expected<CompileResult> compile_step(const CompileRequest& request,
                                     const std::filesystem::path& topologies_file);
// The same for a config resolved already (`precast train` resolves once for its cache key and
// the compile); request.config is not read.
Expected<CompileResult> compile_step(const CompileRequest& request, ResolvedConfig resolved);

}  // namespace precast
