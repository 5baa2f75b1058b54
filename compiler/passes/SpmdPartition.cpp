#include "compiler/passes/SpmdPartition.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "compiler/passes/PropagateSharding.h"
#include "ir/Builder.h"
#include "ir/Rewriter.h"
#include "ir/Composites.h"
#include "ir/passes/DeadCodeElimination.h"

namespace precast {
namespace {

using ir::AttrKey;
using ir::AttrSet;
using ir::Builder;
using ir::Function;
using ir::Op;
using ir::OpKind;
using ir::TensorType;
using ir::Value;
using Axes = std::vector<std::string>;

// The mesh axis context parallelism shards sequences over; ring attention runs around it.
constexpr std::string_view kContextAxis = "context";

ShardingSpec replicated_spec(size_t rank) {
  ShardingSpec s;
  s.dims.assign(rank, {});
  return s;
}

bool uses_axis(const ShardingSpec& s, const std::string& axis) {
  for (const Axes& a : s.dims) {
    if (std::find(a.begin(), a.end(), axis) != a.end()) return true;
  }
  return false;
}

// The longest common prefix of a and b.
Axes common_prefix(const Axes& a, const Axes& b) {
  Axes out;
  for (size_t i = 0; i < a.size() && i < b.size() && a[i] == b[i]; ++i) out.push_back(a[i]);
  return out;
}

// MaxText's device order, as the lockstep interpreter and the MPI runtime number devices.
std::vector<int64_t> coordinates(const Mesh& mesh, int64_t device) {
  return interpreter_mesh(mesh).coordinates(device);
}

// A routing of the sparse MoE path's rows to their experts' devices (expert parallelism): the
// global ids it is of, the axes splitting the expert stack, the ids' row layout, and its local
// values: each row's destination, and the dispatched rows' local expert ids (-1: padding).
struct Routing {
  uint32_t ids = 0;
  Axes axes;
  ShardingSpec rows;
  int64_t group_size = 1;
  int64_t capacity = 1;
  Value dest;
  Value local_ids;
};

struct Dispatched {
  Value local;
  uint32_t routing = 0;  // the global ids of its Routing
};

class Partitioner {
 public:
  Partitioner(const Function& global, const ShardingTable& analysis, const Mesh& mesh,
              const PartitionOptions& options)
      : g_(global), analysis_(analysis), mesh_(mesh), options_(options) {}

  // Builds the per-device function into `into` (empty, on any context); out.module is left
  // untouched.
  Status run(Function& into, PartitionedModule& out) {
    f_ = &into;
    ir::Rewriter rewriter(g_, into, ir::Rewriter::Params::kOwn);
    Builder& builder = rewriter.builder();
    b_ = &builder;
    local_.assign(g_.num_values(), Value{});
    actual_.assign(g_.num_values(), {});
    target_.clear();
    for (uint32_t id = 0; id < g_.num_values(); ++id) target_.push_back(effective(Value{id}));
    users_.assign(g_.num_values(), {});
    for (uint32_t i = 0; i < g_.num_ops(); ++i) {
      for (Value v : g_.operands(g_.op(i))) users_[v.id].push_back(i);
    }
    find_generated();
    for (Value p : g_.params()) {
      TensorType type = local_type(p, target_[p.id]);
      Value local = f_->add_param(f_->context().intern_type(type));
      copy_annotations(p, local);
      size_t number = g_.value_info(p).number;
      if (g_.param_role(number) != ir::ParamRole::kNone) {
        f_->set_param_role(number, g_.param_role(number));
      }
      local_[p.id] = local;
      actual_[p.id] = target_[p.id];
      out.param_specs.push_back(target_[p.id]);
    }
    std::pair<int, int> block{ir::kNoLayer, -1};  // decoder layer and phase of the last group
    for (uint32_t i = 0; i < g_.num_ops(); ++i) {
      // A reshard serves every op of one block and phase (q, k and v read one gather of the
      // norm's output, wi_0 and wi_1 one of theirs, wo's two gradients one of dy), as XLA's CSE
      // merges the SPMD partitioner's identical collectives. The cache starts afresh with each
      // decoder layer and phase, so a forward gather is never kept alive into the backward pass.
      const Op& op = g_.op(i);
      group_ = reshard_group(op);
      std::pair<int, int> here{op.facts.layer,
                               group_ == 0 ? -1 : static_cast<int>(op.facts.phase)};
      if (group_ == 0 || here != block) cache_.clear();
      block = here;
      // Collectives and reshards made for op i take its scope and facts (phase, layer, region:
      // memory categories, listings).
      b_->set_scope(g_.scope(op));
      b_->set_facts(op.facts);
      PRECAST_RETURN_IF_ERROR(partition(i));
      if (!builder.ok()) {
        return internal_error(fmt::format("spmd partitioning of op {} ({}) of @{}: {}", i,
                                          ir::op_name(g_.op(i).kind), g_.name(),
                                          builder.status().error().message()));
      }
    }
    std::vector<Value> results;
    group_ = 0;
    for (Value r : g_.results()) {
      cache_.clear();
      results.push_back(reshard(r, target_[r.id]));
      out.result_specs.push_back(target_[r.id]);
    }
    PRECAST_RETURN_IF_ERROR(rewriter.finish("spmd-partition", std::span<const Value>(results)));
    if (!routings_.empty()) erase_unused_combines();
    out.local_values = local_;
    out.local_specs = actual_;
    for (const Op& op : f_->ops()) {
      switch (op.kind) {
        case OpKind::kAllGather: ++out.stats.all_gathers; break;
        case OpKind::kAllReduce: ++out.stats.all_reduces; break;
        case OpKind::kReduceScatter: ++out.stats.reduce_scatters; break;
        case OpKind::kAllToAll: ++out.stats.all_to_alls; break;
        case OpKind::kShardSlice: ++out.stats.shard_slices; break;
        case OpKind::kCollectivePermute: ++out.stats.collective_permutes; break;
        case OpKind::kRaggedAllToAll: ++out.stats.ragged_all_to_alls; break;
        default: break;
      }
    }
    return Status::success();
  }

 private:
  // The analysis's sharding without size-1 axes, and without the axes of a dimension they do
  // not divide.
  ShardingSpec effective(Value v) const {
    const ShardingSpec& given = analysis_.spec(v.id);
    const TensorType& type = g_.type(v);
    ShardingSpec s = replicated_spec(static_cast<size_t>(type.rank()));
    for (size_t d = 0; d < s.dims.size() && d < given.dims.size(); ++d) {
      Axes kept;
      for (const std::string& a : given.dims[d]) {
        if (mesh_.axis_size(a) > 1) kept.push_back(a);
      }
      if (type.dims[d] % shard_count(kept, mesh_) == 0) s.dims[d] = std::move(kept);
    }
    return s;
  }

  int64_t shards(const ShardingSpec& s) const {
    int64_t n = 1;
    for (const Axes& a : s.dims) n *= shard_count(a, mesh_);
    return n;
  }

  // Every dimension of `more` starts with the axes `less` has there.
  static bool extends(const ShardingSpec& more, const ShardingSpec& less) {
    for (size_t d = 0; d < less.dims.size(); ++d) {
      if (common_prefix(more.dims[d], less.dims[d]).size() != less.dims[d].size()) return false;
    }
    return true;
  }

  bool divides(Value v, const ShardingSpec& s) const {
    const TensorType& type = g_.type(v);
    for (size_t d = 0; d < s.dims.size(); ++d) {
      if (type.dims[d] % shard_count(s.dims[d], mesh_) != 0) return false;
    }
    return true;
  }

  TensorType local_type(Value global, const ShardingSpec& s) const {
    TensorType type = g_.type(global);
    for (size_t d = 0; d < s.dims.size(); ++d) type.dims[d] /= shard_count(s.dims[d], mesh_);
    return type;
  }

  void copy_annotations(Value from, Value to) {
    ir::Context& context = f_->context();
    std::vector<ir::StringId> axes;
    for (ir::StringId s : g_.axes(from)) axes.push_back(context.intern_string(g_.context().string(s)));
    f_->set_axes(to, context.intern_axes(axes));
    f_->set_value_name(to, context.intern_string(g_.value_name(from)));
  }

  Builder::DeviceGroup group(const Axes& axes) const {
    return Builder::DeviceGroup{axes, shard_count(axes, mesh_), spans_dcn(axes, mesh_)};
  }

  // Drops the reshards of v made from a local value it no longer has.
  void forget(Value v) {
    cache_.erase(cache_.lower_bound({v.id, std::string()}),
                 cache_.lower_bound({v.id + 1, std::string()}));
  }

  // The local value of global v laid out as `want`: gathers what `want` drops, slices what it
  // adds, and moves an axis between dimensions with one all_to_all.
  Value reshard(Value v, const ShardingSpec& want) {
    const ShardingSpec& have = actual_[v.id];
    if (have.dims == want.dims) return local_[v.id];
    std::pair<uint32_t, std::string> key{v.id, fmt::format("{}@{}", want.to_string(), group_)};
    auto cached = cache_.find(key);
    if (cached != cache_.end()) return cached->second;
    size_t rank = want.dims.size();
    std::vector<Axes> gather(rank), slice(rank);
    for (size_t d = 0; d < rank; ++d) {
      size_t keep = common_prefix(have.dims[d], want.dims[d]).size();
      gather[d].assign(have.dims[d].begin() + static_cast<std::ptrdiff_t>(keep), have.dims[d].end());
      slice[d].assign(want.dims[d].begin() + static_cast<std::ptrdiff_t>(keep), want.dims[d].end());
    }
    Value x = local_[v.id];
    for (size_t i = 0; i < rank; ++i) {
      if (gather[i].empty()) continue;
      for (size_t j = 0; j < rank; ++j) {
        // Only onto a dimension that keeps its present axes: the pieces arrive as its minor part.
        if (j == i || slice[j] != gather[i] || !gather[j].empty()) continue;
        x = b_->all_to_all(x, static_cast<int64_t>(j), static_cast<int64_t>(i), group(gather[i]));
        gather[i].clear();
        slice[j].clear();
        break;
      }
    }
    for (size_t d = 0; d < rank; ++d) {
      if (!gather[d].empty()) x = b_->all_gather(x, static_cast<int64_t>(d), group(gather[d]));
    }
    for (size_t d = 0; d < rank; ++d) {
      if (!slice[d].empty()) x = b_->shard_slice(x, static_cast<int64_t>(d), group(slice[d]));
    }
    cache_.emplace(key, x);
    return x;
  }

  // Emits op i on local operands with results laid out as `out`; each result then takes its
  // target sharding unless `settle` is false.
  std::vector<Value> emit(uint32_t i, std::span<const Value> operands,
                          const std::vector<ShardingSpec>& out, const AttrSet& attrs,
                          bool settle = true) {
    const Op& op = g_.op(i);
    std::vector<TensorType> declared;
    for (uint32_t r = 0; r < op.num_results; ++r) {
      declared.push_back(local_type(g_.result(op, r), out[r]));
    }
    std::vector<Value> results = b_->clone(g_, i, operands, declared, attrs);
    for (uint32_t r = 0; r < op.num_results && r < results.size(); ++r) {
      Value global = g_.result(op, r);
      local_[global.id] = results[r];
      actual_[global.id] = out[r];
      if (settle && results[r].valid()) {
        forget(global);
        Value settled = reshard(global, target_[global.id]);
        if (settled.id != results[r].id) {
          local_[global.id] = settled;
          actual_[global.id] = target_[global.id];
        }
      }
    }
    return results;
  }

  std::vector<Value> locals(uint32_t i, const std::vector<ShardingSpec>& want) {
    std::vector<Value> out;
    std::span<const Value> operands = g_.operands(g_.op(i));
    for (size_t k = 0; k < operands.size(); ++k) out.push_back(reshard(operands[k], want[k]));
    return out;
  }

  // Every operand whole, the op computed whole, its results then sliced to their targets.
  Status replicated_op(uint32_t i) {
    const Op& op = g_.op(i);
    std::vector<ShardingSpec> want, out;
    for (Value v : g_.operands(op)) want.push_back(replicated_spec(g_.type(v).dims.size()));
    for (uint32_t r = 0; r < op.num_results; ++r) {
      out.push_back(replicated_spec(g_.type(g_.result(op, r)).dims.size()));
    }
    emit(i, locals(i, want), out, g_.attrs(op));
    return Status::success();
  }

  Status partition(uint32_t i) {
    const Op& op = g_.op(i);
    Value result = g_.result(op);
    const ShardingSpec& target = target_[result.id];
    std::span<const Value> x = g_.operands(op);
    if (ir::is_elementwise(op.kind)) {
      if (dispatched_elementwise(i)) return Status::success();
      // As XLA's propagation: an operand sharded further than the target (a broadcast that took
      // its layout from another user after this op was analysed) keeps the op sharded; users
      // needing less gather later.
      ShardingSpec out = target;
      for (Value v : x) {
        const ShardingSpec& have = actual_[v.id];
        if (g_.type(v).dims != g_.type(result).dims || shards(have) <= shards(out)) continue;
        if (extends(have, target)) out = have;
      }
      // A value generated from iotas, constants and broadcasts (the loss's one-hot mask of the
      // targets over the vocabulary) is computed in the layout its users all want when that is
      // further sharded: each device generates its own piece instead of the whole mask.
      if (generated(result)) {
        std::optional<ShardingSpec> users = common_user_layout(result, 4);
        if (users && shards(*users) > shards(out) && extends(*users, out) && divides(result, *users)) {
          out = *users;
        }
      }
      std::vector<ShardingSpec> want(x.size(), out);
      emit(i, locals(i, want), {out}, g_.attrs(op), out.dims == target.dims);
      return Status::success();
    }
    switch (op.kind) {
      case OpKind::kConstant: {
        if (g_.attrs(op).reals(AttrKey::kValue).size() == 1) {
          emit(i, {}, {target}, g_.attrs(op));
          return Status::success();
        }
        return replicated_op(i);
      }
      case OpKind::kIota: {
        size_t d = static_cast<size_t>(g_.attrs(op).integer(AttrKey::kDimension));
        if (target.dims[d].empty()) {
          emit(i, {}, {target}, g_.attrs(op));
          return Status::success();
        }
        return replicated_op(i);
      }
      case OpKind::kBroadcastInDim: {
        std::span<const int64_t> dims = g_.attrs(op).ints(AttrKey::kDims);
        ShardingSpec want = replicated_spec(g_.type(x[0]).dims.size());
        for (size_t k = 0; k < dims.size(); ++k) {
          size_t r = static_cast<size_t>(dims[k]);
          if (g_.type(x[0]).dims[k] == g_.type(result).dims[r]) want.dims[k] = target.dims[r];
        }
        emit(i, locals(i, {want}), {target}, g_.attrs(op));
        return Status::success();
      }
      case OpKind::kTranspose: {
        std::span<const int64_t> perm = g_.attrs(op).ints(AttrKey::kPermutation);
        // As for elementwise ops: an operand sharded further than the target (a weight gradient
        // reduce-scattered on its way through a transpose) keeps its pieces, transposed, rather
        // than being gathered here and sliced again by the next op.
        const ShardingSpec& have = actual_[x[0].id];
        ShardingSpec moved = replicated_spec(perm.size());
        for (size_t k = 0; k < perm.size(); ++k) moved.dims[k] = have.dims[static_cast<size_t>(perm[k])];
        ShardingSpec out = shards(moved) > shards(target) && extends(moved, target) ? moved : target;
        // A weight gradient computed in its weight's layout (dot) keeps it through the transpose
        // and convert that lead there, whatever layout the analysis gave the steps between.
        if (out.dims != moved.dims) {
          std::optional<ShardingSpec> successor = successor_layout(result);
          if (successor && successor->dims == moved.dims) out = moved;
        }
        ShardingSpec want = replicated_spec(perm.size());
        for (size_t k = 0; k < perm.size(); ++k) want.dims[static_cast<size_t>(perm[k])] = out.dims[k];
        emit(i, locals(i, {want}), {out}, g_.attrs(op), out.dims == target.dims);
        return Status::success();
      }
      case OpKind::kReshape:
        return reshape(i);
      case OpKind::kReduceSum:
      case OpKind::kReduceMax:
      case OpKind::kReduceMin:
        return reduce(i);
      case OpKind::kDotGeneral:
        return dot(i);
      case OpKind::kTake:
        return take(i);
      case OpKind::kScatterAdd:
        return scatter_add(i);
      case OpKind::kTopK:
        return top_k(i);
      case OpKind::kGroupedDot:
        return grouped_dot(i);
      case OpKind::kGroupedDotWeightGrad:
        return grouped_dot_weight_grad(i);
      case OpKind::kSlice:
      case OpKind::kPad:
      case OpKind::kConcatenate:
        return window(i);
      case OpKind::kAttention:
      case OpKind::kAttentionGrad:
        return attention(i);
      default:
        return replicated_op(i);
    }
  }

  // A reshape runs locally when its operand can be laid out so that the result's sharding
  // follows from it (reshape_sharding) with whole local pieces on both sides.
  Status reshape(uint32_t i) {
    const Op& op = g_.op(i);
    Value x = g_.operands(op)[0];
    Value result = g_.result(op);
    const ShardingSpec& target = target_[result.id];
    const std::vector<int64_t>& from = g_.type(x).dims;
    const std::vector<int64_t>& to = g_.type(result).dims;
    // Candidates: the operand's own layout, and the target's axes moved onto the operand's
    // dimensions of the same position in each group.
    std::vector<ShardingSpec> candidates = {actual_[x.id], inverse_reshape(target, from, to)};
    for (const ShardingSpec& want : candidates) {
      if (!divides(x, want)) continue;
      ShardingSpec forward = reshape_sharding(want, from, to, mesh_);
      if (forward.dims != target.dims) continue;
      if (local_type(x, want).num_elements() != local_type(result, target).num_elements()) continue;
      emit(i, locals(i, {want}), {target}, g_.attrs(op));
      return Status::success();
    }
    return replicated_op(i);
  }

  // The operand layout whose reshape_sharding is `target`: each run's major result dimension's
  // axes on its major operand dimension.
  ShardingSpec inverse_reshape(const ShardingSpec& target, const std::vector<int64_t>& from,
                               const std::vector<int64_t>& to) const {
    ShardingSpec want = replicated_spec(from.size());
    for (const ReshapeRun& run : reshape_runs(from, to)) {
      want.dims[run.from_begin] = target.dims[run.to_begin];
    }
    return want;
  }

  // Sums over a sharded dimension reduce locally, then all_reduce the partial sums; max and
  // min gather the dimension first.
  // top_k selects along the last dimension: each device selects in its rows, that dimension whole.
  Status top_k(uint32_t i) {
    const Op& op = g_.op(i);
    ShardingSpec target = target_[g_.result(op).id];
    target.dims.back().clear();
    emit(i, locals(i, {target}), {target}, g_.attrs(op));
    return Status::success();
  }

  // MoE's grouped matmul (sparse_matmul): each device multiplies its own rows (the batch and
  // token dimensions keep their sharding) by the whole expert stack, gathered as a dot gathers an
  // FSDP-sharded weight.
  Status grouped_dot(uint32_t i) {
    const Op& op = g_.op(i);
    std::span<const Value> x = g_.operands(op);
    if (const Routing* r = expert_routing(x[2], actual_[x[1].id].dims[0], g_.type(x[1]).dims[0])) {
      ShardingSpec stack = replicated_spec(3);
      stack.dims[0] = r->axes;
      Value h = b_->grouped_dot(dispatched(x[0], *r), reshard(x[1], stack), r->local_ids);
      dispatched_[g_.result(op).id] = Dispatched{h, x[2].id};
      settle(g_.result(op), combine(h, *r), rows_layout(g_.result(op), *r));
      return Status::success();
    }
    const ShardingSpec& target = target_[g_.result(op).id];
    ShardingSpec rows = replicated_spec(3);
    rows.dims[0] = target.dims[0];
    rows.dims[1] = target.dims[1];
    ShardingSpec ids = replicated_spec(2);
    ids.dims = {target.dims[0], target.dims[1]};
    emit(i, locals(i, {rows, replicated_spec(g_.type(x[1]).dims.size()), ids}), {rows}, g_.attrs(op));
    return Status::success();
  }

  // ---- Expert parallelism of the sparse path (MaxText's ragged_all_to_all) ----
  //
  // A grouped_dot whose expert stack is split over mesh axes that also split its rows runs on
  // each device's own experts: every row goes to the device holding its expert (a
  // ragged_all_to_all into a static buffer [G, C, F], G devices in the expert group, C rows per
  // sender at most), the local grouped matmul runs there on the local stack, and the rows come
  // back with the reverse exchange. Values computed from dispatched rows stay dispatched
  // (elementwise ops, reductions over features): the expert MLP needs one dispatch and one
  // combine, as MaxText's. Every dispatched value also gets its combined (row-layout) value for
  // users outside; those nobody reads are erased after partitioning.

  // The routing of global expert ids `ids` [R, N] onto a stack of `experts` split over `axes`,
  // made on first use; null when the stack is not split or its axes do not split the rows.
  const Routing* expert_routing(Value ids, const Axes& axes, int64_t experts) {
    if (!options_.ragged_expert_dispatch) return nullptr;
    if (axes.empty() || g_.type(ids).rank() != 2) return nullptr;
    const ShardingSpec& rows = actual_[ids.id];
    for (const std::string& a : axes) {
      if (!uses_axis(rows, a)) return nullptr;
    }
    int64_t group_size = shard_count(axes, mesh_);
    if (group_size <= 1 || experts % group_size != 0) return nullptr;
    auto found = routings_.find(ids.id);
    if (found != routings_.end()) return found->second.axes == axes ? &found->second : nullptr;
    Routing r;
    r.ids = ids.id;
    r.axes = axes;
    r.rows = rows;
    r.group_size = group_size;
    int64_t local_experts = experts / group_size;
    Value local = local_[ids.id];
    int64_t local_rows = f_->type(local).num_elements();
    // MaxText's worst-case buffer (get_ragged_buffer_size): a token picks k distinct experts, at
    // most min(k, local experts) of them on one device, so a sender places at most
    // local_rows / k * min(k, local experts) rows at one receiver (all its rows when k is not
    // known: ids not read from a top_k).
    int64_t k = experts_per_row(ids);
    r.capacity = k > 0 && local_rows % k == 0 ? local_rows / k * std::min(k, local_experts)
                                                : local_rows;
    r.capacity = std::max<int64_t>(r.capacity, 1);
    r.dest = b_->div(local, b_->splat(static_cast<double>(local_experts), local));
    // The ids travel shifted by one so that the buffer's zero padding reads as -1, no expert
    // (grouped_dot skips such rows); the local expert is the id's place in the device's range.
    Value sent = b_->ragged_all_to_all(b_->add(local, b_->splat(1, local)), r.dest, r.capacity,
                                       false, group(axes));
    Value global = b_->sub(sent, b_->splat(1, sent));
    Value padding = b_->compare(sent, b_->splat(0, sent), ir::ComparisonDirection::kEq);
    Value place = b_->binary(OpKind::kRem, global,
                             b_->splat(static_cast<double>(local_experts), global));
    r.local_ids = b_->select(padding, b_->splat(-1, sent), place);
    return &routings_.emplace(ids.id, std::move(r)).first->second;
  }

  // num_experts_per_tok of ids that are a top_k's reshaped result; 0 otherwise.
  int64_t experts_per_row(Value ids) const {
    Value v = ids;
    while (!g_.is_param(v)) {
      const Op& op = g_.op(g_.defining_op(v));
      if (op.kind == OpKind::kTopK) return g_.attrs(op).integer(AttrKey::kK);
      if (op.kind != OpKind::kReshape && op.kind != OpKind::kConvert) return 0;
      v = g_.operands(op)[0];
    }
    return 0;
  }

  // The row layout of a [R, N, F...] value: its rows as the routing's ids, features whole.
  ShardingSpec rows_layout(Value v, const Routing& r) const {
    ShardingSpec s = replicated_spec(static_cast<size_t>(g_.type(v).rank()));
    s.dims[0] = r.rows.dims[0];
    s.dims[1] = r.rows.dims[1];
    return s;
  }

  bool row_shaped(Value v, const Routing& r) const {
    const std::vector<int64_t>& dims = g_.type(v).dims;
    const std::vector<int64_t>& ids = g_.type(Value{r.ids}).dims;
    return dims.size() >= 2 && dims[0] == ids[0] && dims[1] == ids[1];
  }

  Value combine(Value dispatched_rows, const Routing& r) {
    return b_->ragged_all_to_all(dispatched_rows, r.dest, r.capacity, true, group(r.axes));
  }

  // Global row-shaped v in r's dispatched layout [G, C, F...]: a broadcast of rows broadcasts
  // the dispatched rows, a splat is made in place, anything else is sent.
  Value dispatched(Value v, const Routing& r) {
    auto found = dispatched_.find(v.id);
    if (found != dispatched_.end() && found->second.routing == r.ids) return found->second.local;
    Value out;
    if (!g_.is_param(v)) {
      ir::OpIndex def = g_.defining_op(v);
      const Op& op = g_.op(def);
      std::vector<int64_t> dims = g_.type(v).dims;
      dims[0] = r.group_size;
      dims[1] = r.capacity;
      ir::TensorType type{g_.type(v).dtype, dims};
      if (op.kind == OpKind::kBroadcastInDim) {
        std::span<const int64_t> map = g_.attrs(op).ints(AttrKey::kDims);
        Value from = g_.operands(op)[0];
        if (map.size() >= 2 && map[0] == 0 && map[1] == 1 && row_shaped(from, r)) {
          out = b_->broadcast_in_dim(dispatched(from, r), dims,
                                     std::vector<int64_t>(map.begin(), map.end()));
        }
      } else if (op.kind == OpKind::kConstant && g_.attrs(op).reals(AttrKey::kValue).size() == 1) {
        out = b_->clone(g_, def, {}, std::vector<ir::TensorType>{type}, g_.attrs(op))[0];
      }
    }
    if (!out.valid()) {
      out = b_->ragged_all_to_all(reshard(v, rows_layout(v, r)), r.dest, r.capacity, false,
                                  group(r.axes));
    }
    dispatched_[v.id] = Dispatched{out, r.ids};
    return out;
  }

  // The routing one of op i's operands is dispatched by, if its operands are all row-shaped.
  const Routing* dispatched_routing(uint32_t i) const {
    const Routing* routing = nullptr;
    for (Value v : g_.operands(g_.op(i))) {
      auto found = dispatched_.find(v.id);
      if (found != dispatched_.end()) routing = &routings_.at(found->second.routing);
    }
    if (!routing) return nullptr;
    for (Value v : g_.operands(g_.op(i))) {
      if (!row_shaped(v, *routing)) return nullptr;
    }
    return routing;
  }

  // An elementwise op of dispatched rows runs on them; its row-layout value is their combine.
  bool dispatched_elementwise(uint32_t i) {
    const Routing* r = dispatched_routing(i);
    if (!r) return false;
    const Op& op = g_.op(i);
    Value result = g_.result(op);
    std::vector<Value> operands;
    for (Value v : g_.operands(op)) operands.push_back(dispatched(v, *r));
    std::vector<int64_t> dims = g_.type(result).dims;
    dims[0] = r->group_size;
    dims[1] = r->capacity;
    Value d = b_->clone(g_, i, operands,
                        std::vector<ir::TensorType>{ir::TensorType{g_.type(result).dtype, dims}},
                        g_.attrs(op))[0];
    dispatched_[result.id] = Dispatched{d, r->ids};
    settle(result, combine(d, *r), rows_layout(result, *r));
    return true;
  }

  // A reduction over the features of dispatched rows (the routing weights' gradient) runs on
  // them, and only its result comes back.
  bool dispatched_reduce(uint32_t i) {
    const Routing* r = dispatched_routing(i);
    const Op& op = g_.op(i);
    if (!r) return false;
    std::span<const int64_t> dims = g_.attrs(op).ints(AttrKey::kDims);
    for (int64_t d : dims) {
      if (d < 2) return false;
    }
    Value result = g_.result(op);
    if (!row_shaped(result, *r)) return false;
    std::vector<int64_t> out = g_.type(result).dims;
    out[0] = r->group_size;
    out[1] = r->capacity;
    Value d = b_->clone(g_, i, std::vector<Value>{dispatched(g_.operands(op)[0], *r)},
                        std::vector<ir::TensorType>{ir::TensorType{g_.type(result).dtype, out}},
                        g_.attrs(op))[0];
    dispatched_[result.id] = Dispatched{d, r->ids};
    settle(result, combine(d, *r), rows_layout(result, *r));
    return true;
  }

  // Erases the ops no result reaches (the combines and dispatches of values nobody read back)
  // and renumbers local_ as Function::erase_ops does.
  void erase_unused_combines() {
    Function& f = *f_;
    std::vector<bool> dead = ir::find_dead_ops(f);
    std::vector<Value> renumber(f.num_values());
    uint32_t next = 0;
    for (Value p : f.params()) renumber[p.id] = Value{next++};
    for (ir::OpIndex i = 0; i < f.num_ops(); ++i) {
      if (dead[i]) continue;
      for (uint32_t r = 0; r < f.op(i).num_results; ++r) renumber[f.result(f.op(i), r).id] = Value{next++};
    }
    f.erase_ops(dead);
    for (Value& v : local_) {
      if (v.valid()) v = renumber[v.id];
    }
  }

  // Its weight gradient: each device sums its own rows' products, then the partial sums are
  // reduce-scattered onto the dimensions where the gradient is sharded on those axes (FSDP's
  // expert weights) and all-reduced over the rest.
  Status grouped_dot_weight_grad(uint32_t i) {
    const Op& op = g_.op(i);
    std::span<const Value> x = g_.operands(op);
    Value result = g_.result(op);
    const ShardingSpec& have = actual_[x[0].id];
    ShardingSpec rows = replicated_spec(3);
    Axes partial;
    for (size_t d = 0; d < 2; ++d) {
      rows.dims[d] = have.dims[d];
      partial.insert(partial.end(), have.dims[d].begin(), have.dims[d].end());
    }
    ShardingSpec ids = replicated_spec(2);
    ids.dims = {rows.dims[0], rows.dims[1]};
    ShardingSpec out = replicated_spec(3);
    std::vector<Value> r;
    // The stack's split: the gradient's own, or (a low-precision gradient converted on its way
    // to the weight's layout) its successor's.
    Axes stack_axes = target_[result.id].dims[0];
    if (std::optional<ShardingSpec> successor = successor_layout(result);
        stack_axes.empty() && successor) {
      stack_axes = successor->dims[0];
    }
    if (const Routing* routing = expert_routing(x[2], stack_axes, g_.type(result).dims[0])) {
      // Each device sums the rows its experts received: its experts' whole gradient over its
      // expert group; the other row axes (data, fsdp) still hold partial sums.
      out.dims[0] = routing->axes;
      partial.clear();
      for (const Axes& axes : actual_[x[2].id].dims) {
        for (const std::string& a : axes) {
          if (std::find(routing->axes.begin(), routing->axes.end(), a) == routing->axes.end()) {
            partial.push_back(a);
          }
        }
      }
      TensorType local = local_type(result, out);
      r.push_back(b_->grouped_dot_weight_grad(dispatched(x[0], *routing), dispatched(x[1], *routing),
                                              routing->local_ids, local.dims[0]));
      local_[result.id] = r[0];
      actual_[result.id] = out;
    } else {
      r = emit(i, locals(i, {rows, rows, ids}), {out}, g_.attrs(op), false);
    }
    if (partial.empty()) {
      settle(result, r[0], out);
      return Status::success();
    }
    ShardingSpec scattered = scatter_layout(result, out, partial, successor_layout(result));
    Value v = r[0];
    ShardingSpec layout = out;
    Axes reduced = partial;
    for (size_t d = 0; d < scattered.dims.size(); ++d) {
      Axes extra;
      for (const std::string& a : scattered.dims[d]) {
        if (std::find(reduced.begin(), reduced.end(), a) == reduced.end()) break;
        extra.push_back(a);
      }
      if (extra.empty() || g_.type(result).dims[d] % shard_count(extra, mesh_) != 0) continue;
      for (const std::string& a : extra) reduced.erase(std::find(reduced.begin(), reduced.end(), a));
      v = b_->reduce_scatter(v, static_cast<int64_t>(d), group(extra));
      layout.dims[d] = extra;
    }
    if (!reduced.empty()) v = b_->all_reduce(v, group(reduced));
    settle(result, v, layout);
    return Status::success();
  }

  Status reduce(uint32_t i) {
    if (dispatched_reduce(i)) return Status::success();
    const Op& op = g_.op(i);
    Value x = g_.operands(op)[0];
    Value result = g_.result(op);
    const ShardingSpec& target = target_[result.id];
    std::span<const int64_t> reduced = g_.attrs(op).ints(AttrKey::kDims);
    ShardingSpec want = replicated_spec(g_.type(x).dims.size());
    Axes partial;
    size_t kept = 0;
    for (size_t d = 0; d < want.dims.size(); ++d) {
      bool is_reduced = std::find(reduced.begin(), reduced.end(), static_cast<int64_t>(d)) !=
                        reduced.end();
      if (!is_reduced) {
        want.dims[d] = target.dims[kept++];
        continue;
      }
      // A sum or a maximum over a sharded dimension: each device reduces its piece, then one
      // all_reduce (sum or max) over those axes.
      if (op.kind != OpKind::kReduceSum && op.kind != OpKind::kReduceMax) continue;
      for (const std::string& a : actual_[x.id].dims[d]) {
        if (uses_axis(target, a)) break;
        want.dims[d].push_back(a);
        partial.push_back(a);
      }
    }
    std::vector<Value> r = emit(i, locals(i, {want}), {target}, g_.attrs(op), false);
    if (!partial.empty()) {
      local_[result.id] = b_->all_reduce(r[0], group(partial), op.kind == OpKind::kReduceMax);
    }
    return Status::success();
  }

  Status dot(uint32_t i) {
    const Op& op = g_.op(i);
    std::span<const Value> x = g_.operands(op);
    Value result = g_.result(op);
    // A dot whose result only flows through layout ops (a weight gradient on its way through
    // transpose and convert) is computed in the layout its successor wants, not in the one the
    // analysis inferred from its operands: the weight's own sharding, so it is never moved
    // between axes afterwards.
    std::optional<ShardingSpec> successor = successor_layout(result);
    const ShardingSpec& target =
        successor && divides(result, *successor) ? *successor : target_[result.id];
    const AttrSet& attrs = g_.attrs(op);
    std::span<const int64_t> lb = attrs.ints(AttrKey::kLhsBatch), rb = attrs.ints(AttrKey::kRhsBatch);
    std::span<const int64_t> lc = attrs.ints(AttrKey::kLhsContract),
                             rc = attrs.ints(AttrKey::kRhsContract);
    const size_t batch_dims = lb.size();
    // Contracting dimensions sharded alike on both sides (a common leading run of axes the
    // result's batch dimensions do not use) stay sharded: each device sums its part. They take
    // precedence over the result's free dimensions: an axis both wants is dropped from the free
    // dimension, and the partial sums are reduce-scattered onto it afterwards (Megatron's
    // row-parallel matmul: the mlp activation stays split by `tensor` into `mlp/wo`, and the
    // output is reduce-scattered over `tensor` onto the embed dimension, not the activation
    // gathered first).
    auto batch_uses = [&](const std::string& a) {
      for (size_t b = 0; b < batch_dims; ++b) {
        const Axes& axes = target.dims[b];
        if (std::find(axes.begin(), axes.end(), a) != axes.end()) return true;
      }
      return false;
    };
    Axes partial;
    std::vector<Axes> contracted(lc.size());
    for (size_t c = 0; c < lc.size(); ++c) {
      Axes both = common_prefix(actual_[x[0].id].dims[static_cast<size_t>(lc[c])],
                                actual_[x[1].id].dims[static_cast<size_t>(rc[c])]);
      for (const std::string& a : both) {
        if (batch_uses(a) || std::find(partial.begin(), partial.end(), a) != partial.end()) break;
        contracted[c].push_back(a);
        partial.push_back(a);
      }
    }
    // The layout the local dot computes: the target less the contracted axes (and whatever
    // follows them in a free dimension).
    ShardingSpec out = target;
    for (size_t d = batch_dims; d < out.dims.size(); ++d) {
      Axes& axes = out.dims[d];
      auto hit = std::find_if(axes.begin(), axes.end(), [&](const std::string& a) {
        return std::find(partial.begin(), partial.end(), a) != partial.end();
      });
      axes.erase(hit, axes.end());
    }
    ShardingSpec wl = replicated_spec(g_.type(x[0]).dims.size());
    ShardingSpec wr = replicated_spec(g_.type(x[1]).dims.size());
    size_t k = 0;
    for (size_t b = 0; b < batch_dims; ++b, ++k) {
      wl.dims[static_cast<size_t>(lb[b])] = out.dims[k];
      wr.dims[static_cast<size_t>(rb[b])] = out.dims[k];
    }
    auto is_free = [](int64_t d, std::span<const int64_t> batch, std::span<const int64_t> contract) {
      return std::find(batch.begin(), batch.end(), d) == batch.end() &&
             std::find(contract.begin(), contract.end(), d) == contract.end();
    };
    for (int64_t d = 0; d < g_.type(x[0]).rank(); ++d) {
      if (is_free(d, lb, lc)) wl.dims[static_cast<size_t>(d)] = out.dims[k++];
    }
    for (int64_t d = 0; d < g_.type(x[1]).rank(); ++d) {
      if (is_free(d, rb, rc)) wr.dims[static_cast<size_t>(d)] = out.dims[k++];
    }
    for (size_t c = 0; c < lc.size(); ++c) {
      wl.dims[static_cast<size_t>(lc[c])] = contracted[c];
      wr.dims[static_cast<size_t>(rc[c])] = contracted[c];
    }
    // Not settled onto the analysis's layout: users reshard from the one chosen here.
    std::vector<Value> r = emit(i, locals(i, {wl, wr}), {out}, attrs, false);
    if (partial.empty()) return Status::success();
    // Partial sums: scattered over the dimensions where the value they become is sharded on
    // the same axes (the target's, or further on, FSDP's weight gradients), all-reduced over the
    // rest.
    ShardingSpec scattered = scatter_layout(result, target, partial, successor);
    Value v = r[0];
    ShardingSpec layout = out;
    Axes reduced = partial;
    for (size_t d = 0; d < scattered.dims.size(); ++d) {
      Axes extra;
      for (size_t e = out.dims[d].size(); e < scattered.dims[d].size(); ++e) {
        const std::string& a = scattered.dims[d][e];
        if (std::find(reduced.begin(), reduced.end(), a) == reduced.end()) break;
        extra.push_back(a);
        reduced.erase(std::find(reduced.begin(), reduced.end(), a));
      }
      if (extra.empty()) continue;
      v = b_->reduce_scatter(v, static_cast<int64_t>(d), group(extra));
      layout.dims[d].insert(layout.dims[d].end(), extra.begin(), extra.end());
    }
    if (!reduced.empty()) v = b_->all_reduce(v, group(reduced));
    local_[result.id] = v;
    actual_[result.id] = layout;
    forget(result);
    if (!extends(layout, target)) settle(result, v, layout);
    return Status::success();
  }

  // The run of ops whose reshards are shared: the op's block (the module instance the
  // frontend made it in: query, key and value of "decoder/layers_3/self_attention") and its
  // phase (forward, remat's recomputation, backward); backward and recomputed ops carry their
  // forward op's block. 0: the op is in no block and shares nothing.
  static uint32_t reshard_group(const Op& op) {
    if (op.facts.block == 0) return 0;
    return uint32_t{op.facts.block} << 8 | (static_cast<uint32_t>(op.facts.phase) + 1);
  }

  // True when v is computed from nothing but iotas, constants and broadcasts through
  // elementwise ops: any piece of it can be generated where it is needed. Operands come before
  // their users, so one pass in op order decides every value (generated_).
  bool generated(Value v) const { return generated_[v.id]; }

  void find_generated() {
    generated_.assign(g_.num_values(), false);
    for (const Op& op : g_.ops()) {
      if (op.num_results != 1) continue;
      bool is = op.kind == OpKind::kIota || op.kind == OpKind::kConstant ||
                op.kind == OpKind::kBroadcastInDim;
      if (!is && ir::is_elementwise(op.kind)) {
        std::span<const Value> x = g_.operands(op);
        is = std::all_of(x.begin(), x.end(), [&](Value u) { return generated_[u.id]; });
      }
      generated_[g_.result(op).id] = is;
    }
  }

  // The one layout every user of v reads it in, when all of them are elementwise ops of v's
  // shape that agree: a user's target, or the further sharded layout that user's own users
  // agree on (up to `depth` levels: the one-hot mask's backward select feeds the vocab-sharded
  // logits gradient; a projection's data gradient is added to the other branches' before the
  // embed-sharded norm gradient reads it).
  std::optional<ShardingSpec> common_user_layout(Value v, int depth) const {
    std::optional<ShardingSpec> common;
    for (uint32_t u : users_[v.id]) {
      const Op& user = g_.op(u);
      Value r = g_.result(user);
      if (!ir::is_elementwise(user.kind) || g_.type(r).dims != g_.type(v).dims) return std::nullopt;
      std::optional<ShardingSpec> wanted = target_[r.id];
      if (depth > 0) {
        std::optional<ShardingSpec> further = common_user_layout(r, depth - 1);
        if (further && shards(*further) > shards(*wanted) && extends(*further, *wanted)) {
          wanted = further;
        }
      }
      if (common && common->dims != wanted->dims) return std::nullopt;
      common = wanted;
    }
    return common;
  }

  // The most sharded layout extending `base` that an elementwise user of v's shape wants, or
  // through such users, their own users (up to `depth` levels): where partial sums are better
  // reduce-scattered than all-reduced. A user wanting less gathers again, which costs what the
  // all_reduce would have.
  std::optional<ShardingSpec> most_sharded_user_layout(Value v, const ShardingSpec& base,
                                                       int depth) const {
    std::optional<ShardingSpec> best;
    for (uint32_t u : users_[v.id]) {
      const Op& user = g_.op(u);
      Value r = g_.result(user);
      if (!ir::is_elementwise(user.kind) || g_.type(r).dims != g_.type(v).dims) continue;
      std::optional<ShardingSpec> wanted = target_[r.id];
      if (depth > 0) {
        std::optional<ShardingSpec> further = most_sharded_user_layout(r, base, depth - 1);
        if (further && shards(*further) > shards(*wanted)) wanted = further;
      }
      if (!extends(*wanted, base)) continue;
      if (!best || shards(*wanted) > shards(*best)) best = wanted;
    }
    return best;
  }

  // The layout of the value `result` becomes through its only users when they are layout ops
  // (transpose, convert, reshape; up to four), mapped back onto `result`'s dimensions; none when
  // its user is not one.
  std::optional<ShardingSpec> successor_layout(Value result) const {
    std::vector<uint32_t> chain;
    Value v = result;
    for (int step = 0; step < 4 && users_[v.id].size() == 1; ++step) {
      const Op& user = g_.op(users_[v.id][0]);
      if (user.kind != OpKind::kTranspose && user.kind != OpKind::kConvert &&
          user.kind != OpKind::kReshape) {
        break;
      }
      chain.push_back(users_[v.id][0]);
      v = g_.result(user);
    }
    if (chain.empty()) return std::nullopt;
    ShardingSpec s = target_[v.id];
    for (size_t c = chain.size(); c-- > 0;) {
      const Op& op = g_.op(chain[c]);
      Value operand = g_.operands(op)[0];
      if (op.kind == OpKind::kTranspose) {
        std::span<const int64_t> perm = g_.attrs(op).ints(AttrKey::kPermutation);
        ShardingSpec back = replicated_spec(perm.size());
        for (size_t k = 0; k < perm.size(); ++k) back.dims[static_cast<size_t>(perm[k])] = s.dims[k];
        s = back;
      } else if (op.kind == OpKind::kReshape) {
        s = inverse_reshape(s, g_.type(operand).dims, g_.type(g_.result(op)).dims);
      }
    }
    return s;
  }

  // The dot result's layout with the partial axes that its successor through layout ops
  // (transpose, convert, reshape; `successor`, successor_layout(result)), or else the
  // elementwise users it feeds (a data gradient added to the other branch's, in the
  // embed-sharded layout), shard appended to the matching dimensions: a reduce_scatter there
  // instead of an all_reduce and a slice.
  ShardingSpec scatter_layout(Value result, const ShardingSpec& target, const Axes& partial,
                              std::optional<ShardingSpec> successor) {
    if (!successor) successor = most_sharded_user_layout(result, target, 3);
    if (!successor) return target;
    const ShardingSpec& s = *successor;
    ShardingSpec out = target;
    for (size_t d = 0; d < out.dims.size() && d < s.dims.size(); ++d) {
      // Only axes that extend this dimension's layout, in the successor's order.
      if (common_prefix(s.dims[d], target.dims[d]).size() != target.dims[d].size()) continue;
      for (size_t k = target.dims[d].size(); k < s.dims[d].size(); ++k) {
        const std::string& a = s.dims[d][k];
        if (std::find(partial.begin(), partial.end(), a) == partial.end()) break;
        out.dims[d].push_back(a);
      }
    }
    return divides(result, out) ? out : target;
  }

  Status take(uint32_t i) {
    const Op& op = g_.op(i);
    std::span<const Value> x = g_.operands(op);
    const ShardingSpec& target = target_[g_.result(op).id];
    size_t axis = static_cast<size_t>(g_.attrs(op).integer(AttrKey::kAxis));
    size_t ids_rank = g_.type(x[1]).dims.size();
    ShardingSpec table = replicated_spec(g_.type(x[0]).dims.size());
    ShardingSpec ids = replicated_spec(ids_rank);
    for (size_t d = 0; d < table.dims.size(); ++d) {
      if (d < axis) table.dims[d] = target.dims[d];
      if (d > axis) table.dims[d] = target.dims[d - 1 + ids_rank];
    }
    for (size_t k = 0; k < ids_rank; ++k) ids.dims[k] = target.dims[axis + k];
    emit(i, locals(i, {table, ids}), {target}, g_.attrs(op));
    return Status::success();
  }

  // Each device adds its own updates into zeros; the sums over the devices that hold different
  // updates are reduce-scattered where the value's successor or users are split over those
  // devices, all-reduced otherwise, then added to the target.
  Status scatter_add(uint32_t i) {
    const Op& op = g_.op(i);
    std::span<const Value> x = g_.operands(op);
    Value result = g_.result(op);
    size_t axis = static_cast<size_t>(g_.attrs(op).integer(AttrKey::kAxis));
    ShardingSpec out = target_[result.id];
    out.dims[axis].clear();
    size_t ids_rank = g_.type(x[1]).dims.size();
    ShardingSpec ids = replicated_spec(ids_rank);
    Axes partial;
    for (size_t k = 0; k < ids_rank; ++k) {
      for (const std::string& a : actual_[x[1].id].dims[k]) {
        if (uses_axis(out, a)) break;
        ids.dims[k].push_back(a);
        partial.push_back(a);
      }
    }
    ShardingSpec updates = replicated_spec(g_.type(x[2]).dims.size());
    for (size_t d = 0; d < updates.dims.size(); ++d) {
      if (d < axis) updates.dims[d] = out.dims[d];
      else if (d < axis + ids_rank) updates.dims[d] = ids.dims[d - axis];
      else updates.dims[d] = out.dims[d + 1 - ids_rank];
    }
    if (partial.empty()) {
      emit(i, locals(i, {out, ids, updates}), {out}, g_.attrs(op));
      return Status::success();
    }
    std::vector<Value> operands = locals(i, {out, ids, updates});
    operands[0] = b_->splat(0.0, operands[0]);
    std::vector<Value> r = emit(i, operands, {out}, g_.attrs(op), false);
    // The partial sums are reduce-scattered onto the dimensions where the value they become
    // through layout ops, or else their elementwise users, are sharded on those axes (the
    // embedding's gradient on its way to ZeRO-1's moment layout), all-reduced over the rest.
    Value sum = r[0];
    ShardingSpec layout = out;
    Axes reduced = partial;
    std::optional<ShardingSpec> successor = successor_layout(result);
    if (!successor) successor = most_sharded_user_layout(result, out, 3);
    if (successor && divides(result, *successor)) {
      for (size_t d = 0; d < layout.dims.size(); ++d) {
        if (common_prefix(successor->dims[d], out.dims[d]).size() != out.dims[d].size()) continue;
        Axes extra;
        for (size_t e = out.dims[d].size(); e < successor->dims[d].size(); ++e) {
          auto hit = std::find(reduced.begin(), reduced.end(), successor->dims[d][e]);
          if (hit == reduced.end()) break;
          extra.push_back(*hit);
          reduced.erase(hit);
        }
        if (extra.empty()) continue;
        sum = b_->reduce_scatter(sum, static_cast<int64_t>(d), group(extra));
        layout.dims[d].insert(layout.dims[d].end(), extra.begin(), extra.end());
      }
    }
    if (!reduced.empty()) sum = b_->all_reduce(sum, group(reduced));
    Value added = b_->add(reshard(x[0], layout), sum);
    if (extends(layout, target_[result.id])) {
      local_[result.id] = added;
      actual_[result.id] = layout;
      forget(result);
    } else {
      settle(result, added, layout);
    }
    return Status::success();
  }

  // slice, pad and concatenate: the dimensions they cut, pad or join are whole; the others keep
  // their sharding (slice's limits become the local sizes there).
  Status window(uint32_t i) {
    const Op& op = g_.op(i);
    Value result = g_.result(op);
    const AttrSet& attrs = g_.attrs(op);
    ShardingSpec out = target_[result.id];
    const TensorType& in = g_.type(g_.operands(op)[0]);
    for (size_t d = 0; d < out.dims.size(); ++d) {
      bool touched = false;
      if (op.kind == OpKind::kSlice) {
        std::span<const int64_t> stride = attrs.ints(AttrKey::kStride);
        touched = attrs.ints(AttrKey::kStart)[d] != 0 || attrs.ints(AttrKey::kLimit)[d] != in.dims[d] ||
                  (!stride.empty() && stride[d] != 1);
      } else if (op.kind == OpKind::kPad) {
        std::span<const int64_t> interior = attrs.ints(AttrKey::kInterior);
        touched = attrs.ints(AttrKey::kLow)[d] != 0 || attrs.ints(AttrKey::kHigh)[d] != 0 ||
                  (!interior.empty() && interior[d] != 0);
      } else {
        touched = static_cast<int64_t>(d) == attrs.integer(AttrKey::kDimension);
      }
      if (touched) out.dims[d].clear();
    }
    std::vector<ShardingSpec> want;
    for (Value v : g_.operands(op)) {
      want.push_back(g_.type(v).dims.size() == out.dims.size() ? out : replicated_spec(g_.type(v).dims.size()));
    }
    AttrSet local = attrs;
    if (op.kind == OpKind::kSlice) {
      std::vector<int64_t> limit(attrs.ints(AttrKey::kLimit).begin(), attrs.ints(AttrKey::kLimit).end());
      for (size_t d = 0; d < limit.size(); ++d) limit[d] /= shard_count(out.dims[d], mesh_);
      local.set_ints(AttrKey::kLimit, limit);
    }
    emit(i, locals(i, want), {out}, local);
    return Status::success();
  }

  // attention and attention_grad run per batch shard and per head shard, with whole sequences,
  // or, when the sequence is sharded over the context axis, with the local queries against the
  // whole gathered keys and values (context_parallel_strategy=all_gather: gathered_kv_attention)
  // or against key chunks that meet around the context ring (ring: ring_attention).
  // kv heads split with the query heads when the head axes divide them; otherwise (fewer kv
  // heads than head shards) each device repeats the kv heads to one per query head and keeps
  // its own, and the kv gradients are gathered back over the head axes and summed per kv head.
  Status attention(uint32_t i) {
    Axes context = context_axes(i);
    if (!context.empty()) {
      return options_.ring_attention ? ring_attention(i, context)
                                     : gathered_kv_attention(i, context);
    }
    const Op& op = g_.op(i);
    std::span<const Value> x = g_.operands(op);
    auto [batch, heads, query_heads, kv_heads, repeat] = attention_layout(i);
    ShardingSpec q{{batch, {}, heads, {}}};
    ShardingSpec k{{batch, {}, repeat ? Axes{} : heads, {}}};
    bool grad = op.kind == OpKind::kAttentionGrad;
    std::vector<Value> operands = attention_operands(i, q, k, repeat);
    if (!repeat) {
      emit(i, operands, grad ? std::vector<ShardingSpec>{q, k, k} : std::vector<ShardingSpec>{q},
           g_.attrs(op));
      return Status::success();
    }
    int64_t group_heads = query_heads / kv_heads;
    if (!grad) {
      emit(i, operands, {q}, g_.attrs(op));
      return Status::success();
    }
    std::vector<TensorType> declared = {f_->type(operands[0]), f_->type(operands[1]),
                                        f_->type(operands[2])};
    std::vector<Value> r = b_->clone(g_, i, operands, declared, g_.attrs(op));
    for (uint32_t n = 0; n < 3 && n < r.size(); ++n) {
      Value v = r[n];
      if (n > 0 && v.valid()) v = sum_repeated_kv(v, kv_heads, group_heads, heads);
      settle(g_.result(op, n), v, n == 0 ? q : k);
    }
    return Status::success();
  }

  // What partitioning attention op i starts from: the batch and head axes of its result's
  // target, its query and kv head counts, and whether the head axes split the query heads
  // further than the kv heads divide (each device then repeats the kv heads it needs).
  struct AttentionLayout {
    Axes batch, heads;
    int64_t query_heads, kv_heads;
    bool repeat;
  };
  AttentionLayout attention_layout(uint32_t i) const {
    const Op& op = g_.op(i);
    std::span<const Value> x = g_.operands(op);
    const ShardingSpec& target = target_[g_.result(op).id];
    AttentionLayout a{target.dims[0], target.dims[2], g_.type(x[0]).dims[2], g_.type(x[1]).dims[2],
                      false};
    a.repeat = a.kv_heads % shard_count(a.heads, mesh_) != 0;
    return a;
  }

  // The local operands of attention (or attention_grad) op i: q (and out, dout) laid out as
  // `q`, k and v as `kv`, the segment ids [B, T] and [B, S] with their sequences laid out as q's
  // and kv's, positions (only in a hand-written per-device module) whole. When the head axes
  // split the query heads further than the kv heads (`repeat`), each device repeats the kv heads
  // to its own query heads.
  std::vector<Value> attention_operands(uint32_t i, const ShardingSpec& q, const ShardingSpec& kv,
                                        bool repeat) {
    const Op& op = g_.op(i);
    bool grad = op.kind == OpKind::kAttentionGrad;
    std::vector<ShardingSpec> want = {q, kv, kv};
    if (grad) want.insert(want.end(), {q, q});
    size_t first = grad ? 5 : 3;
    bool positions = g_.attrs(op).flag(AttrKey::kPositions);
    if (op.num_operands - first == (positions ? 4u : 2u)) {
      want.push_back(ShardingSpec{{q.dims[0], q.dims[1]}});
      want.push_back(ShardingSpec{{kv.dims[0], kv.dims[1]}});
    }
    if (positions) want.insert(want.end(), {replicated_spec(1), replicated_spec(1)});
    std::vector<Value> operands = locals(i, want);
    if (repeat) {
      std::span<const Value> x = g_.operands(op);
      int64_t group_heads = g_.type(x[0]).dims[2] / g_.type(x[1]).dims[2];
      for (size_t n = 1; n <= 2; ++n) operands[n] = repeat_kv(operands[n], group_heads, q.dims[2]);
    }
    return operands;
  }

  // ---- Gathered kv (context_parallel_strategy=all_gather, MaxText's default) ----
  //
  // With the sequence sharded over the context axis (g devices), device p keeps its query rows
  // [p T/g, (p+1) T/g) and gathers the keys and values of the whole sequence (and the kv
  // segment ids), so it computes 1/g of the attention. The causal and window masks compare
  // global positions: the composite gets `positions`, the queries' from an iota sliced per
  // device, the keys' 0..T-1. The gradient's dk and dv are every device's queries' partial sums
  // over the whole sequence: a reduce_scatter over the context axis adds them up and leaves each
  // device its own rows.
  Status gathered_kv_attention(uint32_t i, const Axes& context) {
    const Op& op = g_.op(i);
    std::span<const Value> x = g_.operands(op);
    auto [batch, heads, query_heads, kv_heads, repeat] = attention_layout(i);
    ShardingSpec q{{batch, context, heads, {}}};
    ShardingSpec k_whole{{batch, {}, repeat ? Axes{} : heads, {}}};
    ShardingSpec k_local{{batch, context, repeat ? Axes{} : heads, {}}};
    bool grad = op.kind == OpKind::kAttentionGrad;
    std::vector<Value> operands = attention_operands(i, q, k_whole, repeat);
    int64_t group_heads = query_heads / kv_heads;
    std::string saved_scope(b_->scope());
    b_->set_scope(g_.context().string(op.scope));
    int64_t length = g_.type(x[1]).dims[1];
    Value kv_positions = b_->iota(TensorType{ir::DType::kS32, {length}}, 0);
    operands.push_back(b_->shard_slice(kv_positions, 0, group(context)));
    operands.push_back(kv_positions);
    b_->set_scope(saved_scope);
    AttrSet attrs = g_.attrs(op);
    attrs.set_flag(AttrKey::kPositions, true);
    std::vector<TensorType> declared;
    for (uint32_t r = 0; r < op.num_results; ++r) declared.push_back(f_->type(operands[r]));
    if (!grad) declared[0] = local_type(g_.result(op), q);
    std::vector<Value> r = b_->clone(g_, i, operands, declared, attrs);
    for (uint32_t n = 0; n < op.num_results && n < r.size(); ++n) {
      Value v = r[n];
      if (n > 0 && v.valid()) {
        if (repeat) v = sum_repeated_kv(v, kv_heads, group_heads, heads);
        b_->set_scope(g_.context().string(op.scope));
        v = b_->reduce_scatter(v, 1, group(context));
        b_->set_scope(saved_scope);
      }
      settle(g_.result(op, n), v, n == 0 ? q : k_local);
    }
    return Status::success();
  }

  // kv [B, S, K, D] -> [B, S, K * repeats, D] (head h reads kv head h / repeats), then this
  // device's heads.
  Value repeat_kv(Value kv, int64_t repeats, const Axes& heads) {
    std::vector<int64_t> dims = f_->type(kv).dims;
    Value spread = b_->broadcast_in_dim(kv, {dims[0], dims[1], dims[2], repeats, dims[3]}, {0, 1, 2, 4});
    Value merged = b_->reshape(spread, {dims[0], dims[1], dims[2] * repeats, dims[3]});
    return b_->shard_slice(merged, 2, group(heads));
  }

  // The gradient of repeat_kv: [B, S, H/c, D] -> all heads -> [B, S, K, H/K, D] -> summed per kv
  // head.
  Value sum_repeated_kv(Value grad, int64_t kv_heads, int64_t repeats, const Axes& heads) {
    Value v = b_->all_gather(grad, 2, group(heads));
    std::vector<int64_t> dims = f_->type(v).dims;
    v = b_->reshape(v, {dims[0], dims[1], kv_heads, repeats, dims[3]});
    return b_->reduce_sum(v, {3});
  }

  // Records `local`, laid out as `layout`, as the per-device value of `global`, then reshards it
  // to its target.
  void settle(Value global, Value local, const ShardingSpec& layout) {
    local_[global.id] = local;
    actual_[global.id] = layout;
    forget(global);
    Value settled = reshard(global, target_[global.id]);
    local_[global.id] = settled;
    actual_[global.id] = target_[global.id];
  }

  // ---- Ring attention (context_parallel_strategy=ring) ----
  //
  // With the sequence of attention's result sharded over the context axis (g devices), device p
  // holds query rows and kv rows [p T/g, (p+1) T/g). For g steps it attends its queries to the kv
  // chunk it holds, then passes the chunk to the next device (collective_permute, shift 1: p
  // receives p - 1's chunk), so at step j it holds chunk (p - j) mod g. Each step is one
  // attention_stats composite over that block of keys (flash: the [T/g, T/g] scores are never
  // materialised) with the op's scale, soft cap, masks and GQA grouping, the causal and window
  // masks comparing global positions (`positions`: the queries' from an iota sliced per device,
  // the keys' travelling with the chunk) and the segment mask the chunk's own kv segment ids.
  // The blocks' results combine exactly through their rows' softmax max m_j and sum s_j:
  // m = max_j m_j, s = sum_j s_j exp(m_j - m), out = sum_j (s_j exp(m_j - m) / s) out_j. (A log-
  // sum-exp alone would not do: a fully masked row's m_j is the mask value, -2.4e38, and adding
  // log s_j to it is lost to rounding; kept apart, its blocks still weigh by their sizes.)

  // The context axes attention op i splits its queries over: {context} when the op's result is
  // sequence-sharded with context leading, keys and queries have one length (self-attention)
  // and the op compares the default positions. Empty otherwise: whole sequences.
  Axes context_axes(uint32_t i) const {
    const Op& op = g_.op(i);
    if (g_.attrs(op).flag(AttrKey::kPositions)) return {};
    std::span<const Value> x = g_.operands(op);
    const Axes& sequence = target_[g_.result(op).id].dims[1];
    if (sequence.empty() || sequence[0] != kContextAxis) return {};
    if (g_.type(x[0]).dims[1] != g_.type(x[1]).dims[1]) return {};
    return {std::string(kContextAxis)};
  }

  // One kv chunk and what masking needs of it; the ring passes all of it on.
  struct KvChunk {
    Value k, v;       // [B, Tk, K, D], [B, Tk, K, Dv]
    Value positions;  // s32[Tk], global; invalid without causal or window masks
    Value segments;   // s32[B, Tk]; invalid without segment ids
  };

  // The local queries and what every block needs of them.
  struct RingQueries {
    Value q;          // [B, Tq, H, D]
    Value positions;  // s32[Tq], global; invalid without causal or window masks
    Value segments;   // s32[B, Tq]; invalid without segment ids
  };

  // Passes every part of the chunk to the next device of the ring.
  KvChunk shift(const KvChunk& c, const Builder::DeviceGroup& ring) {
    auto pass = [&](Value v) { return v.valid() ? b_->collective_permute(v, 1, ring) : v; };
    return KvChunk{pass(c.k), pass(c.v), pass(c.positions), pass(c.segments)};
  }

  // The operands of one block's composite after q, k, v (and out, dout): segment ids, then
  // positions.
  void append_block_masks(const RingQueries& rq, const KvChunk& c, std::vector<Value>& operands) {
    if (rq.segments.valid()) operands.insert(operands.end(), {rq.segments, c.segments});
    if (rq.positions.valid()) operands.insert(operands.end(), {rq.positions, c.positions});
  }

  // The op's attributes for one block: `positions` when the masks compare positions.
  AttrSet block_attrs(const RingQueries& rq, const AttrSet& attrs) const {
    AttrSet out = attrs;
    if (rq.positions.valid()) out.set_flag(AttrKey::kPositions, true);
    return out;
  }

  // What the backward needs of the forward ring pass: each block's rows' softmax max and sum, in
  // ring order, and their combination.
  struct RingStatistics {
    std::vector<Value> block_max, block_sum;  // [B, Tq, H] each
    Value max, sum;
  };

  struct RingForward {
    Value out;  // [B, Tq, H, Dv], q's dtype
    RingStatistics statistics;
  };

  // Per-row values [B, Tq, H] spread over the last dimension of `like` [B, Tq, H, Dv].
  Value spread_rows(Value rows, Value like) {
    return b_->broadcast_in_dim(rows, f_->type(like).dims, {0, 1, 2});
  }

  // The forward around the ring: g blocks, g - 1 shifts of the chunk; the running combination
  // (out, max, sum) in the rows' type (f32, or f64 for f64 operands).
  RingForward ring_forward(const RingQueries& rq, KvChunk chunk, const AttrSet& attrs,
                           const Builder::DeviceGroup& ring) {
    AttrSet block = block_attrs(rq, attrs);
    ir::DType q_type = f_->type(rq.q).dtype;
    RingStatistics statistics;
    Value out;
    for (int64_t step = 0; step < ring.size; ++step) {
      if (step > 0) chunk = shift(chunk, ring);
      std::vector<Value> operands = {rq.q, chunk.k, chunk.v};
      append_block_masks(rq, chunk, operands);
      std::vector<Value> r = b_->create(OpKind::kAttentionStats, operands, block);
      if (r.size() != 3) return {};
      Value block_max = r[1], block_sum = r[2];
      ir::DType row_type = f_->type(block_max).dtype;
      Value block_out = q_type == row_type ? r[0] : b_->convert(r[0], row_type);
      statistics.block_max.push_back(block_max);
      statistics.block_sum.push_back(block_sum);
      if (step == 0) {
        out = block_out;
        statistics.max = block_max;
        statistics.sum = block_sum;
        continue;
      }
      Value top = b_->max(statistics.max, block_max);
      Value old_weight = b_->mul(statistics.sum, b_->exp(b_->sub(statistics.max, top)));
      Value new_weight = b_->mul(block_sum, b_->exp(b_->sub(block_max, top)));
      Value total = b_->add(old_weight, new_weight);
      out = b_->div(b_->add(b_->mul(out, spread_rows(old_weight, out)),
                            b_->mul(block_out, spread_rows(new_weight, out))),
                    spread_rows(total, out));
      statistics.max = top;
      statistics.sum = total;
    }
    if (f_->type(out).dtype != q_type) out = b_->convert(out, q_type);
    return RingForward{out, statistics};
  }

  struct RingGradients {
    Value dq, dk, dv;  // [B, Tq, H, D], [B, Tk, K, D], [B, Tk, K, Dv]
  };

  // attention_grad block by block. A block's own softmax weights are the whole row's times
  // c = s_j exp(m_j - m) / s, so the block's gradient is attention_grad of the block with dout
  // scaled by c and the whole `out` (which scales Δ = Σ dout·out by c too): the weights, dp - Δ
  // and dv all come out the whole row's. dq adds up on the device; each chunk's dk and dv
  // accumulators travel with it and, after the g-th shift (one more than the chunk's g - 1),
  // arrive back at the chunk's owner.
  RingGradients ring_backward(const RingQueries& rq, KvChunk chunk, Value out, Value dout,
                              const RingStatistics& statistics, const AttrSet& attrs,
                              const Builder::DeviceGroup& ring) {
    AttrSet block = block_attrs(rq, attrs);
    ir::DType dout_type = f_->type(dout).dtype;
    Value dq, dk, dv;
    for (int64_t step = 0; step < ring.size; ++step) {
      if (step > 0) chunk = shift(chunk, ring);
      size_t j = static_cast<size_t>(step);
      Value share = b_->div(
          b_->mul(statistics.block_sum[j], b_->exp(b_->sub(statistics.block_max[j], statistics.max))),
          statistics.sum);
      if (f_->type(share).dtype != dout_type) share = b_->convert(share, dout_type);
      std::vector<Value> operands = {rq.q, chunk.k, chunk.v, out,
                                     b_->mul(dout, spread_rows(share, dout))};
      append_block_masks(rq, chunk, operands);
      std::vector<Value> r = b_->create(OpKind::kAttentionGrad, operands, block);
      if (r.size() != 3) return {};
      dq = step == 0 ? r[0] : b_->add(dq, r[0]);
      dk = step == 0 ? r[1] : b_->add(dk, r[1]);
      dv = step == 0 ? r[2] : b_->add(dv, r[2]);
      dk = b_->collective_permute(dk, 1, ring);
      dv = b_->collective_permute(dv, 1, ring);
    }
    return RingGradients{dq, dk, dv};
  }

  // Identifies an attention's operands, attributes and local layout, shared by the forward op
  // and its attention_grad.
  std::string ring_key(uint32_t i, const ShardingSpec& q, const ShardingSpec& k) const {
    const Op& op = g_.op(i);
    std::span<const Value> x = g_.operands(op);
    bool grad = op.kind == OpKind::kAttentionGrad;
    std::string key = fmt::format("{} {} {} {} {}", x[0].id, x[1].id, x[2].id, op.attrs,
                                  q.to_string() + k.to_string());
    size_t segments = grad ? 5 : 3;
    if (x.size() > segments) key += fmt::format(" {} {}", x[segments].id, x[segments + 1].id);
    return key;
  }

  Status ring_attention(uint32_t i, const Axes& ring) {
    const Op& op = g_.op(i);
    std::span<const Value> x = g_.operands(op);
    const AttrSet& attrs = g_.attrs(op);
    auto [batch, heads, query_heads, kv_heads, repeat] = attention_layout(i);
    ShardingSpec q{{batch, ring, heads, {}}};
    ShardingSpec k{{batch, ring, repeat ? Axes{} : heads, {}}};
    bool grad = op.kind == OpKind::kAttentionGrad;
    bool has_segments = x.size() == (grad ? 7u : 5u);
    std::vector<Value> operands = attention_operands(i, q, k, repeat);
    int64_t group_heads = query_heads / kv_heads;
    std::string saved_scope(b_->scope());
    b_->set_scope(g_.context().string(op.scope));

    RingQueries rq;
    rq.q = operands[0];
    Builder::DeviceGroup ring_group = group(ring);
    if (attrs.flag(AttrKey::kCausal) || attrs.integer(AttrKey::kSlidingWindow) > 0) {
      int64_t length = g_.type(x[0]).dims[1];
      rq.positions =
          b_->shard_slice(b_->iota(TensorType{ir::DType::kS32, {length}}, 0), 0, ring_group);
    }
    KvChunk chunk{operands[1], operands[2], rq.positions, Value{}};
    if (has_segments) {
      rq.segments = operands[operands.size() - 2];
      chunk.segments = operands[operands.size() - 1];
    }
    std::string key = ring_key(i, q, k);
    if (!grad) {
      RingForward forward = ring_forward(rq, chunk, attrs, ring_group);
      ring_statistics_[key] = forward.statistics;
      Value global = g_.result(op);
      copy_annotations(global, forward.out);
      if (op.checkpoint != 0) {
        b_->with_checkpoint(forward.out, g_.context().string(op.checkpoint));
      }
      b_->set_scope(saved_scope);
      settle(global, forward.out, q);
      return Status::success();
    }
    // The forward's statistics when its attention (or remat's recomputation of it) came first;
    // otherwise a forward ring pass recomputes them.
    auto found = ring_statistics_.find(key);
    RingStatistics statistics = found != ring_statistics_.end()
                                    ? found->second
                                    : ring_forward(rq, chunk, attrs, ring_group).statistics;
    RingGradients r =
        ring_backward(rq, chunk, operands[3], operands[4], statistics, attrs, ring_group);
    std::array<Value, 3> results = {r.dq, r.dk, r.dv};
    for (uint32_t n = 0; n < 3; ++n) {
      Value global = g_.result(op, n);
      copy_annotations(global, results[n]);
      if (n > 0 && repeat) results[n] = sum_repeated_kv(results[n], kv_heads, group_heads, heads);
    }
    b_->set_scope(saved_scope);
    for (uint32_t n = 0; n < 3; ++n) settle(g_.result(op, n), results[n], n == 0 ? q : k);
    return Status::success();
  }

  const Function& g_;
  const ShardingTable& analysis_;
  const Mesh& mesh_;
  const PartitionOptions& options_;
  Function* f_ = nullptr;
  Builder* b_ = nullptr;
  std::vector<Value> local_;
  std::vector<ShardingSpec> actual_;
  std::vector<ShardingSpec> target_;
  std::vector<std::vector<uint32_t>> users_;
  std::vector<bool> generated_;
  // Reshards made in the current decoder layer and phase, by value, layout and block
  // (reshard_group): one gather serves all the uses of a value in one block.
  std::map<std::pair<uint32_t, std::string>, Value> cache_;
  uint32_t group_ = 0;  // reshard_group of the op being partitioned
  // Softmax statistics of each ring attention, by ring_key: attention_grad of the same operands
  // and attributes reuses them.
  std::map<std::string, RingStatistics> ring_statistics_;
  // Expert parallelism of the sparse MoE path: the routings by their global expert ids, and the
  // values computed in a routing's dispatched layout (rows at their experts' devices).
  std::map<uint32_t, Routing> routings_;
  std::unordered_map<uint32_t, Dispatched> dispatched_;
};

}  // namespace

namespace {
Status annotate_shardings(Function& device, const PartitionedModule& out);
}  // namespace

Expected<PartitionedModule> partition_spmd(const ir::Function& function,
                                           const ShardingAnalysis& analysis, const Mesh& mesh,
                                           const PartitionOptions& options) {
  if (analysis.specs.size() != function.num_values()) {
    return internal_error(fmt::format("partition_spmd: the sharding analysis is of another "
                                      "function ({} values, @{} has {})",
                                      analysis.specs.size(), function.name(), function.num_values()));
  }
  PartitionedModule out;
  Function& into = out.module.add_function(function.name());
  ShardingTable table = sharding_table(analysis);
  PRECAST_RETURN_IF_ERROR(Partitioner(function, table, mesh, options).run(into, out));
  PRECAST_RETURN_IF_ERROR(annotate_shardings(into, out));
  return out;
}

namespace {

struct ValueShardings {
  std::vector<ShardingSpec> specs;
  std::vector<bool> known;
};

// The shardings of a per-device function's values: those the partitioner computed global values
// with, then, in op order, what a collective or shard_slice makes of its operand's.
ValueShardings device_shardings(const Function& device, const PartitionedModule& out) {
  ValueShardings d;
  d.specs.resize(device.num_values());
  d.known.assign(device.num_values(), false);
  for (size_t g = 0; g < out.local_values.size(); ++g) {
    Value local = out.local_values[g];
    if (!local.valid() || d.known[local.id]) continue;
    d.specs[local.id] = out.local_specs[g];
    d.known[local.id] = !out.local_specs[g].dims.empty() || device.type(local).dims.empty();
  }
  auto axes_of = [&device](const ir::AttrSet& attrs) {
    std::vector<std::string> axes;
    for (int64_t id : attrs.ints(ir::AttrKey::kMeshAxes)) {
      axes.emplace_back(device.context().string(static_cast<ir::StringId>(id)));
    }
    return axes;
  };
  auto drop = [](std::vector<std::string>& dim, const std::vector<std::string>& axes) {
    std::erase_if(dim, [&](const std::string& a) {
      return std::find(axes.begin(), axes.end(), a) != axes.end();
    });
  };
  for (const Op& op : device.ops()) {
    if (op.num_results != 1 || op.num_operands == 0) continue;
    Value result = device.result(op);
    Value x = device.operands(op)[0];
    if (d.known[result.id] || !d.known[x.id]) continue;
    const ir::AttrSet& attrs = device.attrs(op);
    ShardingSpec spec = d.specs[x.id];
    if (spec.dims.size() != device.type(x).dims.size()) continue;
    std::vector<std::string> axes = axes_of(attrs);
    auto dim = [&](ir::AttrKey key) -> std::vector<std::string>& {
      return spec.dims[static_cast<size_t>(attrs.integer(key))];
    };
    switch (op.kind) {
      case OpKind::kAllGather:
        drop(dim(ir::AttrKey::kDimension), axes);
        break;
      case OpKind::kShardSlice:
      case OpKind::kReduceScatter:
        dim(ir::AttrKey::kDimension).insert(dim(ir::AttrKey::kDimension).end(), axes.begin(),
                                            axes.end());
        break;
      case OpKind::kAllToAll:
        drop(dim(ir::AttrKey::kDimension), axes);
        dim(ir::AttrKey::kSplitDimension)
            .insert(dim(ir::AttrKey::kSplitDimension).end(), axes.begin(), axes.end());
        break;
      case OpKind::kAllReduce:
      case OpKind::kCollectivePermute:
        break;
      default:
        if (!ir::is_elementwise(op.kind) || device.type(x).dims != device.type(result).dims) {
          continue;
        }
    }
    d.specs[result.id] = std::move(spec);
    d.known[result.id] = true;
  }
  return d;
}

// Writes the shardings device_shardings finds onto the per-device function's values.
Status annotate_shardings(Function& device, const PartitionedModule& out) {
  ValueShardings shardings = device_shardings(device, out);
  ir::Builder b(device);
  for (uint32_t id = 0; id < device.num_values(); ++id) {
    if (!shardings.known[id]) continue;
    const ShardingSpec& spec = shardings.specs[id];
    if (static_cast<int64_t>(spec.dims.size()) != device.type(Value{id}).rank()) {
      return internal_error(
          fmt::format("spmd partitioning: value {} of @{} has type {} but "
                      "sharding {}",
                      id, device.name(), ir::to_string(device.type(Value{id})), spec.to_string()));
    }
    b.with_sharding(Value{id}, spec.dims);
  }
  return Status::success();
}

}  // namespace

Expected<PartitionStats> partition_spmd_in_place(ir::Module& module, size_t index,
                                                 std::span<const AxisRule> rules, const Mesh& mesh,
                                                 const PartitionOptions& options) {
  PRECAST_ASSIGN_OR_RETURN(ShardingAnalysis analysis,
                           analyze_sharding(module.function(index), rules, mesh));
  return partition_spmd_in_place(module, index, sharding_table(std::move(analysis)), mesh,
                                 options);
}

Expected<PartitionStats> partition_spmd_in_place(ir::Module& module, size_t index,
                                                 const ShardingTable& analysis, const Mesh& mesh,
                                                 const PartitionOptions& options) {
  Function& global = module.function(index);
  // The global values' annotations (propagate-sharding's) are read already: the per-device
  // values get theirs from the partitioner, not copied from the global ones.
  for (uint32_t id = 0; id < global.num_values(); ++id) global.set_sharding(Value{id}, 0);
  std::unique_ptr<Function> device = module.new_function(global.name());
  PartitionedModule out;
  PRECAST_RETURN_IF_ERROR(Partitioner(global, analysis, mesh, options).run(*device, out));
  PRECAST_RETURN_IF_ERROR(annotate_shardings(*device, out));
  module.replace_function(index, std::move(device));
  return out.stats;
}

ir::InterpreterMesh interpreter_mesh(const Mesh& mesh) {
  return ir::InterpreterMesh{mesh.axes, mesh.shape, mesh.num_slices > 1 ? mesh.dcn : std::vector<int64_t>{}};
}

ir::HostTensor shard_of(const ir::HostTensor& global, const ShardingSpec& spec, const Mesh& mesh,
                        int64_t device) {
  std::vector<int64_t> coords = coordinates(mesh, device);
  const std::vector<int64_t>& dims = global.type.dims;
  size_t rank = dims.size();
  std::vector<int64_t> local(rank), start(rank);
  for (size_t d = 0; d < rank; ++d) {
    int64_t position = 0, count = 1;
    for (const std::string& a : d < spec.dims.size() ? spec.dims[d] : Axes{}) {
      auto it = std::find(mesh.axes.begin(), mesh.axes.end(), a);
      if (it == mesh.axes.end()) continue;
      size_t axis = static_cast<size_t>(it - mesh.axes.begin());
      position = position * mesh.shape[axis] + coords[axis];
      count *= mesh.shape[axis];
    }
    local[d] = dims[d] / count;
    start[d] = position * local[d];
  }
  ir::HostTensor out{TensorType{global.type.dtype, local}, {}};
  int64_t n = out.type.num_elements();
  out.values.reserve(static_cast<size_t>(n));
  std::vector<int64_t> index(rank, 0);
  for (int64_t e = 0; e < n; ++e) {
    int64_t flat = 0;
    for (size_t d = 0; d < rank; ++d) flat = flat * dims[d] + start[d] + index[d];
    out.values.push_back(global.values[static_cast<size_t>(flat)]);
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < local[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

ir::Pass spmd_partition_pass(SpmdPartitionPassOptions options) {
  std::string summary = fmt::format("partition @{} for the mesh {}: per-device shapes, explicit collectives",
                                    options.function, options.mesh.shape_string());
  return ir::Pass("spmd-partition", std::move(summary),
                  [options = std::move(options)](ir::Module& module) -> Expected<bool> {
                    PRECAST_ASSIGN_OR_RETURN(
                        size_t i, ir::function_for_pass(module, "spmd-partition", options.function));
                    if (options.mesh.num_devices <= 1) return false;
                    const Function& global = module.function(i);
                    bool annotated = false;
                    for (Value p : global.params()) annotated |= global.has_sharding(p);
                    // The shardings propagate-sharding wrote; a step without them is analysed
                    // here (precast-opt on a step that never went through the pipeline).
                    ShardingTable table;
                    if (annotated) {
                      PRECAST_ASSIGN_OR_RETURN(table, global_shardings_from_ir(global));
                    } else {
                      PRECAST_ASSIGN_OR_RETURN(
                          ShardingAnalysis analysis,
                          analyze_sharding(global, options.rules, options.mesh));
                      table = sharding_table(std::move(analysis));
                    }
                    PRECAST_RETURN_IF_ERROR(partition_spmd_in_place(module, i, table, options.mesh,
                                                                    options.partition));
                    return true;
                  });
}

}  // namespace precast
