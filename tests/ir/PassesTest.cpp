// dce, cse, simplify and the pass manager (pipelines, dumps, timing, verification).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/support/IrTestSupport.h"
#include "ir/PassManager.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"
#include "ir/passes/CommonSubexpressionElimination.h"
#include "ir/passes/DeadCodeElimination.h"
#include "ir/passes/IrPasses.h"
#include "ir/passes/Simplify.h"

namespace precast::ir {
namespace {

using testing::parse_or_fail;

// Runs `pass` on the function text and returns the printed result (verified).
template <typename PassFn>
std::string apply(PassFn pass, std::string_view text, bool expect_change = true) {
  Module m = parse_or_fail(text);
  Expected<bool> changed = pass(m);
  EXPECT_TRUE(changed.ok());
  if (changed.ok()) {
    EXPECT_EQ(*changed, expect_change);
  }
  Status s = verify_module(m);
  EXPECT_TRUE(s.ok()) << s.error().message();
  return print_module(m);
}

TEST(DeadCodeElimination, RemovesUnusedChains) {
  std::string out = apply(eliminate_dead_code, R"(func @f(%x: f32[4]) -> (f32[4]) {
  %0 = exp %x : f32[4]
  %1 = log %0 : f32[4]
  %2 = neg %x : f32[4]
  return %2
}
)");
  EXPECT_EQ(out, R"(func @f(%x: f32[4]) -> (f32[4]) {
  %0 = neg %x : f32[4]
  return %0
}
)");
}

TEST(DeadCodeElimination, KeepsEverythingLive) {
  const char* text = "func @f(%x: f32[4]) -> (f32[4]) {\n  %0 = exp %x : f32[4]\n  return %0\n}\n";
  EXPECT_EQ(apply(eliminate_dead_code, text, false), text);
}

TEST(CommonSubexpressionElimination, MergesEqualOpsAndChains) {
  std::string out = apply(eliminate_common_subexpressions, R"(func @f(%x: f32[4]) -> (f32[4], f32[4]) {
  %0 = exp %x : f32[4]
  %1 = exp %x : f32[4]
  %2 = neg %0 : f32[4]
  %3 = neg %1 : f32[4]
  %4 = constant 1.0 : f32[4]
  %5 = constant 1.0 : f32[4]
  %6 = add %2, %4 : f32[4]
  %7 = add %3, %5 : f32[4]
  return %6, %7
}
)");
  EXPECT_EQ(out, R"(func @f(%x: f32[4]) -> (f32[4], f32[4]) {
  %0 = exp %x : f32[4]
  %1 = neg %0 : f32[4]
  %2 = constant 1.0 : f32[4]
  %3 = add %1, %2 : f32[4]
  return %3, %3
}
)");
}

TEST(CommonSubexpressionElimination, RespectsAnnotationsAndAttributes) {
  const char* text = R"(func @f(%x: f32[4,4]) -> (f32[4,4], f32[4,4], f32[4,4]{a,b}, f32[4], f32[4]) {
  %0 = exp %x : f32[4,4] #query_proj
  %1 = exp %x : f32[4,4]
  %2 = exp %x : f32[4,4]{a,b}
  %3 = reduce_sum %x {dims=[0]} : f32[4]
  %4 = reduce_sum %x {dims=[1]} : f32[4]
  return %0, %1, %2, %3, %4
}
)";
  EXPECT_EQ(apply(eliminate_common_subexpressions, text, false), text);
}

// Remat clones (phase recompute) are deliberate recomputations: CSE must not fold them back into
// the forward op (that would undo the remat policy), but clones of one scope may still merge with
// each other.
TEST(CommonSubexpressionElimination, KeepsRematClonesApartFromTheForward) {
  const char* text = R"(func @f(%x: f32[4]) -> (f32[4], f32[4], f32[4]) {
  %0 = exp %x : f32[4] @"decoder/layers_0/mlp" layer=0
  %1 = exp %x : f32[4] @"decoder/layers_0/mlp/remat" recompute layer=0
  %2 = exp %x : f32[4] @"decoder/layers_0/mlp/remat" recompute layer=0
  return %0, %1, %2
}
)";
  std::string out = apply(eliminate_common_subexpressions, text);
  EXPECT_EQ(out, R"(func @f(%x: f32[4]) -> (f32[4], f32[4], f32[4]) {
  %0 = exp %x : f32[4] @"decoder/layers_0/mlp" layer=0
  %1 = exp %x : f32[4] @"decoder/layers_0/mlp/remat" recompute layer=0
  return %0, %1, %1
}
)");
}

TEST(Simplify, MultiplicativeAndAdditiveIdentities) {
  std::string out = apply(simplify, R"(func @f(%x: f32[4]) -> (f32[4]) {
  %one = constant 1.0 : f32[4]
  %zero = constant 0.0 : f32[4]
  %0 = mul %x, %one : f32[4]
  %1 = mul %one, %0 : f32[4]
  %2 = add %1, %zero : f32[4]
  %3 = add %zero, %2 : f32[4]
  %4 = sub %3, %zero : f32[4]
  %5 = div %4, %one : f32[4]
  %6 = exp %5 : f32[4]
  return %6
}
)");
  EXPECT_EQ(out, R"(func @f(%x: f32[4]) -> (f32[4]) {
  %one = constant 1.0 : f32[4]
  %zero = constant 0.0 : f32[4]
  %0 = exp %x : f32[4]
  return %0
}
)");
}

TEST(Simplify, NoOpConversionsAndMovement) {
  std::string out = apply(simplify, R"(func @f(%x: f32[2,3]) -> (f32[2,3]) {
  %0 = convert %x : f32[2,3]
  %1 = reshape %0 : f32[2,3]
  %2 = transpose %1 {permutation=[0, 1]} : f32[2,3]
  %3 = broadcast_in_dim %2 {dims=[0, 1]} : f32[2,3]
  return %3
}
)");
  EXPECT_EQ(out, "func @f(%x: f32[2,3]) -> (f32[2,3]) {\n  return %x\n}\n");
}

TEST(Simplify, ReshapeAndTransposeChainsFold) {
  std::string out = apply(simplify, R"(func @f(%x: f32[2,3,4]) -> (f32[24], f32[4,2,3], f32[2,3,4]) {
  %0 = reshape %x : f32[6,4]
  %1 = reshape %0 : f32[24]
  %2 = transpose %x {permutation=[1, 2, 0]} : f32[3,4,2]
  %3 = transpose %2 {permutation=[1, 2, 0]} : f32[4,2,3]
  %4 = transpose %3 {permutation=[1, 2, 0]} : f32[2,3,4]
  %5 = reshape %0 : f32[2,3,4]
  return %1, %3, %5
}
)");
  EXPECT_EQ(out, R"(func @f(%x: f32[2,3,4]) -> (f32[24], f32[4,2,3], f32[2,3,4]) {
  %0 = reshape %x : f32[6,4]
  %1 = reshape %x : f32[24]
  %2 = transpose %x {permutation=[1, 2, 0]} : f32[3,4,2]
  %3 = transpose %x {permutation=[2, 0, 1]} : f32[4,2,3]
  return %1, %3, %x
}
)");
}

TEST(Simplify, BroadcastOfSplatBecomesAConstant) {
  std::string out = apply(simplify, R"(func @f() -> (f32[8,128]{batch,embed}) {
  %0 = constant 0.5 : f32[]
  %1 = broadcast_in_dim %0 {dims=[]} : f32[8,128]{batch,embed} @"decoder"
  return %1
}
)");
  EXPECT_EQ(out, R"(func @f() -> (f32[8,128]{batch,embed}) {
  %0 = constant 0.5 : f32[]
  %1 = constant 0.5 : f32[8,128]{batch,embed} @"decoder"
  return %1
}
)");
}

TEST(Simplify, KeepsAnnotatedAndCheckpointedOps) {
  const char* text = R"(func @f(%x: f32[4]) -> (f32[4]{embed}, f32[4]) {
  %one = constant 1.0 : f32[4]
  %0 = mul %x, %one : f32[4]{embed}
  %1 = mul %x, %one : f32[4] #out_proj
  %2 = mul %x, %x : f32[4]
  return %0, %1
}
)";
  EXPECT_EQ(apply(simplify, text, false), text);
}

TEST(PassRegistry, LookupAndErrors) {
  PassRegistry registry;
  ASSERT_TRUE(register_ir_passes(registry).ok());
  EXPECT_TRUE(registry.contains("cse"));
  Expected<Pass> missing = registry.lookup("csee");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code(), ExitCode::kUsage);
  EXPECT_EQ(missing.error().message(), "unknown pass 'csee'; did you mean 'cse', 'dce' or 'simplify'?");
  EXPECT_FALSE(registry.add({"cse", "again", eliminate_dead_code}).ok());
  EXPECT_FALSE(registry.add({"Bad_Name", "", eliminate_dead_code}).ok());
}

PassManagerOptions verifying() {
  PassManagerOptions options;
  options.verify_each = true;
  return options;
}

class PassManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(register_ir_passes(registry_).ok());
    dir_ = std::filesystem::temp_directory_path() /
           ("precast-pm-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static std::string read(const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  std::vector<std::string> dumped() const {
    std::vector<std::string> names;
    if (!std::filesystem::exists(dir_)) return names;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }

  PassRegistry registry_;
  std::filesystem::path dir_;
  const char* text_ = R"(func @f(%x: f32[4]) -> (f32[4]) {
  %one = constant 1.0 : f32[4]
  %0 = mul %x, %one : f32[4]
  %1 = exp %0 : f32[4]
  %2 = exp %0 : f32[4]
  %3 = add %1, %2 : f32[4]
  return %3
}
)";
};

TEST_F(PassManagerTest, RunsPipelineAndDumpsEveryPass) {
  PassManagerOptions options;
  options.verify_each = true;
  options.dump_dir = dir_.string();
  Expected<PassManager> pm = PassManager::create(options);
  ASSERT_TRUE(pm.ok());
  ASSERT_TRUE(pm->add_pipeline(registry_, "simplify, cse,dce").ok());
  EXPECT_EQ(pm->size(), 3u);
  Module m = parse_or_fail(text_);
  Status s = pm->run(m);
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(dumped(), (std::vector<std::string>{"00-input.ir", "01-simplify.ir", "02-cse.ir", "03-dce.ir"}));
  EXPECT_EQ(read(dir_ / "00-input.ir"), print_module(parse_or_fail(text_)));
  EXPECT_EQ(read(dir_ / "03-dce.ir"), print_module(m));
  EXPECT_EQ(print_module(m), R"(func @f(%x: f32[4]) -> (f32[4]) {
  %0 = exp %x : f32[4]
  %1 = add %0, %0 : f32[4]
  return %1
}
)");
  ASSERT_EQ(pm->timings().size(), 3u);
  EXPECT_TRUE(pm->timings()[0].changed);
  std::string report = pm->timing_report();
  EXPECT_NE(report.find("simplify"), std::string::npos);
  EXPECT_NE(report.find("total"), std::string::npos);
}

TEST_F(PassManagerTest, DumpAfterRegexRestrictsDumps) {
  PassManagerOptions options;
  options.dump_dir = dir_.string();
  options.dump_after = "^(cse|dce)$";
  Expected<PassManager> pm = PassManager::create(options);
  ASSERT_TRUE(pm.ok());
  ASSERT_TRUE(pm->add_pipeline(registry_, "simplify,cse,dce").ok());
  Module m = parse_or_fail(text_);
  ASSERT_TRUE(pm->run(m).ok());
  EXPECT_EQ(dumped(), (std::vector<std::string>{"00-input.ir", "02-cse.ir", "03-dce.ir"}));
}

TEST_F(PassManagerTest, BadRegexAndUnknownPass) {
  PassManagerOptions options;
  options.dump_after = "(";
  Expected<PassManager> pm = PassManager::create(options);
  ASSERT_FALSE(pm.ok());
  EXPECT_EQ(pm.error().code(), ExitCode::kUsage);
  Expected<PassManager> ok = PassManager::create({});
  ASSERT_TRUE(ok.ok());
  Status s = ok->add_pipeline(registry_, "cse,simplfy");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("unknown pass 'simplfy'; did you mean 'simplify'"), std::string::npos);
}

TEST_F(PassManagerTest, InvalidOutputOfAPassIsAnInternalError) {
  Expected<PassManager> pm = PassManager::create(verifying());
  ASSERT_TRUE(pm.ok());
  pm->add({"break-types", "retypes the first op's result", [](Module& m) -> Expected<bool> {
             Function& f = m.function(0);
             Op& op = f.mutable_op(0);
             op.kind = OpKind::kIsFinite;  // f32 result where pred is inferred
             return true;
           }});
  Module m = parse_or_fail("func @f(%x: f32[4]) -> (f32[4]) {\n  %0 = exp %x : f32[4]\n  return %0\n}\n");
  Status s = pm->run(m);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ExitCode::kInternal);
  EXPECT_EQ(s.error().message(),
            "pass 'break-types' produced invalid IR: test.ir:2: in @f, %0 = is_finite: result type "
            "f32[4] does not match the inferred type pred[4]");
}

TEST_F(PassManagerTest, PassErrorsNameThePass) {
  Expected<PassManager> pm = PassManager::create({});
  ASSERT_TRUE(pm.ok());
  pm->add({"fails", "", [](Module&) -> Expected<bool> { return usage_error("no can do"); }});
  Module m = parse_or_fail("func @f() -> () {\n  return\n}\n");
  Status s = pm->run(m);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message(), "pass 'fails': no can do");
}

TEST_F(PassManagerTest, VerifiesInputWhenAsked) {
  Expected<PassManager> pm = PassManager::create(verifying());
  ASSERT_TRUE(pm.ok());
  Module m = parse_or_fail("func @f(%x: f32[4]) -> () {\n  %0 = exp %x : f32[5]\n  return\n}\n");
  Status s = pm->run(m);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ExitCode::kUsage);
}

// Options in braces reach the pass's factory; an item without '=' continues the previous value;
// the run's record names the options and counts the ops before and after; after_each sees every
// pass.
TEST_F(PassManagerTest, OptionsReachTheFactoryAndTheRecord) {
  std::string seen_mesh;
  int64_t seen_window = 0;
  ASSERT_TRUE(registry_
                  .add_factory("configured", "takes options",
                               [&](const PassOptions& options) -> Expected<Pass> {
                                 PRECAST_RETURN_IF_ERROR(
                                     options.check_known("configured", {"mesh", "window"}));
                                 seen_mesh = options.get_string("mesh", "");
                                 PRECAST_ASSIGN_OR_RETURN(
                                     seen_window, options.get_int("configured", "window", 7));
                                 return Pass("configured", "", [](Module&) -> Expected<bool> {
                                   return false;
                                 });
                               })
                  .ok());
  std::vector<std::string> observed;
  PassManagerOptions options;
  options.after_each = [&observed](const PassTiming& t, const Module&) -> Status {
    observed.push_back(t.name);
    return Status::success();
  };
  Expected<PassManager> pm = PassManager::create(options);
  ASSERT_TRUE(pm.ok());
  Status added = pm->add_pipeline(registry_, "cse, configured{mesh=fsdp:2,tensor:2, window=16},dce");
  ASSERT_TRUE(added.ok()) << added.error().message();
  EXPECT_EQ(seen_mesh, "fsdp:2,tensor:2");
  EXPECT_EQ(seen_window, 16);
  Module m = parse_or_fail(text_);
  ASSERT_TRUE(pm->run(m).ok());
  EXPECT_EQ(observed, (std::vector<std::string>{"cse", "configured", "dce"}));
  ASSERT_EQ(pm->timings().size(), 3u);
  EXPECT_EQ(pm->timings()[1].options, "{mesh=fsdp:2,tensor:2,window=16}");
  // cse merges the two exps (5 ops -> 4); dce then drops nothing here (the mul stays).
  EXPECT_EQ(pm->timings()[0].ops_before, 5u);
  EXPECT_EQ(pm->timings()[0].ops_after, 4u);

  Expected<PassManager> other = PassManager::create({});
  ASSERT_TRUE(other.ok());
  Status unknown = other->add_pipeline(registry_, "configured{windw=3}");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().message(),
            "pass 'configured' has no option 'windw' (did you mean 'window'?); its options: mesh, "
            "window");
  Status no_options = other->add_pipeline(registry_, "cse{x=1}");
  ASSERT_FALSE(no_options.ok());
  EXPECT_EQ(no_options.error().message(), "pass 'cse' takes no options (got 'x')");
  Status not_int = other->add_pipeline(registry_, "configured{window=abc}");
  ASSERT_FALSE(not_int.ok());
  EXPECT_EQ(not_int.error().message(), "pass 'configured': option window='abc' is not an integer");
  Status unclosed = other->add_pipeline(registry_, "configured{window=3");
  ASSERT_FALSE(unclosed.ok());
  Status bare = other->add_pipeline(registry_, "configured{fsdp}");
  ASSERT_FALSE(bare.ok());
  EXPECT_EQ(bare.error().message(), "pass 'configured': option 'fsdp' has no value; write key=value");
}

TEST(Passes, PipelineKeepsEveryOpModuleValid) {
  Module m = testing::every_op_module();
  PassRegistry registry;
  ASSERT_TRUE(register_ir_passes(registry).ok());
  Expected<PassManager> pm = PassManager::create(verifying());
  ASSERT_TRUE(pm.ok());
  ASSERT_TRUE(pm->add_pipeline(registry, "simplify,cse,dce,decompose-composites,simplify,cse,dce").ok());
  Status s = pm->run(m);
  EXPECT_TRUE(s.ok()) << s.error().message();
}

}  // namespace
}  // namespace precast::ir
