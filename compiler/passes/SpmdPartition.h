// SPMD partitioning: the global train step becomes the program one device runs, with
// per-device shapes and explicit collectives, as XLA's SPMD partitioner turns a sharded HLO
// module into a per-partition one.
//
// Precondition: `analysis` is analyze_sharding() of `function` on `mesh` (the sharding of every
// value). Each op runs on local pieces when its operands' shardings allow it; where an operand is
// laid out otherwise it is resharded first, with the cheapest of
//   all_gather      (drop minor mesh axes of a dimension),
//   shard_slice     (add minor mesh axes: keep this device's piece, no communication),
//   all_to_all      (an axis moves from one dimension to another);
// contractions over a dimension sharded on both sides keep it sharded (an axis the result would
// also use on a free dimension is taken off that dimension: Megatron's row-parallel matmul) and
// leave partial sums, reduce_scatter'ed onto the most sharded layout the value they become
// takes (through layout ops: the weight gradient; or its elementwise users: a data gradient on
// its way into the embed-sharded residual stream), all_reduce'd over the rest; a dot whose
// result only flows through layout ops into a weight gradient is computed in that weight's
// layout; an embedding lookup's gradient (scatter_add of batch-split updates) is
// reduce-scattered the same way onto the layout it is converted into (ZeRO-1's moments). A
// reduce_sum or reduce_max over a sharded dimension reduces each device's piece and
// then all_reduces (sum, or max=true) over those axes, so vocab-split logits stay split through
// the loss; a value generated from iotas, constants and broadcasts (the loss's one-hot mask)
// is generated in the layout its users agree on. FSDP's weights are gathered at each use
// (forward, backward and recomputation), never kept whole between uses; within one block of a
// decoder layer and one phase (forward, recomputation, backward) one reshard of a value serves
// every op, as XLA's CSE merges identical collectives. Mesh axes of size 1 take no part; a
// dimension that a sharding does not divide evenly is kept whole (JAX would pad it).
//
// MoE's sparse path under expert parallelism: a grouped_dot (or its weight gradient) whose expert
// stack is split on its groups over axes that also split its rows runs on each device's own
// experts. The rows go to the devices of their experts with a ragged_all_to_all into a static
// worst-case buffer [G, C, F] (G devices in the expert group; C = n / k x min(k, local experts)
// rows per sender, MaxText's get_ragged_buffer_size, n the sender's rows, k the ids' top_k), the
// ids arrive as local expert numbers (-1 on padding, which grouped_dot skips), elementwise ops
// and feature reductions of dispatched rows stay dispatched, and each dispatched value's
// row-layout twin is the reverse exchange (combine), erased after partitioning when nobody
// reads it. The weight gradients are summed from the received rows: whole over the expert
// group, partial over the rows' other axes.
//
// attention and attention_grad run per batch shard and per head shard. By default
// (context_parallel_strategy=all_gather) a context-sharded sequence keeps each device's T/g query
// rows and gathers k, v and the kv segment ids whole; the composite compares global positions
// (`positions`: the queries' from an iota sliced per device), and the gradient's dk and dv are
// reduce_scatter'ed back to their rows. With PartitionOptions::ring_attention
// (context_parallel_strategy=ring) each device keeps its query chunk of T/g rows and the kv
// chunks go around the ring of the g `context` devices (collective_permute, shift 1): each block
// is one attention_stats composite (flash: no [T/g, T/g] scores), the forward combining the
// blocks through their rows' softmax max and sum; the backward runs attention_grad per block
// with dout scaled by the block's share of the row's softmax (from the forward ring of the same
// operands, or a forward ring of its own when there is none), adds into dq locally while each
// chunk's dk and dv travel with it and arrive back at its owner. Masks use global positions (an
// iota sliced per device for the queries; key positions travel with the chunk).
//
// The result is a module with one function of the same name and the same parameters (in
// per-device shapes, with the same names, axes and donation aliases); its results have the
// sharding the analysis gave them. It verifies, prints and parses back like any module, and
// ir::interpret_spmd runs it on every device of the mesh.
#pragma once

#include <cstdint>
#include <span>

#include "compiler/analysis/Sharding.h"
#include "ir/Interpreter.h"
#include "ir/Module.h"
#include "ir/PassManager.h"

namespace precast {

struct PartitionOptions {
  // context_parallel_strategy=ring: attention over a sequence sharded on the `context` mesh axis
  // passes kv chunks around the context devices instead of all-gathering them.
  bool ring_attention = false;
  // MoE's sparse path under expert parallelism sends rows to their experts' devices with
  // ragged_all_to_all (MaxText's). The CPU backend has no ragged_all_to_all yet, so CPU targets
  // turn this off: their grouped matmuls gather the expert stacks instead (a valid partition of
  // the same step, with other collectives and memory).
  bool ragged_expert_dispatch = true;
};

struct PartitionStats {
  int64_t all_gathers = 0;
  int64_t all_reduces = 0;
  int64_t reduce_scatters = 0;
  int64_t all_to_alls = 0;
  int64_t shard_slices = 0;
  int64_t collective_permutes = 0;
  int64_t ragged_all_to_alls = 0;
};

struct PartitionedModule {
  ir::Module module;
  PartitionStats stats;
  // The per-value sharding the partitioner used for the parameters and results (the analysis's,
  // less size-1 axes and uneven splits): what the runtime feeds and reads on each device.
  std::vector<ShardingSpec> param_specs;
  std::vector<ShardingSpec> result_specs;
  // For each value of the global function: the per-device value computing it and that value's
  // sharding (the analysis's, or a partial layout such as a dot's scattered gradient).
  std::vector<ir::Value> local_values;
  std::vector<ShardingSpec> local_specs;
};

// The per-device function's values carry the sharding the partitioner gave them (ValueInfo's
// sharding annotation; none where it is not known).
Expected<PartitionedModule> partition_spmd(const ir::Function& function,
                                           const ShardingAnalysis& analysis, const Mesh& mesh,
                                           const PartitionOptions& options = {});

// Analyses the sharding of module function `index` with `rules` on `mesh` and replaces that
// function with its per-device form (the same name, params and results). Like partition_spmd's
// module, the per-device function's values carry their sharding as IR annotations
// (`f32[4,8] P('fsdp', None)`), except where neither the partitioner nor a collective's
// attributes say it (e.g. a reshape it inserted).
Expected<PartitionStats> partition_spmd_in_place(ir::Module& module, size_t index,
                                                 std::span<const AxisRule> rules, const Mesh& mesh,
                                                 const PartitionOptions& options = {});
// The same with the shardings given (propagate-sharding's, read back from the IR).
Expected<PartitionStats> partition_spmd_in_place(ir::Module& module, size_t index,
                                                 const ShardingTable& shardings, const Mesh& mesh,
                                                 const PartitionOptions& options = {});

// The `spmd-partition` pass: partition_spmd_in_place on the function named `function` (a train
// step), with the shardings propagate-sharding annotated it with (a step without any is analysed
// here with `rules`). Nothing to do on one device. Changed when the mesh has more than one
// device.
struct SpmdPartitionPassOptions {
  std::vector<AxisRule> rules;  // logical_axis_rules, in order
  Mesh mesh;
  PartitionOptions partition;
  std::string function = "train_step";
};
ir::Pass spmd_partition_pass(SpmdPartitionPassOptions options);

// The mesh in the form the multi-device interpreter takes (its DCN sizes when it spans slices).
ir::InterpreterMesh interpreter_mesh(const Mesh& mesh);

// Device `device`'s piece of a global value with this sharding (devices in MaxText's order,
// slices outermost, as the interpreter and the runtime number ranks).
ir::HostTensor shard_of(const ir::HostTensor& global, const ShardingSpec& spec, const Mesh& mesh,
                        int64_t device);

}  // namespace precast
