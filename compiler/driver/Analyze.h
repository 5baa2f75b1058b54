// `precast analyze`: resolves a config against a target topology and reports the mesh, the
// parameter count, MaxText's per-device TFLOPs and the batch, as text or JSON.
#pragma once

#include <algorithm>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "compiler/analysis/IrCounts.h"
#include "compiler/analysis/MemoryReport.h"
#include "compiler/analysis/ModelFormulas.h"
#include "compiler/autodiff/Remat.h"
#include "compiler/config/Config.h"
#include "compiler/config/ModelSpec.h"
#include "compiler/Pipeline.h"
#include "compiler/config/ResolvedConfig.h"
#include "compiler/topology/Mesh.h"
#include "compiler/topology/Topology.h"

namespace precast {

struct AnalysisReport {
  ResolvedConfig resolved;
  ModelSpec model;
  BatchSpec batch;
  int64_t parameters = 0;
  ModelFlops flops;  // MaxText's formula
  // From the lowered train step (forward, backward, optimizer of the whole step, all devices'
  // rows): model FLOPs by MaxText's conventions (equal to `flops`, a test holds it) and what the
  // IR executes, both per device.
  size_t train_step_ops = 0;
  ModelFlops ir_flops;
  // What one device executes: counted on the per-device train step (after partitioning), with
  // the recomputation and every replicated op.
  long double hardware_flops_per_device = 0;
  // What the pipeline (compiler/Pipeline.h) made: @forward, @init and @train_step, the
  // per-device program after every stage — the function the memory report is about and the one
  // `precast compile` generates code for.
  std::shared_ptr<TrainProgram> program;
  size_t device_step_ops = 0;
  bool schedule_changed = false;
  MemoryReport memory;
  int64_t memory_limit_bytes = 0;  // hbm_limit_bytes, else the topology's per-device memory
  bool fits() const { return memory.plan.total_bytes() <= memory_limit_bytes; }
  // When it does not fit: overrides that do, each verified by a re-analysis.
  std::vector<std::string> suggestions;
  // Milliseconds outside the pipeline's passes (--pass-timing): resolving the config (layering,
  // topology, mesh), and the report after assign-buffers (FLOP and collective counts, the XLA
  // accounting's temp overheads, host offload).
  double resolve_ms = 0;
  double report_ms = 0;

  // Roofline per step: compute at the peak FLOP/s of the activation dtype, collectives at the
  // topology's ICI / DCN bandwidth; the estimate assumes they overlap (the slowest bounds).
  double compute_seconds = 0;
  double ici_seconds = 0;
  double dcn_seconds = 0;
  double step_seconds() const { return std::max({compute_seconds, ici_seconds, dcn_seconds}); }
};

// The pipeline's options (schedule, dump directory and filter, verification); analyze needs
// every stage, so stop_after must be empty.
using AnalyzeOptions = PipelineOptions;

// Tunes glibc's allocator for the analyses' many small, short-lived allocations (IR ops, sharding
// specs): no fastbins, so that the larger requests between them do not consolidate the fastbins
// again and again (malloc_consolidate took 6-9% of `precast analyze`'s samples; 12% less CPU on
// llama3.1-405b on v5p-1024 without them). Process-wide; call once, before analysing.
void tune_allocator_for_analysis();

Expected<AnalysisReport> analyze(const ConfigRequest& request,
                                 const std::filesystem::path& topologies_file,
                                 const AnalyzeOptions& options = {});
// The same for a config resolved already (each command resolves its config once).
Expected<AnalysisReport> analyze(ResolvedConfig resolved, const AnalyzeOptions& options = {});

// Re-analyses with candidate overrides (smaller per_device_batch_size, remat policies that keep
// less) and returns those that fit, lightest change first.
// `precast fit`: for each remat policy (lightest recomputation first), the largest
// per_device_batch_size (a power of two times the configured one) that fits, ranked by
// estimated tokens per second per device.
struct FitCandidate {
  std::string mesh;  // "" = the configured mesh; else e.g. "fsdp 64 x tensor 2"
  std::string remat_policy;
  double per_device_batch_size = 0;
  double memory_gib = 0;
  double step_seconds = 0;
  double tokens_per_second = 0;
};
// For each remat policy, the largest per_device_batch_size that fits; with `search_mesh`, for
// each ICI mesh of the slice's devices split over data, fsdp and tensor too (data only, fsdp
// only, fsdp x tensor 2/4/8, data x fsdp halves). Ranked by estimated tokens/s per device.
Expected<std::vector<FitCandidate>> search_fits(const ConfigRequest& request,
                                                const std::filesystem::path& topologies_file,
                                                const AnalysisReport& base,
                                                bool search_mesh = false);
// The ICI meshes search_fits tries: (label, overrides) pairs.
std::vector<std::pair<std::string, std::vector<std::string>>> candidate_meshes(
    const AnalysisReport& base);
std::string format_fits(const std::vector<FitCandidate>& fits, const AnalysisReport& base);

// `analyses`, when given, receives how many re-analyses the search ran (--pass-timing).
std::vector<std::string> suggest_fits(const ConfigRequest& request,
                                      const std::filesystem::path& topologies_file,
                                      const AnalysisReport& report, int* analyses = nullptr);

// The binary search of suggest_fits over the halvings k = low..high of the batch: the smallest
// k for which `fits(k)` holds, 0 when none does, assuming what fits at k fits at every larger k.
// It probes exactly the k a one-at-a-time binary search would and returns its answer, but
// analyses the next probe on the "does not fit" side concurrently with the current one (a
// second core), so a miss costs no extra wall time; `fits` must be safe to call from several
// threads and deterministic.
int smallest_fitting_halving(int low, int high, const std::function<bool(int)>& fits);

// --pass-timing's table of the stages outside the pipeline, in the pass table's columns:
// resolving the config, the report, the suggestions' re-analyses (run concurrently; their wall
// time) and formatting the output.
std::string format_outside_pipeline_timing(const AnalysisReport& report, double suggestions_ms,
                                           int suggestion_analyses, double format_ms);

std::string format_analysis_text(const AnalysisReport& report);
std::string format_analysis_json(const AnalysisReport& report);

}  // namespace precast
