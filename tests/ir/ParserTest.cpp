// Parser: error messages name file:line:col, what was expected and what was found.
#include <gtest/gtest.h>

#include "tests/support/IrTestSupport.h"
#include "ir/Parser.h"

namespace precast::ir {
namespace {

using testing::parse_message;

// Wraps one body line into a function with parameters %x: f32[4] and %i: s32[4].
std::string body_error(std::string_view line) {
  return parse_message("func @f(%x: f32[4], %i: s32[4]) -> () {\n  " + std::string(line) +
                       "\n  return\n}\n");
}

TEST(Parser, ErrorsCarryUsageExitCode) {
  Expected<Module> m = parse_module("junk", ParseOptions{"x.ir", 1});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code(), ExitCode::kUsage);
  EXPECT_EQ(m.error().message(), "x.ir:1:1: expected 'func', found 'junk'");
}

TEST(Parser, TopLevel) {
  EXPECT_EQ(parse_message("func f() -> () {}"), "test.ir:1:6: expected a function name (@name), found 'f'");
  EXPECT_EQ(parse_message("func @f( -> () {}"), "test.ir:1:10: expected a parameter (%name), found '->'");
  EXPECT_EQ(parse_message("func @f() () {}"), "test.ir:1:11: expected '->', found '('");
  EXPECT_EQ(parse_message("func @f() -> () {\n  return\n"),
            "test.ir:3:1: expected '}' closing the function, found end of input");
  EXPECT_EQ(parse_message("func @f() -> () {\n  return\n}\nfunc @f() -> () {\n  return\n}\n"),
            "test.ir:4:6: redefinition of function @f");
}

TEST(Parser, Types) {
  EXPECT_EQ(parse_message("func @f(%x: f33[4]) -> () {\n  return\n}"),
            "test.ir:1:13: expected an element type (f32, f64, bf16, f16, s32, u32, pred), found 'f33'");
  EXPECT_EQ(parse_message("func @f(%x: f32[4,]) -> () {\n  return\n}"),
            "test.ir:1:19: expected a dimension size, found ']'");
  EXPECT_EQ(parse_message("func @f(%x: f32[-4]) -> () {\n  return\n}"),
            "test.ir:1:17: dimension size -4 is outside [0, 2^40]");
  EXPECT_EQ(parse_message("func @f(%x: f32[4]{a,b}) -> () {\n  return\n}"),
            "test.ir:1:19: 2 axis names given for a rank-1 type");
  EXPECT_EQ(parse_message("func @f(%x: f32[99999999999999999999]) -> () {\n  return\n}"),
            "test.ir:1:17: integer 99999999999999999999 is out of range");
  EXPECT_EQ(parse_message("func @f(%x: f32[1048576,1048576,1048576]) -> () {\n  return\n}"),
            "test.ir:1:33: tensor has more than 2^53 elements");
}

TEST(Parser, Names) {
  EXPECT_EQ(body_error("%0 = add %x, %y : f32[4]"), "test.ir:2:16: use of undefined value %y");
  EXPECT_EQ(body_error("%x = add %x, %x : f32[4]"), "test.ir:2:3: redefinition of %x");
  EXPECT_EQ(body_error("% = add %x, %x : f32[4]"), "test.ir:2:3: expected a name after '%'");
  EXPECT_EQ(parse_message("func @f(%a: f32[1], %a: f32[1]) -> () {\n  return\n}"),
            "test.ir:1:21: redefinition of %a");
}

TEST(Parser, Ops) {
  EXPECT_EQ(body_error("%0 = ad %x, %x : f32[4]"),
            "test.ir:2:8: unknown op 'ad'; did you mean 'add', 'pad' or 'and'?");
  EXPECT_EQ(body_error("%0 add %x, %x : f32[4]"),
            "test.ir:2:6: expected '=' after the result names, found 'add'");
  EXPECT_EQ(body_error("%0 = add %x %x : f32[4]"),
            "test.ir:2:15: expected ':' before the result type, found '%x'");
  EXPECT_EQ(body_error("%0 = add %x : f32[4]"), "test.ir:2:8: add expects 2 operands, found 1");
  EXPECT_EQ(body_error("%0, %1 = add %x, %x : f32[4]"),
            "test.ir:2:12: add has 1 result, found 2 names");
  EXPECT_EQ(body_error("%0 = concatenate {dimension=0} : f32[4]"),
            "test.ir:2:8: concatenate expects at least 1 operands, found 0");
  EXPECT_EQ(body_error("%0 = add %x, %x : f32[4] @\"\""), "test.ir:2:28: scope must not be empty");
  EXPECT_EQ(body_error("%0 = add %x, %x : f32[4] @\"open"), "test.ir:2:28: unterminated string");
  EXPECT_EQ(body_error("%0 = add %x, %x : f32[4] ?"), "test.ir:2:28: unexpected character '?'");
}

TEST(Parser, Attributes) {
  EXPECT_EQ(body_error("%0 = add %x, %x {dims=[0]} : f32[4]"),
            "test.ir:2:20: add takes no attributes, found 'dims'");
  EXPECT_EQ(body_error("%0 = reduce_sum %x {dim=[0]} : f32[]"),
            "test.ir:2:23: reduce_sum has no attribute 'dim'; expected 'dims'");
  EXPECT_EQ(body_error("%0 = reduce_sum %x {dims=[0], dims=[0]} : f32[]"),
            "test.ir:2:33: attribute 'dims' given twice");
  EXPECT_EQ(body_error("%0 = reduce_sum %x {dims=0} : f32[]"),
            "test.ir:2:28: expected '[' starting an integer list, found '0'");
  EXPECT_EQ(body_error("%0 = compare %x, %x {direction=lq} : pred[4]"),
            "test.ir:2:34: expected a comparison direction (eq, ne, lt, le, gt, ge), found 'lq'");
  EXPECT_EQ(body_error("%0 = iota {dimension=x} : s32[4]"),
            "test.ir:2:24: expected an integer, found 'x'");
}

TEST(Parser, Literals) {
  EXPECT_EQ(body_error("%0 = constant 1.5 : s32[]"),
            "test.ir:2:17: expected an integer in a s32 literal");
  EXPECT_EQ(body_error("%0 = constant 1 : pred[]"),
            "test.ir:2:17: expected true or false in a pred literal");
  EXPECT_EQ(body_error("%0 = constant true : f32[]"),
            "test.ir:2:17: expected a number in a f32 literal");
  EXPECT_EQ(body_error("%0 = constant [] : f32[0]"), "test.ir:2:17: a literal needs at least one value");
  EXPECT_EQ(body_error("%0 = constant %x : f32[4]"), "test.ir:2:17: expected a number, found '%x'");
  EXPECT_EQ(body_error("%0 = constant -foo : f32[]"), "test.ir:2:17: unexpected '-foo'");
}

TEST(Parser, Return) {
  EXPECT_EQ(parse_message("func @f(%x: f32[4]) -> (f32[4]) {\n  return\n}"),
            "test.ir:2:3: return has 0 values but the signature declares 1 results");
  EXPECT_EQ(parse_message("func @f(%x: f32[4]) -> (f32[5]) {\n  return %x\n}"),
            "test.ir:2:10: returned value %x has type f32[4] but the signature declares f32[5]");
  EXPECT_EQ(parse_message("func @f(%x: f32[4]{a}) -> (f32[4]) {\n  return %x\n}"),
            "test.ir:2:10: returned value %x has type f32[4]{a} but the signature declares f32[4]");
}

TEST(Parser, ParsesWithoutShapeChecks) {
  // Shapes are the verifier's business: this parses, and the verifier rejects it.
  EXPECT_EQ(body_error("%0 = add %x, %i : f32[4]"), "");
}

TEST(Parser, MissingFileIsAUsageError) {
  Expected<Module> m = parse_module_file("/nonexistent/file.ir");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code(), ExitCode::kUsage);
  EXPECT_EQ(m.error().message(), "/nonexistent/file.ir: cannot open file");
}

}  // namespace
}  // namespace precast::ir
