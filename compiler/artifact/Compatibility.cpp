// Host detection and the compatibility checks. Triples follow LLVM's normalized spelling so the
// key the backend writes (from LLVM) and the host we detect here (without LLVM) compare equal.
#include "compiler/artifact/Compatibility.h"

#include <sys/utsname.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include <fmt/format.h>

namespace precast::artifact {
namespace {

// Architecture spellings other tools use for the same target, and their LLVM names.
const std::map<std::string, std::string, std::less<>> kArchitectureAliases = {
    {"amd64", "x86_64"}, {"x86-64", "x86_64"}, {"arm64", "aarch64"}};

// Operating-system components; a triple whose second component is one of these has no vendor.
const std::set<std::string, std::less<>> kOperatingSystems = {
    "linux", "darwin", "windows", "freebsd", "netbsd", "openbsd", "none"};

// Kernel /proc/cpuinfo flag spellings whose LLVM feature name differs. Unlisted flags keep
// their spelling, which matches LLVM for the common ones (avx, avx2, fma, f16c, avx512f, ...).
const std::map<std::string, std::string, std::less<>> kCpuinfoToLlvmFeature = {
    {"sse4_1", "sse4.1"},
    {"sse4_2", "sse4.2"},
    {"pni", "sse3"},
    {"pclmulqdq", "pclmul"},
    {"avx512_bf16", "avx512bf16"},
    {"avx512_fp16", "avx512fp16"},
    {"avx512_vnni", "avx512vnni"},
    {"avx512_vbmi2", "avx512vbmi2"},
    {"avx512_bitalg", "avx512bitalg"},
    {"avx512_vpopcntdq", "avx512vpopcntdq"},
    {"avx_vnni", "avxvnni"},
    {"asimd", "neon"},
    {"bmi1", "bmi"},
    {"abm", "lzcnt"},
    {"lahf_lm", "sahf"},
    {"3dnowprefetch", "prfchw"},
    {"rdrand", "rdrnd"},
    {"sha_ni", "sha"},
    {"user_shstk", "shstk"},
    {"avx512_vp2intersect", "avx512vp2intersect"},
    {"avx512_vbmi", "avx512vbmi"},
    {"lm", "64bit"},
};

std::vector<std::string> split(std::string_view text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t end = text.find(separator, start);
    parts.emplace_back(text.substr(start, end - start));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

std::string join(const std::vector<std::string>& parts, std::string_view separator) {
  std::string joined;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) joined += separator;
    joined += parts[i];
  }
  return joined;
}

std::string lowercase(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower;
}

std::string_view compiled_architecture() {
#if defined(__x86_64__)
  return "x86_64";
#elif defined(__aarch64__)
  return "aarch64";
#elif defined(__riscv) && __riscv_xlen == 64
  return "riscv64";
#elif defined(__powerpc64__) && defined(__LITTLE_ENDIAN__)
  return "powerpc64le";
#else
  return "";
#endif
}

std::string host_architecture() {
  if (!compiled_architecture().empty()) return std::string(compiled_architecture());
  utsname name{};
  if (::uname(&name) != 0) return "unknown";
  return normalize_triple(name.machine);
}

// "linux-gnu", "linux-musl", ...: the part of the triple after the vendor.
std::string_view host_system() {
#if defined(__ANDROID__)
  return "linux-android";
#elif defined(__linux__) && defined(__GLIBC__)
  return "linux-gnu";
#elif defined(__linux__)
  return "linux-musl";
#elif defined(__APPLE__)
  return "darwin";
#else
  return "unknown";
#endif
}

// An LLVM feature string may say "+avx2"; "-feature" entries are not requirements.
std::optional<std::string> required_feature(std::string_view feature) {
  if (feature.starts_with('-')) return std::nullopt;
  if (feature.starts_with('+')) feature.remove_prefix(1);
  return std::string(feature);
}

std::string_view value_or_not_set(const ConfigEntry* entry) {
  return entry != nullptr ? std::string_view(entry->value) : std::string_view("(not set)");
}

bool is_compile_time(const ConfigEntry* a, const ConfigEntry* b) {
  return (a != nullptr && a->phase == ConfigPhase::kCompile) ||
         (b != nullptr && b->phase == ConfigPhase::kCompile);
}

std::map<std::string_view, const ConfigEntry*> index_by_key(
    const std::vector<ConfigEntry>& config) {
  std::map<std::string_view, const ConfigEntry*> index;
  for (const ConfigEntry& entry : config) index.emplace(entry.key, &entry);
  return index;
}

const ConfigEntry* find_entry(const std::map<std::string_view, const ConfigEntry*>& index,
                              std::string_view key) {
  auto it = index.find(key);
  return it != index.end() ? it->second : nullptr;
}

void add_config_mismatch(const ConfigEntry* in_artifact, const ConfigEntry* given,
                         std::string_view key, std::vector<Mismatch>& mismatches) {
  if (!is_compile_time(in_artifact, given)) return;
  if (in_artifact != nullptr && given != nullptr && in_artifact->value == given->value) return;
  mismatches.push_back({fmt::format("config key {}", key),
                        std::string(value_or_not_set(in_artifact)),
                        std::string(value_or_not_set(given))});
}

std::string read_file_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::string normalize_triple(std::string_view triple) {
  std::vector<std::string> parts = split(lowercase(triple), '-');
  if (auto alias = kArchitectureAliases.find(parts[0]); alias != kArchitectureAliases.end()) {
    parts[0] = alias->second;
  }
  if (parts.size() >= 2 && kOperatingSystems.contains(parts[1])) {
    parts.insert(parts.begin() + 1, "unknown");
  }
  if (parts.size() >= 3 && parts[1] == "pc" && parts[2] == "linux") parts[1] = "unknown";
  return join(parts, "-");
}

std::string host_triple() {
  return normalize_triple(fmt::format("{}-unknown-{}", host_architecture(), host_system()));
}

std::vector<std::string> parse_cpu_features(std::string_view cpuinfo_text) {
  std::set<std::string> features;
  for (const std::string& line : split(cpuinfo_text, '\n')) {
    if (!line.starts_with("flags") && !line.starts_with("Features")) continue;
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::istringstream words(line.substr(colon + 1));
    for (std::string flag; words >> flag;) {
      auto llvm_name = kCpuinfoToLlvmFeature.find(flag);
      features.insert(llvm_name != kCpuinfoToLlvmFeature.end() ? llvm_name->second : flag);
    }
    break;  // every core lists the same flags; the first line is enough
  }
  return {features.begin(), features.end()};
}

HostInfo host_info() {
  HostInfo host;
  host.triple = host_triple();
  host.cpu_features = parse_cpu_features(read_file_text("/proc/cpuinfo"));
  host.device_count = 1;
  return host;
}

std::vector<Mismatch> check_compatibility(const CompatibilityKey& artifact, const HostInfo& host) {
  std::vector<Mismatch> mismatches;
  if (normalize_triple(artifact.target_triple) != normalize_triple(host.triple)) {
    mismatches.push_back({"target triple", artifact.target_triple, host.triple});
  }
  std::set<std::string_view> host_features(host.cpu_features.begin(), host.cpu_features.end());
  for (const std::string& feature : artifact.cpu_features) {
    std::optional<std::string> required = required_feature(feature);
    if (required && !host_features.contains(*required)) {
      mismatches.push_back({"cpu feature " + *required, "required", "missing"});
    }
  }
  if (artifact.num_devices != host.device_count) {
    mismatches.push_back(
        {"device count", std::to_string(artifact.num_devices), std::to_string(host.device_count)});
  }
  return mismatches;
}

std::vector<Mismatch> compare_compile_time_config(const std::vector<ConfigEntry>& artifact_config,
                                                  const std::vector<ConfigEntry>& given_config) {
  auto artifact_index = index_by_key(artifact_config);
  auto given_index = index_by_key(given_config);
  std::vector<Mismatch> mismatches;
  for (const ConfigEntry& entry : artifact_config) {
    add_config_mismatch(&entry, find_entry(given_index, entry.key), entry.key, mismatches);
  }
  for (const ConfigEntry& entry : given_config) {
    if (find_entry(artifact_index, entry.key) == nullptr) {
      add_config_mismatch(nullptr, &entry, entry.key, mismatches);
    }
  }
  return mismatches;
}

std::string format_mismatches(const std::vector<Mismatch>& mismatches,
                              std::string_view actual_label) {
  std::string text;
  for (const Mismatch& mismatch : mismatches) {
    text += fmt::format("  {}: artifact {}, {} {}\n", mismatch.subject, mismatch.artifact_value,
                        actual_label, mismatch.actual_value);
  }
  return text;
}

Status require_compatible_host(const std::filesystem::path& artifact_path,
                               const CompatibilityKey& key, const HostInfo& host) {
  std::vector<Mismatch> mismatches = check_compatibility(key, host);
  if (mismatches.empty()) return Status::success();
  return Error(ExitCode::kIncompatible,
               fmt::format("{} was compiled for another machine:\n{}recompile it with `precast "
                           "compile` for this machine, or run it where it fits",
                           artifact_path.string(), format_mismatches(mismatches, "host")));
}

Status require_same_compile_time_config(const std::filesystem::path& artifact_path,
                                        const std::vector<ConfigEntry>& artifact_config,
                                        const std::vector<ConfigEntry>& given_config) {
  std::vector<Mismatch> mismatches = compare_compile_time_config(artifact_config, given_config);
  if (mismatches.empty()) return Status::success();
  return Error(ExitCode::kIncompatible,
               fmt::format("{} was compiled with different compile-time settings:\n{}set them "
                           "back, or recompile with `precast compile` using the new values "
                           "(run-time keys may change without recompiling)",
                           artifact_path.string(), format_mismatches(mismatches, "config")));
}

}  // namespace precast::artifact
