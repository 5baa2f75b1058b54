#include "compiler/autodiff/Autodiff.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>
#include <string_view>
#include <unordered_set>

namespace precast::autodiff {
namespace {

using ir::AttrKey;
using ir::AttrSet;
using ir::Builder;
using ir::ComparisonDirection;
using ir::DType;
using ir::Function;
using ir::Op;
using ir::OpIndex;
using ir::OpKind;
using ir::TensorType;
using ir::Value;

// Keeps names unique in the function being built when a forward is inlined more than once
// (gradient accumulation) or its names clash with the caller's.
class NameAllocator {
 public:
  explicit NameAllocator(const Function& function) {
    for (size_t i = 0; i < function.num_values(); ++i) {
      std::string_view name = function.value_name(Value{static_cast<uint32_t>(i)});
      if (!name.empty()) used_.emplace(name);
    }
  }
  std::string unique(std::string_view name) {
    std::string candidate(name);
    for (int k = 2; used_.count(candidate) != 0; ++k) candidate = fmt::format("{}_{}", name, k);
    used_.insert(candidate);
    return candidate;
  }

 private:
  std::unordered_set<std::string> used_;
};

// Clones the forward's ops onto `primal` (forward value id -> built value; parameters filled in
// by the caller). Returns the built forward results.
Expected<std::vector<Value>> clone_forward(Builder& b, const Function& forward,
                                           std::vector<Value>& primal) {
  NameAllocator names(b.function());
  std::vector<Value> operands;
  for (OpIndex i = 0; i < forward.num_ops(); ++i) {
    const Op& op = forward.op(i);
    operands.clear();
    for (Value v : forward.operands(op)) operands.push_back(primal[v.id]);
    std::vector<Value> results = b.clone(forward, i, operands);
    if (!b.ok()) return b.status().error();
    for (uint32_t r = 0; r < op.num_results; ++r) {
      Value from = forward.result(op, r);
      primal[from.id] = results[r];
      std::string_view name = forward.value_name(from);
      if (!name.empty()) b.with_name(results[r], names.unique(name));
    }
  }
  std::vector<Value> results;
  for (Value v : forward.results()) results.push_back(primal[v.id]);
  return results;
}

std::vector<int64_t> iota_dims(int64_t begin, int64_t end) {
  std::vector<int64_t> dims(static_cast<size_t>(std::max<int64_t>(end - begin, 0)));
  std::iota(dims.begin(), dims.end(), begin);
  return dims;
}

// Dimensions of `rank` not in `a` or `b`, increasing: dot_general's free dimensions.
std::vector<int64_t> free_dims(int64_t rank, std::span<const int64_t> a,
                               std::span<const int64_t> b) {
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < rank; ++d) {
    if (std::find(a.begin(), a.end(), d) == a.end() &&
        std::find(b.begin(), b.end(), d) == b.end()) {
      dims.push_back(d);
    }
  }
  return dims;
}

// The reverse pass: one VJP rule per op kind.
class Backward {
 public:
  Backward(Builder& b, const Function& forward, const std::vector<Value>& primal,
           const std::vector<bool>& active)
      : b_(b), f_(forward), primal_(primal), active_(active), cotangent_(forward.num_values()) {}

  void seed(Value forward_value, Value cotangent) { accumulate(forward_value, cotangent); }
  Value cotangent(Value forward_value) const { return cotangent_[forward_value.id]; }

  // Leaves the builder's scope as the caller set it.
  Status run() {
    std::string caller_scope(b_.scope());
    ir::OpFacts caller_facts = b_.facts();
    Status status = reverse_ops();
    b_.set_scope(caller_scope);
    b_.set_facts(caller_facts);
    return status;
  }

 private:
  Status reverse_ops() {
    for (OpIndex i = static_cast<OpIndex>(f_.num_ops()); i-- > 0;) {
      const Op& op = f_.op(i);
      bool any = false;
      for (uint32_t r = 0; r < op.num_results; ++r) {
        any = any || cotangent_[f_.result(op, r).id].valid();
      }
      if (!any) continue;
      std::string scope(f_.scope(op));
      b_.set_scope(scope.empty() ? std::string(kBackwardScope) : scope + "/" + kBackwardScope);
      // The backward ops of a forward op stay in its decoder layer and region.
      ir::OpFacts facts = op.facts;
      facts.phase = ir::OpPhase::kBackward;
      b_.set_facts(facts);
      for (uint32_t r = 0; r < op.num_results; ++r) {
        constrain_like_primal(f_.result(op, r), cotangent_[f_.result(op, r).id]);
      }
      PRECAST_RETURN_IF_ERROR(apply(i, op));
      if (!b_.ok()) {
        return b_.status().error().with_context(
            fmt::format("differentiating {} (op {} of @{})", ir::op_name(op.kind), i, f_.name()));
      }
      // The results' cotangents are consumed; drop them so they are not mistaken for live ones.
      for (uint32_t r = 0; r < op.num_results; ++r) cotangent_[f_.result(op, r).id] = Value{};
    }
    return Status::success();
  }

  bool is_active(Value forward_value) const { return active_[forward_value.id]; }

  // A forward value's logical axes are MaxText's sharding constraint on it, and the transpose of
  // JAX's with_sharding_constraint constrains the cotangent the same way: a cotangent, and each
  // contribution summed into it (XLA's propagation carries the sum's layout back into its
  // addends; Precast's runs forward only), takes its primal's axis names unless it already has
  // some or is a parameter. The partitioner then lays the backward out as the forward: the MoE
  // dispatch's and combine's gradients move between the experts and the batch through
  // all-to-alls over `expert`, as the forward does, instead of gathering.
  void constrain_like_primal(Value forward_value, Value g) {
    if (!g.valid() || f_.axes(forward_value).empty()) return;
    const Function& built = b_.function();
    if (!built.axes(g).empty() || built.is_param(g)) return;
    if (built.type(g).dims != f_.type(forward_value).dims) return;
    b_.with_axes(g, f_.axis_names(forward_value));
  }

  void accumulate(Value forward_value, Value g) {
    if (!g.valid() || !is_active(forward_value)) return;
    constrain_like_primal(forward_value, g);
    Value& slot = cotangent_[forward_value.id];
    slot = slot.valid() ? b_.add(slot, g) : g;
  }

  Value x(const Op& op, size_t i) const { return primal_[f_.operands(op)[i].id]; }
  Value y(const Op& op, uint32_t r = 0) const { return primal_[f_.result(op, r).id]; }
  Value g(const Op& op, uint32_t r = 0) const { return cotangent_[f_.result(op, r).id]; }
  Value operand(const Op& op, size_t i) const { return f_.operands(op)[i]; }
  const TensorType& type(Value built) const { return b_.type(built); }

  // A cotangent in `like`'s dtype (dot_general with a wider result dtype, for one).
  Value to_dtype(Value v, DType dtype) { return type(v).dtype == dtype ? v : b_.convert(v, dtype); }

  Value zeros_like(Value v) { return b_.splat(0.0, v); }

  Status apply(OpIndex index, const Op& op) {
    switch (op.kind) {
      case OpKind::kConstant:
      case OpKind::kIota:
      case OpKind::kRngBits:
      case OpKind::kRngUniform:
      case OpKind::kRngNormal:
      // Piecewise constant: zero derivative almost everywhere.
      case OpKind::kSign:
      case OpKind::kFloor:
      case OpKind::kCeil:
      case OpKind::kRoundNearestEven:
      // Integer or predicate results.
      case OpKind::kNot:
      case OpKind::kIsFinite:
      case OpKind::kAnd:
      case OpKind::kOr:
      case OpKind::kXor:
      case OpKind::kShiftLeft:
      case OpKind::kShiftRightLogical:
      case OpKind::kCompare:
      case OpKind::kTopK:  // indices; the selected values' gradient flows where they are read
        return Status::success();
      case OpKind::kNeg:
        accumulate(operand(op, 0), b_.neg(g(op)));
        return Status::success();
      case OpKind::kAbs:
        accumulate(operand(op, 0), b_.mul(g(op), b_.unary(OpKind::kSign, x(op, 0))));
        return Status::success();
      case OpKind::kExp:
        accumulate(operand(op, 0), b_.mul(g(op), y(op)));
        return Status::success();
      case OpKind::kExpm1:
        accumulate(operand(op, 0), b_.mul(g(op), b_.add(y(op), b_.splat(1.0, y(op)))));
        return Status::success();
      case OpKind::kLog:
        accumulate(operand(op, 0), b_.div(g(op), x(op, 0)));
        return Status::success();
      case OpKind::kLog1p:
        accumulate(operand(op, 0), b_.div(g(op), b_.add(x(op, 0), b_.splat(1.0, x(op, 0)))));
        return Status::success();
      case OpKind::kLogistic: {
        Value s = y(op);  // s' = s (1 - s)
        accumulate(operand(op, 0), b_.mul(g(op), b_.mul(s, b_.sub(b_.splat(1.0, s), s))));
        return Status::success();
      }
      case OpKind::kTanh: {
        Value t = y(op);  // tanh' = 1 - tanh^2
        accumulate(operand(op, 0), b_.mul(g(op), b_.sub(b_.splat(1.0, t), b_.mul(t, t))));
        return Status::success();
      }
      case OpKind::kSqrt:  // (sqrt x)' = 1 / (2 sqrt x)
        accumulate(operand(op, 0), b_.div(g(op), b_.mul(b_.splat(2.0, y(op)), y(op))));
        return Status::success();
      case OpKind::kRsqrt: {
        // (x^-1/2)' = -1/2 x^-3/2 = -1/2 y^3.
        Value r = y(op);
        Value cube = b_.mul(r, b_.mul(r, r));
        accumulate(operand(op, 0), b_.mul(g(op), b_.mul(b_.splat(-0.5, r), cube)));
        return Status::success();
      }
      case OpKind::kSin:
        accumulate(operand(op, 0), b_.mul(g(op), b_.unary(OpKind::kCos, x(op, 0))));
        return Status::success();
      case OpKind::kCos:
        accumulate(operand(op, 0), b_.neg(b_.mul(g(op), b_.unary(OpKind::kSin, x(op, 0)))));
        return Status::success();
      case OpKind::kErf: {
        Value a = x(op, 0);  // erf' = 2/sqrt(pi) exp(-x^2)
        Value d =
            b_.mul(b_.splat(2.0 / std::sqrt(std::numbers::pi), a), b_.exp(b_.neg(b_.mul(a, a))));
        accumulate(operand(op, 0), b_.mul(g(op), d));
        return Status::success();
      }
      case OpKind::kAdd:
        accumulate(operand(op, 0), g(op));
        accumulate(operand(op, 1), g(op));
        return Status::success();
      case OpKind::kSub:
        accumulate(operand(op, 0), g(op));
        if (is_active(operand(op, 1))) accumulate(operand(op, 1), b_.neg(g(op)));
        return Status::success();
      case OpKind::kMul:
        if (is_active(operand(op, 0))) accumulate(operand(op, 0), b_.mul(g(op), x(op, 1)));
        if (is_active(operand(op, 1))) accumulate(operand(op, 1), b_.mul(g(op), x(op, 0)));
        return Status::success();
      case OpKind::kDiv:
        if (is_active(operand(op, 0))) accumulate(operand(op, 0), b_.div(g(op), x(op, 1)));
        if (is_active(operand(op, 1))) {  // d(a/b)/db = -(a/b)/b
          accumulate(operand(op, 1), b_.neg(b_.div(b_.mul(g(op), y(op)), x(op, 1))));
        }
        return Status::success();
      case OpKind::kRem:
        // rem(a, b) = a - b trunc(a/b); trunc(a/b) = (a - rem) / b.
        accumulate(operand(op, 0), g(op));
        if (is_active(operand(op, 1))) {
          Value quotient = b_.div(b_.sub(x(op, 0), y(op)), x(op, 1));
          accumulate(operand(op, 1), b_.neg(b_.mul(g(op), quotient)));
        }
        return Status::success();
      case OpKind::kMax:
      case OpKind::kMin:
        return min_max(op);
      case OpKind::kPow:
        return pow(op);
      case OpKind::kAtan2: {
        // atan2(a, b): da = b / (a^2 + b^2), db = -a / (a^2 + b^2).
        Value a = x(op, 0), c = x(op, 1);
        Value norm = b_.add(b_.mul(a, a), b_.mul(c, c));
        if (is_active(operand(op, 0))) accumulate(operand(op, 0), b_.div(b_.mul(g(op), c), norm));
        if (is_active(operand(op, 1))) {
          accumulate(operand(op, 1), b_.neg(b_.div(b_.mul(g(op), a), norm)));
        }
        return Status::success();
      }
      case OpKind::kSelect: {
        Value zero = zeros_like(g(op));
        if (is_active(operand(op, 1))) accumulate(operand(op, 1), b_.select(x(op, 0), g(op), zero));
        if (is_active(operand(op, 2))) accumulate(operand(op, 2), b_.select(x(op, 0), zero, g(op)));
        return Status::success();
      }
      case OpKind::kConvert:
        if (ir::is_floating(type(x(op, 0)).dtype)) {
          accumulate(operand(op, 0), b_.convert(g(op), type(x(op, 0)).dtype));
        }
        return Status::success();
      case OpKind::kBroadcastInDim:
        return broadcast_in_dim(op);
      case OpKind::kReshape:
        accumulate(operand(op, 0), b_.reshape(g(op), type(x(op, 0)).dims));
        return Status::success();
      case OpKind::kTranspose: {
        std::span<const int64_t> perm = f_.attrs(op).ints(AttrKey::kPermutation);
        std::vector<int64_t> inverse(perm.size());
        for (size_t i = 0; i < perm.size(); ++i)
          inverse[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
        accumulate(operand(op, 0), b_.transpose(g(op), inverse));
        return Status::success();
      }
      case OpKind::kSlice:
        return slice(op);
      case OpKind::kConcatenate:
        return concatenate(op);
      case OpKind::kPad:
        return pad(op);
      case OpKind::kReduceSum: {
        std::span<const int64_t> reduced = f_.attrs(op).ints(AttrKey::kDims);
        const TensorType& in = type(x(op, 0));
        std::vector<int64_t> kept;
        for (int64_t d = 0; d < in.rank(); ++d) {
          if (std::find(reduced.begin(), reduced.end(), d) == reduced.end()) kept.push_back(d);
        }
        accumulate(operand(op, 0), b_.broadcast_in_dim(g(op), in.dims, kept));
        return Status::success();
      }
      case OpKind::kReduceMax:
      case OpKind::kReduceMin:
        return reduce_chooser(op);
      case OpKind::kDotGeneral:
        return dot_general(op);
      case OpKind::kGroupedDot:
        return grouped_dot(op);
      case OpKind::kGroupedDotWeightGrad:
        return grouped_dot_weight_grad(op);
      case OpKind::kTake: {
        int64_t axis = f_.attrs(op).integer(AttrKey::kAxis);
        Value table = x(op, 0);
        // take clamps an out-of-range id into the table (XLA's gather) and scatter_add drops
        // one (XLA's scatter), so the ids are clamped first: the row the forward read gets the
        // gradient, as in JAX, whose gather transposes to a scatter in the same clip mode.
        Value ids = x(op, 1);
        int64_t rows = f_.type(operand(op, 0)).dims[static_cast<size_t>(axis)];
        if (rows > 0) {
          ids = b_.max(b_.min(ids, b_.splat(static_cast<double>(rows - 1), ids)),
                       b_.splat(0.0, ids));
        }
        accumulate(operand(op, 0), b_.scatter_add(zeros_like(table), ids, g(op), axis));
        return Status::success();
      }
      case OpKind::kScatterAdd: {
        int64_t axis = f_.attrs(op).integer(AttrKey::kAxis);
        accumulate(operand(op, 0), g(op));
        if (is_active(operand(op, 2))) accumulate(operand(op, 2), b_.take(g(op), x(op, 1), axis));
        return Status::success();
      }
      case OpKind::kAttention:
        return attention(op);
      case OpKind::kAttentionStats:
        return attention_stats(op);
      case OpKind::kAttentionGrad:
      case OpKind::kAllGather:
      case OpKind::kAllReduce:
      case OpKind::kReduceScatter:
      case OpKind::kAllToAll:
      case OpKind::kCollectivePermute:
      case OpKind::kRaggedAllToAll:
      case OpKind::kShardSlice:
      case OpKind::kCount:
        break;
    }
    return usage_error(fmt::format(
        "autodiff: op {} ({}) of @{} has no derivative rule (second derivatives of attention are "
        "not supported, and autodiff runs before SPMD partitioning adds collectives)",
        index, ir::op_name(op.kind), f_.name()));
  }

  Status min_max(const Op& op) {
    // The chosen operand gets the cotangent; ties split it evenly (as JAX does).
    Value a = x(op, 0), c = x(op, 1), ga = g(op);
    ComparisonDirection wins =
        op.kind == OpKind::kMax ? ComparisonDirection::kGt : ComparisonDirection::kLt;
    Value zero = zeros_like(ga);
    Value half = b_.mul(ga, b_.splat(0.5, ga));
    Value tie = b_.compare(a, c, ComparisonDirection::kEq);
    if (is_active(operand(op, 0))) {
      accumulate(operand(op, 0), b_.select(b_.compare(a, c, wins), ga, b_.select(tie, half, zero)));
    }
    if (is_active(operand(op, 1))) {
      accumulate(operand(op, 1), b_.select(b_.compare(c, a, wins), ga, b_.select(tie, half, zero)));
    }
    return Status::success();
  }

  Status pow(const Op& op) {
    Value a = x(op, 0), e = x(op, 1), ga = g(op);
    if (is_active(operand(op, 0))) {  // d/da a^e = e a^(e-1)
      Value d = b_.mul(e, b_.pow(a, b_.sub(e, b_.splat(1.0, e))));
      accumulate(operand(op, 0), b_.mul(ga, d));
    }
    if (is_active(operand(op, 1))) {  // d/de a^e = a^e log a, taken as 0 where a == 0
      Value zero = zeros_like(a);
      Value is_zero = b_.compare(a, zero, ComparisonDirection::kEq);
      Value safe_a = b_.select(is_zero, b_.splat(1.0, a), a);
      Value d = b_.mul(y(op), b_.log(safe_a));
      accumulate(operand(op, 1), b_.mul(ga, d));
    }
    return Status::success();
  }

  Status broadcast_in_dim(const Op& op) {
    const TensorType& in = type(x(op, 0));
    Value ga = g(op);
    const TensorType& out = type(ga);
    std::span<const int64_t> dims = f_.attrs(op).ints(AttrKey::kDims);
    // Sum over result dims that no operand dim maps to, and over mapped dims of size 1 that
    // were stretched; then reshape to the operand's shape.
    std::vector<int64_t> summed;
    for (int64_t d = 0; d < out.rank(); ++d) {
      auto it = std::find(dims.begin(), dims.end(), d);
      if (it == dims.end()) {
        summed.push_back(d);
      } else if (in.dims[static_cast<size_t>(it - dims.begin())] == 1 &&
                 out.dims[static_cast<size_t>(d)] != 1) {
        summed.push_back(d);
      }
    }
    Value reduced = summed.empty() ? ga : b_.reduce_sum(ga, summed);
    if (type(reduced).dims != in.dims) reduced = b_.reshape(reduced, in.dims);
    accumulate(operand(op, 0), reduced);
    return Status::success();
  }

  Status slice(const Op& op) {
    const TensorType& in = type(x(op, 0));
    const AttrSet& attrs = f_.attrs(op);
    std::span<const int64_t> start = attrs.ints(AttrKey::kStart);
    std::span<const int64_t> stride = attrs.ints(AttrKey::kStride);
    const TensorType& out = type(g(op));
    std::vector<int64_t> low, high, interior;
    for (int64_t d = 0; d < in.rank(); ++d) {
      size_t i = static_cast<size_t>(d);
      int64_t step = stride.empty() ? 1 : stride[i];
      int64_t n = out.dims[i];
      int64_t last = n == 0 ? start[i] : start[i] + (n - 1) * step + 1;  // one past the last taken
      low.push_back(start[i]);
      interior.push_back(n == 0 ? 0 : step - 1);
      high.push_back(in.dims[i] - last);
    }
    Value zero = b_.scalar(0.0, in.dtype);
    accumulate(operand(op, 0), b_.pad(g(op), zero, low, high, interior));
    return Status::success();
  }

  Status concatenate(const Op& op) {
    int64_t dimension = f_.attrs(op).integer(AttrKey::kDimension);
    const TensorType& out = type(g(op));
    int64_t offset = 0;
    for (size_t i = 0; i < op.num_operands; ++i) {
      const TensorType& part = type(x(op, i));
      int64_t size = part.dims[static_cast<size_t>(dimension)];
      if (is_active(operand(op, i))) {
        std::vector<int64_t> start(out.dims.size(), 0), limit = out.dims;
        start[static_cast<size_t>(dimension)] = offset;
        limit[static_cast<size_t>(dimension)] = offset + size;
        accumulate(operand(op, i), b_.slice(g(op), start, limit, {}));
      }
      offset += size;
    }
    return Status::success();
  }

  Status pad(const Op& op) {
    // Undo the edge padding (negated low/high: crops what was added, restores zeros where the
    // forward cropped), then take every (interior + 1)-th element.
    const TensorType& in = type(x(op, 0));
    const AttrSet& attrs = f_.attrs(op);
    std::span<const int64_t> low = attrs.ints(AttrKey::kLow);
    std::span<const int64_t> high = attrs.ints(AttrKey::kHigh);
    std::span<const int64_t> interior = attrs.ints(AttrKey::kInterior);
    Value ga = g(op);
    std::vector<int64_t> neg_low, neg_high;
    bool any_edge = false, any_interior = false;
    for (int64_t d = 0; d < in.rank(); ++d) {
      size_t i = static_cast<size_t>(d);
      neg_low.push_back(-low[i]);
      neg_high.push_back(-high[i]);
      any_edge = any_edge || low[i] != 0 || high[i] != 0;
      any_interior = any_interior || (!interior.empty() && interior[i] != 0);
    }
    Value zero = b_.scalar(0.0, in.dtype);
    Value core = any_edge ? b_.pad(ga, zero, neg_low, neg_high, {}) : ga;
    Value dx = core;
    if (any_interior) {
      const TensorType& c = type(core);
      std::vector<int64_t> start(c.dims.size(), 0), stride;
      for (int64_t d = 0; d < in.rank(); ++d)
        stride.push_back(interior[static_cast<size_t>(d)] + 1);
      dx = b_.slice(core, start, c.dims, stride);
    }
    if (is_active(operand(op, 0))) accumulate(operand(op, 0), dx);
    if (is_active(operand(op, 1))) {
      std::vector<int64_t> all_out = iota_dims(0, type(ga).rank());
      std::vector<int64_t> all_in = iota_dims(0, in.rank());
      Value total = all_out.empty() ? ga : b_.reduce_sum(ga, all_out);
      Value inner = all_in.empty() ? dx : b_.reduce_sum(dx, all_in);
      accumulate(operand(op, 1), b_.sub(total, inner));
    }
    return Status::success();
  }

  Status reduce_chooser(const Op& op) {
    // The cotangent goes to the elements equal to the result, split evenly among ties.
    Value in = x(op, 0);
    const TensorType& t = type(in);
    std::span<const int64_t> reduced = f_.attrs(op).ints(AttrKey::kDims);
    std::vector<int64_t> kept;
    for (int64_t d = 0; d < t.rank(); ++d) {
      if (std::find(reduced.begin(), reduced.end(), d) == reduced.end()) kept.push_back(d);
    }
    std::vector<int64_t> reduced_dims(reduced.begin(), reduced.end());
    Value chosen = b_.broadcast_in_dim(y(op), t.dims, kept);
    Value hit = b_.compare(in, chosen, ComparisonDirection::kEq);
    Value ones = b_.select(hit, b_.splat(1.0, in), zeros_like(in));
    Value counts = b_.broadcast_in_dim(b_.reduce_sum(ones, reduced_dims), t.dims, kept);
    Value spread = b_.broadcast_in_dim(g(op), t.dims, kept);
    accumulate(operand(op, 0), b_.div(b_.mul(spread, ones), counts));
    return Status::success();
  }

  // out[n] = lhs[n] · rhs[ids[n]]: dlhs[n] = g[n] · rhs[ids[n]]ᵀ (the same grouped product
  // with each group's matrix transposed), drhs[e] = Σ_{ids[n] = e} lhs[n]ᵀ g[n].
  Status grouped_dot(const Op& op) {
    Value lhs = x(op, 0), rhs = x(op, 1), ids = x(op, 2);
    Value ga = to_dtype(g(op), type(lhs).dtype);
    if (is_active(operand(op, 0))) {
      accumulate(operand(op, 0), b_.grouped_dot(ga, b_.transpose(rhs, {0, 2, 1}), ids));
    }
    if (is_active(operand(op, 1))) {
      accumulate(operand(op, 1),
                 b_.grouped_dot_weight_grad(lhs, ga, ids, type(rhs).dims[0]));
    }
    return Status::success();
  }

  // w[e] = Σ_{ids[n] = e} lhs[n]ᵀ dout[n]: dlhs[n] = dout[n] · g[ids[n]]ᵀ,
  // ddout[n] = lhs[n] · g[ids[n]].
  Status grouped_dot_weight_grad(const Op& op) {
    Value lhs = x(op, 0), dout = x(op, 1), ids = x(op, 2);
    Value ga = to_dtype(g(op), type(lhs).dtype);
    if (is_active(operand(op, 0))) {
      accumulate(operand(op, 0), b_.grouped_dot(dout, b_.transpose(ga, {0, 2, 1}), ids));
    }
    if (is_active(operand(op, 1))) accumulate(operand(op, 1), b_.grouped_dot(lhs, ga, ids));
    return Status::success();
  }

  Status dot_general(const Op& op) {
    const AttrSet& attrs = f_.attrs(op);
    std::vector<int64_t> lb(attrs.ints(AttrKey::kLhsBatch).begin(),
                            attrs.ints(AttrKey::kLhsBatch).end());
    std::vector<int64_t> rb(attrs.ints(AttrKey::kRhsBatch).begin(),
                            attrs.ints(AttrKey::kRhsBatch).end());
    std::vector<int64_t> lc(attrs.ints(AttrKey::kLhsContract).begin(),
                            attrs.ints(AttrKey::kLhsContract).end());
    std::vector<int64_t> rc(attrs.ints(AttrKey::kRhsContract).begin(),
                            attrs.ints(AttrKey::kRhsContract).end());
    Value lhs = x(op, 0), rhs = x(op, 1);
    const TensorType& lt = type(lhs);
    const TensorType& rt = type(rhs);
    std::vector<int64_t> lf = free_dims(lt.rank(), lb, lc);
    std::vector<int64_t> rf = free_dims(rt.rank(), rb, rc);
    int64_t nb = static_cast<int64_t>(lb.size());
    int64_t nlf = static_cast<int64_t>(lf.size());
    // In the operands' dtype.
    Value ga = to_dtype(g(op), lt.dtype);

    // g: [batch..., lhs free..., rhs free...]; each operand's gradient contracts g with the
    // other operand over that operand's free dimensions.
    if (is_active(operand(op, 0))) {
      accumulate(operand(op, 0),
                 dot_operand_gradient(ga, rhs, {rb, rf, rc}, nb + nlf, lt.rank(), {lb, lf, lc}));
    }
    if (is_active(operand(op, 1))) {
      accumulate(operand(op, 1),
                 dot_operand_gradient(ga, lhs, {lb, lf, lc}, nb, rt.rank(), {rb, rf, rc}));
    }
    return Status::success();
  }

  // One operand's dimensions as dot_general sees them.
  struct DotSide {
    const std::vector<int64_t>& batch;
    const std::vector<int64_t>& free;
    const std::vector<int64_t>& contract;
  };

  // The gradient of one dot operand ("mine"): g . other over the other's free dimensions (they
  // start at g_other_free in g) gives [batch..., my free..., other's contracting dims in
  // increasing order], permuted into my layout (my contracting dim k pairs with the other's k).
  Value dot_operand_gradient(Value ga, Value other, const DotSide& theirs, int64_t g_other_free,
                             int64_t my_rank, const DotSide& mine) {
    int64_t nb = static_cast<int64_t>(mine.batch.size());
    int64_t n_my_free = static_cast<int64_t>(mine.free.size());
    int64_t n_their_free = static_cast<int64_t>(theirs.free.size());
    ir::DotDims dims{iota_dims(0, nb), theirs.batch,
                     iota_dims(g_other_free, g_other_free + n_their_free), theirs.free};
    Value product = b_.dot_general(ga, other, dims);
    std::vector<int64_t> their_contract_sorted = theirs.contract;
    std::sort(their_contract_sorted.begin(), their_contract_sorted.end());
    // Position in `product` of each of my dimensions.
    std::vector<int64_t> where(static_cast<size_t>(my_rank));
    for (int64_t i = 0; i < nb; ++i)
      where[static_cast<size_t>(mine.batch[static_cast<size_t>(i)])] = i;
    for (int64_t j = 0; j < n_my_free; ++j) {
      where[static_cast<size_t>(mine.free[static_cast<size_t>(j)])] = nb + j;
    }
    for (size_t k = 0; k < mine.contract.size(); ++k) {
      int64_t rank = std::find(their_contract_sorted.begin(), their_contract_sorted.end(),
                               theirs.contract[k]) -
                     their_contract_sorted.begin();
      where[static_cast<size_t>(mine.contract[k])] = nb + n_my_free + rank;
    }
    return permute(product, where);
  }

  // transpose(v, where) unless it is the identity: result dim i = v's dim where[i].
  Value permute(Value v, const std::vector<int64_t>& where) {
    for (size_t i = 0; i < where.size(); ++i) {
      if (where[i] != static_cast<int64_t>(i)) return b_.transpose(v, where);
    }
    return v;
  }

  Status attention(const Op& op) {
    // The segment ids and positions (integers: no gradient) follow out and dout.
    std::vector<Value> operands = {x(op, 0), x(op, 1), x(op, 2), y(op), g(op)};
    for (uint32_t n = 3; n < op.num_operands; ++n) operands.push_back(x(op, n));
    std::vector<Value> grads = b_.create(OpKind::kAttentionGrad, operands, f_.attrs(op));
    if (!b_.ok()) return Status::success();  // reported by run()
    for (size_t i = 0; i < 3; ++i) {
      if (is_active(operand(op, i))) accumulate(operand(op, i), grads[i]);
    }
    return Status::success();
  }

  // attention_stats -> (out, max, sum). The max carries no gradient (as the max inside JAX's
  // logsumexp): the rule is exact for anything computed from out and max + log(sum), the rows'
  // log-partition (gpt_oss's attention sinks). With c = g_sum * sum per row and head, the score
  // gradient is p (dout.v - dout.out + c): attention_grad's p (dp - Delta) with Delta lowered by
  // c, which one extra value column carries — v gets a zero column, out the column -c and dout
  // a column of ones, so Delta = dout.out - c and dp is unchanged; dv drops the column again.
  Status attention_stats(const Op& op) {
    Value q = x(op, 0), k = x(op, 1), v = x(op, 2);
    Value out = y(op, 0), sum = y(op, 2);
    const TensorType& out_type = type(out);
    std::vector<int64_t> dims = out_type.dims;  // [B, T, H, Dv]
    Value dout = g(op, 0).valid() ? g(op, 0) : zeros_like(out);
    Value c = g(op, 2).valid() ? b_.mul(g(op, 2), sum) : zeros_like(sum);
    std::vector<int64_t> column{dims[0], dims[1], dims[2], 1};
    Value minus_c = to_dtype(b_.reshape(b_.neg(c), column), out_type.dtype);
    Value ones = b_.splat(1.0, minus_c);
    Value wide_v = b_.pad(v, b_.scalar(0.0, type(v).dtype), {0, 0, 0, 0}, {0, 0, 0, 1});
    std::vector<Value> operands = {q, k, wide_v,
                                   b_.concatenate(std::vector<Value>{out, minus_c}, 3),
                                   b_.concatenate(std::vector<Value>{dout, ones}, 3)};
    for (uint32_t n = 3; n < op.num_operands; ++n) operands.push_back(x(op, n));
    std::vector<Value> grads = b_.create(OpKind::kAttentionGrad, operands, f_.attrs(op));
    if (!b_.ok()) return Status::success();  // reported by run()
    std::vector<int64_t> v_dims = type(v).dims;
    grads[2] = b_.slice(grads[2], {0, 0, 0, 0}, v_dims);
    for (size_t i = 0; i < 3; ++i) {
      if (is_active(operand(op, i))) accumulate(operand(op, i), grads[i]);
    }
    return Status::success();
  }

  Builder& b_;
  const Function& f_;
  const std::vector<Value>& primal_;
  const std::vector<bool>& active_;
  std::vector<Value> cotangent_;
};

Status check_arguments(const Builder& b, const Function& forward,
                       std::span<const Value> arguments) {
  if (arguments.size() != forward.params().size()) {
    return internal_error(fmt::format("autodiff: @{} takes {} parameters, given {}", forward.name(),
                                      forward.params().size(), arguments.size()));
  }
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (!arguments[i].valid() || b.type(arguments[i]) != forward.type(forward.params()[i])) {
      return internal_error(fmt::format("autodiff: argument {} of @{} must be {}, got {}", i,
                                        forward.name(),
                                        ir::to_string(forward.type(forward.params()[i])),
                                        arguments[i].valid() ? ir::to_string(b.type(arguments[i]))
                                                             : std::string("an invalid value")));
    }
  }
  return Status::success();
}

}  // namespace

Expected<std::vector<Value>> inline_call(Builder& builder, const Function& forward,
                                         std::span<const Value> arguments) {
  PRECAST_RETURN_IF_ERROR(check_arguments(builder, forward, arguments));
  std::vector<Value> primal(forward.num_values());
  for (size_t i = 0; i < arguments.size(); ++i) primal[forward.params()[i].id] = arguments[i];
  return clone_forward(builder, forward, primal);
}

Expected<VjpResult> inline_vjp(Builder& builder, const Function& forward,
                               std::span<const Value> arguments,
                               std::span<const Value> result_cotangents,
                               std::span<const size_t> wrt) {
  PRECAST_RETURN_IF_ERROR(check_arguments(builder, forward, arguments));
  if (result_cotangents.size() != forward.results().size()) {
    return internal_error(fmt::format("autodiff: @{} has {} results, given {} cotangents",
                                      forward.name(), forward.results().size(),
                                      result_cotangents.size()));
  }
  // Activity: a value needs a cotangent when it is floating point and depends on a wrt parameter.
  std::vector<bool> active(forward.num_values(), false);
  for (size_t p : wrt) {
    if (p >= forward.params().size()) {
      return internal_error(fmt::format("autodiff: @{} has no parameter {}", forward.name(), p));
    }
    Value param = forward.params()[p];
    if (!ir::is_floating(forward.type(param).dtype)) {
      return internal_error(fmt::format("autodiff: parameter {} of @{} is {}, not floating point",
                                        p, forward.name(), ir::to_string(forward.type(param))));
    }
    active[param.id] = true;
  }
  for (const Op& op : forward.ops()) {
    bool any = false;
    for (Value v : forward.operands(op)) any = any || active[v.id];
    if (!any) continue;
    for (uint32_t r = 0; r < op.num_results; ++r) {
      Value result = forward.result(op, r);
      active[result.id] = ir::is_floating(forward.type(result).dtype);
    }
  }

  // Checked before anything is built, so a misuse leaves the caller's function as it was.
  for (size_t r = 0; r < result_cotangents.size(); ++r) {
    if (!result_cotangents[r].valid()) continue;
    const ir::TensorType& expected = forward.type(forward.results()[r]);
    if (builder.type(result_cotangents[r]) != expected) {
      return internal_error(fmt::format("autodiff: cotangent of result {} must be {}, got {}", r,
                                        ir::to_string(expected),
                                        ir::to_string(builder.type(result_cotangents[r]))));
    }
  }

  std::vector<Value> primal(forward.num_values());
  for (size_t i = 0; i < arguments.size(); ++i) primal[forward.params()[i].id] = arguments[i];
  PRECAST_ASSIGN_OR_RETURN(std::vector<Value> results, clone_forward(builder, forward, primal));

  Backward backward(builder, forward, primal, active);
  for (size_t r = 0; r < result_cotangents.size(); ++r) {
    if (result_cotangents[r].valid()) backward.seed(forward.results()[r], result_cotangents[r]);
  }
  PRECAST_RETURN_IF_ERROR(backward.run());

  VjpResult out;
  out.results = std::move(results);
  for (size_t p : wrt) {
    Value param = forward.params()[p];
    Value gradient = backward.cotangent(param);
    if (!gradient.valid()) gradient = builder.constant(0.0, forward.type(param));
    // A gradient is laid out (and sharded) like its parameter.
    std::vector<std::string_view> axes = forward.axis_names(param);
    if (!axes.empty() && builder.function().axes(gradient).empty() &&
        !builder.function().is_param(gradient)) {
      builder.with_axes(gradient, axes);
    }
    out.gradients.push_back(gradient);
  }
  if (!builder.ok()) return builder.status().error();
  return out;
}

Expected<ir::Function*> add_gradient_function(ir::Module& module, const Function& forward,
                                              size_t output, std::span<const size_t> wrt,
                                              const std::string& name) {
  if (output >= forward.results().size() || !forward.type(forward.results()[output]).is_scalar()) {
    return internal_error(
        fmt::format("autodiff: result {} of @{} is not a scalar", output, forward.name()));
  }
  if (module.find_function(name) != nullptr) {
    return internal_error(fmt::format("autodiff: the module already has a function @{}", name));
  }
  // Built detached and added only once complete, so a failure leaves the module as it was.
  std::unique_ptr<Function> function = module.new_function(name);
  Builder b(*function);
  std::vector<Value> arguments;
  for (Value p : forward.params()) {
    Value arg = b.param(forward.type(p), forward.value_name(p));
    std::vector<std::string_view> axes = forward.axis_names(p);
    if (!axes.empty()) b.with_axes(arg, axes);
    arguments.push_back(arg);
  }
  std::vector<Value> cotangents(forward.results().size());
  cotangents[output] = b.constant(1.0, forward.type(forward.results()[output]));
  PRECAST_ASSIGN_OR_RETURN(VjpResult vjp, inline_vjp(b, forward, arguments, cotangents, wrt));
  std::vector<Value> results = vjp.results;
  results.insert(results.end(), vjp.gradients.begin(), vjp.gradients.end());
  b.set_results(results);
  if (!b.ok()) return b.status().error();
  module.add_function(name);
  module.replace_function(module.num_functions() - 1, std::move(function));
  return &module.function(module.num_functions() - 1);
}

}  // namespace precast::autodiff
