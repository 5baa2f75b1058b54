#include "tests/support/IrTestSupport.h"

#include <cmath>

#include "ir/Parser.h"
#include "ir/Verifier.h"

namespace precast::ir::testing {

Module parse_or_fail(std::string_view text) {
  Expected<Module> m = parse_module(text, ParseOptions{"test.ir", 1});
  if (!m.ok()) {
    ADD_FAILURE() << "parse failed: " << m.error().message();
    return Module();
  }
  return std::move(m).value();
}

std::string verify_message(std::string_view text) {
  Module m = parse_or_fail(text);
  Status s = verify_module(m);
  return s.ok() ? "" : s.error().message();
}

std::string parse_message(std::string_view text) {
  Expected<Module> m = parse_module(text, ParseOptions{"test.ir", 1});
  return m.ok() ? "" : m.error().message();
}

HostTensor tensor(DType dtype, std::vector<int64_t> dims, std::vector<double> values) {
  return HostTensor::of(TensorType{dtype, std::move(dims)}, std::move(values));
}

HostTensor eval_op(std::string_view op_text, const std::vector<HostTensor>& arguments,
                   const InterpreterOptions& options) {
  std::string params;
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (i > 0) params += ", ";
    params += "%" + std::string(1, static_cast<char>('a' + i)) + ": " + to_string(arguments[i].type);
  }
  size_t colon = op_text.rfind(" : ");
  std::string result_type(op_text.substr(colon + 3));
  std::string text = "func @f(" + params + ") -> (" + result_type + ") {\n  %r = " +
                     std::string(op_text) + "\n  return %r\n}\n";
  Module m = parse_or_fail(text);
  Expected<std::vector<HostTensor>> results = interpret(m, "f", arguments, options);
  if (!results.ok()) {
    ADD_FAILURE() << "interpret failed: " << results.error().message() << "\n" << text;
    return HostTensor{};
  }
  return (*results)[0];
}

std::vector<double> pseudo_random(size_t count, uint32_t seed) {
  std::vector<double> out(count);
  uint64_t state = seed * 2654435761ULL + 12345;
  for (double& v : out) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    v = static_cast<double>(state >> 40) / static_cast<double>(1ULL << 24) * 2.0 - 1.0;
  }
  return out;
}

double max_abs_difference(const HostTensor& a, const HostTensor& b) {
  EXPECT_EQ(to_string(a.type), to_string(b.type));
  if (a.values.size() != b.values.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < a.values.size(); ++i) {
    double d = std::fabs(a.values[i] - b.values[i]);
    if (std::isnan(d)) return INFINITY;
    worst = std::max(worst, d);
  }
  return worst;
}

namespace {

Value unary_operand(OpKind kind, Value x, Value ints, Value flags) {
  DTypeSet accepted = op_info(kind).dtypes;
  if (accepted.contains(DType::kF32)) return x;
  if (accepted.contains(DType::kS32)) return ints;
  return flags;
}

}  // namespace

Module every_op_module() {
  Module m;
  Function& f = m.add_function("every_op");
  Builder b(f);
  b.set_scope("decoder/layers_0");
  Value x = b.param({DType::kF32, {2, 3}}, "x", {"activation_batch", "activation_embed"});
  Value ids = b.param({DType::kS32, {2, 2}}, "ids");
  Value seed = b.param({DType::kU32, {}}, "seed");
  Value q = b.param({DType::kF32, {1, 4, 2, 4}}, "q");
  Value k = b.param({DType::kF32, {1, 4, 1, 4}}, "k");
  Value v = b.param({DType::kF32, {1, 4, 1, 4}}, "v");
  Value segments = b.param({DType::kS32, {1, 4}}, "segments");

  std::vector<Value> keep;
  Value ints = b.constant(std::vector<double>{1, -2, 3, 4, 5, -6}, {DType::kS32, {2, 3}});
  Value flags = b.compare(x, b.splat(0.0, x), ComparisonDirection::kGt);
  keep.push_back(b.iota({DType::kS32, {2, 3}}, 1));
  keep.push_back(b.rng_bits(seed, {2, 3}, 7));
  keep.push_back(b.rng_uniform(seed, {DType::kF32, {2, 3}}, 8));
  keep.push_back(b.rng_normal(seed, {DType::kBF16, {2, 3}}, 9));
  for (int i = 0; i < kNumOpKinds; ++i) {
    auto kind = static_cast<OpKind>(i);
    OpClass c = op_info(kind).op_class;
    if (c == OpClass::kUnary) keep.push_back(b.unary(kind, unary_operand(kind, x, ints, flags)));
    if (c == OpClass::kBinary) {
      Value a = unary_operand(kind, x, ints, flags);
      keep.push_back(b.binary(kind, a, a));
    }
  }
  keep.push_back(b.select(flags, x, b.neg(x)));
  keep.push_back(b.convert(x, DType::kF16));
  keep.push_back(b.broadcast_in_dim(x, {4, 2, 3}, {1, 2}));
  keep.push_back(b.reshape(x, {3, 2}));
  keep.push_back(b.with_checkpoint(b.transpose(x, {1, 0}), "query_proj"));
  keep.push_back(b.slice(x, {0, 0}, {2, 3}, {1, 2}));
  keep.push_back(b.concatenate(std::vector<Value>{x, x}, 0));
  keep.push_back(b.pad(x, b.scalar(0.5), {1, 0}, {0, 2}, {1, 0}));
  keep.push_back(b.reduce_sum(x, {1}));
  keep.push_back(b.reduce_max(x, {0, 1}));
  keep.push_back(b.reduce(OpKind::kReduceMin, x, {0}));
  keep.push_back(b.dot_general(b.reshape(x, {1, 2, 3}), b.reshape(x, {1, 2, 3}),
                               DotDims{{0}, {0}, {2}, {2}}, DType::kF64));
  Value table = b.constant(std::vector<double>{1, 2, 3, 4, 5, 6}, {DType::kF32, {3, 2}});
  Value rows = b.take(table, ids, 0);
  keep.push_back(b.scatter_add(table, ids, rows, 0));
  keep.push_back(b.top_k(table, 2));
  // Two rows of x (ids [1, 2]) times groups of a [3, 3, 2] stack; and the weight gradient.
  Value rows_of_x = b.reshape(x, {1, 2, 3});
  Value stack = b.reshape(b.concatenate(std::vector<Value>{table, table, table}, 0), {3, 3, 2});
  Value groups = b.reshape(b.slice(ids, {0, 0}, {1, 2}), {1, 2});
  Value grouped = b.grouped_dot(rows_of_x, stack, groups);
  keep.push_back(grouped);
  keep.push_back(b.grouped_dot_weight_grad(rows_of_x, grouped, groups, 3));
  AttentionOptions options;
  options.scale = 0.5;
  options.causal = true;
  options.sliding_window = 3;
  options.softcap = 30.0;
  options.flash = true;
  keep.push_back(b.attention(q, k, v, options));
  keep.push_back(b.attention(q, k, v, segments, segments, AttentionOptions{0.25}));
  std::array<Value, 3> grads =
      b.attention_grad(q, k, v, keep.back(), q, segments, segments, AttentionOptions{0.25});
  keep.insert(keep.end(), grads.begin(), grads.end());
  std::array<Value, 3> stats =
      b.attention_stats(std::vector<Value>{q, k, v, segments, segments}, AttentionOptions{0.25});
  keep.insert(keep.end(), stats.begin(), stats.end());
  keep.push_back(b.with_axes(b.exp(x), {"activation_batch", ""}));
  // Per-device ops over a one-device group (a single-device function may hold them).
  Builder::DeviceGroup one{{"data"}, 1, false};
  keep.push_back(b.all_gather(x, 1, one));
  keep.push_back(b.all_reduce(x, Builder::DeviceGroup{{"fsdp", "tensor"}, 1, true}));
  keep.push_back(b.reduce_scatter(x, 0, one));
  keep.push_back(b.all_to_all(x, 0, 1, one));
  keep.push_back(b.collective_permute(x, 0, one));
  keep.push_back(b.shard_slice(x, 1, one));
  // x's two rows sent by their groups' ids (1 and 2: outside a group of one, so nowhere) and back.
  Value sent = b.ragged_all_to_all(rows_of_x, groups, 2, false, one);
  keep.push_back(sent);
  keep.push_back(b.ragged_all_to_all(sent, groups, 2, true, one));
  b.set_results(keep);
  EXPECT_TRUE(b.ok()) << b.status().error().message();
  return m;
}

}  // namespace precast::ir::testing
