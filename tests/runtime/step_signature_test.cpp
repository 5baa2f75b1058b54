// The runtime binds the batch arrays, run-time scalars, metrics and state by their signature
// names: any order binds; a missing, repeated or unknown name is refused (exit 4) naming it.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>

#include "runtime/train/MetricsSink.h"
#include "runtime/train/StepSignature.h"

namespace precast::runtime {
namespace {

artifact::TensorSignature tensor(const std::string& name, const std::string& role) {
  artifact::TensorSignature t;
  t.name = name;
  t.role = role;
  t.dtype = "f32";
  return t;
}

// A train step's signature: one weight and its moment, the batch, the scalars, the metrics.
artifact::Signature train_step() {
  artifact::Signature s;
  s.inputs.push_back(tensor("decoder.w", "parameter"));
  s.inputs.push_back(tensor("mu.decoder.w", "optimizer_state"));
  for (const char* name : kBatchNames) s.inputs.push_back(tensor(name, "batch"));
  for (const char* name : kScalarNames) s.inputs.push_back(tensor(name, "scalar"));
  s.outputs.push_back(tensor("decoder.w", "parameter"));
  s.outputs.back().aliased_input = 0;
  s.outputs.push_back(tensor("mu.decoder.w", "optimizer_state"));
  s.outputs.back().aliased_input = 1;
  for (const char* name : kMetricNames) s.outputs.push_back(tensor(name, "metric"));
  return s;
}

TEST(StepSignature, BindsByNameInAnyOrder) {
  artifact::Signature s = train_step();
  std::reverse(s.inputs.begin() + 2, s.inputs.end());
  std::reverse(s.outputs.begin() + 2, s.outputs.end());
  Expected<StepBinding> b = bind_signature(s);
  ASSERT_TRUE(b.ok()) << b.error().message();
  for (size_t k = 0; k < kBatchNames.size(); ++k) EXPECT_EQ(s.inputs[b->batch[k]].name, kBatchNames[k]);
  for (size_t k = 0; k < kScalarNames.size(); ++k) EXPECT_EQ(s.inputs[b->scalars[k]].name, kScalarNames[k]);
  for (size_t k = 0; k < kMetricNames.size(); ++k) EXPECT_EQ(s.outputs[b->metrics[k]].name, kMetricNames[k]);
  EXPECT_EQ(b->parameters, std::vector<size_t>{0});
}

void expect_refused(const artifact::Signature& s, const std::string& names) {
  Expected<StepBinding> b = bind_signature(s);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().exit_code(), static_cast<int>(ExitCode::kIncompatible));
  EXPECT_NE(b.error().message().find(names), std::string::npos) << b.error().message();
}

TEST(StepSignature, ARenamedBatchInputIsRefusedNamingIt) {
  artifact::Signature s = train_step();
  s.inputs[5].name = "labels";  // was "targets"
  expect_refused(s, "batch input 'labels'");
}

TEST(StepSignature, AMissingScalarIsRefusedNamingIt) {
  artifact::Signature s = train_step();
  s.inputs.pop_back();  // gradient_clipping_threshold
  expect_refused(s, "no scalar input named 'gradient_clipping_threshold'");
}

TEST(StepSignature, AMissingOrRepeatedMetricIsRefusedNamingIt) {
  artifact::Signature missing = train_step();
  missing.outputs.pop_back();
  expect_refused(missing, "no metric output named 'param_norm'");
  artifact::Signature repeated = train_step();
  repeated.outputs.back().name = "loss";
  expect_refused(repeated, "two metric outputs named 'loss'");
}

// MoE with load_balance_loss_weight > 0: the optional ninth metric binds by name, at most once.
TEST(StepSignature, TheLoadBalancingLossMetricIsOptional) {
  artifact::Signature plain = train_step();
  Expected<StepBinding> without = bind_signature(plain);
  ASSERT_TRUE(without.ok()) << without.error().message();
  EXPECT_FALSE(without->moe_lb_loss.has_value());
  artifact::Signature moe = train_step();
  moe.outputs.insert(moe.outputs.begin() + 3, tensor("moe_lb_loss", "metric"));
  Expected<StepBinding> with = bind_signature(moe);
  ASSERT_TRUE(with.ok()) << with.error().message();
  EXPECT_EQ(with->moe_lb_loss, std::optional<size_t>(3));
  EXPECT_EQ(moe.outputs[with->metrics[0]].name, "loss");
  moe.outputs.push_back(tensor("moe_lb_loss", "metric"));
  expect_refused(moe, "two metric outputs named 'moe_lb_loss'");
}

// MaxText's step line (metric_logger.py) ends with "moe_lb_loss: {:.6f}" whenever num_experts > 1,
// 0.000000 without the loss; a dense model's line has no such part. The JSON scalars carry
// learning/moe_lb_loss after learning/z_loss when the step computes it.
TEST(StepSignature, TheStepLineReportsTheLoadBalancingLossOfMoeModels) {
  StepMetrics m;
  m.step = 3;
  m.seconds = 0.5;
  m.loss = 2.25;
  m.lm_loss = 2.2;
  m.perplexity = 9.025013;
  m.total_weights = 30;
  m.moe_lb_loss = 0.0512345678;
  std::ostringstream moe, zero, dense;
  ASSERT_TRUE(LogLineSink(moe, 1.0, 100.0, true).write(m).ok());
  EXPECT_EQ(moe.str(),
            "completed step: 3, seconds: 0.500, TFLOP/s/device: 2.000, Tokens/s/device: 200.000, "
            "total_weights: 30, loss: 2.250, lm_loss: 2.200, perplexity: 9.025, "
            "moe_lb_loss: 0.051235\n");
  Scalars scalars = step_scalars(m, PerfFigures{});
  ASSERT_GT(scalars.size(), 4u);
  EXPECT_EQ(scalars[3].first, "learning/z_loss");
  EXPECT_EQ(scalars[4].first, "learning/moe_lb_loss");
  EXPECT_EQ(scalars[4].second, 0.0512345678);
  m.moe_lb_loss.reset();
  ASSERT_TRUE(LogLineSink(zero, 1.0, 100.0, true).write(m).ok());
  EXPECT_TRUE(zero.str().ends_with("perplexity: 9.025, moe_lb_loss: 0.000000\n")) << zero.str();
  ASSERT_TRUE(LogLineSink(dense, 1.0, 100.0).write(m).ok());
  EXPECT_TRUE(dense.str().ends_with("perplexity: 9.025\n")) << dense.str();
  for (const auto& [name, value] : step_scalars(m, PerfFigures{}))
    EXPECT_NE(name, "learning/moe_lb_loss");
}

TEST(StepSignature, StateOutputsMustNameAStateInput) {
  artifact::Signature s = train_step();
  s.outputs[0].name = "decoder.v";
  expect_refused(s, "parameter output 'decoder.v'");
  artifact::Signature copied = train_step();
  copied.outputs[1].aliased_input = -1;
  expect_refused(copied, "optimizer_state output 'mu.decoder.w' that is not written in place");
  artifact::Signature role = train_step();
  role.inputs[3].role = "labels";
  expect_refused(role, "role 'labels'");
}

}  // namespace
}  // namespace precast::runtime
