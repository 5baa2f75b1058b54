// Verifier: one negative test per rule; messages name the op as printed, its line, and the rule.
#include <gtest/gtest.h>

#include "tests/support/IrTestSupport.h"
#include "ir/Builder.h"
#include "ir/Verifier.h"

namespace precast::ir {
namespace {

using testing::verify_message;

// Parameters available to the body line: %x: f32[4,8], %y: f32[8,16], %i: s32[4], %p: pred[4,8],
// %s: f32[], %u: u32[], %q/%k/%v attention inputs, %seg: s32[2,6], %pos: s32[6].
std::string check(std::string_view line) {
  return verify_message(
      "func @f(%x: f32[4,8], %y: f32[8,16], %i: s32[4], %p: pred[4,8], %s: f32[], %u: u32[], "
      "%q: f32[2,6,4,8], %k: f32[2,6,2,8], %v: f32[2,6,2,8], %seg: s32[2,6], %pos: s32[6]) -> () "
      "{\n  " +
      std::string(line) + "\n  return\n}\n");
}

// The message must name the op on line 2 as `%0 = <op>` and contain the rule text.
void expect_rule(std::string_view line, std::string_view op, std::string_view rule) {
  std::string message = check(line);
  std::string prefix = "test.ir:2: in @f, %0 = " + std::string(op) + ": ";
  EXPECT_EQ(message.substr(0, prefix.size()), prefix) << message;
  EXPECT_NE(message.find(rule), std::string::npos) << "rule: " << rule << "\nmessage: " << message;
}

TEST(Verifier, AcceptsValidOps) {
  EXPECT_EQ(check("%0 = dot_general %x, %y {lhs_contract=[1], rhs_contract=[0]} : f32[4,16]"), "");
  EXPECT_EQ(check("%0 = attention %q, %k, %v, %seg, %seg {scale=0.5, causal=true} : f32[2,6,4,8]"), "");
}

TEST(Verifier, ResultTypeMustMatchInference) {
  expect_rule("%0 = add %x, %x : f32[4,9]", "add",
              "result type f32[4,9] does not match the inferred type f32[4,8]");
}

TEST(Verifier, RequiredAttribute) {
  expect_rule("%0 = reduce_sum %x : f32[]", "reduce_sum", "missing attribute 'dims'");
}

TEST(Verifier, Constant) {
  expect_rule("%0 = constant [1.0, 2.0] : f32[3]", "constant",
              "literal has 2 values but f32[3] has 3 elements");
  expect_rule("%0 = constant 4294967296 : u32[]", "constant", "literal value 4294967296 is not a u32");
  expect_rule("%0 = constant -1 : u32[]", "constant", "literal value -1 is not a u32");
  expect_rule("%0 = constant 2147483648 : s32[]", "constant", "is not an s32");
}

TEST(Verifier, Iota) {
  expect_rule("%0 = iota {dimension=2} : s32[4,8]", "iota", "dimension 2 is out of range");
  expect_rule("%0 = iota {dimension=0} : pred[4]", "iota", "result has element type pred");
}

TEST(Verifier, TruncatedNormal) {
  EXPECT_EQ(check("%0 = rng_normal %u {stream=1, truncate=2.0} : f32[4]"), "");
  expect_rule("%0 = rng_normal %u {truncate=1.0} : f32[4]", "rng_normal",
              "truncate 1 must be 0 (no truncation) or a finite bound of at least 1.5");
  expect_rule("%0 = rng_normal %u {truncate=-2.0} : f32[4]", "rng_normal", "truncate -2 must be");
  expect_rule("%0 = rng_normal %u {truncate=inf} : f32[4]", "rng_normal", "truncate inf must be");
}

TEST(Verifier, Random) {
  expect_rule("%0 = rng_uniform %x {stream=1} : f32[4]", "rng_uniform",
              "seed must be an s32 or u32 scalar, got f32[4,8]");
  expect_rule("%0 = rng_uniform %u {stream=4294967296} : f32[4]", "rng_uniform",
              "stream 4294967296 is outside [0, 2^32)");
  expect_rule("%0 = rng_uniform %u : s32[4]", "rng_uniform", "result has element type s32");
  expect_rule("%0 = rng_bits %u : f32[4]", "rng_bits", "expected u32");
}

TEST(Verifier, Elementwise) {
  expect_rule("%0 = exp %i : s32[4]", "exp", "operand has element type s32; expected f32, f64, bf16 or f16");
  expect_rule("%0 = add %x, %y : f32[4,8]", "add", "operand types f32[4,8] and f32[8,16] differ");
  expect_rule("%0 = pow %i, %i : s32[4]", "pow", "operand has element type s32");
  expect_rule("%0 = and %x, %x : f32[4,8]", "and", "expected s32, u32 or pred");
  expect_rule("%0 = compare %x, %y {direction=lt} : pred[4,8]", "compare", "operand types");
}

TEST(Verifier, Select) {
  expect_rule("%0 = select %x, %x, %x : f32[4,8]", "select", "predicate must be pred");
  expect_rule("%0 = select %p, %x, %y : f32[4,8]", "select", "branch types f32[4,8] and f32[8,16] differ");
  expect_rule("%0 = select %p, %y, %y : f32[8,16]", "select", "predicate shape pred[4,8] differs");
}

TEST(Verifier, Convert) {
  expect_rule("%0 = convert %x : bf16[8,4]", "convert", "must have the operand's shape");
}

TEST(Verifier, BroadcastInDim) {
  expect_rule("%0 = broadcast_in_dim %x {dims=[0, 1]} : f64[4,8]", "broadcast_in_dim",
              "must keep the operand's element type f32");
  expect_rule("%0 = broadcast_in_dim %x {dims=[0]} : f32[4,8]", "broadcast_in_dim",
              "dims [0] has 1 entries but the operand has rank 2");
  expect_rule("%0 = broadcast_in_dim %x {dims=[0, 2]} : f32[4,8]", "broadcast_in_dim",
              "has dimension 2 out of range for rank 2");
  expect_rule("%0 = broadcast_in_dim %x {dims=[2, 1]} : f32[2,8,4]", "broadcast_in_dim",
              "must be strictly increasing");
  expect_rule("%0 = broadcast_in_dim %x {dims=[0, 1]} : f32[4,9]", "broadcast_in_dim",
              "operand dimension 1 (size 8) cannot broadcast to result dimension 1 (size 9)");
}

TEST(Verifier, Reshape) {
  expect_rule("%0 = reshape %x : f32[33]", "reshape", "cannot reshape f32[4,8] (32 elements)");
  expect_rule("%0 = reshape %x : s32[32]", "reshape", "must keep the operand's element type");
}

TEST(Verifier, Transpose) {
  expect_rule("%0 = transpose %x {permutation=[0]} : f32[4]", "transpose", "has 1 entries");
  expect_rule("%0 = transpose %x {permutation=[1, 1]} : f32[8,8]", "transpose", "names dimension 1 twice");
  expect_rule("%0 = transpose %x {permutation=[0, 5]} : f32[4,8]", "transpose", "out of range");
}

TEST(Verifier, Slice) {
  expect_rule("%0 = slice %x {start=[0], limit=[4, 8]} : f32[4,8]", "slice", "start [0] has 1 entries");
  expect_rule("%0 = slice %x {start=[0, 0], limit=[4, 8], stride=[1, 0]} : f32[4,8]", "slice",
              "stride [1, 0] must be positive");
  expect_rule("%0 = slice %x {start=[0, 3], limit=[4, 9]} : f32[4,6]", "slice",
              "dimension 1: need 0 <= start (3) <= limit (9) <= size (8)");
}

TEST(Verifier, Concatenate) {
  expect_rule("%0 = concatenate %x, %x {dimension=2} : f32[4,16]", "concatenate",
              "dimension 2 is out of range for rank 2");
  expect_rule("%0 = concatenate %x, %y {dimension=0} : f32[12,8]", "concatenate",
              "operand 1 (f32[8,16]) does not match operand 0 (f32[4,8]) outside dimension 0");
}

TEST(Verifier, Pad) {
  expect_rule("%0 = pad %x, %x {low=[0, 0], high=[0, 0]} : f32[4,8]", "pad",
              "padding value must be a f32 scalar, got f32[4,8]");
  expect_rule("%0 = pad %x, %s {low=[0], high=[0, 0]} : f32[4,8]", "pad", "low [0] has 1 entries");
  expect_rule("%0 = pad %x, %s {low=[0, 0], high=[0, 0], interior=[0, -1]} : f32[4,8]", "pad",
              "must not be negative");
  expect_rule("%0 = pad %x, %s {low=[0, -9], high=[0, 0]} : f32[4,0]", "pad",
              "dimension 1 would have negative size -1");
}

TEST(Verifier, Reduce) {
  expect_rule("%0 = reduce_max %x {dims=[2]} : f32[4,8]", "reduce_max", "out of range for rank 2");
  expect_rule("%0 = reduce_sum %x {dims=[1, 0]} : f32[]", "reduce_sum", "must be strictly increasing");
  expect_rule("%0 = reduce_sum %p {dims=[0]} : pred[8]", "reduce_sum", "operand has element type pred");
}

TEST(Verifier, DotGeneral) {
  expect_rule("%0 = dot_general %x, %i {lhs_contract=[0], rhs_contract=[0]} : f32[8]", "dot_general",
              "operand element types f32 and s32 differ");
  expect_rule("%0 = dot_general %x, %y {lhs_contract=[1, 1], rhs_contract=[0, 1]} : f32[4]",
              "dot_general", "lhs batch+contract dims [1, 1] names dimension 1 twice");
  expect_rule("%0 = dot_general %x, %y {lhs_contract=[1], rhs_contract=[3]} : f32[4,8]",
              "dot_general", "rhs batch+contract dims [3] has dimension 3 out of range for rank 2");
  expect_rule("%0 = dot_general %x, %y {lhs_batch=[0], lhs_contract=[1], rhs_contract=[0]} : f32[4,16]",
              "dot_general", "lhs_batch [0] and rhs_batch [] differ in length");
  expect_rule("%0 = dot_general %x, %y {lhs_contract=[0], rhs_contract=[0]} : f32[8,16]",
              "dot_general", "contract dimension pair 0: lhs dimension 0 has size 4 but rhs dimension 0 has size 8");
  expect_rule("%0 = dot_general %x, %y {lhs_contract=[1], rhs_contract=[0]} : s32[4,16]",
              "dot_general", "result type s32[4,16] does not match the inferred type f32[4,16]");
}

TEST(Verifier, TakeAndScatter) {
  expect_rule("%0 = take %x, %x {axis=0} : f32[4,8,8]", "take", "indices must be s32 or u32, got f32[4,8]");
  expect_rule("%0 = take %x, %i {axis=2} : f32[4]", "take", "axis 2 is out of range for table f32[4,8]");
  expect_rule("%0 = scatter_add %x, %seg, %x {axis=0} : f32[4,8]", "scatter_add",
              "updates must be f32[2,6,8] (what take would return), got f32[4,8]");
  expect_rule("%0 = scatter_add %x, %x, %x {axis=0} : f32[4,8]", "scatter_add", "indices must be s32 or u32");
  expect_rule("%0 = scatter_add %x, %i, %x {axis=5} : f32[4,8]", "scatter_add", "axis 5 is out of range");
}

TEST(Verifier, Attention) {
  expect_rule("%0 = attention %q, %k, %v, %seg {scale=1.0} : f32[2,6,4,8]", "attention",
              "expects 3 operands (q, k, v) or 5");
  expect_rule("%0 = attention %x, %k, %v {scale=1.0} : f32[2,6,4,8]", "attention", "must be rank 4");
  EXPECT_EQ(check("%0 = attention %q, %q, %q {scale=1.0} : f32[2,6,4,8]"), "");  // plain MHA
  expect_rule("%0 = attention %q, %k, %q {scale=1.0} : f32[2,6,4,8]", "attention",
              "k f32[2,6,2,8] and v f32[2,6,4,8] must agree on [B,S,K]");
  expect_rule("%0 = attention %q, %k, %v, %seg, %i {scale=1.0} : f32[2,6,4,8]", "attention",
              "segment ids must be s32[2,6] and s32[2,6]");
  expect_rule("%0 = attention %q, %k, %v {scale=0.0} : f32[2,6,4,8]", "attention",
              "scale 0 must be finite and non-zero");
  expect_rule("%0 = attention %q, %k, %v {scale=1.0, softcap=-1.0} : f32[2,6,4,8]", "attention",
              "softcap -1 must be finite and >= 0");
  expect_rule("%0 = attention %q, %k, %v {scale=1.0, sliding_window=-2} : f32[2,6,4,8]", "attention",
              "sliding_window must be >= 0");
}

// attention_grad defines three results, so its messages start `%0, %1, %2 = attention_grad`.
constexpr std::string_view kGradTypes = " : f32[2,6,4,8], f32[2,6,2,8], f32[2,6,2,8]";

void expect_grad_rule(std::string_view operands, std::string_view rule,
                      std::string_view types = kGradTypes) {
  std::string line = "%0, %1, %2 = attention_grad " + std::string(operands) + std::string(types);
  std::string message = check(line);
  std::string prefix = "test.ir:2: in @f, %0, %1, %2 = attention_grad: ";
  EXPECT_EQ(message.substr(0, prefix.size()), prefix) << message;
  EXPECT_NE(message.find(rule), std::string::npos) << "rule: " << rule << "\nmessage: " << message;
}

TEST(Verifier, AttentionGrad) {
  // out and dout are f32[2,6,4,8] like %q; the gradients are typed like q, k, v.
  EXPECT_EQ(check("%0, %1, %2 = attention_grad %q, %k, %v, %q, %q {scale=0.5, causal=true}" +
                  std::string(kGradTypes)),
            "");
  EXPECT_EQ(check("%0, %1, %2 = attention_grad %q, %k, %v, %q, %q, %seg, %seg {scale=0.5}" +
                  std::string(kGradTypes)),
            "");
  expect_grad_rule("%q, %k, %v, %q, %q, %seg {scale=1.0}",
                   "expects 5 operands (q, k, v, out, dout) or 7 (q, k, v, out, dout, q_segment, "
                   "kv_segment), got 6");
  expect_grad_rule("%q, %k, %v, %k, %q {scale=1.0}",
                   "out must be f32[2,6,4,8] (the attention result [B,T,H,Dv]), got f32[2,6,2,8]");
  expect_grad_rule("%q, %k, %v, %q, %x {scale=1.0}",
                   "dout must be f32[2,6,4,8] (the attention result [B,T,H,Dv]), got f32[4,8]");
  // attention's own rules apply to the forward operands.
  expect_grad_rule("%x, %k, %v, %q, %q {scale=1.0}", "q, k, v must be rank 4");
  expect_grad_rule("%q, %k, %q, %q, %q {scale=1.0}",
                   "k f32[2,6,2,8] and v f32[2,6,4,8] must agree on [B,S,K]");
  expect_grad_rule("%q, %k, %v, %q, %q, %seg, %i {scale=1.0}",
                   "segment ids must be s32[2,6] and s32[2,6], got s32[2,6] and s32[4]");
  expect_grad_rule("%q, %k, %v, %q, %q {scale=0.0}", "scale 0 must be finite and non-zero");
  expect_grad_rule("%q, %k, %v, %q, %q {scale=1.0, softcap=-1.0}",
                   "softcap -1 must be finite and >= 0");
  expect_grad_rule("%q, %k, %v, %q, %q {scale=1.0, sliding_window=-2}",
                   "sliding_window must be >= 0");
  expect_grad_rule("%q, %k, %v, %q, %q {scale=1.0}",
                   "result type f32[2,6,4,8] does not match the inferred type f32[2,6,2,8]",
                   " : f32[2,6,4,8], f32[2,6,4,8], f32[2,6,2,8]");
  expect_grad_rule("%q, %k, %v, %q, %q", "missing attribute 'scale'");
}

TEST(Verifier, AttentionPositions) {
  EXPECT_EQ(check("%0 = attention %q, %k, %v, %pos, %pos {scale=1.0, causal=true, positions=true} "
                  ": f32[2,6,4,8]"),
            "");
  EXPECT_EQ(check("%0 = attention %q, %k, %v, %seg, %seg, %pos, %pos {scale=1.0, positions=true} "
                  ": f32[2,6,4,8]"),
            "");
  expect_rule("%0 = attention %q, %k, %v {scale=1.0, positions=true} : f32[2,6,4,8]", "attention",
              "with positions=true expects 5 operands (q, k, v, q_positions, kv_positions) or 7");
  expect_rule("%0 = attention %q, %k, %v, %pos, %seg {scale=1.0, positions=true} : f32[2,6,4,8]",
              "attention", "positions must be s32[6] and s32[6], got s32[6] and s32[2,6]");
  expect_grad_rule("%q, %k, %v, %q, %q, %pos {scale=1.0, positions=true}",
                   "with positions=true expects 7 operands (q, k, v, out, dout, q_positions, "
                   "kv_positions) or 9");
  expect_grad_rule("%q, %k, %v, %q, %q, %seg, %seg, %i, %pos {scale=1.0, positions=true}",
                   "positions must be s32[6] and s32[6], got s32[4] and s32[6]");
  EXPECT_EQ(check("%0, %1, %2 = attention_grad %q, %k, %v, %q, %q, %seg, %seg, %pos, %pos "
                  "{scale=1.0, positions=true}" +
                  std::string(kGradTypes)),
            "");
}

TEST(Verifier, AttentionGradArityIsCheckedByTheParser) {
  std::string text =
      "func @f(%q: f32[2,6,4,8]) -> () {\n"
      "  %0 = attention_grad %q, %q, %q, %q, %q {scale=1.0} : f32[2,6,4,8]\n"
      "  return\n}\n";
  EXPECT_NE(testing::parse_message(text).find("attention_grad has 3 results, found 1 names"),
            std::string::npos)
      << testing::parse_message(text);
  std::string four =
      "func @f(%q: f32[2,6,4,8]) -> () {\n"
      "  %0, %1, %2 = attention_grad %q, %q, %q, %q {scale=1.0} : f32[2,6,4,8], "
      "f32[2,6,4,8], f32[2,6,4,8]\n"
      "  return\n}\n";
  EXPECT_NE(testing::parse_message(four).find("attention_grad expects 5 to 9 operands, found 4"),
            std::string::npos)
      << testing::parse_message(four);
}

TEST(Verifier, AttentionGroupsAndDims) {
  std::string text =
      "func @f(%q: f32[2,6,3,8], %k: f32[2,6,2,8], %k4: f32[2,6,3,4], %b: f32[1,6,3,8], %h: f16[2,6,3,8]) -> () {\n"
      "  %0 = attention %q, %k, %k {scale=1.0} : f32[2,6,3,8]\n"
      "  return\n}\n";
  EXPECT_NE(verify_message(text).find("query heads (3) must be a multiple of kv heads (2)"), std::string::npos);
  std::string dims = text;
  dims.replace(dims.find("%q, %k, %k"), 10, "%q, %k4, %k4");
  EXPECT_NE(verify_message(dims).find("q head dim 8 differs from k head dim 4"), std::string::npos);
  std::string batch = text;
  batch.replace(batch.find("%q, %k, %k"), 10, "%b, %q, %q");
  EXPECT_NE(verify_message(batch).find("same batch size"), std::string::npos);
  std::string dtype = text;
  dtype.replace(dtype.find("%q, %k, %k"), 10, "%h, %q, %q");
  EXPECT_NE(verify_message(dtype).find("same element type"), std::string::npos);
}

// Rules the parser cannot produce are checked on modules built directly.
class VerifierStructureTest : public ::testing::Test {
 protected:
  Module m_;
  Function& f_ = m_.add_function("f");
  Context& c_ = m_.context();
  TypeId f32x4_ = c_.intern_type({DType::kF32, {4}});

  std::string message() {
    Status s = verify_module(m_);
    return s.ok() ? "" : s.error().message();
  }
  OpIndex exp_of(Value x) {
    return f_.append_op(OpKind::kExp, std::span<const Value>(&x, 1),
                        std::span<const TypeId>(&f32x4_, 1), 0);
  }
};

TEST_F(VerifierStructureTest, UseBeforeDefinition) {
  Value x = f_.add_param(f32x4_);
  OpIndex first = exp_of(x);
  OpIndex second = exp_of(f_.result(f_.op(first)));
  f_.set_operand(first, 0, f_.result(f_.op(second)));
  EXPECT_EQ(message(), "in @f, %1 = exp: operand 0 (%2) is used before its definition");
}

TEST_F(VerifierStructureTest, OperandNotInFunction) {
  Value x = f_.add_param(f32x4_);
  OpIndex op = exp_of(x);
  f_.set_operand(op, 0, Value{99});
  EXPECT_EQ(message(), "in @f, %1 = exp: operand 0 is not a value of this function");
}

TEST_F(VerifierStructureTest, OperandCount) {
  Value x = f_.add_param(f32x4_);
  std::vector<Value> two = {x, x};
  f_.append_op(OpKind::kExp, two, std::span<const TypeId>(&f32x4_, 1), 0);
  EXPECT_EQ(message(), "in @f, %1 = exp: expects 1 operand, got 2");
}

TEST_F(VerifierStructureTest, ResultCount) {
  Value x = f_.add_param(f32x4_);
  std::vector<TypeId> two = {f32x4_, f32x4_};
  f_.append_op(OpKind::kExp, std::span<const Value>(&x, 1), two, 0);
  EXPECT_EQ(message(), "in @f, %1, %2 = exp: has 2 results, expected 1");
}

TEST_F(VerifierStructureTest, UnexpectedAndMistypedAttributes) {
  Value x = f_.add_param(f32x4_);
  AttrSet extra;
  extra.set_int(AttrKey::kAxis, 0);
  f_.append_op(OpKind::kExp, std::span<const Value>(&x, 1), std::span<const TypeId>(&f32x4_, 1),
               c_.intern_attrs(extra));
  EXPECT_EQ(message(), "in @f, %1 = exp: unexpected attribute 'axis'");

  Module m2;
  Function& g = m2.add_function("g");
  TypeId s32x4 = m2.context().intern_type({DType::kS32, {4}});
  AttrSet wrong_kind;
  wrong_kind.set_ints(AttrKey::kDimension, {0, 1});
  g.append_op(OpKind::kIota, {}, std::span<const TypeId>(&s32x4, 1), m2.context().intern_attrs(wrong_kind));
  EXPECT_EQ(verify_module(m2).error().message(), "in @g, %0 = iota: attribute 'dimension' must hold one integer");
}

TEST_F(VerifierStructureTest, OpFactsInRange) {
  Value x = f_.add_param(f32x4_);
  OpIndex op = exp_of(x);
  f_.mutable_op(op).facts.layer = -2;
  EXPECT_EQ(message(), "in @f, %1 = exp: layer index -2 is negative");
  f_.mutable_op(op).facts.layer = 7;
  EXPECT_EQ(message(), "");
  f_.mutable_op(op).facts.phase = static_cast<OpPhase>(9);
  EXPECT_EQ(message(), "in @f, %1 = exp: phase 9 does not exist");
  f_.mutable_op(op).facts.phase = OpPhase::kRecompute;
  f_.mutable_op(op).facts.region = static_cast<OpRegion>(5);
  EXPECT_EQ(message(), "in @f, %1 = exp: region 5 does not exist");
}

TEST_F(VerifierStructureTest, ParamRoleInRange) {
  f_.add_param(f32x4_, 0, c_.intern_string("w"));
  f_.set_param_role(0, static_cast<ParamRole>(4));
  EXPECT_EQ(message(), "in @f: parameter %w has role 4, which does not exist");
}

TEST_F(VerifierStructureTest, Shardings) {
  Value x = f_.add_param(f32x4_);
  Value y = f_.result(f_.op(exp_of(x)));
  StringId fsdp = c_.intern_string("fsdp"), tensor = c_.intern_string("tensor");
  std::vector<std::vector<StringId>> two = {{fsdp}, {}};
  f_.set_sharding(x, c_.intern_sharding(two));
  EXPECT_EQ(message(), "in @f: value %0 has a rank-2 sharding for type f32[4]");
  std::vector<std::vector<StringId>> fine = {{fsdp, tensor}};
  f_.set_sharding(x, c_.intern_sharding(fine));
  EXPECT_EQ(message(), "");
  std::vector<std::vector<StringId>> twice = {{fsdp, fsdp}};
  f_.set_sharding(y, c_.intern_sharding(twice));
  EXPECT_EQ(message(), "in @f, %1 = exp: value %1 is sharded over mesh axis 'fsdp' twice");
  std::vector<std::vector<StringId>> odd = {{c_.intern_string("a b")}};
  f_.set_sharding(y, c_.intern_sharding(odd));
  EXPECT_EQ(
      message(),
      "in @f, %1 = exp: value %1 is sharded over mesh axis 'a b', which is not an identifier");
  // Interning: equal shardings share an id; P() (a scalar's) is not "none".
  EXPECT_EQ(c_.intern_sharding(fine), c_.intern_sharding(fine));
  EXPECT_NE(c_.intern_sharding({}), ShardingId{0});
}

TEST_F(VerifierStructureTest, NegativeDimension) {
  TypeId bad = c_.intern_type({DType::kF32, {-1}});
  f_.add_param(bad);
  EXPECT_EQ(message(), "in @f: value %0 has negative dimension in f32[-1]");
}

TEST_F(VerifierStructureTest, ValueNames) {
  Value a = f_.add_param(f32x4_, 0, c_.intern_string("a"));
  f_.add_param(f32x4_, 0, c_.intern_string("a"));
  EXPECT_EQ(message(), "in @f: value name %a is defined twice");
  f_.set_value_name(a, c_.intern_string("9lives"));
  EXPECT_EQ(message(), "in @f: value name '9lives' is not an identifier ([A-Za-z_][A-Za-z0-9_.]*)");
}

TEST_F(VerifierStructureTest, AxisNames) {
  Value x = f_.add_param(f32x4_);
  std::vector<StringId> two = {c_.intern_string("a"), c_.intern_string("b")};
  f_.set_axes(x, c_.intern_axes(two));
  EXPECT_EQ(message(), "in @f: value %0 has 2 axis names for type f32[4]");
  std::vector<StringId> underscore = {c_.intern_string("_")};
  f_.set_axes(x, c_.intern_axes(underscore));
  EXPECT_EQ(message(), "in @f: value %0 has axis name '_', which is not an identifier other than '_'");
}

TEST_F(VerifierStructureTest, FunctionResults) {
  Value x = f_.add_param(f32x4_);
  f_.set_results(std::vector<Value>{x, Value{7}});
  EXPECT_EQ(message(), "in @f: result 1 is not a defined value");
}

TEST_F(VerifierStructureTest, FunctionNames) {
  m_.add_function("f");
  EXPECT_EQ(message(), "function @f is defined twice");
  Module m2;
  m2.add_function("");
  EXPECT_EQ(verify_module(m2).error().message(), "function 0 has an empty name");
}

TEST_F(VerifierStructureTest, DeclaredTypeNeeded) {
  Builder b(f_);
  Value x = b.param({DType::kF32, {4}});
  std::vector<Value> out = b.create(OpKind::kReshape, std::span<const Value>(&x, 1), AttrSet{});
  EXPECT_FALSE(out[0].valid());
  EXPECT_EQ(b.status().error().message(), "builder: reshape: needs its result type to be given");
}

TEST(Verifier, ResultAliases) {
  EXPECT_EQ(verify_message("func @f(%a: f32[2], %b: f64[2]) -> (f32[2] aliases %a) {\n"
                           "  return %a\n}\n"),
            "");
  std::string message = verify_message(
      "func @f(%a: f32[2], %b: f64[2]) -> (f32[2] aliases %b) {\n  return %a\n}\n");
  EXPECT_NE(message.find("result 0 (f32[2]) aliases parameter %b of another type (f64[2])"),
            std::string::npos)
      << message;
  message = verify_message(
      "func @f(%a: f32[2]) -> (f32[2] aliases %a, f32[2] aliases %a) {\n  return %a, %a\n}\n");
  EXPECT_NE(message.find("parameter %a is aliased by more than one result"), std::string::npos)
      << message;
}

TEST(Parser, AliasesMustNameAParameter) {
  EXPECT_EQ(testing::parse_message("func @f(%a: f32[2]) -> (f32[2] aliases 3) {\n  return %a\n}\n"),
            "test.ir:1:40: expected a parameter (%name) after 'aliases', found '3'");
  EXPECT_EQ(testing::parse_message("func @f(%a: f32[2]) -> (f32[2] aliases %z) {\n  return %a\n}\n"),
            "test.ir:1:40: use of undefined value %z");
}

}  // namespace
}  // namespace precast::ir
