// The runtime binds the batch arrays, run-time scalars, metrics and state by their signature
// names: any order binds; a missing, repeated or unknown name is refused (exit 4) naming it.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

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
