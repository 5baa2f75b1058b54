// Whether an artifact may run here: the host's triple, CPU features and device count against
// the artifact's compatibility key, and a run config's compile-time keys against the ones the
// artifact was compiled with. The runtime refuses with every mismatch listed (exit code 4).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/artifact/Artifact.h"
#include "ir/support/Error.h"

namespace precast::artifact {

// The machine the runtime is on.
struct HostInfo {
  std::string triple;                     // normalized, e.g. "x86_64-unknown-linux-gnu"
  std::vector<std::string> cpu_features;  // LLVM feature names: "avx2", "fma", "sse4.2", ...
  int64_t device_count = 1;               // devices this run spans (MPI ranks on the CPU)
};

// One disagreement, with both sides as text.
struct Mismatch {
  std::string subject;         // "target triple", "cpu feature avx512f", "config key emb_dim"
  std::string artifact_value;  // what the artifact says
  std::string actual_value;    // what the host or the given config says

  bool operator==(const Mismatch&) const = default;
};

// LLVM's normalized triple for the spellings Precast meets: a missing vendor becomes
// "unknown" ("x86_64-linux-gnu" → "x86_64-unknown-linux-gnu"), "pc" on Linux is the same
// target as "unknown", and "amd64"/"arm64" are "x86_64"/"aarch64". Other triples pass through.
std::string normalize_triple(std::string_view triple);

// The triple this process runs as, from the compiler's target macros (uname for an
// architecture the macros do not name); LLVM's normalized form.
std::string host_triple();

// LLVM feature names from the text of /proc/cpuinfo: its x86 "flags" line or Arm "Features"
// line, with the kernel's spellings translated ("sse4_2" → "sse4.2", "avx512_bf16" →
// "avx512bf16"). Sorted, without duplicates.
std::vector<std::string> parse_cpu_features(std::string_view cpuinfo_text);

// Triple and CPU features of this machine; device_count is 1, which a multi-process runtime
// replaces with its world size. Features are empty where /proc/cpuinfo cannot be read.
HostInfo host_info();

// Every way the host fails the key: triple (after normalization), each required CPU feature
// the host lacks, and the device count. Empty means compatible.
std::vector<Mismatch> check_compatibility(const CompatibilityKey& artifact, const HostInfo& host);

// Each compile-time key whose value differs between the artifact's resolved config and the
// given one, in the artifact's key order. A key is compile-time if either side marks it so; a
// key missing on one side shows as "(not set)". Run-time keys never mismatch.
std::vector<Mismatch> compare_compile_time_config(const std::vector<ConfigEntry>& artifact_config,
                                                  const std::vector<ConfigEntry>& given_config);

// One line per mismatch: "  target triple: artifact x86_64-unknown-linux-gnu, host aarch64-…".
// `actual_label` names the other side ("host", "config").
std::string format_mismatches(const std::vector<Mismatch>& mismatches,
                              std::string_view actual_label);

// The runtime's refusals: kIncompatible errors that name the file, list every mismatch and
// say what to do; success when there is nothing to report.
Status require_compatible_host(const std::filesystem::path& artifact_path,
                               const CompatibilityKey& key, const HostInfo& host);
Status require_same_compile_time_config(const std::filesystem::path& artifact_path,
                                        const std::vector<ConfigEntry>& artifact_config,
                                        const std::vector<ConfigEntry>& given_config);

}  // namespace precast::artifact
