// ir::Rewriter: the rebuild epilogue shared by remat, partitioning, widening and the schedule.
#include <gtest/gtest.h>

#include "ir/Printer.h"
#include "ir/Rewriter.h"
#include "tests/support/IrTestSupport.h"

namespace precast::ir {
namespace {

using testing::parse_or_fail;

const char* kStep = R"(func @train_step(%w: f32[4] P('fsdp') role=optimizer_state, %x: f32[4]) -> (f32[4] aliases %w, f32[]) {
  %e = exp %x : f32[4] @"decoder/layers_1/mlp" layer=1
  %new = sub %w, %e : f32[4] region=optimizer
  %s = reduce_sum %e {dims=[0]} : f32[] @"loss" backward region=logits
  return %new, %s
}
)";

// Cloning every op in order and committing gives back the same text: parameters with their
// shardings and roles, op facts and scopes, results and donation.
TEST(Rewriter, CloneEveryOpAndCommitIsTheIdentity) {
  Module m = parse_or_fail(kStep);
  std::string before = print_module(m);
  Rewriter rewriter(m, 0);
  for (OpIndex i = 0; i < m.function(0).num_ops(); ++i) rewriter.clone(i);
  Status committed = rewriter.commit("identity");
  ASSERT_TRUE(committed.ok()) << committed.error().message();
  EXPECT_EQ(print_module(m), before);
}

// A rewrite the pass decides (here: exp replaced by its operand) maps values; the results follow
// the map, the donation stays.
TEST(Rewriter, MappedValuesBecomeTheResults) {
  Module m = parse_or_fail(kStep);
  Rewriter rewriter(m, 0);
  const Function& f = rewriter.source();
  Value x = f.params()[1];
  rewriter.map(f.result(f.op(0)), rewriter[x]);
  rewriter.clone(1);
  rewriter.clone(2);
  ASSERT_TRUE(rewriter.commit("drop-exp").ok());
  const Function& g = m.function(0);
  EXPECT_EQ(g.num_ops(), 2u);
  EXPECT_EQ(g.result_alias(0), 0);
  EXPECT_NE(print_module(m).find("sub %w, %x"), std::string::npos) << print_module(m);
}

// A rebuild that does not verify is an internal error naming the pass, and the module keeps its
// function.
TEST(Rewriter, AnInvalidRebuildIsAnInternalErrorAndLeavesTheModule) {
  Module m = parse_or_fail(kStep);
  std::string before = print_module(m);
  Rewriter rewriter(m, 0);
  rewriter.clone(0);  // %new and %s are never built: the results map to nothing
  Status committed = rewriter.commit("half-done");
  ASSERT_FALSE(committed.ok());
  EXPECT_EQ(committed.error().code(), ExitCode::kInternal);
  EXPECT_NE(committed.error().message().find("half-done produced an invalid @train_step"),
            std::string::npos)
      << committed.error().message();
  EXPECT_EQ(print_module(m), before);
}

// Building into a given function: the pass adds its own parameters; finish() completes it there
// and leaves the module as it was.
TEST(Rewriter, BuildsIntoAGivenFunctionWithItsOwnParameters) {
  Module m = parse_or_fail(kStep);
  std::unique_ptr<Function> built = m.new_function("train_step");
  Function& into = *built;
  Rewriter rewriter(m.function(0), into, Rewriter::Params::kOwn);
  const Function& f = rewriter.source();
  for (Value p : f.params()) rewriter.map(p, into.add_param_like(f, p));
  for (OpIndex i = 0; i < f.num_ops(); ++i) rewriter.clone(i);
  Status finished = rewriter.finish("copy");
  ASSERT_TRUE(finished.ok()) << finished.error().message();
  EXPECT_EQ(print_function(into), print_function(m.function(0)));
  EXPECT_FALSE(rewriter.release("copy").ok());  // nothing of its own to hand over
}

}  // namespace
}  // namespace precast::ir
