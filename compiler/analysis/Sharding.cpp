#include "compiler/analysis/Sharding.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <unordered_map>

namespace precast {
namespace {

using ir::AttrKey;
using ir::Function;
using ir::Op;
using ir::OpKind;
using ir::Value;

using Axes = std::vector<std::string>;

int64_t product(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// Keeps each mesh axis on the first dimension that has it.
void dedupe(ShardingSpec& spec) {
  // Most specs name each axis once: find a repeat by comparing the few names pairwise, and
  // rebuild only a spec that has one.
  bool repeated = false;
  for (size_t d = 0; d < spec.dims.size() && !repeated; ++d) {
    for (size_t k = 0; k < spec.dims[d].size() && !repeated; ++k) {
      const std::string& a = spec.dims[d][k];
      for (size_t e = d; e < spec.dims.size() && !repeated; ++e) {
        for (size_t j = e == d ? k + 1 : 0; j < spec.dims[e].size(); ++j) {
          if (spec.dims[e][j] == a) {
            repeated = true;
            break;
          }
        }
      }
    }
  }
  if (!repeated) return;
  std::set<std::string> seen;
  for (Axes& axes : spec.dims) {
    Axes kept;
    for (const std::string& a : axes) {
      if (seen.insert(a).second) kept.push_back(a);
    }
    axes = std::move(kept);
  }
}

ShardingSpec replicated(int64_t rank) {
  ShardingSpec spec;
  spec.dims.assign(static_cast<size_t>(rank), {});
  return spec;
}

class Propagation {
 public:
  Propagation(const Function& f, std::span<const AxisRule> rules, const Mesh& mesh,
              const ShardingOptions& options)
      : f_(f), rules_(rules), mesh_(mesh) {
    if (options.shard_optimizer_over_data && mesh.axis_size("data") > 1) {
      over_data_.assign(f.num_values(), false);
      std::span<const Value> params = f.params();
      for (size_t k = 0; k < params.size(); ++k) {
        if (f.param_role(k) == ir::ParamRole::kOptimizerState) over_data_[params[k].id] = true;
      }
      std::span<const Value> results = f.results();
      for (size_t k = 0; k < results.size(); ++k) {
        int32_t p = f.result_alias(k);
        if (p >= 0 && f.param_role(static_cast<size_t>(p)) == ir::ParamRole::kOptimizerState) {
          over_data_[results[k].id] = true;
        }
      }
    }
  }

  Expected<ShardingAnalysis> run() {
    out_.specs.resize(f_.num_values());
    out_.device_bytes.assign(f_.num_values(), 0);
    for (Value p : f_.params())
      PRECAST_RETURN_IF_ERROR(annotate_or(p, replicated(f_.type(p).rank())));
    for (uint32_t i = 0; i < f_.num_ops(); ++i) {
      const Op& op = f_.op(i);
      std::vector<ShardingSpec> inferred = infer(op);
      for (uint32_t r = 0; r < op.num_results; ++r) {
        PRECAST_RETURN_IF_ERROR(annotate_or(f_.result(op, r), std::move(inferred[r])));
      }
    }
    users_.assign(f_.num_values(), {});
    for (uint32_t i = 0; i < f_.num_ops(); ++i) {
      for (Value v : f_.operands(f_.op(i))) users_[v.id].push_back(i);
    }
    // Broadcasts (a norm scale spread over [B, T, E], a mask) take their layout from their
    // users, as XLA's propagation does: the most sharded same-shaped elementwise user.
    for (uint32_t i = static_cast<uint32_t>(f_.num_ops()); i-- > 0;) {
      const Op& op = f_.op(i);
      if (op.kind != OpKind::kBroadcastInDim && op.kind != OpKind::kIota &&
          op.kind != OpKind::kConstant) {
        continue;
      }
      Value v = f_.result(op);
      if (!f_.axes(v).empty()) continue;
      const ShardingSpec* best = &spec(v);
      for (uint32_t u : users_[v.id]) {
        const Op& user = f_.op(u);
        if (!ir::is_elementwise(user.kind) || f_.type(f_.result(user)).dims != f_.type(v).dims) {
          continue;
        }
        if (shards(spec(f_.result(user))) > shards(*best)) best = &spec(f_.result(user));
      }
      if (best != &spec(v)) PRECAST_RETURN_IF_ERROR(annotate_or(v, *best));
    }
    if (!over_data_.empty()) gradients_take_moment_layouts();
    return std::move(out_);
  }

 private:
  const ShardingSpec& spec(Value v) const { return out_.specs[v.id]; }

  // A value with logical axis names takes their resolution (MaxText's sharding constraints);
  // otherwise the inferred spec.
  Status annotate_or(Value v, ShardingSpec inferred) {
    ir::AxesId axes_id = f_.value_info(v).axes;
    ShardingSpec s;
    auto cached = resolved_.find(axes_id);
    if (axes_id != 0 && cached != resolved_.end()) {
      s = cached->second;
    } else if (axes_id != 0 && named(v)) {
      // Interned axis lists: each distinct list is resolved once.
      Expected<ShardingSpec> resolved = resolve_sharding(f_.axis_names(v), rules_, mesh_);
      if (!resolved.ok()) {
        return resolved.error().with_context(
            fmt::format("sharding %{} of @{}", f_.value_name(v), f_.name()));
      }
      s = std::move(*resolved);
      resolved_.emplace(axes_id, s);
    } else {
      s = std::move(inferred);
      s.dims.resize(static_cast<size_t>(f_.type(v).rank()));
      dedupe(s);
    }
    const ir::TensorType& type = f_.type(v);
    if (!over_data_.empty() && over_data_[v.id]) s = zero1_sharding(s, type.dims, mesh_);
    out_.device_bytes[v.id] =
        product(per_device_dims(type.dims, s, mesh_)) * ir::bytes_per_element(type.dtype);
    out_.specs[v.id] = std::move(s);
    return Status::success();
  }

  // ZeRO-1: the values the moments' updates read (the clipped gradient, the gradient, the
  // weight-decay term, the hyperparameters' broadcasts) take the moment's layout, as XLA's
  // propagation carries the optimizer state's sharding back into them: the weight gradient is
  // then reduce-scattered over `data` as well as `fsdp` (SpmdPartition follows its users'
  // layout) instead of all-reduced over `data` and sliced. Walking back from the new moments
  // through elementwise ops of the same shape, a value takes its user's layout when every one of
  // its users is such an op or a reduction (a norm's sum of squares): never a weight (a
  // parameter) or a value the forward or backward pass reads in another way. A reduction's or a
  // scatter_add's result keeps its layout (the norm scales' and the embedding's gradients: the
  // layout of their batch-split operands follows from it) and the partitioner reduce-scatters
  // its partial sums onto the layout of the users marked here.
  void gradients_take_moment_layouts() {
    std::vector<bool> marked = over_data_;
    std::vector<std::vector<uint32_t>> users(f_.num_values());
    for (uint32_t i = 0; i < f_.num_ops(); ++i) {
      for (Value v : f_.operands(f_.op(i))) users[v.id].push_back(i);
    }
    std::vector<bool> is_param(f_.num_values(), false);
    for (Value p : f_.params()) is_param[p.id] = true;
    auto only_elementwise_or_reduced = [&](Value v) {
      return std::all_of(users[v.id].begin(), users[v.id].end(), [&](uint32_t u) {
        const Op& user = f_.op(u);
        if (user.kind == OpKind::kReduceSum || user.kind == OpKind::kReduceMax) return true;
        return ir::is_elementwise(user.kind) && user.num_results == 1 &&
               f_.type(f_.result(user)).dims == f_.type(v).dims;
      });
    };
    std::vector<bool> is_result(f_.num_values(), false);
    for (Value r : f_.results()) is_result[r.id] = true;
    auto mark = [&](Value v, Value like) {
      const ir::TensorType& type = f_.type(v);
      marked[v.id] = true;
      out_.specs[v.id] = out_.specs[like.id];
      out_.device_bytes[v.id] = product(per_device_dims(type.dims, out_.specs[v.id], mesh_)) *
                                ir::bytes_per_element(type.dtype);
    };
    // Back from the moments (their updates' inputs), then forward through the optimizer's
    // elementwise ops that read a marked value (the update and the weight-decay term it is
    // added to, whose own inputs the next sweep back reaches), until nothing changes. The new
    // weights themselves (results) keep their layout: they are all-gathered over `data`.
    for (bool changed = true; changed;) {
      changed = false;
      for (uint32_t i = static_cast<uint32_t>(f_.num_ops()); i-- > 0;) {
        const Op& op = f_.op(i);
        if (!ir::is_elementwise(op.kind) || op.num_results != 1) continue;
        Value r = f_.result(op);
        if (!marked[r.id]) continue;
        for (Value v : f_.operands(op)) {
          if (marked[v.id] || is_param[v.id] || f_.type(v).dims != f_.type(r).dims ||
              !only_elementwise_or_reduced(v)) {
            continue;
          }
          OpKind producer = f_.op(f_.defining_op(v)).kind;
          if (producer == OpKind::kReduceSum || producer == OpKind::kReduceMax ||
              producer == OpKind::kReduceMin || producer == OpKind::kScatterAdd) {
            continue;
          }
          mark(v, r);
          changed = true;
        }
      }
      for (uint32_t i = 0; i < f_.num_ops(); ++i) {
        const Op& op = f_.op(i);
        if (!ir::is_elementwise(op.kind) || op.num_results != 1 ||
            op.facts.region != ir::OpRegion::kOptimizer) {
          continue;
        }
        Value r = f_.result(op);
        if (marked[r.id] || is_result[r.id] || !only_elementwise_or_reduced(r)) continue;
        for (Value v : f_.operands(op)) {
          if (!marked[v.id] || f_.type(v).dims != f_.type(r).dims) continue;
          mark(r, v);
          changed = true;
          break;
        }
      }
    }
  }

  bool named(Value v) const {
    std::vector<std::string_view> names = f_.axis_names(v);
    return std::any_of(names.begin(), names.end(),
                       [](std::string_view n) { return !n.empty() && n != "_"; });
  }

  int64_t shards(const ShardingSpec& s) const {
    int64_t n = 1;
    for (const Axes& a : s.dims) n *= shard_count(a, mesh_);
    return n;
  }

  std::vector<ShardingSpec> infer(const Op& op) {
    std::span<const Value> x = f_.operands(op);
    const ir::AttrSet& attrs = f_.attrs(op);
    Value result = f_.result(op);
    int64_t rank = f_.type(result).rank();
    if (ir::is_elementwise(op.kind)) {
      // The most sharded operand of the result's shape.
      const ShardingSpec* best = nullptr;
      for (Value v : x) {
        if (f_.type(v).dims != f_.type(result).dims) continue;
        if (!best || shards(spec(v)) > shards(*best)) best = &spec(v);
      }
      return {best ? *best : replicated(rank)};
    }
    switch (op.kind) {
      case OpKind::kBroadcastInDim: {
        ShardingSpec s = replicated(rank);
        std::span<const int64_t> dims = attrs.ints(AttrKey::kDims);
        const ir::TensorType& in = f_.type(x[0]);
        for (size_t i = 0; i < dims.size(); ++i) {
          if (in.dims[i] == f_.type(result).dims[static_cast<size_t>(dims[i])]) {
            s.dims[static_cast<size_t>(dims[i])] = spec(x[0]).dims[i];
          }
        }
        return {s};
      }
      case OpKind::kReshape:
        return {reshape_sharding(spec(x[0]), f_.type(x[0]).dims, f_.type(result).dims, mesh_)};
      case OpKind::kTranspose: {
        ShardingSpec s = replicated(rank);
        std::span<const int64_t> perm = attrs.ints(AttrKey::kPermutation);
        for (size_t i = 0; i < perm.size(); ++i)
          s.dims[i] = spec(x[0]).dims[static_cast<size_t>(perm[i])];
        return {s};
      }
      case OpKind::kReduceSum:
      case OpKind::kReduceMax:
      case OpKind::kReduceMin: {
        std::span<const int64_t> reduced = attrs.ints(AttrKey::kDims);
        ShardingSpec s;
        for (int64_t d = 0; d < f_.type(x[0]).rank(); ++d) {
          if (std::find(reduced.begin(), reduced.end(), d) == reduced.end()) {
            s.dims.push_back(spec(x[0]).dims[static_cast<size_t>(d)]);
          }
        }
        return {s};
      }
      case OpKind::kSlice:
      case OpKind::kPad:
      case OpKind::kScatterAdd:
        return {spec(x[0])};
      case OpKind::kConcatenate:
        return {spec(x[0])};
      case OpKind::kTopK: {
        ShardingSpec s = spec(x[0]);
        s.dims.back().clear();  // the selected dimension is whole on every device
        return {s};
      }
      case OpKind::kGroupedDot: {
        // Rows keep the lhs's batch and token sharding; the expert stack is gathered.
        ShardingSpec s = spec(x[0]);
        s.dims.back().clear();
        return {s};
      }
      case OpKind::kTake: {
        int64_t axis = attrs.integer(AttrKey::kAxis);
        const ShardingSpec& table = spec(x[0]);
        ShardingSpec s;
        for (int64_t d = 0; d < axis; ++d) s.dims.push_back(table.dims[static_cast<size_t>(d)]);
        for (const Axes& a : spec(x[1]).dims) s.dims.push_back(a);
        for (size_t d = static_cast<size_t>(axis) + 1; d < table.dims.size(); ++d)
          s.dims.push_back(table.dims[d]);
        return {s};
      }
      case OpKind::kDotGeneral:
        return {dot_result(op)};
      case OpKind::kAttention:
        return {spec(x[0])};
      case OpKind::kAttentionGrad:
        return {spec(x[0]), spec(x[1]), spec(x[2])};
      case OpKind::kAttentionStats: {
        ShardingSpec rows = spec(x[0]);
        rows.dims.pop_back();
        return {spec(x[0]), rows, rows};
      }
      default:
        break;
    }
    std::vector<ShardingSpec> out;
    for (uint32_t r = 0; r < op.num_results; ++r)
      out.push_back(replicated(f_.type(f_.result(op, r)).rank()));
    return out;
  }

  ShardingSpec dot_result(const Op& op) const {
    std::span<const Value> x = f_.operands(op);
    const ir::AttrSet& attrs = f_.attrs(op);
    std::span<const int64_t> lb = attrs.ints(AttrKey::kLhsBatch),
                             rb = attrs.ints(AttrKey::kRhsBatch);
    std::span<const int64_t> lc = attrs.ints(AttrKey::kLhsContract),
                             rc = attrs.ints(AttrKey::kRhsContract);
    const ShardingSpec& l = spec(x[0]);
    const ShardingSpec& r = spec(x[1]);
    ShardingSpec s;
    // A batch dimension whole on the lhs takes the rhs's axes only when the lhs uses none of
    // them elsewhere: an MoE gradient [X, B, C, .] (B split over `expert`) times the expert
    // stack (X on `expert`) keeps its batch split rather than moving `expert` to X.
    auto lhs_uses = [&](const Axes& axes) {
      return std::any_of(axes.begin(), axes.end(), [&](const std::string& a) {
        return std::any_of(l.dims.begin(), l.dims.end(), [&](const Axes& d) {
          return std::find(d.begin(), d.end(), a) != d.end();
        });
      });
    };
    for (size_t i = 0; i < lb.size(); ++i) {
      const Axes& a = l.dims[static_cast<size_t>(lb[i])];
      const Axes& other = r.dims[static_cast<size_t>(rb[i])];
      s.dims.push_back(!a.empty() || lhs_uses(other) ? a : other);
    }
    auto free = [](int64_t rank, std::span<const int64_t> b, std::span<const int64_t> c) {
      std::vector<int64_t> out;
      for (int64_t d = 0; d < rank; ++d) {
        if (std::find(b.begin(), b.end(), d) == b.end() &&
            std::find(c.begin(), c.end(), d) == c.end())
          out.push_back(d);
      }
      return out;
    };
    for (int64_t d : free(f_.type(x[0]).rank(), lb, lc))
      s.dims.push_back(l.dims[static_cast<size_t>(d)]);
    for (int64_t d : free(f_.type(x[1]).rank(), rb, rc))
      s.dims.push_back(r.dims[static_cast<size_t>(d)]);
    return s;
  }

  const Function& f_;
  std::span<const AxisRule> rules_;
  const Mesh& mesh_;
  ShardingAnalysis out_;
  std::vector<std::vector<uint32_t>> users_;
  std::unordered_map<ir::AxesId, ShardingSpec> resolved_;
  std::vector<bool> over_data_;  // per value id (ZeRO-1); empty when off
};

}  // namespace

Expected<std::vector<AxisRule>> axis_rules_from_config(const Config& config) {
  std::vector<AxisRule> rules;
  const ConfigValue& value = config.get("logical_axis_rules");
  if (!value.is_list()) {
    return usage_error("logical_axis_rules must be a list of [logical_name, mesh_axes] pairs");
  }
  for (const ConfigValue& item : value.as_list()) {
    if (!item.is_list() || item.as_list().size() != 2 || !item.as_list()[0].is_string()) {
      return usage_error(fmt::format(
          "logical_axis_rules: entry {} is not a [logical_name, mesh_axes] pair; write e.g. "
          "['embed', ['fsdp', 'tensor']]",
          item.to_yaml()));
    }
    AxisRule rule;
    rule.logical = item.as_list()[0].as_string();
    const ConfigValue& axes = item.as_list()[1];
    if (axes.is_string()) {
      rule.mesh_axes.push_back(axes.as_string());
    } else if (axes.is_list()) {
      for (const ConfigValue& a : axes.as_list()) {
        if (!a.is_string()) {
          return usage_error(fmt::format("logical_axis_rules: in {}, mesh axis {} is not a name",
                                         item.to_yaml(), a.to_yaml()));
        }
        rule.mesh_axes.push_back(a.as_string());
      }
    } else if (!axes.is_none()) {
      return usage_error(
          fmt::format("logical_axis_rules: in {}, the mesh axes must be a name or a list of names",
                      item.to_yaml()));
    }
    rules.push_back(std::move(rule));
  }
  return rules;
}

std::string ShardingSpec::to_string() const {
  std::string out = "P(";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) out += ", ";
    if (dims[i].empty()) {
      out += "None";
    } else if (dims[i].size() == 1) {
      out += fmt::format("'{}'", dims[i][0]);
    } else {
      out += "(";
      for (size_t k = 0; k < dims[i].size(); ++k)
        out += fmt::format("{}'{}'", k ? ", " : "", dims[i][k]);
      out += ")";
    }
  }
  return out + ")";
}

bool ShardingSpec::replicated() const {
  return std::all_of(dims.begin(), dims.end(), [](const Axes& a) { return a.empty(); });
}

namespace {

// MaxText's peeled MoE dispatch (moe.py _maybe_shard_moe_dispatch with
// moe_dispatch_no_expert_sharding): each dimension resolved on its own, then `expert` taken off
// the dimensions named with kPeelExpert.
Expected<ShardingSpec> resolve_peeled(std::span<const std::string_view> logical,
                                      std::span<const AxisRule> rules, const Mesh& mesh) {
  ShardingSpec spec;
  for (std::string_view name : logical) {
    bool peel = name.ends_with(kPeelExpert);
    if (peel) name.remove_suffix(kPeelExpert.size());
    std::string_view one[] = {name};
    Expected<ShardingSpec> dim = resolve_sharding(one, rules, mesh);
    if (!dim.ok()) return dim.error();
    Axes axes = std::move(dim->dims[0]);
    if (peel) std::erase(axes, std::string("expert"));
    spec.dims.push_back(std::move(axes));
  }
  dedupe(spec);
  return spec;
}

}  // namespace

Expected<ShardingSpec> resolve_sharding(std::span<const std::string_view> logical,
                                        std::span<const AxisRule> rules, const Mesh& mesh) {
  if (std::any_of(logical.begin(), logical.end(),
                  [](std::string_view n) { return n.ends_with(kPeelExpert); })) {
    return resolve_peeled(logical, rules, mesh);
  }
  for (size_t i = 0; i < logical.size(); ++i) {
    if (logical[i].empty() || logical[i] == "_") continue;
    for (size_t j = i + 1; j < logical.size(); ++j) {
      if (logical[i] == logical[j]) {
        return usage_error(fmt::format(
            "logical axis '{}' names two dimensions of one array; each dimension needs its own "
            "logical name",
            logical[i]));
      }
    }
  }
  ShardingSpec spec;
  spec.dims.assign(logical.size(), {});
  std::vector<bool> assigned(logical.size(), false);
  std::set<std::string> used;
  for (const AxisRule& rule : rules) {
    for (size_t d = 0; d < logical.size(); ++d) {
      if (assigned[d] || logical[d] != rule.logical) continue;
      bool clash = std::any_of(rule.mesh_axes.begin(), rule.mesh_axes.end(),
                               [&](const std::string& a) { return used.count(a) != 0; });
      if (clash) continue;
      for (const std::string& a : rule.mesh_axes) {
        if (std::find(mesh.axes.begin(), mesh.axes.end(), a) == mesh.axes.end()) {
          return usage_error(fmt::format(
              "logical_axis_rules: rule ['{}', ...] names mesh axis '{}', which is not in "
              "mesh_axes ({})",
              rule.logical, a, fmt::join(mesh.axes, ", ")));
        }
        used.insert(a);
      }
      spec.dims[d] = rule.mesh_axes;
      assigned[d] = true;
    }
  }
  return spec;
}

int64_t shard_count(const std::vector<std::string>& axes, const Mesh& mesh) {
  int64_t n = 1;
  for (const std::string& a : axes) n *= mesh.axis_size(a);
  return n;
}

std::vector<int64_t> per_device_dims(const std::vector<int64_t>& dims, const ShardingSpec& spec,
                                     const Mesh& mesh) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t n = i < spec.dims.size() ? shard_count(spec.dims[i], mesh) : 1;
    out.push_back((dims[i] + n - 1) / n);
  }
  return out;
}

std::vector<ReshapeRun> reshape_runs(const std::vector<int64_t>& from,
                                     const std::vector<int64_t>& to) {
  std::vector<ReshapeRun> runs;
  size_t i = 0, j = 0;
  while (i < from.size() && j < to.size()) {
    // Advance both sides until the products meet.
    ReshapeRun run{i, i, j, j};
    int64_t pi = from[i], pj = to[j];
    while (pi != pj) {
      if (pi < pj && i + 1 < from.size()) {
        pi *= from[++i];
      } else if (j + 1 < to.size()) {
        pj *= to[++j];
      } else {
        break;
      }
    }
    run.from_end = ++i;
    run.to_end = ++j;
    runs.push_back(run);
  }
  return runs;
}

ShardingSpec reshape_sharding(const ShardingSpec& in, const std::vector<int64_t>& from,
                              const std::vector<int64_t>& to, const Mesh& mesh) {
  ShardingSpec s = replicated(static_cast<int64_t>(to.size()));
  for (const ReshapeRun& run : reshape_runs(from, to)) {
    // The run's major operand dimension's axes go to its major result dimension when they
    // divide it.
    const Axes& major = in.dims[run.from_begin];
    if (!major.empty() && to[run.to_begin] % shard_count(major, mesh) == 0) {
      s.dims[run.to_begin] = major;
    }
  }
  return s;
}

bool spans_dcn(const std::vector<std::string>& axes, const Mesh& mesh) {
  for (const std::string& a : axes) {
    for (size_t i = 0; i < mesh.axes.size(); ++i) {
      if (mesh.axes[i] == a && i < mesh.dcn.size() && mesh.dcn[i] > 1) return true;
    }
  }
  return false;
}

Expected<ShardingAnalysis> analyze_sharding(const ir::Function& function,
                                            std::span<const AxisRule> rules, const Mesh& mesh,
                                            const ShardingOptions& options) {
  return Propagation(function, rules, mesh, options).run();
}

ShardingSpec add_data_to_sharding(const ShardingSpec& spec, const std::vector<int64_t>& dims,
                                  const Mesh& mesh) {
  for (const Axes& axes : spec.dims) {
    if (std::find(axes.begin(), axes.end(), "data") != axes.end()) return spec;
  }
  std::vector<int64_t> local = per_device_dims(dims, spec, mesh);
  int64_t data = mesh.axis_size("data");
  for (size_t d = 0; d < local.size() && d < spec.dims.size(); ++d) {
    const Axes& axes = spec.dims[d];
    if (local[d] % data != 0 || std::find(axes.begin(), axes.end(), "tensor") != axes.end()) {
      continue;
    }
    ShardingSpec out = spec;
    out.dims[d].insert(out.dims[d].begin(), "data");
    return out;
  }
  return spec;
}

ShardingSpec zero1_sharding(const ShardingSpec& spec, const std::vector<int64_t>& dims,
                            const Mesh& mesh) {
  ShardingSpec maxtext = add_data_to_sharding(spec, dims, mesh);
  for (size_t d = 0; d < maxtext.dims.size(); ++d) {
    if (maxtext.dims[d] == spec.dims[d]) continue;
    // MaxText's `data` leads the dimension's axes; here it follows them.
    ShardingSpec out = spec;
    out.dims[d].push_back("data");
    return out;
  }
  return spec;
}

ShardingTable sharding_table(ShardingAnalysis analysis) {
  ShardingTable table;
  table.specs = std::move(analysis.specs);
  table.of_value.resize(table.specs.size());
  for (uint32_t id = 0; id < table.of_value.size(); ++id) table.of_value[id] = id;
  return table;
}

}  // namespace precast
