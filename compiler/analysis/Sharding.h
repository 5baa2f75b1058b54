// Sharding of every value of a function over the device mesh, from MaxText's logical axis
// rules: parameters and annotated values (those carrying logical axis names) are resolved with
// flax's rule resolution, the rest inherit their operands' sharding op by op. From the result:
// per-device shapes and bytes (what the memory plan packs), the collectives SPMD partitioning
// implies (all-gathers of weights whose contracting dimension is sharded, all-reduce or
// reduce-scatter of partial sums) with their bytes and mesh axes (ICI or DCN), and per-device
// matmul FLOPs.
//
// This is an analysis over the global (unpartitioned) IR: it says what each device holds and
// exchanges, as XLA's SPMD partitioner would arrange it for these programs; it does not emit a
// per-device module.
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

enum class CollectiveKind : uint8_t { kAllGather, kAllReduce, kReduceScatter };
std::string_view collective_name(CollectiveKind kind);

struct Collective {
  CollectiveKind kind;
  uint32_t op = 0;                     // the op it serves (a dot, a reduction)
  ir::Value value;                     // what is gathered, or the partial result reduced
  std::vector<std::string> mesh_axes;  // the group it spans
  int64_t group_size = 1;
  bool dcn = false;  // spans slices (data-center network)
  // Bytes of the full (gathered / unreduced) per-device buffer; the wire traffic per device is
  // bytes * (group_size - 1) / group_size for all-gather and reduce-scatter, twice that for
  // all-reduce (ring algorithms).
  int64_t bytes = 0;
  int64_t wire_bytes() const;
};

struct ShardingAnalysis {
  std::vector<ShardingSpec> specs;    // per value id
  std::vector<int64_t> device_bytes;  // per value id
  std::vector<Collective> collectives;
  // Values a collective writes (a reduce-scatter's sharded result, seen through layout ops):
  // they are buffers of their own, never fused into their users.
  std::vector<ir::Value> collective_outputs;
  long double device_dot_flops = 0;  // matmul FLOPs one device executes
};

Expected<ShardingAnalysis> analyze_sharding(const ir::Function& function,
                                            std::span<const AxisRule> rules, const Mesh& mesh);

}  // namespace precast
