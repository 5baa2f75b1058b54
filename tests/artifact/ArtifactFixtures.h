// A fully populated artifact (every field non-default) and scratch-directory helpers shared by
// the artifact tests.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "compiler/artifact/Artifact.h"

namespace precast::artifact::fixtures {

inline Artifact full_artifact() {
  Artifact a;
  a.compiler_version = "0.1.0";
  a.key.target_triple = "x86_64-unknown-linux-gnu";
  a.key.cpu_features = {"avx", "avx2", "fma", "sse4.2"};
  a.key.topology_name = "cpu-4";
  a.key.mesh = {{"data", 2}, {"fsdp", 2}};
  a.key.num_devices = 4;
  a.key.ir_hash = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

  a.signature.inputs = {
      {"params.embedding", {32000, 512}, "f32", "{fsdp, embed}", -1, "parameter", "normal 0.02", -1},
      {"opt.mu.embedding", {32000, 512}, "f32", "{fsdp, embed}", -1, "optimizer_state", "", -1},
      {"batch.inputs", {2, 1024}, "i32", "{data}", -1, "batch", "", -1},
      {"learning_rate", {}, "f32", "", -1, "scalar", "", -1},
  };
  a.signature.outputs = {
      {"params.embedding'", {32000, 512}, "f32", "{fsdp, embed}", 0, "parameter", "", -1},
      {"opt.mu.embedding'", {32000, 512}, "f32", "{fsdp, embed}", 1, "optimizer_state", "", -1},
      {"loss", {}, "f32", "", -1, "metric", "", -1},
      {"lm_loss", {}, "f32", "", -1, "metric", "", 2},
  };

  a.plan.arena_bytes = 1 << 20;
  a.plan.alignment = 64;
  a.plan.buffers = {
      {"logits", 0, 524288, 3, 9, "temp"},
      {"grad.embedding", 524288, 262144, 5, 11, "temp"},
      {"params.embedding", 0, 65536000, 0, 12, "argument"},
  };
  a.plan.argument_bytes = 131080196;
  a.plan.output_bytes = 131072004;
  a.plan.alias_bytes = 131072000;
  a.plan.temp_bytes = 786432;

  a.program = {
      {StepKind::kKernelCall,
       "fused_embed_lookup_0",
       {{BufferSpace::kArgument, 0, 65536000},
        {BufferSpace::kArgument, 2, 8192},
        {BufferSpace::kTemp, 0, 524288}},
       {},
       {},
       {}, "gather", "token_embedder"},
      {StepKind::kGemm,
       "",
       {{BufferSpace::kTemp, 0, 524288},
        {BufferSpace::kConstant, 128, 4096},
        {BufferSpace::kTemp, 524288, 262144}},
       {2048, 512, 128, 0, 1},
       {1.0, 0.0},
       {}, "dot_general", "decoder/layers_0/mlp/wi"},
      {StepKind::kAttention, "", {{BufferSpace::kTemp, 0, 524288}}, {8, 64, 1}, {0.125}, {}, "attention", "decoder/layers_0/self_attention"},
      {StepKind::kCollective,
       "",
       {{BufferSpace::kTemp, 524288, 262144}, {BufferSpace::kTemp, 786432, 262144}},
       {2, 1},
       {},
       {CollectiveKind::kReduceScatter, Reduction::kSum, {"data", "fsdp"}, {{0, 2}, {1, 3}}, 0,
        {1}, "f32", 262144}, "reduce_scatter", ""},
      {StepKind::kCopy,
       "",
       {{BufferSpace::kTemp, 524288, 4}, {BufferSpace::kOutput, 2, 4}},
       {},
       {-1.5e-300, 3.25},
       {}, "result_copies", ""},
  };
  // Every byte value, so nothing is treated as text.
  for (int i = 0; i < 600; ++i) a.object_code.push_back(static_cast<uint8_t>(i * 7));
  a.ir_text = "func @train_step(%p: f32[32000,512]) -> f32[] {\n  return %loss\n}\n";
  a.report_text = "Per train step:\n Total TFLOPs: 13.59\n";
  a.config = {
      {"model_name", "llama2-7b", ConfigPhase::kCompile},
      {"emb_dim", "512", ConfigPhase::kCompile},
      {"learning_rate", "3e-05", ConfigPhase::kRun},
      {"steps", "150001", ConfigPhase::kRun},
  };
  a.setup_text = "number parameters: 0.016 billion\n";
  a.model_tflops_per_device = 0.5625;
  a.tokens_per_device = 8192;
  return a;
}

// A fresh empty directory under the system temp dir, removed when the object goes away.
class ScratchDirectory {
 public:
  explicit ScratchDirectory(const std::string& name)
      : path_(std::filesystem::temp_directory_path() /
              ("precast-artifact-test-" + name + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDirectory() {
    std::error_code ignored;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add, ignored);
    std::filesystem::remove_all(path_, ignored);
  }
  const std::filesystem::path& path() const { return path_; }

  // Every entry's file name, sorted: tests assert that no temporary was left behind.
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(path_)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace precast::artifact::fixtures
