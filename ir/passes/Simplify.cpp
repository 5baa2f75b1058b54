#include "ir/passes/Simplify.h"

#include <optional>

namespace precast::ir {
namespace {

class FunctionSimplifier {
 public:
  explicit FunctionSimplifier(Function& f)
      : f_(f), replacement_(f.num_values()), erase_(f.num_ops(), false) {}

  bool run() {
    for (OpIndex i = 0; i < f_.num_ops(); ++i) {
      forward_operands(i);
      // Fold chains first, so reshape(reshape(x)) back to x's type then disappears entirely.
      changed_ = rewrite_in_place(i) || changed_;
      if (erase_[i]) continue;
      std::optional<Value> same = simplify_to_existing(i);
      if (same && can_replace(i, *same)) {
        replacement_[f_.result(f_.op(i)).id] = *same;
        erase_[i] = true;
        changed_ = true;
      }
    }
    if (!changed_) return false;
    f_.replace_uses(replacement_);
    f_.erase_ops(erase_);
    return true;
  }

 private:
  void forward_operands(OpIndex i) {
    std::span<const Value> operands = f_.operands(f_.op(i));
    for (uint32_t k = 0; k < operands.size(); ++k) {
      Value r = replacement_[operands[k].id];
      if (r.valid()) f_.set_operand(i, k, r);
    }
  }

  // Dropping op i for v must not lose its type, axis names, sharding or checkpoint name.
  bool can_replace(OpIndex i, Value v) const {
    const Op& op = f_.op(i);
    Value result = f_.result(op);
    const ValueInfo& from = f_.value_info(result);
    const ValueInfo& to = f_.value_info(v);
    return op.checkpoint == 0 && from.type == to.type && (from.axes == 0 || from.axes == to.axes) &&
           (from.sharding == 0 || from.sharding == to.sharding);
  }

  // The splat value of a constant, if v is one.
  std::optional<double> splat_value(Value v) const {
    OpIndex def = f_.defining_op(v);
    if (def == kNoOp || f_.op(def).kind != OpKind::kConstant) return std::nullopt;
    std::span<const double> values = f_.attrs(f_.op(def)).reals(AttrKey::kValue);
    if (values.size() != 1) return std::nullopt;
    return values[0];
  }
  bool is_splat(Value v, double value) const {
    std::optional<double> s = splat_value(v);
    return s && *s == value;
  }

  const Op* operand_def(const Op& op, uint32_t k, OpKind kind) const {
    OpIndex def = f_.defining_op(f_.operands(op)[k]);
    if (def == kNoOp || f_.op(def).kind != kind) return nullptr;
    return &f_.op(def);
  }

  static bool is_identity(std::span<const int64_t> permutation) {
    for (size_t i = 0; i < permutation.size(); ++i) {
      if (permutation[i] != static_cast<int64_t>(i)) return false;
    }
    return true;
  }

  std::optional<Value> simplify_to_existing(OpIndex i) const {
    const Op& op = f_.op(i);
    std::span<const Value> x = f_.operands(op);
    switch (op.kind) {
      case OpKind::kAdd:
        if (is_splat(x[1], 0.0)) return x[0];
        if (is_splat(x[0], 0.0)) return x[1];
        return std::nullopt;
      case OpKind::kSub:
        if (is_splat(x[1], 0.0)) return x[0];
        return std::nullopt;
      case OpKind::kMul:
        if (is_splat(x[1], 1.0)) return x[0];
        if (is_splat(x[0], 1.0)) return x[1];
        return std::nullopt;
      case OpKind::kDiv:
        if (is_splat(x[1], 1.0)) return x[0];
        return std::nullopt;
      case OpKind::kConvert:
      case OpKind::kReshape:
      case OpKind::kBroadcastInDim:
        // Same type in and out: nothing moved (broadcast dims are strictly increasing).
        return x[0];
      case OpKind::kTranspose:
        if (is_identity(f_.attrs(op).ints(AttrKey::kPermutation))) return x[0];
        return std::nullopt;
      default:
        return std::nullopt;
    }
  }

  bool rewrite_in_place(OpIndex i) {
    switch (f_.op(i).kind) {
      case OpKind::kReshape:
        return fold_reshape_of_reshape(i);
      case OpKind::kTranspose:
        return fold_transpose_of_transpose(i);
      case OpKind::kBroadcastInDim:
        return fold_broadcast_of_splat(i);
      default:
        return false;
    }
  }

  bool fold_reshape_of_reshape(OpIndex i) {
    const Op* inner = operand_def(f_.op(i), 0, OpKind::kReshape);
    if (!inner) return false;
    f_.set_operand(i, 0, f_.operands(*inner)[0]);
    return true;
  }

  // transpose(transpose(y, inner), outer) = transpose(y, inner[outer[i]]).
  bool fold_transpose_of_transpose(OpIndex i) {
    const Op* inner = operand_def(f_.op(i), 0, OpKind::kTranspose);
    if (!inner) return false;
    std::span<const int64_t> inner_perm = f_.attrs(*inner).ints(AttrKey::kPermutation);
    std::span<const int64_t> outer_perm = f_.attrs(f_.op(i)).ints(AttrKey::kPermutation);
    std::vector<int64_t> composed;
    for (int64_t p : outer_perm) composed.push_back(inner_perm[p]);
    Value source = f_.operands(*inner)[0];
    if (is_identity(composed) && can_replace(i, source)) {
      replacement_[f_.result(f_.op(i)).id] = source;
      erase_[i] = true;
      return true;
    }
    AttrSet attrs;
    attrs.set_ints(AttrKey::kPermutation, std::move(composed));
    f_.mutable_op(i).attrs = f_.context().intern_attrs(attrs);
    f_.set_operand(i, 0, source);
    return true;
  }

  bool fold_broadcast_of_splat(OpIndex i) {
    std::optional<double> value = splat_value(f_.operands(f_.op(i))[0]);
    if (!value) return false;
    AttrSet attrs;
    attrs.set_reals(AttrKey::kValue, {*value});
    Op& op = f_.mutable_op(i);
    op.kind = OpKind::kConstant;
    op.attrs = f_.context().intern_attrs(attrs);
    f_.reset_operands(i, {});
    return true;
  }

  Function& f_;
  std::vector<Value> replacement_;
  std::vector<bool> erase_;
  bool changed_ = false;
};

}  // namespace

Expected<bool> simplify(Module& module) {
  bool changed = false;
  for (size_t i = 0; i < module.num_functions(); ++i) {
    changed = FunctionSimplifier(module.function(i)).run() || changed;
  }
  return changed;
}

}  // namespace precast::ir
