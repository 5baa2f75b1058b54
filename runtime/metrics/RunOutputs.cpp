#include "runtime/metrics/RunOutputs.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>

#include "runtime/checkpoint/DurableFile.h"

namespace precast::runtime {
namespace {

namespace fs = std::filesystem;

std::string with_slash(std::string dir) {
  if (!dir.empty() && dir.back() != '/') dir += '/';
  return dir;
}

Expected<bool> flag(const std::map<std::string, std::string>& config, const std::string& key,
                    bool fallback) {
  auto it = config.find(key);
  if (it == config.end()) return fallback;
  const std::string& v = it->second;
  if (v == "True" || v == "true" || v == "1") return true;
  if (v == "False" || v == "false" || v == "0") return false;
  return usage_error(fmt::format("{}={}: expected true or false", key, v));
}

// A value as YAML: the printed value itself when YAML reads it back as the same text or as the
// number, bool, null or flow list it prints; otherwise a single-quoted string.
std::string yaml_value(const std::string& v) {
  static const std::regex plain(
      R"(^(-?[0-9][0-9eE.+-]*|True|False|true|false|None|null|[A-Za-z_/.][A-Za-z0-9_./~-]*)$)");
  static const std::regex flow_list(R"(^\[[^:#{}]*\]$)");
  if (std::regex_match(v, plain) || std::regex_match(v, flow_list)) return v;
  std::string quoted = "'";
  for (char c : v) quoted += c == '\'' ? std::string("''") : std::string(1, c);
  return quoted + "'";
}

}  // namespace

Expected<RunOutputs> run_outputs(const std::map<std::string, std::string>& config,
                                 const std::string& base_output_directory,
                                 const std::string& run_name,
                                 const std::map<std::string, std::string>& explicit_dirs) {
  RunOutputs o;
  std::string base = base_output_directory.empty() ? "./maxtext_output" : base_output_directory;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  o.run_directory = base + "/" + run_name + "/";
  o.metrics_dir = o.run_directory + "metrics/";
  o.tensorboard_dir = o.run_directory + "tensorboard/";
  o.logs_dir = o.run_directory + "logs/";
  o.config_file = o.run_directory + "config.yml";
  if (auto it = explicit_dirs.find("metrics_dir");
      it != explicit_dirs.end() && !it->second.empty()) {
    o.metrics_dir = with_slash(it->second);
  }
  if (auto it = explicit_dirs.find("tensorboard_dir");
      it != explicit_dirs.end() && !it->second.empty()) {
    o.tensorboard_dir = with_slash(it->second);
  }
  PRECAST_ASSIGN_OR_RETURN(o.enable_tensorboard, flag(config, "enable_tensorboard", true));
  PRECAST_ASSIGN_OR_RETURN(o.save_config, flag(config, "save_config_to_gcs", false));
  if (auto it = config.find("cpu_peak_tflops"); it != config.end()) {
    const std::string& v = it->second;
    char* end = nullptr;
    o.cpu_peak_tflops = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !(o.cpu_peak_tflops >= 0)) {
      return usage_error(fmt::format(
          "cpu_peak_tflops={}: expected a number of TFLOP/s >= 0 (0 = measure at start-up)", v));
    }
  }
  return o;
}

std::string default_metrics_file(const RunOutputs& outputs) {
  return outputs.metrics_dir + "metrics.jsonl";
}

Status create_run_directories(const RunOutputs& outputs) {
  std::vector<std::string> dirs = {outputs.run_directory, outputs.metrics_dir, outputs.logs_dir};
  if (outputs.enable_tensorboard) dirs.push_back(outputs.tensorboard_dir);
  for (const std::string& dir : dirs) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) {
      return Error(ExitCode::kFailure,
                   fmt::format("cannot create the run's output directory {}: {}; choose another "
                               "base_output_directory",
                               dir, ec.message()));
    }
  }
  return Status::success();
}

Status write_resolved_config(const RunOutputs& outputs,
                             const std::map<std::string, std::string>& config) {
  std::string text = "# The resolved config of this run (precast-run, save_config_to_gcs=true).\n";
  for (const auto& [key, value] : config) {
    if (key == "hf_access_token") continue;  // a secret, never written (MaxText skips it too)
    text += key + ": " + yaml_value(value) + "\n";
  }
  const std::string temp = outputs.config_file + ".tmp";
  PRECAST_RETURN_IF_ERROR(checkpoint::write_file_durably(temp, {{text.data(), text.size()}}));
  std::error_code ec;
  fs::rename(temp, outputs.config_file, ec);
  if (ec) {
    std::remove(temp.c_str());
    return Error(ExitCode::kFailure, fmt::format("cannot rename {} to {}: {}", temp,
                                                 outputs.config_file, ec.message()));
  }
  return checkpoint::sync_directory(outputs.run_directory);
}

}  // namespace precast::runtime
