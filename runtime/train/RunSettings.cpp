#include "runtime/train/RunSettings.h"

#include <fmt/format.h>

#include <cstdlib>

#include "ir/support/ClosestNames.h"

namespace precast::runtime {
namespace {

std::string strip_quotes(std::string v) {
  if (v.size() >= 2 && (v.front() == '\'' || v.front() == '"') && v.back() == v.front()) {
    return v.substr(1, v.size() - 2);
  }
  return v;
}

// The checkpoint keys. checkpoint_dir is MaxText's derivation from the run's own
// base_output_directory and run_name (which may differ from the ones recorded at compile time).
template <class Text, class Number, class Flag>
Status checkpoint_settings(RunSettings& s, Text& text, Number& number, Flag& flag) {
  PRECAST_ASSIGN_OR_RETURN(s.enable_checkpointing, flag("enable_checkpointing"));
  PRECAST_ASSIGN_OR_RETURN(s.save_checkpoint_on_completion, flag("save_checkpoint_on_completion"));
  PRECAST_ASSIGN_OR_RETURN(s.async_checkpointing, flag("async_checkpointing"));
  PRECAST_ASSIGN_OR_RETURN(double period, number("checkpoint_period"));
  if (period < 1 || period != static_cast<double>(static_cast<int64_t>(period))) {
    return usage_error(fmt::format("checkpoint_period={}: must be a whole number of steps >= 1",
                                   period));
  }
  s.checkpoint_period = static_cast<int64_t>(period);
  PRECAST_ASSIGN_OR_RETURN(std::string keep, text("max_num_checkpoints_to_keep"));
  if (keep != "None" && keep != "null" && !keep.empty()) {
    PRECAST_ASSIGN_OR_RETURN(double k, number("max_num_checkpoints_to_keep"));
    if (k < 1 || k != static_cast<double>(static_cast<int64_t>(k))) {
      return usage_error(fmt::format(
          "max_num_checkpoints_to_keep={}: must be a whole number >= 1, or None to keep all", keep));
    }
    s.max_num_checkpoints_to_keep = static_cast<int64_t>(k);
  }
  PRECAST_ASSIGN_OR_RETURN(std::string base, text("base_output_directory"));
  if (base.empty()) base = "./maxtext_output";
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  s.checkpoint_dir = base + "/" + s.run_name + "/checkpoints/";
  PRECAST_ASSIGN_OR_RETURN(std::string parameters_path, text("load_parameters_path"));
  PRECAST_ASSIGN_OR_RETURN(std::string full_state_path, text("load_full_state_path"));
  s.load_parameters_path = strip_quotes(parameters_path);
  s.load_full_state_path = strip_quotes(full_state_path);
  if (!s.load_parameters_path.empty() && !s.load_full_state_path.empty()) {
    return usage_error(fmt::format(
        "load_parameters_path={} and load_full_state_path={}: At most one of "
        "load_parameters_path or load_full_state_path should be set; keep the one to start from",
        s.load_parameters_path, s.load_full_state_path));
  }
  return Status::success();
}

}  // namespace

Expected<std::map<std::string, std::string>> run_config(const artifact::Artifact& artifact,
                                                         const std::vector<std::string>& overrides) {
  std::map<std::string, std::string> config;
  std::map<std::string, artifact::ConfigPhase> phase;
  for (const artifact::ConfigEntry& e : artifact.config) {
    config[e.key] = e.value;
    phase[e.key] = e.phase;
  }
  for (const std::string& o : overrides) {
    size_t eq = o.find('=');
    if (eq == std::string::npos || eq == 0) {
      return usage_error(fmt::format("'{}' is not key=value; run-time keys are set as e.g. steps=50", o));
    }
    std::string key = o.substr(0, eq), value = strip_quotes(o.substr(eq + 1));
    auto it = config.find(key);
    if (it == config.end()) {
      std::vector<std::string> keys;
      for (const auto& [k, v] : config) keys.push_back(k);
      std::vector<std::string> close = closest_names(key, keys, 1);
      return usage_error(fmt::format("unknown key '{}'{}", key,
                                     close.empty() ? "" : fmt::format("; did you mean '{}'?", close[0])));
    }
    if (phase[key] == artifact::ConfigPhase::kCompile && it->second != value) {
      return Error(ExitCode::kIncompatible,
                   fmt::format("{} is a compile-time key: the artifact was built with {}={}; "
                               "recompile with `precast compile ... {}={}` to change it",
                               key, key, it->second, key, value));
    }
    it->second = value;
  }
  return config;
}

Expected<RunSettings> run_settings(const std::map<std::string, std::string>& config) {
  auto missing = [](const std::string& key) {
    return Error(ExitCode::kIncompatible,
                 fmt::format("the artifact's config lacks '{}'; recompile with this build", key));
  };
  auto text = [&](const std::string& key) -> Expected<std::string> {
    auto it = config.find(key);
    if (it == config.end()) return missing(key);
    return it->second;
  };
  auto number = [&](const std::string& key) -> Expected<double> {
    auto it = config.find(key);
    if (it == config.end()) return missing(key);
    const std::string& v = it->second;
    char* end = nullptr;
    double d = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0') {
      return usage_error(fmt::format("{}={}: expected a number", key, v));
    }
    return d;
  };
  auto flag = [&](const std::string& key) -> Expected<bool> {
    auto it = config.find(key);
    if (it == config.end()) return missing(key);
    const std::string& v = it->second;
    if (v == "True" || v == "true" || v == "1") return true;
    if (v == "False" || v == "false" || v == "0") return false;
    return usage_error(fmt::format("{}={}: expected true or false", key, v));
  };
  RunSettings s;
  PRECAST_ASSIGN_OR_RETURN(double steps, number("steps"));
  PRECAST_ASSIGN_OR_RETURN(double schedule_steps, number("learning_rate_schedule_steps"));
  PRECAST_ASSIGN_OR_RETURN(ResolvedSteps resolved,
                           resolve_steps(static_cast<int64_t>(steps),
                                         static_cast<int64_t>(schedule_steps)));
  s.steps = resolved.steps;
  s.schedule.schedule_steps = resolved.schedule_steps;
  PRECAST_ASSIGN_OR_RETURN(s.schedule.learning_rate, number("learning_rate"));
  PRECAST_ASSIGN_OR_RETURN(std::string type, text("lr_schedule_type"));
  PRECAST_ASSIGN_OR_RETURN(s.schedule.type, parse_schedule_type(type));
  PRECAST_ASSIGN_OR_RETURN(s.schedule.warmup_steps_fraction, number("warmup_steps_fraction"));
  PRECAST_ASSIGN_OR_RETURN(s.schedule.final_fraction, number("learning_rate_final_fraction"));
  PRECAST_ASSIGN_OR_RETURN(s.schedule.wsd_decay_steps_fraction, number("wsd_decay_steps_fraction"));
  PRECAST_ASSIGN_OR_RETURN(std::string style, text("wsd_decay_style"));
  PRECAST_ASSIGN_OR_RETURN(s.schedule.wsd_decay_style, parse_wsd_decay_style(style));
  PRECAST_RETURN_IF_ERROR(validate_schedule(s.schedule));
  PRECAST_ASSIGN_OR_RETURN(s.adam_b1, number("adam_b1"));
  PRECAST_ASSIGN_OR_RETURN(s.adam_b2, number("adam_b2"));
  PRECAST_ASSIGN_OR_RETURN(s.adam_eps, number("adam_eps"));
  PRECAST_ASSIGN_OR_RETURN(s.adam_eps_root, number("adam_eps_root"));
  PRECAST_ASSIGN_OR_RETURN(s.adam_weight_decay, number("adam_weight_decay"));
  PRECAST_ASSIGN_OR_RETURN(s.gradient_clipping_threshold, number("gradient_clipping_threshold"));
  PRECAST_ASSIGN_OR_RETURN(double init_seed, number("init_weights_seed"));
  PRECAST_ASSIGN_OR_RETURN(double data_seed, number("data_shuffle_seed"));
  s.init_weights_seed = static_cast<uint32_t>(static_cast<int64_t>(init_seed));
  s.data_seed = static_cast<uint32_t>(static_cast<int64_t>(data_seed));
  PRECAST_ASSIGN_OR_RETURN(double threads, number("num_threads"));
  if (threads < 0) return usage_error(fmt::format("num_threads={}: must be >= 0 (0 = all cores)", threads));
  s.num_threads = static_cast<int>(threads);
  PRECAST_ASSIGN_OR_RETURN(s.collective_timeout_seconds, number("collective_timeout_seconds"));
  if (!(s.collective_timeout_seconds > 0)) {
    return usage_error(fmt::format("collective_timeout_seconds={}: must be a number of seconds > 0",
                                   s.collective_timeout_seconds));
  }
  PRECAST_ASSIGN_OR_RETURN(s.metrics_file, text("metrics_file"));
  PRECAST_ASSIGN_OR_RETURN(s.run_name, text("run_name"));
  PRECAST_ASSIGN_OR_RETURN(s.base_output_directory, text("base_output_directory"));
  PRECAST_ASSIGN_OR_RETURN(s.abort_on_nan_loss, flag("abort_on_nan_loss"));
  PRECAST_ASSIGN_OR_RETURN(s.abort_on_inf_loss, flag("abort_on_inf_loss"));
  PRECAST_RETURN_IF_ERROR(checkpoint_settings(s, text, number, flag));
  PRECAST_ASSIGN_OR_RETURN(s.profile, profile_settings(config));
  PRECAST_ASSIGN_OR_RETURN(s.outputs, run_outputs(config, s.base_output_directory, s.run_name));
  if (s.metrics_file.empty()) s.metrics_file = default_metrics_file(s.outputs);
  s.config = config;
  PRECAST_ASSIGN_OR_RETURN(s.data, data::data_settings(config));
  PRECAST_ASSIGN_OR_RETURN(s.eval, eval_settings(config));
  return s;
}

Expected<RunSettings> run_settings(const artifact::Artifact& artifact,
                                   const std::vector<std::string>& overrides) {
  PRECAST_ASSIGN_OR_RETURN(auto config, run_config(artifact, overrides));
  PRECAST_ASSIGN_OR_RETURN(RunSettings settings, run_settings(config));
  // checkpoint_dir given explicitly wins over the derivation (the value the artifact recorded is
  // derived from the compile-time run_name, so only an override says the user chose it).
  std::map<std::string, std::string> explicit_dirs;
  for (const std::string& o : overrides) {
    if (o.rfind("checkpoint_dir=", 0) == 0) {
      settings.checkpoint_dir = strip_quotes(o.substr(std::string("checkpoint_dir=").size()));
    }
    for (const char* key : {"metrics_dir", "tensorboard_dir"}) {
      std::string prefix = std::string(key) + "=";
      if (o.rfind(prefix, 0) == 0) explicit_dirs[key] = strip_quotes(o.substr(prefix.size()));
    }
  }
  if (!explicit_dirs.empty()) {
    bool default_metrics = settings.metrics_file == default_metrics_file(settings.outputs);
    PRECAST_ASSIGN_OR_RETURN(settings.outputs,
                             run_outputs(config, settings.base_output_directory,
                                         settings.run_name, explicit_dirs));
    if (default_metrics) settings.metrics_file = default_metrics_file(settings.outputs);
  }
  // The config this run prints and saves shows its own output paths.
  settings.config["checkpoint_dir"] = settings.checkpoint_dir;
  settings.config["metrics_dir"] = settings.outputs.metrics_dir;
  settings.config["tensorboard_dir"] = settings.outputs.tensorboard_dir;
  settings.config["metrics_file"] = settings.metrics_file;
  return settings;
}

std::vector<std::string> run_time_overrides(const std::vector<artifact::ConfigEntry>& entries) {
  std::vector<std::string> out;
  for (const artifact::ConfigEntry& e : entries) {
    if (e.phase == artifact::ConfigPhase::kRun) out.push_back(e.key + "=" + e.value);
  }
  return out;
}

}  // namespace precast::runtime
