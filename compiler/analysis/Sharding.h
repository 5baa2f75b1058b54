// Sharding of every value of a function over the device mesh, from MaxText's logical axis
// rules: parameters and annotated values (those carrying logical axis names) are resolved with
// flax's rule resolution, the rest inherit their operands' sharding op by op; with it, each
// value's per-device bytes.
//
// This is an analysis over the global (unpartitioned) IR: the layout each value should have.
// compiler/passes/SpmdPartition turns it into the per-device program, whose collectives
// (count_collectives) and buffer plan are what `precast analyze` reports.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/config/Config.h"
#include "compiler/topology/Mesh.h"
#include "ir/Module.h"

namespace precast {

struct AxisRule {
  std::string logical;
  std::vector<std::string> mesh_axes;  // empty: never sharded
};

// logical_axis_rules as the loader merged them, in order, duplicates kept (fallbacks).
Expected<std::vector<AxisRule>> axis_rules_from_config(const Config& config);

// Per dimension, the mesh axes it is split over (major to minor); none = replicated.
struct ShardingSpec {
  std::vector<std::vector<std::string>> dims;
  // "P('fsdp', None, ('tensor', 'tensor_sequence'))", as JAX prints a PartitionSpec.
  std::string to_string() const;
  bool replicated() const;
};

// flax's _logical_to_mesh_axes: rules in list order; a rule [name, axes] applies to the
// dimension named `name` if that dimension is unassigned and none of `axes` is already used by
// another dimension of the array; the first applicable rule wins; unmatched dimensions, and
// dimensions without a name ("" or "_"), are replicated. Size-1 mesh axes count as used. A
// logical name repeated in one array, or a rule naming an axis the mesh does not have, is an
// error.
//
// A name ending in kPeelExpert (`activation_batch_moe.peel_expert`) is MaxText's peeled MoE
// dispatch (moe_dispatch_no_expert_sharding): every dimension of that array is then resolved on
// its own, and the marked dimensions drop `expert` (so the expert dimension keeps it).
inline constexpr std::string_view kPeelExpert = ".peel_expert";
Expected<ShardingSpec> resolve_sharding(std::span<const std::string_view> logical,
                                        std::span<const AxisRule> rules, const Mesh& mesh);

// Devices a dimension is split over.
int64_t shard_count(const std::vector<std::string>& axes, const Mesh& mesh);
// Each dimension divided by its shard count, rounded up (JAX pads uneven shards).
std::vector<int64_t> per_device_dims(const std::vector<int64_t>& dims, const ShardingSpec& spec,
                                     const Mesh& mesh);

// A reshape's dimensions in matching runs: operand dimensions [from_begin, from_end) hold the
// same elements as result dimensions [to_begin, to_end) (one each when the sizes are equal; a
// split or a merge otherwise). The major dimension of each side leads its run.
struct ReshapeRun {
  size_t from_begin, from_end, to_begin, to_end;
};
std::vector<ReshapeRun> reshape_runs(const std::vector<int64_t>& from,
                                     const std::vector<int64_t>& to);

// The sharding a reshape's result takes from its operand's: dimensions of equal size keep their
// axes; in a split or a merge the major operand dimension's axes go to the major result
// dimension when they divide it.
ShardingSpec reshape_sharding(const ShardingSpec& in, const std::vector<int64_t>& from,
                              const std::vector<int64_t>& to, const Mesh& mesh);
// Whether a group over these mesh axes spans slices (any of them has a DCN factor above 1).
bool spans_dcn(const std::vector<std::string>& axes, const Mesh& mesh);

struct ShardingAnalysis {
  std::vector<ShardingSpec> specs;    // per value id
  std::vector<int64_t> device_bytes;  // per value id
};

// The shardings of a function's values as a table of the distinct specs and, per value id, its
// entry: what the partitioner reads (a few hundred specs serve tens of thousands of values).
struct ShardingTable {
  std::vector<ShardingSpec> specs;
  std::vector<uint32_t> of_value;  // per value id, an index into specs
  const ShardingSpec& spec(uint32_t value_id) const { return specs[of_value[value_id]]; }
};
// The analysis as a table (each value its own entry).
ShardingTable sharding_table(ShardingAnalysis analysis);

struct ShardingOptions {
  // shard_optimizer_over_data (ZeRO-1): the optimizer state (parameters of role
  // kOptimizerState and the results donated into them) also split over the `data` mesh axis on
  // the dimension MaxText's add_data_to_sharding picks (maxtext_utils/sharding.py), with `data`
  // as that dimension's minor axis (zero1_sharding); a spec that already uses `data` is kept.
  // The values the moments' updates read (the gradients, clipped) take the moments' layout, so
  // each weight gradient is reduce-scattered over `data` with `fsdp`, the optimizer's update
  // runs on each device's data shard and the new weights are all-gathered over `data`.
  bool shard_optimizer_over_data = false;
};

Expected<ShardingAnalysis> analyze_sharding(const ir::Function& function,
                                            std::span<const AxisRule> rules, const Mesh& mesh,
                                            const ShardingOptions& options = {});

// MaxText's add_data_to_sharding for one array of global shape `dims` (see ShardingOptions).
ShardingSpec add_data_to_sharding(const ShardingSpec& spec, const std::vector<int64_t>& dims,
                                  const Mesh& mesh);
// The ZeRO-1 layout of the optimizer state: `data` on the dimension add_data_to_sharding picks,
// after that dimension's axes rather than before them. Each device's bytes are MaxText's; each
// device's piece of a moment then lies inside its piece of the weight (P(('fsdp', 'data'))
// within P('fsdp')), so the update slices the weight locally and the new weight is gathered over
// `data` alone, where MaxText's order (('data', 'fsdp')) needs the whole weight moved.
ShardingSpec zero1_sharding(const ShardingSpec& spec, const std::vector<int64_t>& dims,
                            const Mesh& mesh);

}  // namespace precast
