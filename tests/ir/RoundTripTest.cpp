// print(parse(print(m))) == print(m), byte for byte, for built and hand-written modules.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/support/IrTestSupport.h"
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"

namespace precast::ir {
namespace {

using testing::parse_or_fail;

void expect_round_trip(const Module& m) {
  std::string first = print_module(m);
  Module parsed = parse_or_fail(first);
  Status verified = verify_module(parsed);
  EXPECT_TRUE(verified.ok()) << verified.error().message() << "\n" << first;
  EXPECT_EQ(print_module(parsed), first);
}

TEST(RoundTrip, EveryOpKind) {
  Module m = testing::every_op_module();
  expect_round_trip(m);
  std::string text = print_module(m);
  EXPECT_NE(text.find("#query_proj"), std::string::npos);
  EXPECT_NE(text.find("@\"decoder/layers_0\""), std::string::npos);
  EXPECT_NE(text.find("{activation_batch,_}"), std::string::npos);
  EXPECT_NE(text.find("attention %q, %k, %v {scale=0.5, causal=true, sliding_window=3, "
                      "softcap=30.0, flash=true}"),
            std::string::npos)
      << text;
}

TEST(RoundTrip, AttentionGradWithThreeResults) {
  const char* text =
      R"(func @backward(%q: f32[1,4,2,8], %k: f32[1,4,1,8], %v: f32[1,4,1,8], %out: f32[1,4,2,8], %dout: f32[1,4,2,8], %seg: s32[1,4]) -> (f32[1,4,2,8], f32[1,4,1,8]{activation_length,_,_,_}, f32[1,4,1,8]) {
  %dq, %dk, %dv = attention_grad %q, %k, %v, %out, %dout, %seg, %seg {scale=0.35355339, causal=true, sliding_window=2, softcap=50.0, flash=true} : f32[1,4,2,8], f32[1,4,1,8]{activation_length,_,_,_}, f32[1,4,1,8] @"decoder/layers_0/self_attention" #attention_grads
  %0, %1, %2 = attention_grad %q, %k, %v, %out, %dout {scale=1.0} : f32[1,4,2,8], f32[1,4,1,8], f32[1,4,1,8]
  return %dq, %dk, %2
}
)";
  Module m = parse_or_fail(text);
  EXPECT_EQ(print_module(m), text);
  expect_round_trip(m);
  std::string every_op = print_module(testing::every_op_module());
  EXPECT_NE(every_op.find("= attention_grad %q, %k, %v, "), std::string::npos) << every_op;
}

// Donation: "aliases %param" after a result type says the result may reuse that buffer.
TEST(RoundTrip, ResultAliases) {
  const char* text =
      R"(func @step(%w: f32[4]{embed}, %count: s32[], %lr: f32[]) -> (f32[4]{embed} aliases %w, s32[] aliases %count, f32[]) {
  %0 = broadcast_in_dim %lr {dims=[]} : f32[4]
  %1 = sub %w, %0 : f32[4]{embed}
  %one = constant 1 : s32[]
  %2 = add %count, %one : s32[]
  return %1, %2, %lr
}
)";
  Module m = parse_or_fail(text);
  EXPECT_EQ(print_module(m), text);
  EXPECT_EQ(m.function(0).result_alias(0), 0);
  EXPECT_EQ(m.function(0).result_alias(1), 1);
  EXPECT_EQ(m.function(0).result_alias(2), -1);
  expect_round_trip(m);
}

TEST(RoundTrip, SpecialNumbersAndLiterals) {
  const char* text = R"(func @literals() -> (f32[6], f64[3], bf16[2], s32[3], u32[2], pred[2], f16[]) {
  %0 = constant [inf, -inf, nan, -0.0, 1e+30, 1.5e-45] : f32[6]
  %1 = constant [0.1, 1e-300, 123456789.125] : f64[3]
  %2 = constant [0.1, 3.0] : bf16[2]
  %3 = constant [-2147483648, 0, 2147483647] : s32[3]
  %4 = constant [0, 4294967295] : u32[2]
  %5 = constant [true, false] : pred[2]
  %6 = constant 65504.0 : f16[]
  return %0, %1, %2, %3, %4, %5, %6
}
)";
  Module m = parse_or_fail(text);
  expect_round_trip(m);
  std::string printed = print_module(m);
  EXPECT_NE(printed.find("constant [inf, -inf, nan, -0.0, 1e+30, 1e-45] : f32[6]"), std::string::npos)
      << printed;
  EXPECT_NE(printed.find("constant [0.1, 1e-300, 123456789.125] : f64[3]"), std::string::npos);
  // bf16 keeps the rounded value, printed in its shortest float spelling.
  EXPECT_NE(printed.find("constant [0.100097656, 3.0] : bf16[2]"), std::string::npos) << printed;
}

// A literal beyond double's range still names a real number: too large saturates to infinity,
// too small rounds to the nearest subnormal (1e-310) or to a zero of its sign (1e-400).
TEST(RoundTrip, OutOfRangeLiteralsSaturateOrUnderflow) {
  Module m = parse_or_fail(
      "func @f() -> (f64[7]) {\n"
      "  %0 = constant [1e400, -1e400, 1e-400, -1e-400, 1e-310, 0.00001e-320, 12e+99999] : f64[7]\n"
      "  return %0\n}\n");
  ASSERT_EQ(m.num_functions(), 1u);
  Expected<std::vector<HostTensor>> out = interpret(m, "f", {});
  ASSERT_TRUE(out.ok()) << out.error().message();
  const std::vector<double>& v = (*out)[0].values;
  EXPECT_EQ(v[0], std::numeric_limits<double>::infinity());
  EXPECT_EQ(v[1], -std::numeric_limits<double>::infinity());
  EXPECT_EQ(v[2], 0.0);
  EXPECT_FALSE(std::signbit(v[2]));
  EXPECT_EQ(v[3], 0.0);
  EXPECT_TRUE(std::signbit(v[3]));
  EXPECT_EQ(v[4], 1e-310);
  EXPECT_GT(v[4], 0.0);
  EXPECT_EQ(v[5], 0.0);  // 1e-325: below half the smallest subnormal
  EXPECT_EQ(v[6], std::numeric_limits<double>::infinity());
  expect_round_trip(m);
}

TEST(RoundTrip, HandWrittenTextIsCanonicalisedOnce) {
  // Numbered names renumber, optional zero attributes disappear, spacing normalises.
  const char* text = R"(
func @f(%7: f32[2,2]{_,embed},%x:f32[2]) -> (f32[2,2]{_,embed}) {
  %42 = slice %7 {start=[0,0], limit=[2,2], stride=[1,1]} : f32[2,2]{_,embed}
  %43 = transpose %42 {permutation=[1,0]} : f32[2,2]
  return %42   // trailing comment
}
func @"odd name"() -> () {
  return
}
)";
  Module m = parse_or_fail(text);
  std::string once = print_module(m);
  EXPECT_EQ(once, R"(func @f(%0: f32[2,2]{_,embed}, %x: f32[2]) -> (f32[2,2]{_,embed}) {
  %1 = slice %0 {start=[0, 0], limit=[2, 2], stride=[1, 1]} : f32[2,2]{_,embed}
  %2 = transpose %1 {permutation=[1, 0]} : f32[2,2]
  return %1
}

func @"odd name"() -> () {
  return
}
)");
  expect_round_trip(m);
}

TEST(RoundTrip, QuotedScopesAndCheckpoints) {
  const char* text = R"(func @f(%x: f32[2]) -> (f32[2]) {
  %0 = exp %x : f32[2] @"a \"quoted\" scope\\x" #"not an identifier"
  %1 = neg %0 : f32[2] #plain_name
  return %1
}
)";
  Module m = parse_or_fail(text);
  const Function& f = m.function(0);
  EXPECT_EQ(f.scope(f.op(0)), "a \"quoted\" scope\\x");
  EXPECT_EQ(f.checkpoint(f.op(0)), "not an identifier");
  EXPECT_EQ(print_module(m), text);
  expect_round_trip(m);
}

TEST(RoundTrip, SplitLinesKeepLineNumbers) {
  ParseOptions options{"split.ir", 40};
  Expected<Module> m = parse_module("func @f() -> () {\n  return %x\n}\n", options);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().message(), "split.ir:41:10: use of undefined value %x");
}

}  // namespace
}  // namespace precast::ir
