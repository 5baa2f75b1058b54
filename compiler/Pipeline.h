// The compilation pipeline: a resolved config and its target in; the program one device runs,
// its buffer plan and the stages' records out. Every command runs it (`precast analyze`, `fit`,
// `compile`, `train`, `dump`), so the IR a user dumps is the IR that was analysed and compiled.
//
// The stages, in order (each an ir::Pass, verified, timed and dumpable; compiler/README.md says
// what each reads and writes):
//   lower-forward       ModelSpec -> @forward (the frontend)
//   add-init            @forward's weights -> @init (MaxText's initialisers)
//   train-step          @forward -> @train_step (autodiff, loss normalisation, optimizer)
//   remat               the config's remat_policy on @train_step
//   simplify, cse, dce  IR clean-up
//   propagate-sharding  every value of @train_step annotated with its sharding on the mesh
//   spmd-partition      @train_step -> the program one device runs (nothing on one device)
//   widen-contractions  CPU targets only: bf16/f16 contractions in f32
//   schedule            memory-aware order (skipped with PipelineOptions::schedule off)
//   assign-buffers      the buffer plan
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/analysis/BufferAssignment.h"
#include "compiler/analysis/IrCounts.h"
#include "compiler/analysis/Sharding.h"
#include "compiler/autodiff/Remat.h"
#include "compiler/autodiff/TrainStep.h"
#include "compiler/passes/AssignBuffers.h"
#include "compiler/config/Config.h"
#include "compiler/config/ModelSpec.h"
#include "compiler/frontend/Frontend.h"
#include "compiler/topology/Mesh.h"
#include "compiler/topology/Topology.h"
#include "ir/Module.h"
#include "ir/PassManager.h"

namespace precast {

struct PipelineOptions {
  // The last stage to run (a stage name); empty = every stage.
  std::string stop_after;
  // Non-empty: write every stage's module (DIR/NN-<stage>.ir; the assign-buffers stage as the
  // module annotated with its plan).
  std::string dump_dir;
  std::string dump_after;  // regex over stage names; empty = every stage
  bool verify_each = false;
  // The memory-aware schedule. Off, the plan is of the program order: never smaller, so a step
  // that fits without it fits with it (what out-of-memory suggestions are verified with).
  bool schedule = true;
  // Replaces dtype, weight_dtype, mu_dtype and grad_dtype (f64 for reference checks).
  std::optional<ir::DType> dtype_override;
  // On a TPU: temp is XLA's preallocated-temp arena alone (XlaStepAccounting::model_arena, the
  // plan every TPU target gets), without the on-chip arenas and the estimated extra that
  // memory_analysis()'s temp adds to it (`precast analyze --xla-arena`; XlaTempOverhead.h).
  bool xla_arena = false;
};

// What the pipeline made of a config.
struct TrainProgram {
  ir::Module module;  // @forward, @init, @train_step (the per-device step after partitioning)
  std::vector<frontend::WeightInfo> weights;  // @train_step's first parameters, in order
  autodiff::TrainStepLayout layout;           // layout.function: @train_step as it stands
  autodiff::TrainStepSpec step;
  autodiff::RematPolicy remat;
  // The global train step after remat, before partitioning: MaxText's model FLOPs come from it.
  std::optional<IrCounts> global_counts;
  size_t global_step_ops = 0;
  // The buffer plan of @train_step, when assign-buffers ran.
  std::optional<MemoryPlan> plan;
  std::vector<ir::PassTiming> stages;  // one record per stage run, in order
  std::string timing_report;           // for --pass-timing
};

// The stage names this config's pipeline runs, in order (`precast dump --help`, errors).
std::vector<std::string> pipeline_stages(const Topology& topology, const PipelineOptions& options);

// Runs the pipeline for `config` (resolved: derived keys set) on `topology` with `mesh`.
Expected<TrainProgram> run_pipeline(const Config& config, const Topology& topology,
                                    const Mesh& mesh, const PipelineOptions& options = {});

// remat_policy, with the custom placements (context, mlpwo, ..., decoder_layer_input) when it is
// custom.
Expected<autodiff::RematPolicy> remat_policy_from_config(const Config& config);

// The buffer plan's settings the pipeline's schedule and assign-buffers stages use for this
// config and target: remat's offloaded checkpoints, the scan's stacked gradients, and on a TPU
// XLA's accounting of MaxText's step (BufferOptions::xla).
Expected<BufferPlanSettings> buffer_plan_settings(const Config& config, const Topology& topology);

// opt_type, mu_dtype, grad_dtype, gradient_accumulation_steps and adamw_mask (regexes searched in
// each weight's '/'-joined path, e.g. "decoder/layers_0/pre_self_attention_layer_norm/scale";
// a match turns weight decay off for that weight).
Expected<autodiff::TrainStepSpec> train_step_spec(const Config& config, const ModelSpec& spec,
                                                  const BatchSpec& batch,
                                                  const std::vector<frontend::WeightInfo>& weights,
                                                  std::optional<ir::DType> dtype_override = {});

// The compiler's passes for precast-opt (each with its text options, see --list-passes):
// remat{policy=...}, spmd-partition{mesh=fsdp:2,tensor:2, strategy=ring}, widen-contractions,
// schedule{window=N}, assign-buffers{offload=..., stacked-gradients=true}; `defaults` supplies
// the logical_axis_rules and mesh axes when a pipeline does not name them (MaxText's base.yml).
struct CompilerPassDefaults {
  std::vector<AxisRule> rules;
  std::vector<std::string> mesh_axes;
};
Status register_compiler_passes(ir::PassRegistry& registry, const CompilerPassDefaults& defaults);

}  // namespace precast
