#include "ir/Interpreter.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>

#include "ir/Builder.h"
#include "ir/FloatFormats.h"
#include "ir/Verifier.h"
#include "ir/interpreter/Kernels.h"

namespace precast::ir {

HostTensor HostTensor::filled(const TensorType& type, double value) {
  return HostTensor{type, std::vector<double>(static_cast<size_t>(type.num_elements()), value)};
}

HostTensor HostTensor::scalar(double value, DType dtype) {
  return HostTensor{TensorType{dtype, {}}, {value}};
}

HostTensor HostTensor::of(const TensorType& type, std::vector<double> values) {
  return HostTensor{type, std::move(values)};
}

namespace {

Status check_arguments(const Function& f, std::span<const HostTensor> arguments) {
  std::span<const Value> params = f.params();
  if (arguments.size() != params.size()) {
    return usage_error(fmt::format("@{} takes {} arguments, got {}", f.name(), params.size(),
                                   arguments.size()));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const TensorType& want = f.type(params[i]);
    const HostTensor& got = arguments[i];
    if (got.type != want) {
      return usage_error(fmt::format("@{} argument {} must be {}, got {}", f.name(), i,
                                     to_string(want), to_string(got.type)));
    }
    if (static_cast<int64_t>(got.values.size()) != want.num_elements()) {
      return usage_error(fmt::format("@{} argument {} has {} values for type {}", f.name(), i,
                                     got.values.size(), to_string(want)));
    }
  }
  return Status::success();
}

void round_in_place(HostTensor& t, bool round_floats) {
  if (is_floating(t.type.dtype) && !round_floats) return;
  for (double& v : t.values) v = round_to_dtype(t.type.dtype, v);
}

Expected<std::vector<HostTensor>> run_decomposition(const Function& f, const Op& op,
                                                    std::span<const HostTensor* const> operands,
                                                    const InterpreterOptions& options) {
  Module scratch;
  Function& g = scratch.add_function("decomposition");
  Builder b(g);
  std::vector<Value> params;
  std::vector<HostTensor> arguments;
  for (const HostTensor* x : operands) {
    params.push_back(b.param(x->type));
    arguments.push_back(*x);
  }
  PRECAST_ASSIGN_OR_RETURN(std::vector<Value> results,
                           op_info(op.kind).decompose(b, f.attrs(op), params));
  b.set_results(results);
  PRECAST_RETURN_IF_ERROR(b.status());
  return interpret(g, arguments, options);
}

Expected<std::vector<HostTensor>> evaluate(const Function& f, const Op& op,
                                           std::span<const HostTensor* const> operands,
                                           const InterpreterOptions& options) {
  const OpInfo& info = op_info(op.kind);
  if (info.op_class == OpClass::kComposite && options.decompose_composites) {
    return run_decomposition(f, op, operands, options);
  }
  kernels::KernelInput in{op.kind, f.attrs(op), operands, f.type(f.result(op))};
  switch (op.kind) {
    case OpKind::kConstant:
    case OpKind::kIota:
    case OpKind::kRngBits:
    case OpKind::kRngUniform:
    case OpKind::kRngNormal:
      return std::vector<HostTensor>{kernels::leaf(in)};
    case OpKind::kBroadcastInDim:
    case OpKind::kReshape:
    case OpKind::kTranspose:
    case OpKind::kSlice:
    case OpKind::kConcatenate:
    case OpKind::kPad:
      return std::vector<HostTensor>{kernels::data_movement(in)};
    case OpKind::kReduceSum:
    case OpKind::kReduceMax:
    case OpKind::kReduceMin:
    case OpKind::kTake:
    case OpKind::kScatterAdd:
    case OpKind::kTopK:
    case OpKind::kGroupedDot:
    case OpKind::kGroupedDotWeightGrad:
      return std::vector<HostTensor>{kernels::reduction(in)};
    case OpKind::kDotGeneral:
      return std::vector<HostTensor>{kernels::dot_general(in)};
    case OpKind::kAttention:
      return std::vector<HostTensor>{kernels::attention(in)};
    case OpKind::kAttentionGrad:
      return kernels::attention_grad(in);
    case OpKind::kAttentionStats:
      return kernels::attention_stats(in);
    default:
      break;
  }
  if (is_elementwise(op.kind)) return std::vector<HostTensor>{kernels::elementwise(in)};
  // A composite without a direct kernel runs through its decomposition.
  if (info.decompose) return run_decomposition(f, op, operands, options);
  return internal_error(fmt::format("interpreter: no kernel for {}", info.name));
}

// For each value, the last op reading it, so its storage can be released after that op.
std::vector<OpIndex> last_uses(const Function& f) {
  std::vector<OpIndex> last(f.num_values(), kNoOp);
  for (OpIndex i = 0; i < f.num_ops(); ++i) {
    for (Value v : f.operands(f.op(i))) last[v.id] = i;
  }
  return last;
}

// ---- Collectives --------------------------------------------------------------------------

// A tensor seen as [outer, length, inner] around one dimension.
struct DimView {
  int64_t outer = 1, length = 1, inner = 1;
  DimView(const TensorType& type, int64_t dim) {
    for (int64_t d = 0; d < type.rank(); ++d) {
      int64_t n = type.dims[static_cast<size_t>(d)];
      if (d < dim) outer *= n;
      if (d == dim) length = n;
      if (d > dim) inner *= n;
    }
  }
};

// Piece `index` of `count` equal pieces of x along dim.
HostTensor piece(const HostTensor& x, int64_t dim, int64_t index, int64_t count) {
  DimView view(x.type, dim);
  int64_t m = view.length / count;
  HostTensor out{x.type, {}};
  out.type.dims[static_cast<size_t>(dim)] = m;
  out.values.reserve(x.values.size() / static_cast<size_t>(count));
  for (int64_t o = 0; o < view.outer; ++o) {
    auto first = x.values.begin() + (o * view.length + index * m) * view.inner;
    out.values.insert(out.values.end(), first, first + m * view.inner);
  }
  return out;
}

HostTensor concatenate(std::span<const HostTensor* const> parts, int64_t dim) {
  HostTensor out{parts[0]->type, {}};
  out.type.dims[static_cast<size_t>(dim)] = 0;
  for (const HostTensor* p : parts) {
    out.type.dims[static_cast<size_t>(dim)] += p->type.dims[static_cast<size_t>(dim)];
  }
  DimView first(parts[0]->type, dim);
  for (int64_t o = 0; o < first.outer; ++o) {
    for (const HostTensor* p : parts) {
      DimView view(p->type, dim);
      auto begin = p->values.begin() + o * view.length * view.inner;
      out.values.insert(out.values.end(), begin, begin + view.length * view.inner);
    }
  }
  return out;
}

HostTensor sum(std::span<const HostTensor* const> parts) {
  HostTensor out = *parts[0];
  for (size_t p = 1; p < parts.size(); ++p) {
    for (size_t i = 0; i < out.values.size(); ++i) out.values[i] += parts[p]->values[i];
  }
  if (!is_floating(out.type.dtype)) {
    for (double& v : out.values) v = round_to_dtype(out.type.dtype, v);
  }
  return out;
}

// Elementwise maximum over the group, NaN if any part is NaN (as reduce_max).
HostTensor maximum(std::span<const HostTensor* const> parts) {
  HostTensor out = *parts[0];
  for (size_t p = 1; p < parts.size(); ++p) {
    for (size_t i = 0; i < out.values.size(); ++i) {
      double a = out.values[i], v = parts[p]->values[i];
      out.values[i] = std::isnan(a) || std::isnan(v) ? std::numeric_limits<double>::quiet_NaN()
                                                     : std::max(a, v);
    }
  }
  return out;
}

class Lockstep {
 public:
  Lockstep(const Function& f, const InterpreterMesh& mesh, const InterpreterOptions& options)
      : f_(f), mesh_(mesh), options_(options) {}

  Expected<std::vector<std::vector<HostTensor>>> run(
      std::span<const std::vector<HostTensor>> arguments) {
    size_t devices = arguments.size();
    std::vector<std::vector<HostTensor>> env(devices, std::vector<HostTensor>(f_.num_values()));
    std::vector<bool> is_result(f_.num_values(), false);
    for (Value v : f_.results()) is_result[v.id] = true;
    for (size_t d = 0; d < devices; ++d) {
      Status checked = check_arguments(f_, arguments[d]);
      if (!checked.ok()) {
        return devices > 1 ? checked.error().with_context(fmt::format("device {}", d))
                           : checked.error();
      }
      for (size_t i = 0; i < arguments[d].size(); ++i) {
        HostTensor& slot = env[d][f_.params()[i].id];
        slot = arguments[d][i];
        round_in_place(slot, options_.round_to_dtype);
      }
    }
    std::vector<OpIndex> last = last_uses(f_);
    std::vector<const HostTensor*> operands;
    for (OpIndex i = 0; i < f_.num_ops(); ++i) {
      const Op& op = f_.op(i);
      std::vector<std::vector<HostTensor>> results(devices);
      if (is_collective(op.kind) || op.kind == OpKind::kShardSlice) {
        PRECAST_ASSIGN_OR_RETURN(results, communicate(op, env));
      } else {
        for (size_t d = 0; d < devices; ++d) {
          operands.clear();
          for (Value v : f_.operands(op)) operands.push_back(&env[d][v.id]);
          PRECAST_ASSIGN_OR_RETURN(results[d], evaluate(f_, op, operands, options_));
        }
      }
      for (size_t d = 0; d < devices; ++d) {
        for (uint32_t r = 0; r < op.num_results; ++r) {
          HostTensor& slot = env[d][f_.result(op, r).id];
          slot = std::move(results[d][r]);
          round_in_place(slot, options_.round_to_dtype);
          if (options_.observer) options_.observer(d, f_.result(op, r), slot);
        }
        for (Value v : f_.operands(op)) {
          if (last[v.id] == i && !is_result[v.id]) env[d][v.id] = HostTensor{};
        }
      }
    }
    std::vector<std::vector<HostTensor>> out(devices);
    for (size_t d = 0; d < devices; ++d) {
      for (Value v : f_.results()) out[d].push_back(env[d][v.id]);
    }
    return out;
  }

 private:
  // For the op's mesh axes: each device's position in its group, and the group's members in
  // position order.
  struct Groups {
    std::vector<int64_t> position;
    std::vector<std::vector<size_t>> members;  // per device
  };

  Expected<Groups> groups(const Op& op, size_t devices) const {
    const AttrSet& attrs = f_.attrs(op);
    std::vector<size_t> axes;
    int64_t size = 1;
    for (int64_t id : attrs.ints(AttrKey::kMeshAxes)) {
      std::string_view name = f_.context().string(static_cast<StringId>(id));
      auto it = std::find(mesh_.axes.begin(), mesh_.axes.end(), name);
      if (it == mesh_.axes.end()) {
        if (attrs.integer(AttrKey::kGroupSize) == 1) continue;
        return usage_error(fmt::format(
            "{} at line {} spans mesh axis '{}', which the mesh ({}) does not have; run it with "
            "interpret_spmd on the mesh it was partitioned for",
            op_name(op.kind), op.line, name, fmt::join(mesh_.axes, ", ")));
      }
      axes.push_back(static_cast<size_t>(it - mesh_.axes.begin()));
      size *= mesh_.sizes[axes.back()];
    }
    if (size != attrs.integer(AttrKey::kGroupSize)) {
      return usage_error(fmt::format("{} at line {}: group_size {} but its mesh axes hold {} devices",
                                     op_name(op.kind), op.line,
                                     attrs.integer(AttrKey::kGroupSize), size));
    }
    Groups g;
    g.position.assign(devices, 0);
    g.members.assign(devices, {});
    std::map<std::vector<int64_t>, std::vector<size_t>> by_rest;
    for (size_t d = 0; d < devices; ++d) {
      std::vector<int64_t> coords = coordinates(d);
      int64_t position = 0;
      for (size_t a : axes) position = position * mesh_.sizes[a] + coords[a];
      for (size_t a : axes) coords[a] = -1;
      g.position[d] = position;
      by_rest[coords].push_back(d);
    }
    for (auto& [rest, members] : by_rest) {
      std::vector<size_t> ordered(members.size());
      for (size_t d : members) ordered[static_cast<size_t>(g.position[d])] = d;
      for (size_t d : members) g.members[d] = ordered;
    }
    return g;
  }

  std::vector<int64_t> coordinates(size_t device) const {
    return mesh_.coordinates(static_cast<int64_t>(device));
  }

  Expected<std::vector<std::vector<HostTensor>>> communicate(
      const Op& op, const std::vector<std::vector<HostTensor>>& env) const {
    size_t devices = env.size();
    PRECAST_ASSIGN_OR_RETURN(Groups g, groups(op, devices));
    const AttrSet& attrs = f_.attrs(op);
    Value x = f_.operands(op)[0];
    int64_t size = attrs.integer(AttrKey::kGroupSize);
    int64_t dim = attrs.integer(AttrKey::kDimension);
    std::vector<std::vector<HostTensor>> out(devices);
    for (size_t d = 0; d < devices; ++d) {
      std::vector<const HostTensor*> parts;
      for (size_t m : g.members[d]) parts.push_back(&env[m][x.id]);
      int64_t p = g.position[d];
      HostTensor result;
      switch (op.kind) {
        case OpKind::kAllGather:
          result = concatenate(parts, dim);
          break;
        case OpKind::kAllReduce:
          result = attrs.flag(AttrKey::kMax) ? maximum(parts) : sum(parts);
          break;
        case OpKind::kReduceScatter:
          result = piece(sum(parts), dim, p, size);
          break;
        case OpKind::kAllToAll: {
          int64_t split = attrs.integer(AttrKey::kSplitDimension);
          std::vector<HostTensor> received;
          for (const HostTensor* part : parts) received.push_back(piece(*part, split, p, size));
          std::vector<const HostTensor*> pointers;
          for (const HostTensor& r : received) pointers.push_back(&r);
          result = concatenate(pointers, dim);
          break;
        }
        case OpKind::kCollectivePermute: {
          int64_t shift = attrs.integer(AttrKey::kShift);
          result = *parts[static_cast<size_t>(((p - shift) % size + size) % size)];
          break;
        }
        case OpKind::kShardSlice:
          result = piece(env[d][x.id], dim, p, size);
          break;
        case OpKind::kRaggedAllToAll:
          result = ragged(op, env, g.members[d], p);
          break;
        default:
          return internal_error(fmt::format("interpreter: {} is not a collective",
                                            op_name(op.kind)));
      }
      out[d].push_back(std::move(result));
    }
    return out;
  }

  // ragged_all_to_all at group position p (members in position order). Row n of a member's
  // dest sends to dest[n]; its place among that member's rows to the same position is its slot.
  HostTensor ragged(const Op& op, const std::vector<std::vector<HostTensor>>& env,
                    const std::vector<size_t>& members, int64_t p) const {
    const AttrSet& attrs = f_.attrs(op);
    Value x = f_.operands(op)[0];
    Value dest = f_.operands(op)[1];
    int64_t capacity = attrs.integer(AttrKey::kCapacity);
    HostTensor out = HostTensor::filled(f_.type(f_.result(op)), 0.0);
    int64_t rows = f_.type(dest).num_elements();
    int64_t leading = f_.type(x).dims[0] * f_.type(x).dims[1];
    int64_t width = leading == 0 ? 0 : f_.type(x).num_elements() / leading;
    auto slots = [&](size_t member) {  // per row: (destination, slot), slot -1 when unsent
      std::vector<std::pair<int64_t, int64_t>> s(static_cast<size_t>(rows), {-1, -1});
      std::vector<int64_t> used(members.size(), 0);
      const std::vector<double>& to = env[member][dest.id].values;
      for (int64_t n = 0; n < rows; ++n) {
        auto q = static_cast<int64_t>(to[static_cast<size_t>(n)]);
        if (q < 0 || q >= static_cast<int64_t>(members.size())) continue;
        int64_t slot = used[static_cast<size_t>(q)]++;
        if (slot < capacity) s[static_cast<size_t>(n)] = {q, slot};
      }
      return s;
    };
    auto copy_row = [&](const std::vector<double>& from, int64_t from_row, int64_t to_row) {
      std::copy_n(from.begin() + from_row * width, width, out.values.begin() + to_row * width);
    };
    if (attrs.flag(AttrKey::kCombine)) {
      // This device's rows come back from the positions they went to.
      size_t self = members[static_cast<size_t>(p)];
      std::vector<std::pair<int64_t, int64_t>> mine = slots(self);
      for (int64_t n = 0; n < rows; ++n) {
        auto [q, slot] = mine[static_cast<size_t>(n)];
        if (q < 0) continue;
        const std::vector<double>& from = env[members[static_cast<size_t>(q)]][x.id].values;
        copy_row(from, p * capacity + slot, n);
      }
      return out;
    }
    for (size_t q = 0; q < members.size(); ++q) {
      std::vector<std::pair<int64_t, int64_t>> theirs = slots(members[q]);
      const std::vector<double>& from = env[members[q]][x.id].values;
      for (int64_t n = 0; n < rows; ++n) {
        auto [to, slot] = theirs[static_cast<size_t>(n)];
        if (to == p) copy_row(from, n, static_cast<int64_t>(q) * capacity + slot);
      }
    }
    return out;
  }

  const Function& f_;
  const InterpreterMesh& mesh_;
  const InterpreterOptions& options_;
};

}  // namespace

int64_t InterpreterMesh::num_devices() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

std::vector<int64_t> InterpreterMesh::coordinates(int64_t device) const {
  size_t n = sizes.size();
  std::vector<int64_t> ici(n), across(n, 1);
  int64_t per_slice = 1;
  for (size_t a = 0; a < n; ++a) {
    if (a < dcn.size()) across[a] = dcn[a];
    ici[a] = sizes[a] / across[a];
    per_slice *= ici[a];
  }
  int64_t inside = device % per_slice, slice = device / per_slice;
  std::vector<int64_t> coords(n);
  for (size_t a = n; a-- > 0;) {
    coords[a] = (slice % across[a]) * ici[a] + inside % ici[a];
    inside /= ici[a];
    slice /= across[a];
  }
  return coords;
}

Expected<std::vector<HostTensor>> interpret(const Function& function,
                                            std::span<const HostTensor> arguments,
                                            const InterpreterOptions& options) {
  PRECAST_RETURN_IF_ERROR(verify_function(function));
  InterpreterMesh single;
  std::vector<std::vector<HostTensor>> one{std::vector<HostTensor>(arguments.begin(), arguments.end())};
  PRECAST_ASSIGN_OR_RETURN(std::vector<std::vector<HostTensor>> results,
                           Lockstep(function, single, options).run(one));
  return std::move(results[0]);
}

Expected<std::vector<std::vector<HostTensor>>> interpret_spmd(
    const Function& function, const InterpreterMesh& mesh,
    std::span<const std::vector<HostTensor>> arguments, const InterpreterOptions& options) {
  PRECAST_RETURN_IF_ERROR(verify_function(function));
  if (mesh.axes.size() != mesh.sizes.size()) {
    return usage_error("interpret_spmd: the mesh needs one size per axis");
  }
  if (!mesh.dcn.empty()) {
    if (mesh.dcn.size() != mesh.sizes.size()) {
      return usage_error("interpret_spmd: the mesh's dcn sizes need one entry per axis (or none)");
    }
    for (size_t a = 0; a < mesh.sizes.size(); ++a) {
      if (mesh.dcn[a] < 1 || mesh.sizes[a] % mesh.dcn[a] != 0) {
        return usage_error(fmt::format(
            "interpret_spmd: mesh axis '{}' has {} devices, which its dcn size {} does not divide",
            mesh.axes[a], mesh.sizes[a], mesh.dcn[a]));
      }
    }
  }
  if (static_cast<int64_t>(arguments.size()) != mesh.num_devices()) {
    return usage_error(fmt::format("interpret_spmd: the mesh has {} devices but {} argument lists "
                                   "were given",
                                   mesh.num_devices(), arguments.size()));
  }
  return Lockstep(function, mesh, options).run(arguments);
}

Expected<std::vector<HostTensor>> interpret(const Module& module, std::string_view function_name,
                                            std::span<const HostTensor> arguments,
                                            const InterpreterOptions& options) {
  const Function* f = module.find_function(function_name);
  if (!f) return usage_error(fmt::format("no function @{} in the module", function_name));
  return interpret(*f, arguments, options);
}

}  // namespace precast::ir
