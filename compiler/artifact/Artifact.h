// The schema of a `.pcx` artifact: everything one compiled training step carries from the
// compiler to the runtime. Plain data only; ArtifactIo.h reads and writes it, Compatibility.h
// checks it against a host, ArtifactText.h renders it for `precast inspect`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/support/Error.h"

namespace precast::artifact {

// One named axis of the device mesh, e.g. {"fsdp", 4}.
struct MeshAxis {
  std::string name;
  int64_t size = 0;

  bool operator==(const MeshAxis&) const = default;
};

// What a host must match before it may run the artifact (Compatibility.h checks it).
struct CompatibilityKey {
  // LLVM's normalized form, e.g. "x86_64-unknown-linux-gnu" (see normalize_triple).
  std::string target_triple;
  // LLVM target feature names the object code was compiled for: "avx2", "fma", "sse4.2", ...
  std::vector<std::string> cpu_features;
  std::string topology_name;   // "cpu-4", "v5p-128", ...
  std::vector<MeshAxis> mesh;  // in mesh order, e.g. {{"data", 2}, {"fsdp", 2}}
  int64_t num_devices = 0;
  std::string ir_hash;  // hex digest of the partitioned IR the code was generated from

  bool operator==(const CompatibilityKey&) const = default;
};

// One input or output of the step function.
struct TensorSignature {
  std::string name;
  std::vector<int64_t> shape;  // per-device dims
  std::string dtype;           // IR dtype name: "f32", "bf16", "i32", ...
  // The global value's sharding as the IR prints it, e.g. "P('fsdp', ('data', 'tensor'))": the
  // mesh axes that split each dimension; "" = replicated (and every single-device value).
  std::string sharding;
  // Outputs only: the index of the input whose buffer this output reuses (donation), or -1.
  // Always -1 for inputs.
  int64_t aliased_input = -1;
  std::string role;  // "parameter", "optimizer_state", "batch", "scalar", "metric"
  // Inputs with role "parameter": how the runtime initialises it from init_weights_seed —
  // "normal <stddev>" (stream = the input's index, ir/Random.h's random_normal), "ones" or
  // "zeros". Empty for everything else.
  std::string init;
  // Outputs only: an earlier output that is the same value (one buffer serves both, as the
  // plan counts it once), or -1.
  int64_t same_as_output = -1;

  bool operator==(const TensorSignature&) const = default;
};

struct Signature {
  std::vector<TensorSignature> inputs;
  std::vector<TensorSignature> outputs;

  bool operator==(const Signature&) const = default;
};

// One buffer the planner placed; offsets are relative to the start of its category's region.
struct PlannedBuffer {
  std::string value_name;
  int64_t offset = 0;
  int64_t bytes = 0;
  int64_t live_start = 0;  // first step position that needs the buffer
  int64_t live_end = 0;    // last step position that needs it (inclusive)
  std::string category;    // "argument", "output", "alias", "temp", "constant"

  bool operator==(const PlannedBuffer&) const = default;
};

// The memory plan; the byte totals follow XLA's CompiledMemoryStats (DESIGN.md invariant 3).
struct BufferPlan {
  int64_t arena_bytes = 0;  // the temp arena the runtime allocates, exactly this size
  int64_t alignment = 0;    // every offset is a multiple of this
  std::vector<PlannedBuffer> buffers;
  int64_t argument_bytes = 0;
  int64_t output_bytes = 0;
  int64_t alias_bytes = 0;
  int64_t temp_bytes = 0;

  bool operator==(const BufferPlan&) const = default;
};

// Serialized as integers: append new values at the end only (or bump kFormatVersion).
enum class StepKind : uint8_t { kKernelCall, kGemm, kAttention, kCollective, kCopy };
enum class BufferSpace : uint8_t { kArgument, kOutput, kTemp, kConstant };
enum class ConfigPhase : uint8_t { kCompile, kRun };

// A region a step reads or writes.
struct BufferRef {
  BufferSpace space = BufferSpace::kTemp;
  // kArgument/kOutput: the position in Signature::inputs/outputs.
  // kTemp/kConstant: the byte offset into the temp arena / constant pool.
  int64_t index_or_offset = 0;
  int64_t bytes = 0;

  bool operator==(const BufferRef&) const = default;
};

// What a kCollective step does (Step::collective), all the runtime needs to run it through its
// communicator. Serialized as integers: append new values at the end only. The step's buffers
// always hold rank-major pieces (the runtime concatenates and splits whole buffers): where the
// IR's dimension is not the major one, the CPU code generator's pack/unpack steps around the
// collective lay the pieces out so, and `dimensions` records the IR's dimension for inspection.
enum class CollectiveKind : uint8_t {
  kAllReduce,          // every device gets the reduction of all devices' operands
  kAllGather,          // operands concatenated along dimensions[0]
  kReduceScatter,      // the reduction, split along dimensions[0]: device i keeps piece i
  kAllToAll,           // split along dimensions[0], pieces exchanged, concatenated along [1]
  kCollectivePermute,  // device i's operand goes to device (i + shift) mod group size
};
enum class Reduction : uint8_t { kNone, kSum, kMax };

struct Collective {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  Reduction reduction = Reduction::kNone;  // kSum or kMax for all_reduce and reduce_scatter
  std::vector<std::string> mesh_axes;      // the mesh axes one group spans, e.g. {"fsdp"}
  // Device ids of each group, in rank order within the group (every device in exactly one);
  // empty when the groups follow from mesh_axes alone.
  std::vector<std::vector<int64_t>> replica_groups;
  int64_t shift = 0;                // collective_permute only
  std::vector<int64_t> dimensions;  // see CollectiveKind; empty for all_reduce and permutes
  std::string dtype;                // IR dtype name of the operand, e.g. "f32"
  int64_t bytes = 0;                // of the operand on one device

  bool operator==(const Collective&) const = default;
};

// One entry of the step program, executed in order. The CPU backend compiles every step into a
// function of the object code, void(args, outputs, arena, pool), named by `symbol`, which the
// runtime calls: `kind` says what it computes (a fused loop kernel, a GEMM call with its
// layout work, an attention kernel, the final copies into outputs). Its int_params are
// {IR op index (-1 for the copies), n}: the first n of `buffers` are read, the rest written.
// A kCollective step has no symbol: the runtime runs `collective` from buffers[0] (the operand)
// into buffers[1] (the result).
struct Step {
  StepKind kind = StepKind::kKernelCall;
  std::string symbol;  // the object code's function running the step; empty for kCollective
  std::vector<BufferRef> buffers;
  // Kind-specific parameters; the backend and the runtime agree on their meaning per kind.
  std::vector<int64_t> int_params;
  std::vector<double> float_params;
  Collective collective;  // kCollective only; default-valued otherwise
  // What a profile names the step by (since format version 3): the IR op it computes, e.g.
  // "dot_general" ("all_gather_pack"/"_unpack" for a collective's staging kernels,
  // "result_copies" for the final copies), and that op's scope name, e.g.
  // "decoder/layers_0/mlp/wi" ("" when the op has none).
  std::string op;
  std::string scope;

  bool operator==(const Step&) const = default;
};

// One resolved config key; `precast-run` refuses a config that changes a kCompile key.
struct ConfigEntry {
  std::string key;
  std::string value;  // as the config printer writes it
  ConfigPhase phase = ConfigPhase::kCompile;

  bool operator==(const ConfigEntry&) const = default;
};

// A further function of the artifact besides the training step, with its own signature, buffer
// plan, program and object code (since format version 4): "eval_step" (forward + loss sums on
// an eval batch, no update) and "sample_step" (forward of one row returning the logits). Its
// inputs with role "parameter" have the train step's names, shapes and shardings: the runtime
// binds them to the train step's parameter buffers instead of copying the weights.
struct EntryPoint {
  std::string name;
  Signature signature;
  BufferPlan plan;
  std::vector<Step> program;
  std::vector<uint8_t> object_code;
  std::string ir_text;

  bool operator==(const EntryPoint&) const = default;
};

// The entry point names an artifact may hold. The training step is always present and lives in
// Artifact's own signature/plan/program/object_code fields.
inline constexpr std::string_view kTrainStepEntry = "train_step";
inline constexpr std::string_view kEvalStepEntry = "eval_step";
inline constexpr std::string_view kSampleStepEntry = "sample_step";

// One compiled training step. The file framing (magic, format version, checksum) is not part
// of it: ArtifactIo.h adds it on write and checks it on read.
struct Artifact {
  std::string compiler_version;  // "0.1.0"
  CompatibilityKey key;
  Signature signature;
  BufferPlan plan;
  std::vector<Step> program;
  std::vector<uint8_t> object_code;  // relocatable object for key.target_triple; may be empty
  std::string ir_text;               // the final IR, as the printer writes it
  std::string report_text;           // the analysis report (memory, FLOPs)
  std::vector<ConfigEntry> config;
  // What precast-run logs before and during training, as MaxText does: the "number parameters"
  // line and the "Per train step:" TFLOPs block, and the per-device figures of one step behind
  // the TFLOP/s/device and Tokens/s/device columns.
  std::string setup_text;
  double model_tflops_per_device = 0;
  double tokens_per_device = 0;
  // The entry points besides train_step, in the order the compiler made them (may be empty).
  std::vector<EntryPoint> entry_points;

  bool operator==(const Artifact&) const = default;
};

// The artifact as if `name` were its only step: a copy whose signature, plan, program,
// object_code and ir_text are that entry point's ("train_step": the artifact itself), for
// runtime::StepExecutable. Error (exit 4) naming the entry points the artifact has and the key
// that compiles the missing one.
Expected<Artifact> entry_point_artifact(const Artifact& artifact, std::string_view name);


// Names used in text output and messages: "kernel_call", "argument", "compile", ...
std::string_view step_kind_name(StepKind kind);
std::string_view buffer_space_name(BufferSpace space);
std::string_view config_phase_name(ConfigPhase phase);
// "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute".
std::string_view collective_kind_name(CollectiveKind kind);
std::string_view reduction_name(Reduction reduction);  // "none", "sum", "max"

// The first broken cross-field rule (enum out of range, aliased_input not -1 or a valid input
// index, an input with an alias), or nullopt. The writer and reader both apply it.
std::optional<std::string> find_schema_violation(const Artifact& artifact);

}  // namespace precast::artifact
