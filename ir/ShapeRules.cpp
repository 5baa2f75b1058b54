#include "ir/ShapeRules.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "ir/Random.h"

namespace precast::ir {
namespace {

using Types = std::vector<TensorType>;

Error rule_error(std::string message) { return usage_error(std::move(message)); }

std::string list(std::span<const int64_t> values) {
  return fmt::format("[{}]", fmt::join(values, ", "));
}

// Generic attribute schema checks: only listed keys, required ones present, scalar kinds hold
// exactly one element.
Status check_attributes(const OpInfo& info, const AttrSet& attrs) {
  for (const Attribute& a : attrs.entries()) {
    bool listed = std::any_of(info.attrs.begin(), info.attrs.end(),
                              [&](const AttrSpec& s) { return s.key == a.key; });
    std::string_view name = attr_key_info(a.key).name;
    if (!listed) return rule_error(fmt::format("unexpected attribute '{}'", name));
    AttrKind kind = attr_key_info(a.key).kind;
    bool one_int = kind == AttrKind::kInt || kind == AttrKind::kFlag ||
                   kind == AttrKind::kDirection;
    if (one_int && (a.ints.size() != 1 || !a.reals.empty())) {
      return rule_error(fmt::format("attribute '{}' must hold one integer", name));
    }
    if (kind == AttrKind::kReal && (a.reals.size() != 1 || !a.ints.empty())) {
      return rule_error(fmt::format("attribute '{}' must hold one real", name));
    }
    if (kind == AttrKind::kFlag && a.ints[0] != 0 && a.ints[0] != 1) {
      return rule_error(fmt::format("attribute '{}' must be true or false", name));
    }
    if (kind == AttrKind::kDirection && (a.ints[0] < 0 || a.ints[0] > 5)) {
      return rule_error("attribute 'direction' is not one of eq, ne, lt, le, gt, ge");
    }
  }
  for (const AttrSpec& spec : info.attrs) {
    if (spec.required && !attrs.has(spec.key)) {
      return rule_error(fmt::format("missing attribute '{}'", attr_key_info(spec.key).name));
    }
  }
  return Status::success();
}

Status check_operand_count(const OpInfo& info, size_t count) {
  bool variadic = info.max_operands == kVariadic;
  if (count >= info.min_operands && (variadic || count <= info.max_operands)) {
    return Status::success();
  }
  if (variadic) {
    return rule_error(fmt::format("expects at least {} operands, got {}", info.min_operands, count));
  }
  if (info.min_operands == info.max_operands) {
    return rule_error(fmt::format("expects {} operand{}, got {}", info.min_operands,
                                  info.min_operands == 1 ? "" : "s", count));
  }
  return rule_error(fmt::format("expects {} to {} operands, got {}", info.min_operands,
                                info.max_operands, count));
}

// Each entry of `dims` names a dimension of a rank-`rank` tensor, at most once.
Status check_dim_list(std::span<const int64_t> dims, int64_t rank, std::string_view what) {
  std::vector<bool> seen(static_cast<size_t>(std::max<int64_t>(rank, 0)), false);
  for (int64_t d : dims) {
    if (d < 0 || d >= rank) {
      return rule_error(fmt::format("{} {} has dimension {} out of range for rank {}", what,
                                    list(dims), d, rank));
    }
    if (seen[d]) {
      return rule_error(fmt::format("{} {} names dimension {} twice", what, list(dims), d));
    }
    seen[d] = true;
  }
  return Status::success();
}

Status check_strictly_increasing(std::span<const int64_t> dims, std::string_view what) {
  for (size_t i = 1; i < dims.size(); ++i) {
    if (dims[i] <= dims[i - 1]) {
      return rule_error(fmt::format("{} {} must be strictly increasing", what, list(dims)));
    }
  }
  return Status::success();
}

Status check_dtype(DTypeSet allowed, DType dtype, std::string_view what) {
  if (allowed.contains(dtype)) return Status::success();
  return rule_error(
      fmt::format("{} has element type {}; expected {}", what, dtype_name(dtype), allowed.describe()));
}

Status check_length(std::span<const int64_t> values, int64_t rank, std::string_view what) {
  if (static_cast<int64_t>(values.size()) == rank) return Status::success();
  return rule_error(
      fmt::format("{} {} has {} entries but the operand has rank {}", what, list(values),
                  values.size(), rank));
}

const TensorType& declared_result(const OpSignature& op) { return op.declared[0]; }

}  // namespace

Expected<std::vector<TensorType>> infer_result_types(const OpSignature& op) {
  const OpInfo& info = op_info(op.kind);
  PRECAST_RETURN_IF_ERROR(check_operand_count(info, op.operands.size()));
  PRECAST_RETURN_IF_ERROR(check_attributes(info, op.attrs));
  if (!op.declared.empty() && op.declared.size() != info.num_results) {
    return rule_error(fmt::format("has {} result types, expected {}", op.declared.size(),
                                  info.num_results));
  }
  if (info.declares_result_type && op.declared.empty()) {
    return rule_error("needs its result type to be given");
  }
  for (const TensorType& t : op.declared) {
    for (int64_t d : t.dims) {
      if (d < 0) return rule_error(fmt::format("result type {} has a negative dimension", to_string(t)));
    }
  }
  return info.infer(op);
}

namespace shape_rules {

Expected<Types> constant(const OpSignature& op) {
  const TensorType& result = declared_result(op);
  std::span<const double> values = op.attrs.reals(AttrKey::kValue);
  int64_t n = result.num_elements();
  if (values.size() != 1 && static_cast<int64_t>(values.size()) != n) {
    return rule_error(fmt::format("literal has {} values but {} has {} elements", values.size(),
                                  to_string(result), n));
  }
  for (double v : values) {
    bool integral = std::isfinite(v) && std::trunc(v) == v;
    if (result.dtype == DType::kPred && v != 0.0 && v != 1.0) {
      return rule_error(fmt::format("literal value {} is not a pred (true or false)", v));
    }
    if (result.dtype == DType::kS32 && !(integral && v >= -2147483648.0 && v <= 2147483647.0)) {
      return rule_error(fmt::format("literal value {} is not an s32", v));
    }
    if (result.dtype == DType::kU32 && !(integral && v >= 0.0 && v <= 4294967295.0)) {
      return rule_error(fmt::format("literal value {} is not a u32", v));
    }
  }
  return Types{result};
}

Expected<Types> iota(const OpSignature& op) {
  const TensorType& result = declared_result(op);
  PRECAST_RETURN_IF_ERROR(check_dtype(op_info(op.kind).dtypes, result.dtype, "result"));
  int64_t d = op.attrs.integer(AttrKey::kDimension);
  if (d < 0 || d >= result.rank()) {
    return rule_error(fmt::format("dimension {} is out of range for result {}", d, to_string(result)));
  }
  return Types{result};
}

Expected<Types> rng(const OpSignature& op) {
  const TensorType& seed = *op.operands[0];
  if (!seed.is_scalar() || !kIntegerTypes.contains(seed.dtype)) {
    return rule_error(fmt::format("seed must be an s32 or u32 scalar, got {}", to_string(seed)));
  }
  int64_t stream = op.attrs.integer(AttrKey::kStream);
  if (stream < 0 || stream > 0xffffffffLL) {
    return rule_error(fmt::format("stream {} is outside [0, 2^32)", stream));
  }
  double truncate = op.attrs.real(AttrKey::kTruncate);
  if (!(truncate == 0.0 || (std::isfinite(truncate) && truncate >= kMinTruncation))) {
    return rule_error(fmt::format(
        "truncate {} must be 0 (no truncation) or a finite bound of at least {} (a draw is "
        "redrawn at most {} times)",
        truncate, kMinTruncation, kTruncationAttempts - 1));
  }
  const TensorType& result = declared_result(op);
  PRECAST_RETURN_IF_ERROR(check_dtype(op_info(op.kind).dtypes, result.dtype, "result"));
  return Types{result};
}

Expected<Types> unary(const OpSignature& op) {
  const TensorType& x = *op.operands[0];
  PRECAST_RETURN_IF_ERROR(check_dtype(op_info(op.kind).dtypes, x.dtype, "operand"));
  if (op.kind == OpKind::kIsFinite) return Types{TensorType{DType::kPred, x.dims}};
  return Types{x};
}

Expected<Types> binary(const OpSignature& op) {
  const TensorType& a = *op.operands[0];
  const TensorType& b = *op.operands[1];
  if (a != b) {
    return rule_error(fmt::format(
        "operand types {} and {} differ; elementwise ops need equal types (broadcast explicitly)",
        to_string(a), to_string(b)));
  }
  PRECAST_RETURN_IF_ERROR(check_dtype(op_info(op.kind).dtypes, a.dtype, "operand"));
  return Types{a};
}

Expected<Types> compare(const OpSignature& op) {
  const TensorType& a = *op.operands[0];
  const TensorType& b = *op.operands[1];
  if (a != b) {
    return rule_error(
        fmt::format("operand types {} and {} differ", to_string(a), to_string(b)));
  }
  return Types{TensorType{DType::kPred, a.dims}};
}

Expected<Types> select(const OpSignature& op) {
  const TensorType& predicate = *op.operands[0];
  const TensorType& on_true = *op.operands[1];
  const TensorType& on_false = *op.operands[2];
  if (predicate.dtype != DType::kPred) {
    return rule_error(fmt::format("predicate must be pred, got {}", to_string(predicate)));
  }
  if (on_true != on_false) {
    return rule_error(fmt::format("branch types {} and {} differ", to_string(on_true),
                                  to_string(on_false)));
  }
  if (predicate.dims != on_true.dims) {
    return rule_error(fmt::format("predicate shape {} differs from branch shape {}",
                                  to_string(predicate), to_string(on_true)));
  }
  return Types{on_true};
}

Expected<Types> convert(const OpSignature& op) {
  const TensorType& x = *op.operands[0];
  const TensorType& result = declared_result(op);
  if (x.dims != result.dims) {
    return rule_error(fmt::format("result {} must have the operand's shape {}", to_string(result),
                                  to_string(x)));
  }
  return Types{result};
}

Expected<Types> broadcast_in_dim(const OpSignature& op) {
  const TensorType& x = *op.operands[0];
  const TensorType& result = declared_result(op);
  std::span<const int64_t> dims = op.attrs.ints(AttrKey::kDims);
  if (result.dtype != x.dtype) {
    return rule_error(fmt::format("result {} must keep the operand's element type {}",
                                  to_string(result), dtype_name(x.dtype)));
  }
  PRECAST_RETURN_IF_ERROR(check_length(dims, x.rank(), "dims"));
  PRECAST_RETURN_IF_ERROR(check_dim_list(dims, result.rank(), "dims"));
  PRECAST_RETURN_IF_ERROR(check_strictly_increasing(dims, "dims"));
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t from = x.dims[i];
    int64_t to = result.dims[dims[i]];
    if (from != 1 && from != to) {
      return rule_error(fmt::format("operand dimension {} (size {}) cannot broadcast to result "
                                    "dimension {} (size {})",
                                    i, from, dims[i], to));
    }
  }
  return Types{result};
}

Expected<Types> reshape(const OpSignature& op) {
  const TensorType& x = *op.operands[0];
  const TensorType& result = declared_result(op);
  if (result.dtype != x.dtype) {
    return rule_error(fmt::format("result {} must keep the operand's element type {}",
                                  to_string(result), dtype_name(x.dtype)));
  }
  if (result.num_elements() != x.num_elements()) {
    return rule_error(fmt::format("cannot reshape {} ({} elements) to {} ({} elements)",
                                  to_string(x), x.num_elements(), to_string(result),
                                  result.num_elements()));
  }
  return Types{result};
}

Expected<Types> transpose(const OpSignature& op) {
  const TensorType& x = *op.operands[0];
  std::span<const int64_t> permutation = op.attrs.ints(AttrKey::kPermutation);
  PRECAST_RETURN_IF_ERROR(check_length(permutation, x.rank(), "permutation"));
  PRECAST_RETURN_IF_ERROR(check_dim_list(permutation, x.rank(), "permutation"));
  TensorType result{x.dtype, {}};
  for (int64_t p : permutation) result.dims.push_back(x.dims[p]);
  return Types{result};
}

Expected<Types> slice(const OpSignature& op) {
  const TensorType& x = *op.operands[0];
  std::span<const int64_t> start = op.attrs.ints(AttrKey::kStart);
  std::span<const int64_t> limit = op.attrs.ints(AttrKey::kLimit);
  std::span<const int64_t> stride = op.attrs.ints(AttrKey::kStride);
  PRECAST_RETURN_IF_ERROR(check_length(start, x.rank(), "start"));
  PRECAST_RETURN_IF_ERROR(check_length(limit, x.rank(), "limit"));
  if (!stride.empty()) PRECAST_RETURN_IF_ERROR(check_length(stride, x.rank(), "stride"));
  TensorType result{x.dtype, {}};
  for (int64_t i = 0; i < x.rank(); ++i) {
    int64_t step = stride.empty() ? 1 : stride[i];
    if (step < 1) return rule_error(fmt::format("stride {} must be positive", list(stride)));
    if (start[i] < 0 || start[i] > limit[i] || limit[i] > x.dims[i]) {
      return rule_error(fmt::format(
          "dimension {}: need 0 <= start ({}) <= limit ({}) <= size ({})", i, start[i], limit[i],
          x.dims[i]));
    }
    result.dims.push_back((limit[i] - start[i] + step - 1) / step);
  }
  return Types{result};
}

Expected<Types> concatenate(const OpSignature& op) {
  const TensorType& first = *op.operands[0];
  int64_t d = op.attrs.integer(AttrKey::kDimension);
  if (d < 0 || d >= first.rank()) {
    return rule_error(fmt::format("dimension {} is out of range for rank {}", d, first.rank()));
  }
  TensorType result = first;
  result.dims[d] = 0;
  for (size_t i = 0; i < op.operands.size(); ++i) {
    const TensorType& t = *op.operands[i];
    bool compatible = t.dtype == first.dtype && t.rank() == first.rank();
    for (int64_t j = 0; compatible && j < t.rank(); ++j) {
      compatible = j == d || t.dims[j] == first.dims[j];
    }
    if (!compatible) {
      return rule_error(fmt::format("operand {} ({}) does not match operand 0 ({}) outside "
                                    "dimension {}",
                                    i, to_string(t), to_string(first), d));
    }
    result.dims[d] += t.dims[d];
  }
  return Types{result};
}

Expected<Types> pad(const OpSignature& op) {
  const TensorType& x = *op.operands[0];
  const TensorType& padding = *op.operands[1];
  if (!padding.is_scalar() || padding.dtype != x.dtype) {
    return rule_error(fmt::format("padding value must be a {} scalar, got {}", dtype_name(x.dtype),
                                  to_string(padding)));
  }
  std::span<const int64_t> low = op.attrs.ints(AttrKey::kLow);
  std::span<const int64_t> high = op.attrs.ints(AttrKey::kHigh);
  std::span<const int64_t> interior = op.attrs.ints(AttrKey::kInterior);
  PRECAST_RETURN_IF_ERROR(check_length(low, x.rank(), "low"));
  PRECAST_RETURN_IF_ERROR(check_length(high, x.rank(), "high"));
  if (!interior.empty()) PRECAST_RETURN_IF_ERROR(check_length(interior, x.rank(), "interior"));
  TensorType result{x.dtype, {}};
  for (int64_t i = 0; i < x.rank(); ++i) {
    int64_t inner = interior.empty() ? 0 : interior[i];
    if (inner < 0) return rule_error(fmt::format("interior {} must not be negative", list(interior)));
    int64_t size = low[i] + high[i] + x.dims[i] + std::max<int64_t>(x.dims[i] - 1, 0) * inner;
    if (size < 0) {
      return rule_error(fmt::format("dimension {} would have negative size {}", i, size));
    }
    result.dims.push_back(size);
  }
  return Types{result};
}

Expected<Types> reduce(const OpSignature& op) {
  const TensorType& x = *op.operands[0];
  std::span<const int64_t> dims = op.attrs.ints(AttrKey::kDims);
  PRECAST_RETURN_IF_ERROR(check_dtype(op_info(op.kind).dtypes, x.dtype, "operand"));
  PRECAST_RETURN_IF_ERROR(check_dim_list(dims, x.rank(), "dims"));
  PRECAST_RETURN_IF_ERROR(check_strictly_increasing(dims, "dims"));
  TensorType result{x.dtype, {}};
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (std::find(dims.begin(), dims.end(), i) == dims.end()) result.dims.push_back(x.dims[i]);
  }
  return Types{result};
}

namespace {

Status check_dim_pairs(const TensorType& lhs, const TensorType& rhs,
                       std::span<const int64_t> lhs_dims, std::span<const int64_t> rhs_dims,
                       std::string_view what) {
  if (lhs_dims.size() != rhs_dims.size()) {
    return rule_error(fmt::format("lhs_{0} {1} and rhs_{0} {2} differ in length", what,
                                  list(lhs_dims), list(rhs_dims)));
  }
  for (size_t i = 0; i < lhs_dims.size(); ++i) {
    int64_t a = lhs.dims[lhs_dims[i]];
    int64_t b = rhs.dims[rhs_dims[i]];
    if (a != b) {
      return rule_error(fmt::format("{} dimension pair {}: lhs dimension {} has size {} but rhs "
                                    "dimension {} has size {}",
                                    what, i, lhs_dims[i], a, rhs_dims[i], b));
    }
  }
  return Status::success();
}

std::vector<int64_t> concat(std::span<const int64_t> a, std::span<const int64_t> b) {
  std::vector<int64_t> out(a.begin(), a.end());
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

void append_free_dims(const TensorType& t, std::span<const int64_t> batch,
                      std::span<const int64_t> contract, std::vector<int64_t>& out) {
  for (int64_t i = 0; i < t.rank(); ++i) {
    bool used = std::find(batch.begin(), batch.end(), i) != batch.end() ||
                std::find(contract.begin(), contract.end(), i) != contract.end();
    if (!used) out.push_back(t.dims[i]);
  }
}

}  // namespace

Expected<Types> dot_general(const OpSignature& op) {
  const TensorType& lhs = *op.operands[0];
  const TensorType& rhs = *op.operands[1];
  std::span<const int64_t> lhs_batch = op.attrs.ints(AttrKey::kLhsBatch);
  std::span<const int64_t> rhs_batch = op.attrs.ints(AttrKey::kRhsBatch);
  std::span<const int64_t> lhs_contract = op.attrs.ints(AttrKey::kLhsContract);
  std::span<const int64_t> rhs_contract = op.attrs.ints(AttrKey::kRhsContract);
  if (lhs.dtype != rhs.dtype) {
    return rule_error(fmt::format("operand element types {} and {} differ", dtype_name(lhs.dtype),
                                  dtype_name(rhs.dtype)));
  }
  PRECAST_RETURN_IF_ERROR(check_dtype(kNumericTypes, lhs.dtype, "lhs"));
  PRECAST_RETURN_IF_ERROR(
      check_dim_list(concat(lhs_batch, lhs_contract), lhs.rank(), "lhs batch+contract dims"));
  PRECAST_RETURN_IF_ERROR(
      check_dim_list(concat(rhs_batch, rhs_contract), rhs.rank(), "rhs batch+contract dims"));
  PRECAST_RETURN_IF_ERROR(check_dim_pairs(lhs, rhs, lhs_batch, rhs_batch, "batch"));
  PRECAST_RETURN_IF_ERROR(check_dim_pairs(lhs, rhs, lhs_contract, rhs_contract, "contract"));
  // Mixed precision: floating operands may produce another floating type (bf16 x bf16 -> f32).
  DType result_dtype = lhs.dtype;
  if (!op.declared.empty() && is_floating(lhs.dtype) && is_floating(op.declared[0].dtype)) {
    result_dtype = op.declared[0].dtype;
  }
  TensorType result{result_dtype, {}};
  for (int64_t d : lhs_batch) result.dims.push_back(lhs.dims[d]);
  append_free_dims(lhs, lhs_batch, lhs_contract, result.dims);
  append_free_dims(rhs, rhs_batch, rhs_contract, result.dims);
  return Types{result};
}

Expected<Types> take(const OpSignature& op) {
  const TensorType& table = *op.operands[0];
  const TensorType& ids = *op.operands[1];
  int64_t axis = op.attrs.integer(AttrKey::kAxis);
  if (!kIntegerTypes.contains(ids.dtype)) {
    return rule_error(fmt::format("indices must be s32 or u32, got {}", to_string(ids)));
  }
  if (axis < 0 || axis >= table.rank()) {
    return rule_error(fmt::format("axis {} is out of range for table {}", axis, to_string(table)));
  }
  TensorType result{table.dtype, {}};
  result.dims.assign(table.dims.begin(), table.dims.begin() + axis);
  result.dims.insert(result.dims.end(), ids.dims.begin(), ids.dims.end());
  result.dims.insert(result.dims.end(), table.dims.begin() + axis + 1, table.dims.end());
  return Types{result};
}

Expected<Types> top_k(const OpSignature& op) {
  const TensorType& x = *op.operands[0];
  int64_t k = op.attrs.integer(AttrKey::kK);
  PRECAST_RETURN_IF_ERROR(check_dtype(op_info(op.kind).dtypes, x.dtype, "operand"));
  if (x.rank() < 1) return rule_error("operand must have at least one dimension");
  if (k < 1 || k > x.dims.back()) {
    return rule_error(fmt::format("k {} must be in [1, {}] (the last dimension of {})", k,
                                  x.dims.back(), to_string(x)));
  }
  TensorType result{DType::kS32, x.dims};
  result.dims.back() = k;
  return Types{result};
}

Expected<Types> scatter_add(const OpSignature& op) {
  const TensorType& target = *op.operands[0];
  const TensorType& ids = *op.operands[1];
  const TensorType& updates = *op.operands[2];
  int64_t axis = op.attrs.integer(AttrKey::kAxis);
  PRECAST_RETURN_IF_ERROR(check_dtype(kNumericTypes, target.dtype, "operand"));
  if (!kIntegerTypes.contains(ids.dtype)) {
    return rule_error(fmt::format("indices must be s32 or u32, got {}", to_string(ids)));
  }
  if (axis < 0 || axis >= target.rank()) {
    return rule_error(fmt::format("axis {} is out of range for operand {}", axis, to_string(target)));
  }
  TensorType expected{target.dtype, {}};
  expected.dims.assign(target.dims.begin(), target.dims.begin() + axis);
  expected.dims.insert(expected.dims.end(), ids.dims.begin(), ids.dims.end());
  expected.dims.insert(expected.dims.end(), target.dims.begin() + axis + 1, target.dims.end());
  if (updates != expected) {
    return rule_error(fmt::format("updates must be {} (what take would return), got {}",
                                  to_string(expected), to_string(updates)));
  }
  return Types{target};
}

namespace {

// The checks grouped_dot and its weight gradient share: lhs [R,N,K], a second float operand of
// lhs's dtype, ids s32/u32 [R,N].
Status check_grouped_operands(const OpSignature& op) {
  const TensorType& lhs = *op.operands[0];
  const TensorType& other = *op.operands[1];
  const TensorType& ids = *op.operands[2];
  PRECAST_RETURN_IF_ERROR(check_dtype(kFloatTypes, lhs.dtype, "operand"));
  if (other.dtype != lhs.dtype) {
    return rule_error(fmt::format("operands {} and {} must have one element type", to_string(lhs),
                                  to_string(other)));
  }
  if (lhs.rank() != 3) return rule_error(fmt::format("lhs {} must be [R,N,K]", to_string(lhs)));
  if (!kIntegerTypes.contains(ids.dtype) || ids.rank() != 2 || ids.dims[0] != lhs.dims[0] ||
      ids.dims[1] != lhs.dims[1]) {
    return rule_error(fmt::format("ids must be s32 or u32 [{}, {}] (lhs's rows), got {}",
                                  lhs.dims[0], lhs.dims[1], to_string(ids)));
  }
  return Status::success();
}

}  // namespace

Expected<Types> grouped_dot(const OpSignature& op) {
  PRECAST_RETURN_IF_ERROR(check_grouped_operands(op));
  const TensorType& lhs = *op.operands[0];
  const TensorType& rhs = *op.operands[1];
  if (rhs.rank() != 3 || rhs.dims[1] != lhs.dims[2]) {
    return rule_error(fmt::format("rhs {} must be [G, {}, M] (lhs's K)", to_string(rhs),
                                  lhs.dims[2]));
  }
  return Types{TensorType{lhs.dtype, {lhs.dims[0], lhs.dims[1], rhs.dims[2]}}};
}

Expected<Types> grouped_dot_weight_grad(const OpSignature& op) {
  PRECAST_RETURN_IF_ERROR(check_grouped_operands(op));
  const TensorType& lhs = *op.operands[0];
  const TensorType& dout = *op.operands[1];
  const TensorType& result = declared_result(op);
  if (dout.rank() != 3 || dout.dims[0] != lhs.dims[0] || dout.dims[1] != lhs.dims[1]) {
    return rule_error(fmt::format("dout {} must be [{}, {}, M] (lhs's rows)", to_string(dout),
                                  lhs.dims[0], lhs.dims[1]));
  }
  if (result.dtype != lhs.dtype || result.rank() != 3 || result.dims[1] != lhs.dims[2] ||
      result.dims[2] != dout.dims[2]) {
    return rule_error(fmt::format("result {} must be {}[G, {}, {}]", to_string(result),
                                  dtype_name(lhs.dtype), lhs.dims[2], dout.dims[2]));
  }
  return Types{result};
}

Expected<Types> attention(const OpSignature& op) {
  const bool positions = op.attrs.flag(AttrKey::kPositions);
  const size_t count = op.operands.size();
  if (!positions && count != 3 && count != 5) {
    return rule_error(fmt::format(
        "expects 3 operands (q, k, v) or 5 (q, k, v, q_segment, kv_segment), got {}", count));
  }
  if (positions && count != 5 && count != 7) {
    return rule_error(fmt::format(
        "with positions=true expects 5 operands (q, k, v, q_positions, kv_positions) or 7 (q, k, "
        "v, q_segment, kv_segment, q_positions, kv_positions), got {}",
        count));
  }
  const TensorType& q = *op.operands[0];
  const TensorType& k = *op.operands[1];
  const TensorType& v = *op.operands[2];
  if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4) {
    return rule_error(fmt::format("q, k, v must be rank 4 ([B,T,H,D], [B,S,K,D], [B,S,K,Dv]), got "
                                  "{}, {}, {}",
                                  to_string(q), to_string(k), to_string(v)));
  }
  if (k.dtype != q.dtype || v.dtype != q.dtype) {
    return rule_error("q, k and v must have the same element type");
  }
  PRECAST_RETURN_IF_ERROR(check_dtype(kFloatTypes, q.dtype, "q"));
  int64_t batch = q.dims[0], heads = q.dims[2], kv_heads = k.dims[2];
  if (k.dims[0] != batch || v.dims[0] != batch) {
    return rule_error("q, k and v must have the same batch size");
  }
  if (k.dims[1] != v.dims[1] || v.dims[2] != kv_heads) {
    return rule_error(fmt::format("k {} and v {} must agree on [B,S,K]", to_string(k), to_string(v)));
  }
  if (k.dims[3] != q.dims[3]) {
    return rule_error(fmt::format("q head dim {} differs from k head dim {}", q.dims[3], k.dims[3]));
  }
  if (kv_heads == 0 || heads % kv_heads != 0) {
    return rule_error(fmt::format("query heads ({}) must be a multiple of kv heads ({})", heads,
                                  kv_heads));
  }
  if (count == (positions ? 7u : 5u)) {
    const TensorType& q_segment = *op.operands[3];
    const TensorType& kv_segment = *op.operands[4];
    TensorType want_q{DType::kS32, {batch, q.dims[1]}};
    TensorType want_kv{DType::kS32, {batch, k.dims[1]}};
    if (q_segment != want_q || kv_segment != want_kv) {
      return rule_error(fmt::format("segment ids must be {} and {}, got {} and {}",
                                    to_string(want_q), to_string(want_kv), to_string(q_segment),
                                    to_string(kv_segment)));
    }
  }
  if (positions) {
    const TensorType& q_positions = *op.operands[count - 2];
    const TensorType& kv_positions = *op.operands[count - 1];
    TensorType want_q{DType::kS32, {q.dims[1]}};
    TensorType want_kv{DType::kS32, {k.dims[1]}};
    if (q_positions != want_q || kv_positions != want_kv) {
      return rule_error(fmt::format("positions must be {} and {}, got {} and {}",
                                    to_string(want_q), to_string(want_kv), to_string(q_positions),
                                    to_string(kv_positions)));
    }
  }
  double scale = op.attrs.real(AttrKey::kScale);
  double softcap = op.attrs.real(AttrKey::kSoftcap);
  if (!std::isfinite(scale) || scale == 0.0) {
    return rule_error(fmt::format("scale {} must be finite and non-zero", scale));
  }
  if (!(softcap >= 0.0) || !std::isfinite(softcap)) {
    return rule_error(fmt::format("softcap {} must be finite and >= 0", softcap));
  }
  if (op.attrs.integer(AttrKey::kSlidingWindow) < 0) {
    return rule_error("sliding_window must be >= 0");
  }
  return Types{TensorType{q.dtype, {batch, q.dims[1], heads, v.dims[3]}}};
}

// attention's result, then the rows' softmax max and sum [B,T,H] (f64 for f64 operands, else
// f32).
Expected<Types> attention_stats(const OpSignature& op) {
  PRECAST_ASSIGN_OR_RETURN(Types out, attention(op));
  const TensorType& q = *op.operands[0];
  DType rows = q.dtype == DType::kF64 ? DType::kF64 : DType::kF32;
  out.push_back(TensorType{rows, {q.dims[0], q.dims[1], q.dims[2]}});
  out.push_back(out.back());
  return out;
}

// Operands (q, k, v, out, dout [, q_segment, kv_segment] [, q_positions, kv_positions]): the
// forward operands go through attention's rule, whose result type out and dout must both have.
Expected<Types> attention_grad(const OpSignature& op) {
  const size_t count = op.operands.size();
  const bool positions = op.attrs.flag(AttrKey::kPositions);
  if (count != 5 + (positions ? 2u : 0u) && count != 7 + (positions ? 2u : 0u)) {
    return rule_error(positions
                          ? fmt::format("with positions=true expects 7 operands (q, k, v, out, "
                                        "dout, q_positions, kv_positions) or 9 (with q_segment, "
                                        "kv_segment before the positions), got {}",
                                        count)
                          : fmt::format("expects 5 operands (q, k, v, out, dout) or 7 (q, k, v, "
                                        "out, dout, q_segment, kv_segment), got {}",
                                        count));
  }
  std::vector<const TensorType*> forward_operands = {op.operands[0], op.operands[1],
                                                     op.operands[2]};
  for (size_t n = 5; n < count; ++n) forward_operands.push_back(op.operands[n]);
  PRECAST_ASSIGN_OR_RETURN(
      Types forward, attention(OpSignature{OpKind::kAttention, forward_operands, op.attrs, {}}));
  const TensorType& expected = forward[0];
  const TensorType& out = *op.operands[3];
  const TensorType& dout = *op.operands[4];
  if (out != expected) {
    return rule_error(fmt::format("out must be {} (the attention result [B,T,H,Dv]), got {}",
                                  to_string(expected), to_string(out)));
  }
  if (dout != expected) {
    return rule_error(fmt::format("dout must be {} (the attention result [B,T,H,Dv]), got {}",
                                  to_string(expected), to_string(dout)));
  }
  return Types{*op.operands[0], *op.operands[1], *op.operands[2]};
}

// Collectives and shard_slice, in a per-device module. The group is `group_size` devices;
// all_gather concatenates their pieces along `dimension`, reduce_scatter sums and keeps this
// device's piece, all_to_all splits `split_dimension` and concatenates along `dimension`.
Expected<Types> collective(const OpSignature& op) {
  const TensorType& x = *op.operands[0];
  int64_t group = op.attrs.integer(AttrKey::kGroupSize);
  if (group < 1) return rule_error(fmt::format("group_size must be at least 1, got {}", group));
  if (op.attrs.ints(AttrKey::kMeshAxes).empty()) {
    return rule_error("mesh_axes must name at least one mesh axis");
  }
  if (op.kind == OpKind::kAllReduce || op.kind == OpKind::kReduceScatter) {
    PRECAST_RETURN_IF_ERROR(check_dtype(kNumericTypes, x.dtype, "operand"));
  }
  if (op.kind == OpKind::kAllReduce) return Types{x};
  if (op.kind == OpKind::kCollectivePermute) {
    int64_t shift = op.attrs.integer(AttrKey::kShift);
    if (shift <= -group || shift >= group) {
      return rule_error(fmt::format("shift {} is outside (-{}, {})", shift, group, group));
    }
    return Types{x};
  }
  auto check_dim = [&](AttrKey key) -> Status {
    int64_t d = op.attrs.integer(key);
    if (d < 0 || d >= x.rank()) {
      return rule_error(fmt::format("{} {} is out of range for operand {}",
                                    attr_key_info(key).name, d, to_string(x)));
    }
    return Status::success();
  };
  PRECAST_RETURN_IF_ERROR(check_dim(AttrKey::kDimension));
  size_t d = static_cast<size_t>(op.attrs.integer(AttrKey::kDimension));
  TensorType result = x;
  auto split = [&](size_t dim) -> Status {
    if (x.dims[dim] % group != 0) {
      return rule_error(fmt::format("dimension {} of {} does not split into {} equal pieces", dim,
                                    to_string(x), group));
    }
    result.dims[dim] /= group;
    return Status::success();
  };
  switch (op.kind) {
    case OpKind::kAllGather:
      result.dims[d] *= group;
      break;
    case OpKind::kReduceScatter:
    case OpKind::kShardSlice:
      PRECAST_RETURN_IF_ERROR(split(d));
      break;
    case OpKind::kAllToAll: {
      PRECAST_RETURN_IF_ERROR(check_dim(AttrKey::kSplitDimension));
      PRECAST_RETURN_IF_ERROR(split(static_cast<size_t>(op.attrs.integer(AttrKey::kSplitDimension))));
      result.dims[d] *= group;
      break;
    }
    default:
      break;
  }
  return Types{result};
}

Expected<Types> ragged_all_to_all(const OpSignature& op) {
  const TensorType& x = *op.operands[0];
  const TensorType& dest = *op.operands[1];
  int64_t group = op.attrs.integer(AttrKey::kGroupSize);
  int64_t capacity = op.attrs.integer(AttrKey::kCapacity);
  if (group < 1) return rule_error(fmt::format("group_size must be at least 1, got {}", group));
  if (capacity < 1) return rule_error(fmt::format("capacity must be at least 1, got {}", capacity));
  if (op.attrs.ints(AttrKey::kMeshAxes).empty()) {
    return rule_error("mesh_axes must name at least one mesh axis");
  }
  if (dest.dtype != DType::kS32 || dest.rank() != 2) {
    return rule_error(fmt::format("dest {} must be s32[A, B]", to_string(dest)));
  }
  if (x.rank() < 2) return rule_error(fmt::format("operand {} needs rank >= 2", to_string(x)));
  TensorType result = x;
  if (op.attrs.flag(AttrKey::kCombine)) {
    if (x.dims[0] != group || x.dims[1] != capacity) {
      return rule_error(fmt::format("combine's operand {} must be [{}, {}, ...] (group_size, "
                                    "capacity)",
                                    to_string(x), group, capacity));
    }
    result.dims[0] = dest.dims[0];
    result.dims[1] = dest.dims[1];
    return Types{result};
  }
  if (x.dims[0] != dest.dims[0] || x.dims[1] != dest.dims[1]) {
    return rule_error(fmt::format("dest {} must match the operand's rows {}", to_string(dest),
                                  to_string(x)));
  }
  result.dims[0] = group;
  result.dims[1] = capacity;
  return Types{result};
}

}  // namespace shape_rules
}  // namespace precast::ir
