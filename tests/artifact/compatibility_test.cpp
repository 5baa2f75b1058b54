// Host detection, triple normalization, and the mismatch lists the runtime refuses with.
#include <gtest/gtest.h>

#include <algorithm>

#include "compiler/artifact/Compatibility.h"
#include "tests/artifact/ArtifactFixtures.h"

namespace precast::artifact {
namespace {

HostInfo matching_host() {
  return {"x86_64-unknown-linux-gnu", {"avx", "avx2", "f16c", "fma", "sse4.1", "sse4.2"}, 4};
}

TEST(Triple, NormalizesToLlvmSpelling) {
  EXPECT_EQ(normalize_triple("x86_64-linux-gnu"), "x86_64-unknown-linux-gnu");
  EXPECT_EQ(normalize_triple("x86_64-unknown-linux-gnu"), "x86_64-unknown-linux-gnu");
  EXPECT_EQ(normalize_triple("x86_64-pc-linux-gnu"), "x86_64-unknown-linux-gnu");
  EXPECT_EQ(normalize_triple("amd64-linux-gnu"), "x86_64-unknown-linux-gnu");
  EXPECT_EQ(normalize_triple("aarch64-linux-gnu"), "aarch64-unknown-linux-gnu");
  EXPECT_EQ(normalize_triple("arm64-apple-darwin"), "aarch64-apple-darwin");
  EXPECT_EQ(normalize_triple("X86_64-Linux-GNU"), "x86_64-unknown-linux-gnu");
  EXPECT_EQ(normalize_triple("nvptx64-nvidia-cuda"), "nvptx64-nvidia-cuda");
}

#if defined(__x86_64__) && defined(__linux__) && defined(__GLIBC__)
TEST(HostInfo, DetectsThisX86LinuxMachine) {
  EXPECT_EQ(host_triple(), "x86_64-unknown-linux-gnu");
  HostInfo host = host_info();
  EXPECT_EQ(host.triple, "x86_64-unknown-linux-gnu");
  EXPECT_EQ(host.device_count, 1);
  // Every x86-64 CPU has SSE2; the kernel's sse4_2 must arrive under LLVM's name.
  auto has = [&](const char* f) {
    return std::find(host.cpu_features.begin(), host.cpu_features.end(), f) !=
           host.cpu_features.end();
  };
  EXPECT_TRUE(has("sse2"));
  EXPECT_FALSE(has("sse4_2"));
  EXPECT_EQ(has("sse4.2"), __builtin_cpu_supports("sse4.2") != 0);
  EXPECT_EQ(has("avx2"), __builtin_cpu_supports("avx2") != 0);
  EXPECT_EQ(has("fma"), __builtin_cpu_supports("fma") != 0);
}
#endif

TEST(HostInfo, ParsesCpuinfoFlagsIntoLlvmNames) {
  const char* cpuinfo =
      "processor\t: 0\n"
      "model name\t: Some CPU\n"
      "flags\t\t: fpu sse2 pni sse4_1 sse4_2 avx avx2 fma f16c avx512f avx512_bf16 avx_vnni\n"
      "bugs\t\t: spectre_v1\n"
      "processor\t: 1\n"
      "flags\t\t: fpu sse2 something_else\n";
  EXPECT_EQ(parse_cpu_features(cpuinfo),
            (std::vector<std::string>{"avx", "avx2", "avx512bf16", "avx512f", "avxvnni", "f16c",
                                      "fma", "fpu", "sse2", "sse3", "sse4.1", "sse4.2"}));
}

TEST(HostInfo, ParsesArmFeatures) {
  EXPECT_EQ(parse_cpu_features("Features\t: fp asimd sve\n"),
            (std::vector<std::string>{"fp", "neon", "sve"}));
  EXPECT_TRUE(parse_cpu_features("").empty());
}

TEST(Compatibility, MatchingHostHasNoMismatches) {
  EXPECT_TRUE(check_compatibility(fixtures::full_artifact().key, matching_host()).empty());
}

TEST(Compatibility, ShortTripleSpellingIsEquivalent) {
  CompatibilityKey key = fixtures::full_artifact().key;
  key.target_triple = "x86_64-linux-gnu";
  EXPECT_TRUE(check_compatibility(key, matching_host()).empty());
}

TEST(Compatibility, ListsEveryMismatchWithBothValues) {
  CompatibilityKey key = fixtures::full_artifact().key;
  key.cpu_features = {"avx2", "+avx512f", "-sse4a", "fma", "avx512bw"};
  HostInfo host = matching_host();
  host.triple = "aarch64-unknown-linux-gnu";
  host.device_count = 2;
  EXPECT_EQ(check_compatibility(key, host),
            (std::vector<Mismatch>{
                {"target triple", "x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"},
                {"cpu feature avx512f", "required", "missing"},
                {"cpu feature avx512bw", "required", "missing"},
                {"device count", "4", "2"},
            }));
}

TEST(Compatibility, RequireCompatibleHostNamesFileAndEachMismatch) {
  CompatibilityKey key = fixtures::full_artifact().key;
  key.cpu_features.push_back("avx512f");
  HostInfo host = matching_host();
  host.device_count = 1;
  Status status = require_compatible_host("out/step.pcx", key, host);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().code(), ExitCode::kIncompatible);
  EXPECT_EQ(status.error().message(),
            "out/step.pcx was compiled for another machine:\n"
            "  cpu feature avx512f: artifact required, host missing\n"
            "  device count: artifact 4, host 1\n"
            "recompile it with `precast compile` for this machine, or run it where it fits");
  EXPECT_TRUE(
      require_compatible_host("out/step.pcx", fixtures::full_artifact().key, matching_host()).ok());
}

TEST(CompileTimeConfig, SameConfigHasNoDifferences) {
  auto config = fixtures::full_artifact().config;
  EXPECT_TRUE(compare_compile_time_config(config, config).empty());
}

TEST(CompileTimeConfig, ListsDifferingCompileTimeKeysOnly) {
  std::vector<ConfigEntry> artifact_config = fixtures::full_artifact().config;
  std::vector<ConfigEntry> given = {
      {"steps", "10", ConfigPhase::kRun},               // run-time: may change
      {"emb_dim", "1024", ConfigPhase::kCompile},       // differs
      {"learning_rate", "1e-3", ConfigPhase::kRun},     // run-time: may change
      {"remat_policy", "full", ConfigPhase::kCompile},  // unknown to the artifact
                                                        // model_name missing
  };
  EXPECT_EQ(compare_compile_time_config(artifact_config, given),
            (std::vector<Mismatch>{
                {"config key model_name", "llama2-7b", "(not set)"},
                {"config key emb_dim", "512", "1024"},
                {"config key remat_policy", "(not set)", "full"},
            }));
}

TEST(CompileTimeConfig, EitherSideMarkingCompileTimeCounts) {
  std::vector<ConfigEntry> artifact_config = {{"dtype", "bfloat16", ConfigPhase::kRun}};
  std::vector<ConfigEntry> given = {{"dtype", "float32", ConfigPhase::kCompile}};
  EXPECT_EQ(compare_compile_time_config(artifact_config, given),
            (std::vector<Mismatch>{{"config key dtype", "bfloat16", "float32"}}));
}

TEST(CompileTimeConfig, RequireSameConfigMessage) {
  std::vector<ConfigEntry> given = fixtures::full_artifact().config;
  given[1].value = "1024";
  Status status =
      require_same_compile_time_config("step.pcx", fixtures::full_artifact().config, given);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().exit_code(), 4);
  EXPECT_EQ(status.error().message(),
            "step.pcx was compiled with different compile-time settings:\n"
            "  config key emb_dim: artifact 512, config 1024\n"
            "set them back, or recompile with `precast compile` using the new values (run-time "
            "keys may change without recompiling)");
}

}  // namespace
}  // namespace precast::artifact
