// Buffer assignment: which values get memory, how long each lives, and where it sits in one
// arena — the plan the memory report (XLA's CompiledMemoryStats definitions) is computed from,
// and the one the CPU runtime will allocate.
//
// Materialisation follows loop fusion as XLA and our backend do it: an elementwise op (or a
// broadcast, reshape or convert) whose every user is an elementwise op or a reduction (or a fused
// broadcast/reshape) is computed inside its users — a multi-output loop fusion when there are
// several — and gets no buffer; constants and iotas never get one. A fused value's operands stay
// live until its last user runs. Reshapes of a materialised value share its buffer. A result
// aliasing a donated parameter is written into that parameter's buffer when the parameter is not
// read afterwards (the optimizer's in-place update).
//
// Liveness is over the function's op order (the schedule). Packing is largest-first best-fit
// (like XLA's GlobalDecreasingSizeBestFitHeap): each buffer, biggest first, takes the smallest
// free gap among the buffers whose live ranges overlap its own, else the top of the arena.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "ir/Module.h"

namespace precast {

enum class MemoryCategory : uint8_t {
  kParameters,        // weights (arguments)
  kOptimizerState,    // mu, nu, count (arguments)
  kBatch,             // the batch arrays and run-time scalars (arguments)
  kGradients,         // weight gradients, their accumulation and clipping
  kSavedActivations,  // forward values the backward pass reads
  kRecomputation,     // remat clones
  kLogitsAndLoss,     // logits, softmax, cross-entropy (forward and backward)
  kCollectives,       // gathered weights and unreduced partial sums around collectives
  kOther,             // everything else
  kCount,
};
std::string_view category_name(MemoryCategory category);

struct Buffer {
  ir::Value value;
  int64_t bytes = 0;
  int32_t start = 0;    // schedule position of the defining op
  int32_t end = 0;      // last position it is read (inclusive)
  int64_t offset = -1;  // in the temp arena; -1 for arguments and outputs
  MemoryCategory category = MemoryCategory::kOther;
  bool output = false;
  // > 1: the stacked buffer of a scan (stacked_layer_gradients): `layers` decoder layers' buffers
  // of the same weight gradient in one, `value` being the first layer's.
  int32_t layers = 1;
  // In a plan of XLA's arena (xla.model_arena) of scanned layers: a buffer XLA's layer loops carry
  // from one iteration to the next (a residual of a scanned layer, the loops' stacked output and
  // input; a stacked weight gradient, the backward loop's accumulator), as the `(phi)` values of
  // XLA's dumps are (benchmarks/xla_reference/carried.py). The kept bf16 weight copies are not:
  // XLA's loops read them as loop-invariant values (llama2-7b b1 s2048 on v5p-32).
  bool loop_carried = false;
};

struct MemoryPlan {
  // XLA's CompiledMemoryStats: argument = parameters; output = live-out results; alias = results
  // that reuse a donated parameter (counted in both); temp = the packed arena.
  int64_t argument_bytes = 0;
  int64_t output_bytes = 0;
  int64_t alias_bytes = 0;
  int64_t temp_bytes = 0;
  int64_t host_temp_bytes = 0;
  int64_t total_bytes() const { return argument_bytes + output_bytes - alias_bytes + temp_bytes; }
  // TPU targets: what memory_analysis() counts in temp besides the packed arena
  // (XlaTempOverhead.h), in temp_bytes when xla_overheads_in_temp (the product's plan), not in it
  // in a plan of XLA's arena alone (`precast analyze --xla-arena`).
  int64_t xla_on_chip_arenas_bytes = 0;
  int64_t xla_temp_extra_bytes = 0;  // an estimate (xla_temp_extra_bytes)
  bool xla_overheads_in_temp = false;
  // The packed arena: temp_bytes less the overheads it holds.
  int64_t arena_bytes() const {
    return temp_bytes -
           (xla_overheads_in_temp ? xla_on_chip_arenas_bytes + xla_temp_extra_bytes : 0);
  }

  std::vector<Buffer> buffers;  // temp buffers (offset >= 0) and non-aliased outputs
  int32_t peak_position = 0;    // schedule position where the live temp bytes peak
  int64_t peak_live_bytes = 0;  // live temp bytes there (<= temp_bytes: fragmentation)
  // The most temp bytes live at one position without the loop_carried buffers (peak_live_bytes
  // when none is): a candidate for the TPU backend's "Unpadded" size U of its arena's contents,
  // memory_analysis()'s temp being 2 x arena - U (benchmarks/xla_reference/README.md, "What the
  // extra is"). Evaluated by compare.py --extra-models; the product's temp does not use it.
  int64_t uncarried_peak_bytes = 0;
  // Live temp bytes at the peak by category.
  std::vector<int64_t> peak_by_category;
  // Argument bytes by category.
  std::vector<int64_t> argument_by_category;
  size_t num_ops = 0;
};

// A buffer that exists only around one op: a collective's gathered operand or unreduced result.
struct TransientBuffer {
  int32_t position = 0;
  int64_t bytes = 0;
  MemoryCategory category = MemoryCategory::kCollectives;
};

// MaxText's step as XLA compiles it for a TPU, counted as compiled.memory_analysis() counts it.
struct XlaStepAccounting {
  bool enabled = false;
  // The trailing parameters MaxText bakes into its step as constants (the optimizer's
  // hyperparameters, which Precast passes at run time): not arguments.
  size_t trailing_constant_params = 0;
  // MaxText's train state holds more than the step's parameters (its RNG streams' keys and
  // counts, a second optimizer count, the step number): counted as argument, output and alias.
  int64_t extra_state_bytes = 0;
  // Scalars MaxText's step returns beyond the function's results (metrics Precast does not
  // compute): counted as output.
  int64_t extra_output_bytes = 0;
  // The output tuple's own buffer, a table of its elements' addresses: the tuple has the state's
  // arrays (a scanned model's layer weights stacked, one array for all layers), the extra state's
  // `extra_state_arrays` and `metrics` scalars, `pointer_bytes` each, in granules of 8 pointers.
  int64_t extra_state_arrays = 0;
  int64_t metrics = 0;
  int64_t pointer_bytes = 4;
  // Plan XLA's preallocated-temp arena (memory colour 0 of its buffer assignment) as the TPU
  // dumps show it (benchmarks/xla_reference/README.md, "XLA's arena at its peak"): the output
  // head's elementwise chain recomputed in the backward fusions (only the bf16 logits kept), the
  // head's weight gradient run after the backward layer loop (the bf16 logits gradient live
  // across it), and one bf16 copy of each weight kept from before the forward layer loop to the
  // end of the backward one, and a copy of each donated parameter whose update is not written in
  // place (ZeRO-1). The pipeline sets it for every TPU target; memory_analysis()'s temp is this
  // arena + the on-chip arenas + an estimated extra (XlaTempOverhead.h), which the pipeline adds
  // after the plan.
  bool model_arena = false;
  // attention=dot_product: with model_arena, each attention and attention gradient holds its f32
  // scores while it runs (the splash kernel, MaxText's autoselected on a TPU, never stores them).
  bool attention_scores = false;
};

struct BufferOptions {
  // Bytes one device holds of a value (its per-device shape); default: the whole value, or with
  // xla.enabled its TPU tiled layout's bytes (TpuLayout.h).
  std::function<int64_t(ir::Value)> bytes;
  // With enabled: buffers take TPU layouts, parameters the step never reads are not arguments
  // (jax.jit drops unused inputs), and the counts above apply.
  XlaStepAccounting xla;
  // Values kept in host memory (remat offload): not in the device arena.
  std::vector<ir::Value> host_values;
  std::vector<TransientBuffer> transients;
  // (index into transients, last position): transients living over a range, not one op.
  std::vector<std::pair<size_t, int32_t>> transient_ends;
  // Values that must get a buffer of their own (collective outputs).
  std::vector<ir::Value> materialize;
  int64_t alignment = 64;
  bool fuse = true;
  // false: decide buffers and live ranges and find the peak of live bytes, but place nothing
  // (every temp at offset 0, temp_bytes 0) — the cheap lower bound the scheduler compares
  // orders by before it packs one.
  bool pack = true;
  // scan_layers: the decoder layers run as one lax.scan, whose backward accumulates every layer's
  // weight gradients into a stacked buffer allocated before the backward loop starts. Layer
  // weight gradients then live from the first backward op, not from the op that computes them,
  // and the layers' buffers of one gradient (same scope but for the layer index, same size, same
  // place among the layer's gradient buffers) are packed as one stacked buffer.
  bool stacked_layer_gradients = false;
  // With stacked_layer_gradients (and for xla's stacked weights), how the scan groups the layers
  // (frontend::ScanLayout): layer i < scanned_layers is place i % scan_layers_per_block of its
  // block, and each place's weights and gradients are stacked over the blocks apart from the
  // other places'; the layers from scanned_layers on run unscanned (gemma3's remainder), their
  // weights and gradients unstacked.
  int64_t scan_layers_per_block = 1;
  int64_t scanned_layers = std::numeric_limits<int64_t>::max();
};

MemoryPlan plan_memory(const ir::Function& function, const BufferOptions& options = {});

// The one loop-fusion predicate: whether `op` may be computed inside its users instead of getting
// a buffer (an elementwise op, broadcast, reshape, iota or constant, or a per-device piece of a
// value generated in place). plan_memory fuses such an op when every user can absorb it; the
// scheduler reads that decision through value_buffers and the CPU code generator through the
// plan (its storage check uses this predicate too), so the three never decide apart.
bool loop_fusible(const ir::Function& function, const ir::Op& op);

// The storage decisions plan_memory starts from, which depend on the data flow only (not on the
// op order), for passes that reason about memory (the scheduler). value_buffers(f)[v] is the
// value whose buffer v is stored in: v itself, the operand a reshape views, or an invalid Value
// when v has no buffer (fused into its users; constants, iotas). Parameters are their own.
std::vector<ir::Value> value_buffers(const ir::Function& function,
                                     const BufferOptions& options = {});
// materialized_values(f)[v]: v is stored in memory (value_buffers(f)[v] is valid).
std::vector<bool> materialized_values(const ir::Function& function,
                                      const BufferOptions& options = {});

// MaxText's line (GB = 2^30 bytes, one decimal): "Total estimated memory size: 1.5 GB, estimated
// output size: 0.4 GB, estimated temp size: 1.1 GB, estimated argument size: 0.4 GB, Estimated
// host temp size: 0.0 GB."
std::string format_memory_line(const MemoryPlan& plan);

// Precast's breakdown: arguments and the peak by category, and the `top` largest buffers.
// With `with_shardings`, each listed buffer also shows its value's sharding annotation (a
// partitioned function's, ir::print_sharding) where it has one.
std::string format_memory_breakdown(const ir::Function& function, const MemoryPlan& plan,
                                    size_t top = 10, bool with_shardings = false);

}  // namespace precast
