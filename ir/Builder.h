// Builder: appends typed ops to a function with shape inference, so frontend code reads like
// the math (`b.dot_general(x, w, dims)` returns a typed value). Shape errors do not throw or
// abort: the first one is kept (status()) and the failing op yields an invalid Value, which
// later ops propagate silently, so callers check once at the end.
#pragma once

#include <array>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/Module.h"

namespace precast::ir {

struct DotDims {
  std::vector<int64_t> lhs_batch;
  std::vector<int64_t> rhs_batch;
  std::vector<int64_t> lhs_contract;
  std::vector<int64_t> rhs_contract;
};

struct AttentionOptions {
  double scale = 1.0;           // usually 1/sqrt(head_dim)
  bool causal = false;          // key position s may not exceed query position t
  int64_t sliding_window = 0;   // > 0: only |t - s| < window attends
  double softcap = 0.0;         // > 0: scores become softcap * tanh(scores / softcap)
  bool flash = false;           // the [T,S] score matrix is never materialised
  bool positions = false;       // the last two operands are the query and key positions
};

class Builder {
 public:
  explicit Builder(Function& function) : function_(&function) {}

  Function& function() const { return *function_; }
  Context& context() const { return function_->context(); }
  const TensorType& type(Value v) const { return function_->type(v); }

  // The first error met, or success.
  Status status() const;
  bool ok() const { return !error_.has_value(); }

  // Scope path given to the ops created next, e.g. "decoder/layers_0/mlp".
  void set_scope(std::string_view scope) { scope_ = context().intern_string(scope); }
  std::string_view scope() const { return context().string(scope_); }
  // Appends "/component" to the scope until the guard dies.
  class ScopeGuard {
   public:
    ScopeGuard(Builder& builder, std::string_view component);
    ~ScopeGuard() { builder_.scope_ = saved_; }
    ScopeGuard(const ScopeGuard&) = delete;
    ScopeGuard& operator=(const ScopeGuard&) = delete;

   private:
    Builder& builder_;
    StringId saved_;
  };

  // Facts (phase, region, decoder layer, block, site) given to the ops created next, exactly as
  // they are: what a pass does that rebuilds an op or makes ops for it (autodiff, the
  // partitioner). clone() keeps the source op's facts the same way.
  void set_facts(const OpFacts& facts) {
    facts_ = facts;
    name_places_ = false;
  }
  const OpFacts& facts() const { return facts_; }
  // The frontend's way: set the phase, region or layer, and the builder names each new op's
  // block and site from its scope (Context::block_of_scope, site_of_scope): a forward op's
  // block is its module instance, an op in a decoder layer gets its place in the layer.
  void set_phase(OpPhase phase) {
    facts_.phase = phase;
    name_places_ = true;
  }
  void set_region(OpRegion region) {
    facts_.region = region;
    name_places_ = true;
  }
  void set_layer(int16_t layer) {
    facts_.layer = layer;
    name_places_ = true;
  }

  Value param(const TensorType& type, std::string_view name = {},
              std::initializer_list<std::string_view> axes = {});
  void set_results(std::span<const Value> results);
  void set_results(std::initializer_list<Value> results) {
    set_results(std::span<const Value>(results.begin(), results.size()));
  }

  // Leaves. Float literals are rounded to the dtype.
  Value constant(double value, const TensorType& type);
  Value constant(std::span<const double> values, const TensorType& type);
  Value scalar(double value, DType dtype = DType::kF32);
  Value splat(double value, Value like);  // a constant of like's type
  Value iota(const TensorType& type, int64_t dimension);
  Value rng_bits(Value seed, std::vector<int64_t> dims, int64_t stream);
  Value rng_uniform(Value seed, const TensorType& type, int64_t stream);  // [0, 1)
  Value rng_normal(Value seed, const TensorType& type, int64_t stream);   // N(0, 1)
  // N(0, 1) truncated to [-bound, bound] (JAX's truncated_normal(-bound, bound)).
  Value rng_truncated_normal(Value seed, const TensorType& type, int64_t stream, double bound);

  // Elementwise.
  Value unary(OpKind kind, Value x);
  Value binary(OpKind kind, Value a, Value b);
  Value neg(Value x) { return unary(OpKind::kNeg, x); }
  Value exp(Value x) { return unary(OpKind::kExp, x); }
  Value log(Value x) { return unary(OpKind::kLog, x); }
  Value tanh(Value x) { return unary(OpKind::kTanh, x); }
  Value rsqrt(Value x) { return unary(OpKind::kRsqrt, x); }
  Value sqrt(Value x) { return unary(OpKind::kSqrt, x); }
  Value logistic(Value x) { return unary(OpKind::kLogistic, x); }
  Value add(Value a, Value b) { return binary(OpKind::kAdd, a, b); }
  Value sub(Value a, Value b) { return binary(OpKind::kSub, a, b); }
  Value mul(Value a, Value b) { return binary(OpKind::kMul, a, b); }
  Value div(Value a, Value b) { return binary(OpKind::kDiv, a, b); }
  Value max(Value a, Value b) { return binary(OpKind::kMax, a, b); }
  Value min(Value a, Value b) { return binary(OpKind::kMin, a, b); }
  Value pow(Value a, Value b) { return binary(OpKind::kPow, a, b); }
  Value compare(Value a, Value b, ComparisonDirection direction);
  Value select(Value predicate, Value on_true, Value on_false);
  Value convert(Value x, DType dtype);

  // Data movement.
  // dims[i] is the result dimension operand dimension i maps to (strictly increasing).
  Value broadcast_in_dim(Value x, std::vector<int64_t> result_dims, std::vector<int64_t> dims);
  // NumPy-style: the operand's dimensions align with the trailing result dimensions.
  Value broadcast_to(Value x, std::vector<int64_t> result_dims);
  Value reshape(Value x, std::vector<int64_t> dims);
  Value transpose(Value x, std::vector<int64_t> permutation);
  Value slice(Value x, std::vector<int64_t> start, std::vector<int64_t> limit,
              std::vector<int64_t> stride = {});
  Value concatenate(std::span<const Value> parts, int64_t dimension);
  Value pad(Value x, Value padding, std::vector<int64_t> low, std::vector<int64_t> high,
            std::vector<int64_t> interior = {});

  // Reductions and contractions.
  Value reduce(OpKind kind, Value x, std::vector<int64_t> dims);
  Value reduce_sum(Value x, std::vector<int64_t> dims) { return reduce(OpKind::kReduceSum, x, std::move(dims)); }
  Value reduce_max(Value x, std::vector<int64_t> dims) { return reduce(OpKind::kReduceMax, x, std::move(dims)); }
  // result_dtype: a floating type other than the operands' (bf16 x bf16 -> f32).
  Value dot_general(Value lhs, Value rhs, const DotDims& dims,
                    std::optional<DType> result_dtype = std::nullopt);
  // numpy.take: result = table.dims[:axis] + ids.dims + table.dims[axis+1:]; ids are clamped.
  Value take(Value table, Value ids, int64_t axis = 0);
  // The gradient of take: adds updates into target's rows ids; out-of-range ids are dropped.
  Value scatter_add(Value target, Value ids, Value updates, int64_t axis = 0);
  // jax.lax.top_k's indices: the k largest entries along the last dimension, largest first, the
  // lower index first among equal values; s32[..., k]. Not differentiable (read the values with
  // take or a one-hot mask, which carry the gradient).
  Value top_k(Value x, int64_t k);
  // MoE's grouped matmul: result [R,N,M], row (r, n) = lhs[r, n, :] · rhs[ids[r, n]] (lhs
  // [R,N,K], rhs [G,K,M]); an id outside [0, G) gives a zero row.
  Value grouped_dot(Value lhs, Value rhs, Value ids);
  // Its weight gradient: [groups, K, M], group g = Σ over rows with ids == g of lhsᵀ · dout.
  Value grouped_dot_weight_grad(Value lhs, Value dout, Value ids, int64_t groups);

  // Per-device ops (SPMD partitioning). A group is the devices that differ only in the
  // coordinates of `mesh_axes` (major to minor); `size` is the product of those axes' sizes.
  struct DeviceGroup {
    std::vector<std::string> mesh_axes;
    int64_t size = 1;
    bool dcn = false;  // spans slices
  };
  Value all_gather(Value x, int64_t dimension, const DeviceGroup& group);
  // The group's elementwise sum, or with `max` its maximum.
  Value all_reduce(Value x, const DeviceGroup& group, bool max = false);
  Value reduce_scatter(Value x, int64_t dimension, const DeviceGroup& group);
  // Splits split_dimension into group.size pieces, sends piece i to position i, and
  // concatenates what arrives along concat_dimension.
  Value all_to_all(Value x, int64_t split_dimension, int64_t concat_dimension,
                   const DeviceGroup& group);
  // Position i of the group receives position (i - shift) mod size's value.
  Value collective_permute(Value x, int64_t shift, const DeviceGroup& group);
  // MoE's expert-parallel exchange (MaxText's ragged_all_to_all): row (a, b) of x goes to group
  // position dest[a, b]; the result [group.size, capacity, ...] holds, per sending position, the
  // rows it sent here in its row order, zero past them. `combine` is the way back: x is such a
  // buffer and the result [A, B, ...] holds each row's answer from the position dest named.
  Value ragged_all_to_all(Value x, Value dest, int64_t capacity, bool combine,
                          const DeviceGroup& group);
  // This device's piece of x along `dimension` (no communication).
  Value shard_slice(Value x, int64_t dimension, const DeviceGroup& group);

  // Composites.
  Value attention(Value q, Value k, Value v, const AttentionOptions& options);
  Value attention(Value q, Value k, Value v, Value q_segment, Value kv_segment,
                  const AttentionOptions& options);
  // The backward of attention: {dq, dk, dv}, typed like q, k and v. `out` is the forward
  // result and `dout` its cotangent, both [B,T,H,Dv]; options as given to attention.
  std::array<Value, 3> attention_grad(Value q, Value k, Value v, Value out, Value dout,
                                      const AttentionOptions& options);
  std::array<Value, 3> attention_grad(Value q, Value k, Value v, Value out, Value dout,
                                      Value q_segment, Value kv_segment,
                                      const AttentionOptions& options);
  // Any operand list the ops take: (q, k, v [, q_segment, kv_segment] [, q_positions,
  // kv_positions]), the gradient's with out and dout after v; positions need options.positions.
  Value attention(std::span<const Value> operands, const AttentionOptions& options);
  // attention_stats: {out, max, sum} (ir/Composites.h).
  std::array<Value, 3> attention_stats(std::span<const Value> operands,
                                       const AttentionOptions& options);
  std::array<Value, 3> attention_grad(std::span<const Value> operands,
                                      const AttentionOptions& options);

  // Any op kind. `declared` gives the result types of ops that declare them (reshape, ...);
  // for others it may be empty or must match inference. Optional attributes equal to zero are
  // dropped so equal ops get equal attribute ids.
  std::vector<Value> create(OpKind kind, std::span<const Value> operands, const AttrSet& attrs,
                            std::span<const TensorType> declared = {});
  // Copies op `index` of `source` (any context) onto new operands, keeping its attributes,
  // scope, checkpoint name, facts, line and its results' names, axes and shardings.
  std::vector<Value> clone(const Function& source, OpIndex index, std::span<const Value> operands);
  // The same with other result types (a per-device copy) and attributes.
  std::vector<Value> clone(const Function& source, OpIndex index, std::span<const Value> operands,
                           std::span<const TensorType> declared, const AttrSet& attrs);

  // Annotations; each returns v for chaining. Axis names: one per dimension, "" for none.
  Value with_axes(Value v, std::span<const std::string_view> names);
  Value with_axes(Value v, std::initializer_list<std::string_view> names) {
    return with_axes(v, std::span<const std::string_view>(names.begin(), names.size()));
  }
  Value with_checkpoint(Value v, std::string_view name);  // names v's defining op
  Value with_name(Value v, std::string_view name);
  // Per dimension, the mesh axes v is split over; an empty list = replicated dimension.
  Value with_sharding(Value v, std::span<const std::vector<std::string>> dims);

 private:
  Value create_one(OpKind kind, std::span<const Value> operands, const AttrSet& attrs,
                   std::span<const TensorType> declared = {});
  Value create_one(OpKind kind, std::initializer_list<Value> operands, const AttrSet& attrs,
                   std::span<const TensorType> declared = {}) {
    return create_one(kind, std::span<const Value>(operands.begin(), operands.size()), attrs,
                      declared);
  }
  bool check_operands(OpKind kind, std::span<const Value> operands);
  AttrSet group_attrs(const DeviceGroup& group);
  void fail(std::string message);

  Function* function_;
  StringId scope_ = 0;
  OpFacts facts_;
  bool name_places_ = true;  // name block and site from the scope (false after set_facts)
  std::optional<Error> error_;
};

}  // namespace precast::ir
