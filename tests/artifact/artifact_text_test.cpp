// The `precast inspect step.pcx` listing: each section's lines for the fixture artifact.
#include <gtest/gtest.h>

#include "compiler/artifact/ArtifactText.h"
#include "tests/artifact/ArtifactFixtures.h"

namespace precast::artifact {
namespace {

std::string listing() {
  Expected<std::string> bytes = encode_artifact(fixtures::full_artifact());
  EXPECT_TRUE(bytes.ok());
  Expected<ArtifactFile> file = decode_artifact(bytes.ok() ? *bytes : "", "out/step.pcx");
  EXPECT_TRUE(file.ok()) << file.error().message();
  return file.ok() ? format_artifact(*file, "out/step.pcx") : std::string();
}

// The lines of `text` from the one equal to `first` up to (excluding) the next blank line.
std::string section(const std::string& text, const std::string& first) {
  size_t begin = text.find(first + "\n");
  if (begin == std::string::npos) return "(no section " + first + ")";
  size_t end = text.find("\n\n", begin);
  return text.substr(begin, end == std::string::npos ? std::string::npos : end + 1 - begin);
}

TEST(ArtifactText, Header) {
  Expected<std::string> bytes = encode_artifact(fixtures::full_artifact());
  ASSERT_TRUE(bytes.ok());
  const size_t payload = bytes->size() - kHeaderBytes;
  std::string expected =
      "Precast artifact out/step.pcx\n"
      "  magic            PRECAST\\x00\n"
      "  format version   4\n"
      "  compiler version 0.1.0\n"
      "  payload sha256   " +
      to_hex(sha256(std::string_view(*bytes).substr(kHeaderBytes))) + "\n" + "  file size        " +
      group_digits(static_cast<int64_t>(bytes->size())) + " bytes (header 56, payload " +
      group_digits(static_cast<int64_t>(payload)) + ")\n";
  EXPECT_EQ(section(listing(), "Precast artifact out/step.pcx"), expected);
}

TEST(ArtifactText, CompatibilityKey) {
  EXPECT_EQ(section(listing(), "Compatibility key"),
            "Compatibility key\n"
            "  target triple x86_64-unknown-linux-gnu\n"
            "  cpu features  avx avx2 fma sse4.2\n"
            "  topology      cpu-4\n"
            "  mesh          data=2 fsdp=2\n"
            "  devices       4\n"
            "  ir hash       9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n");
}

TEST(ArtifactText, SignatureTable) {
  EXPECT_EQ(
      section(listing(), "Signature (4 inputs, 4 outputs)"),
      "Signature (4 inputs, 4 outputs)\n"
      "      # name              shape        dtype sharding      role            alias\n"
      "  in  0 params.embedding  [32000, 512] f32   {fsdp, embed} parameter\n"
      "  in  1 opt.mu.embedding  [32000, 512] f32   {fsdp, embed} optimizer_state\n"
      "  in  2 batch.inputs      [2, 1024]    i32   {data}        batch\n"
      "  in  3 learning_rate     []           f32   replicated    scalar\n"
      "  out 0 params.embedding' [32000, 512] f32   {fsdp, embed} parameter       donates input 0\n"
      "  out 1 opt.mu.embedding' [32000, 512] f32   {fsdp, embed} optimizer_state donates input 1\n"
      "  out 2 loss              []           f32   replicated    metric\n"
      "  out 3 lm_loss           []           f32   replicated    metric          same buffer as output 2\n");
}

TEST(ArtifactText, BufferPlan) {
  std::string text = listing();
  EXPECT_EQ(section(text, "Buffer plan"),
            "Buffer plan\n"
            "  arena    1,048,576 bytes   alignment 64\n"
            "  argument 131,080,196 bytes\n"
            "  output   131,072,004 bytes\n"
            "  alias    131,072,000 bytes\n"
            "  temp     786,432 bytes\n");
  EXPECT_EQ(section(text, "Buffers (3)"),
            "Buffers (3)\n"
            "  offset  bytes      live  category value\n"
            "  0       524,288    3..9  temp     logits\n"
            "  524,288 262,144    5..11 temp     grad.embedding\n"
            "  0       65,536,000 0..12 argument params.embedding\n");
}

TEST(ArtifactText, OneLinePerStep) {
  std::string program = section(listing(), "Step program (5 steps)");
  EXPECT_EQ(std::count(program.begin(), program.end(), '\n'), 6);
  EXPECT_NE(program.find("  0 kernel_call fused_embed_lookup_0 argument[0] 65,536,000 B, "
                         "argument[2] 8,192 B, temp@0 524,288 B\n"),
            std::string::npos)
      << program;
  EXPECT_NE(program.find("  1 gemm                             temp@0 524,288 B, constant@128 "
                         "4,096 B, temp@524,288 262,144 B  ints [2048, 512, 128, 0, 1] floats "
                         "[1, 0]\n"),
            std::string::npos)
      << program;
  EXPECT_NE(program.find("ints [2, 1] reduce_scatter sum over {data, fsdp} groups {0,2}{1,3} "
                         "dims [1] f32 262,144 B\n"),
            std::string::npos)
      << program;
  EXPECT_NE(program.find("  4 copy"), std::string::npos);
  EXPECT_NE(program.find("temp@524,288 4 B, output[2] 4 B"), std::string::npos);
  EXPECT_NE(program.find("floats [-1.5e-300, 3.25]\n"), std::string::npos);
}

TEST(ArtifactText, ConfigReportAndSizes) {
  std::string text = listing();
  EXPECT_EQ(section(text, "Object code"), "Object code\n  600 bytes\n");
  EXPECT_EQ(section(text, "Resolved config (4 keys)"),
            "Resolved config (4 keys)\n"
            "  model_name    llama2-7b compile\n"
            "  emb_dim       512       compile\n"
            "  learning_rate 3e-05     run\n"
            "  steps         150001    run\n");
  EXPECT_EQ(section(text, "Analysis report"),
            "Analysis report\nPer train step:\n Total TFLOPs: 13.59\n");
  EXPECT_EQ(text.substr(text.rfind("\nIR:")), "\nIR: 65 bytes (show it with --ir)\n");
}

// One line per entry point, train_step first: the fixture's 4 inputs (one of each role) and 4
// outputs, its 1 MiB arena and 600 bytes of code; then an eval_step of 2 inputs and 3 sums.
TEST(ArtifactText, EntryPointSummary) {
  Artifact artifact = fixtures::full_artifact();
  EntryPoint eval;
  eval.name = std::string(kEvalStepEntry);
  eval.signature.inputs = {artifact.signature.inputs[0], artifact.signature.inputs[2]};
  for (const char* sum : {"xent_sum", "z_loss_sum", "total_weights"}) {
    eval.signature.outputs.push_back({sum, {}, "f32", "", -1, "metric", "", -1});
  }
  eval.plan.arena_bytes = 4096;
  eval.plan.alignment = 64;
  eval.object_code.assign(1234, 0x90);
  artifact.entry_points.push_back(eval);
  Expected<std::string> bytes = encode_artifact(artifact);
  ASSERT_TRUE(bytes.ok());
  Expected<ArtifactFile> file = decode_artifact(*bytes, "out/step.pcx");
  ASSERT_TRUE(file.ok()) << file.error().message();
  EXPECT_EQ(
      section(format_artifact(*file, "out/step.pcx"), "Entry points (2)"),
      "Entry points (2)\n"
      "  name       inputs                                               outputs                                     arena           object code\n"
      "  train_step 4: 1 parameter, 1 optimizer_state, 1 batch, 1 scalar 4: 1 parameter, 1 optimizer_state, 2 metric 1,048,576 bytes 600 bytes\n"
      "  eval_step  2: 1 parameter, 1 batch                              3: 3 metric                                 4,096 bytes     1,234 bytes\n");
  // Without further entry points the table has train_step's line alone.
  EXPECT_EQ(section(listing(), "Entry points (1)").substr(0, 17), "Entry points (1)\n");
}

TEST(ArtifactText, IrIsPrintedVerbatim) {
  Artifact artifact = fixtures::full_artifact();
  EXPECT_EQ(format_artifact_ir(artifact), artifact.ir_text);
  artifact.ir_text = "func @f() {}";  // no final newline: one is added
  EXPECT_EQ(format_artifact_ir(artifact), "func @f() {}\n");
}

TEST(ArtifactText, GroupDigits) {
  EXPECT_EQ(group_digits(0), "0");
  EXPECT_EQ(group_digits(999), "999");
  EXPECT_EQ(group_digits(1000), "1,000");
  EXPECT_EQ(group_digits(131080196), "131,080,196");
  EXPECT_EQ(group_digits(-1234567), "-1,234,567");
  EXPECT_EQ(group_digits(INT64_MIN), "-9,223,372,036,854,775,808");
}

}  // namespace
}  // namespace precast::artifact
