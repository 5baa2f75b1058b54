// The artifact's entry points besides train_step (Artifact.h's EntryPoint): eval_step, the
// forward and loss sums of one eval batch with no update, and sample_step, the forward of one row
// per device (all the same prompt) returning its logits (greedy sampling). Each is lowered by the frontend and run through the
// same partition, legalisation, schedule and buffer-plan passes as the train step, on a function
// of its own, then compiled to its own object code.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/artifact/Artifact.h"
#include "compiler/backend/cpu/CodeGen.h"
#include "compiler/config/ResolvedConfig.h"
#include "ir/support/Error.h"

namespace precast {

// eval_step's outputs, in order: Σ xent·w (z-loss included, as the train step's loss), Σ z·w
// and Σ w over the eval batch (all devices' rows: the partitioned step all-reduces them).
inline constexpr const char* kEvalOutputs[] = {"xent_sum", "z_loss_sum", "total_weights"};

// Which entry points the config asks the compiler for: eval_step when eval_interval > 0,
// sample_step when sample_tokens > 0 (both run-time keys; an artifact compiled without them
// refuses a run that asks for them, naming the key to recompile with). Compiling them only on
// request keeps every other compile's time and object size as they were.
std::vector<std::string_view> requested_entry_points(const Config& config);

// Compiles entry point `name` (kEvalStepEntry: micro_batch_size_to_eval_on rows;
// kSampleStepEntry: one row per device of the mesh, each the same prompt) for the resolved config
// with the train step's code generation options (null: planned only, no program or object code,
// for `precast dump` on any target). Its parameter inputs have the train step's names, shapes and shardings.
Expected<artifact::EntryPoint> compile_entry_point(std::string_view name,
                                                   const ResolvedConfig& resolved,
                                                   const backend::CodeGenOptions* options);

// The code generator's options for the resolved config: target_triple, target_cpu and the mesh.
backend::CodeGenOptions code_gen_options(const ResolvedConfig& resolved);

// `precast dump`'s entry points: each one the config asks for (requested_entry_points) lowered
// and planned as `precast compile` does — with its object code on CPU targets — its IR written
// to DIR/<name>.ir, and one line each: name, inputs and outputs by role, arena and code bytes.
struct DumpedEntryPoint {
  std::filesystem::path file;
  std::string line;
};
Expected<std::vector<DumpedEntryPoint>> dump_entry_points(const ResolvedConfig& resolved,
                                                          const std::filesystem::path& dir);

}  // namespace precast
