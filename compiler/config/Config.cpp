#include "compiler/config/Config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "compiler/config/ModelSpec.h"
#include "ir/support/ClosestNames.h"

namespace precast {
namespace {

namespace fs = std::filesystem;

// One key as a YAML file gives it.
struct FileValue {
  ConfigValue value;
  std::string origin;  // "path:line"
};
using FileValues = std::map<std::string, FileValue>;

std::vector<std::string> registered_names() {
  std::vector<std::string> names;
  for (const KeySpec& spec : key_registry()) {
    if (!spec.derived) names.push_back(std::string(spec.name));
  }
  return names;
}

Error unknown_key_error(const std::string& key, const std::string& origin) {
  std::vector<std::string> close = closest_names(key, registered_names(), 3);
  return usage_error(origin + ": unknown config key '" + key + "'. Did you mean " +
                     quoted_alternatives(close) +
                     "? `precast keys` lists every key Precast accepts.");
}

Error derived_key_error(const std::string& key, const std::string& origin) {
  const KeySpec* spec = find_key(key);
  return usage_error(origin + ": '" + key + "' is derived (" + std::string(spec->doc) +
                     ") and cannot be set; set the keys it is computed from instead.");
}

// "a bool", "an integer": the key type's name with its article.
std::string key_type_phrase(KeyType type) {
  std::string_view name = key_type_name(type);
  bool vowel = !name.empty() && std::string_view("aeiou").find(name[0]) != std::string_view::npos;
  return (vowel ? "an " : "a ") + std::string(name);
}

// Checks the key exists and is settable, and coerces the value to the key's type.
Status check_and_coerce(const std::string& key, ConfigValue& value, const std::string& origin) {
  const KeySpec* spec = find_key(key);
  if (spec == nullptr) return unknown_key_error(key, origin);
  if (spec->derived) return derived_key_error(key, origin);
  ConfigValue original = value;
  if (!coerce_to_key_type(*spec, value)) {
    return usage_error(origin + ": key '" + key + "' expects " + key_type_phrase(spec->type) +
                       ", got " + std::string(original.kind_name()) + " " + original.to_yaml() +
                       ". Fix the value (default: " + std::string(spec->default_yaml) + ").");
  }
  return Status::success();
}

std::string display_path(const fs::path& path) {
  return path.lexically_normal().string();
}

Expected<YAML::Node> parse_yaml_file(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    return usage_error("config file '" + display_path(path) +
                       "' does not exist. Pass an existing YAML file, e.g. configs/base.yml.");
  }
  std::ifstream in(path);
  if (!in) {
    return usage_error("config file '" + display_path(path) + "' cannot be read.");
  }
  std::stringstream text;
  text << in.rdbuf();
  try {
    return YAML::Load(text.str());
  } catch (const YAML::Exception& e) {
    return usage_error(display_path(path) + ":" + std::to_string(e.mark.line + 1) + ":" +
                       std::to_string(e.mark.column + 1) + ": malformed YAML: " + e.msg +
                       ". Fix the syntax at that position.");
  }
}

// Reads a flat "key: value" YAML file. `base_config` is returned separately.
Expected<FileValues> read_config_file(const fs::path& path, std::string* base_config) {
  PRECAST_ASSIGN_OR_RETURN(YAML::Node root, parse_yaml_file(path));
  FileValues values;
  if (root.IsNull()) return values;
  if (!root.IsMap()) {
    return usage_error(display_path(path) + ":" + std::to_string(root.Mark().line + 1) +
                       ": a config file must be a mapping of 'key: value' lines.");
  }
  for (auto it = root.begin(); it != root.end(); ++it) {
    std::string key = it->first.as<std::string>();
    std::string origin = display_path(path) + ":" + std::to_string(it->first.Mark().line + 1);
    if (key == "base_config") {
      if (base_config != nullptr) *base_config = it->second.as<std::string>();
      continue;
    }
    const KeySpec* spec = find_key(key);
    if (it->second.IsMap() && (spec == nullptr || spec->type != KeyType::kAny)) {
      if (spec == nullptr) return unknown_key_error(key, origin);
      return usage_error(origin + ": key '" + key + "' expects " + key_type_phrase(spec->type) +
                         ", got a mapping.");
    }
    ConfigValue value = spec != nullptr ? config_value_from_key_yaml(*spec, it->second)
                                        : config_value_from_yaml(it->second);
    PRECAST_RETURN_IF_ERROR(check_and_coerce(key, value, origin));
    values[key] = FileValue{std::move(value), origin};
  }
  return values;
}

// Reads `path` and its base_config ancestors; the child wins. Records each file's folder.
Status read_config_chain(const fs::path& path, FileValues& merged, std::vector<fs::path>& dirs,
                         std::set<fs::path>& visiting) {
  fs::path canonical = fs::weakly_canonical(path);
  if (!visiting.insert(canonical).second) {
    return usage_error(display_path(path) +
                       ": base_config chain loops back to this file. Remove the cycle.");
  }
  std::string parent;
  PRECAST_ASSIGN_OR_RETURN(FileValues own, read_config_file(path, &parent));
  if (!parent.empty()) {
    fs::path parent_path =
        fs::path(parent).is_absolute() ? fs::path(parent) : path.parent_path() / parent;
    Status status = read_config_chain(parent_path, merged, dirs, visiting);
    if (!status.ok()) return status.error().with_context("base_config of " + display_path(path));
  }
  for (auto& [key, value] : own) merged[key] = std::move(value);
  dirs.push_back(path.parent_path() / "models");
  return Status::success();
}

std::string axis_rule_name(const ConfigValue& rule) {
  return rule.as_list()[0].as_string();
}

// MaxText's merge: drop every existing rule whose logical name the new list mentions, then
// append the new rules in their order.
ConfigValue merge_axis_rules(const ConfigValue& existing, const ConfigValue& added) {
  std::set<std::string> names;
  for (const ConfigValue& rule : added.as_list()) names.insert(axis_rule_name(rule));
  ConfigValue::List merged;
  for (const ConfigValue& rule : existing.as_list()) {
    if (names.count(axis_rule_name(rule)) == 0) merged.push_back(rule);
  }
  for (const ConfigValue& rule : added.as_list()) merged.push_back(rule);
  return ConfigValue::list(std::move(merged));
}

void apply_layer(Config& config, const FileValues& layer, ValueSource source, bool replace_rules) {
  for (const auto& [key, file_value] : layer) {
    ConfigValue value = file_value.value;
    if (key == "logical_axis_rules" && !replace_rules) {
      value = merge_axis_rules(config.get(key), value);
    }
    config.set(key, std::move(value), source, file_value.origin);
  }
}

std::string strip_instruct_suffix(std::string name) {
  const std::string suffix = "-Instruct";
  if (name.size() > suffix.size() &&
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
    name.resize(name.size() - suffix.size());
  }
  return name;
}

std::vector<std::string> available_models(const std::vector<fs::path>& dirs) {
  std::set<std::string> names;
  for (const fs::path& dir : dirs) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (entry.path().extension() == ".yml" && entry.path().stem() != "unsupported") {
        names.insert(entry.path().stem().string());
      }
    }
  }
  return {names.begin(), names.end()};
}

Expected<fs::path> find_model_file(const std::string& model_name, const std::vector<fs::path>& dirs,
                                   const std::string& origin) {
  for (auto dir = dirs.rbegin(); dir != dirs.rend(); ++dir) {
    fs::path candidate = *dir / (model_name + ".yml");
    std::error_code ec;
    if (fs::exists(candidate, ec)) return candidate;
  }
  for (const fs::path& dir : dirs) {
    std::map<std::string, std::string> unsupported = read_unsupported_models(dir);
    auto it = unsupported.find(model_name);
    if (it != unsupported.end()) {
      return usage_error(
          origin + ": model family '" + it->second + "' (model_name '" + model_name +
          "') is not supported yet. Supported families: " + supported_families_list() +
          "; `precast models` lists the supported model names.");
    }
  }
  std::vector<std::string> close = closest_names(model_name, available_models(dirs), 4);
  return usage_error(origin + ": unknown model_name '" + model_name + "'. Did you mean " +
                     quoted_alternatives(close) + "? Model configs are read from " +
                     display_path(dirs.empty() ? fs::path("configs/models") : dirs.back()) + ".");
}

// Keys the model file and the command line both set, with different values.
std::vector<std::string> conflicting_keys(const FileValues& model, const FileValues& overrides) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : overrides) {
    if (key == "logical_axis_rules") continue;  // merged, never conflicting
    auto it = model.find(key);
    if (it != model.end() && it->second.value != value.value) keys.push_back(key);
  }
  return keys;
}

Error model_conflict_error(const std::vector<std::string>& keys, const FileValues& model,
                           const FileValues& overrides, const std::string& other) {
  std::string details;
  for (const std::string& key : keys) {
    details += "\n  " + key + ": " + model.at(key).value.to_yaml() + " (" + model.at(key).origin +
               ") vs " + overrides.at(key).value.to_yaml() + " (" + overrides.at(key).origin + ")";
  }
  std::string list;
  for (const std::string& key : keys) list += (list.empty() ? "" : ", ") + ("'" + key + "'");
  return usage_error("Keys [" + list + "] are overridden by both model config and " + other +
                     " with different values. This is not allowed, unless setting "
                     "override_model_config=true." +
                     details);
}

Expected<FileValues> read_overrides(const ConfigRequest& request) {
  FileValues values;
  for (size_t i = 0; i < request.overrides.size(); ++i) {
    std::string origin =
        "command line argument " + std::to_string(request.first_override_position + i);
    PRECAST_ASSIGN_OR_RETURN(Override parsed, parse_override(request.overrides[i], origin));
    PRECAST_RETURN_IF_ERROR(check_and_coerce(parsed.key, parsed.value, origin));
    values[parsed.key] = FileValue{std::move(parsed.value), origin};
  }
  return values;
}

Expected<FileValues> read_environment() {
  FileValues values;
  for (const KeySpec& spec : key_registry()) {
    if (spec.derived) continue;
    std::string variable = "M_";
    for (char c : spec.name) variable.push_back(static_cast<char>(std::toupper(c)));
    const char* text = std::getenv(variable.c_str());
    if (text == nullptr) continue;
    std::string origin = "environment variable " + variable;
    PRECAST_ASSIGN_OR_RETURN(Override parsed,
                             parse_override(std::string(spec.name) + "=" + text, origin));
    PRECAST_RETURN_IF_ERROR(check_and_coerce(parsed.key, parsed.value, origin));
    values[parsed.key] = FileValue{std::move(parsed.value), origin};
  }
  return values;
}

// Keys of features Precast lacks are accepted only at their default; all offenders are named.
Status check_supported_values(const Config& config) {
  std::vector<Error> refused;
  for (const auto& [key, entry] : config.entries()) {
    const KeySpec* spec = find_key(key);
    if (spec == nullptr) continue;
    Status status = check_key_supported(*spec, entry.value, entry.origin);
    if (!status.ok()) refused.push_back(status.error());
  }
  if (refused.empty()) return Status::success();
  if (refused.size() == 1) return refused.front();
  std::string message = std::to_string(refused.size()) + " keys are not supported yet:";
  for (const Error& error : refused) message += "\n  " + error.message();
  return usage_error(message);
}

// The value a loader flag has once base, command line and environment are considered.
ConfigValue layered_value(const std::string& key, const Config& base, const FileValues& cli,
                          const FileValues& env) {
  if (auto it = env.find(key); it != env.end()) return it->second.value;
  if (auto it = cli.find(key); it != cli.end()) return it->second.value;
  return base.get(key);
}

}  // namespace

std::string_view value_source_name(ValueSource source) {
  switch (source) {
    case ValueSource::kDefault:
      return "default";
    case ValueSource::kBase:
      return "base";
    case ValueSource::kModel:
      return "model";
    case ValueSource::kCommandLine:
      return "command line";
    case ValueSource::kEnvironment:
      return "environment";
    case ValueSource::kDerived:
      return "derived";
  }
  return "?";
}

const ConfigEntry& Config::entry(std::string_view key) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    static const ConfigEntry missing;
    return missing;
  }
  return it->second;
}

std::vector<std::string> Config::get_string_list(std::string_view key) const {
  std::vector<std::string> out;
  for (const ConfigValue& item : get(key).as_list()) out.push_back(item.as_string());
  return out;
}

void Config::set(std::string_view key, ConfigValue value, ValueSource source, std::string origin) {
  entries_[std::string(key)] = ConfigEntry{std::move(value), source, std::move(origin)};
}

void Config::set_derived(std::string_view key, ConfigValue value) {
  set(key, std::move(value), ValueSource::kDerived, "derived");
}

Expected<Override> parse_override(const std::string& argument, const std::string& origin) {
  size_t eq = argument.find('=');
  if (eq == std::string::npos || eq == 0) {
    return usage_error(origin + ": '" + argument +
                       "' is not of the form key=value (e.g. per_device_batch_size=4).");
  }
  Override out;
  out.key = argument.substr(0, eq);
  out.origin = origin;
  std::string text = argument.substr(eq + 1);
  try {
    YAML::Node node = YAML::Load(text);
    const KeySpec* spec = find_key(out.key);
    out.value =
        spec != nullptr ? config_value_from_key_yaml(*spec, node) : config_value_from_yaml(node);
  } catch (const YAML::Exception& e) {
    return usage_error(origin + ": the value of '" + out.key + "' is not valid YAML (" + e.msg +
                       " at column " + std::to_string(e.mark.column + 1) + "): " + text);
  }
  return out;
}

Status check_overrides_supported(const std::vector<std::string>& overrides,
                                 int first_override_position) {
  for (size_t i = 0; i < overrides.size(); ++i) {
    std::string origin = "command line argument " + std::to_string(first_override_position + i);
    Expected<Override> parsed = parse_override(overrides[i], origin);
    if (!parsed.ok()) continue;
    const KeySpec* spec = find_key(parsed->key);
    if (spec == nullptr || !coerce_to_key_type(*spec, parsed->value)) continue;
    PRECAST_RETURN_IF_ERROR(check_key_supported(*spec, parsed->value, origin));
  }
  return Status::success();
}

std::map<std::string, std::string> read_unsupported_models(const fs::path& models_dir) {
  std::map<std::string, std::string> out;
  fs::path path = models_dir / "unsupported.yml";
  std::error_code ec;
  if (!fs::exists(path, ec)) return out;
  try {
    YAML::Node root = YAML::LoadFile(path.string());
    for (auto it = root.begin(); it != root.end(); ++it) {
      out[it->first.as<std::string>()] = it->second.as<std::string>();
    }
  } catch (const YAML::Exception&) {
    // A damaged table only loses the "not supported yet" hint; unknown-model errors remain.
  }
  return out;
}

Expected<Config> load_config(const ConfigRequest& request) {
  Config config;
  config.config_file = request.config_file;
  for (const KeySpec& spec : key_registry()) {
    config.set(spec.name, spec.default_value(), ValueSource::kDefault, "registry default");
  }

  FileValues base;
  std::set<fs::path> visiting;
  PRECAST_RETURN_IF_ERROR(
      read_config_chain(request.config_file, base, config.model_dirs, visiting));
  PRECAST_ASSIGN_OR_RETURN(FileValues cli, read_overrides(request));
  FileValues env;
  if (request.read_environment) {
    PRECAST_ASSIGN_OR_RETURN(env, read_environment());
  }
  for (const auto& [key, value] : env) {
    if (cli.count(key) > 0) {
      return usage_error("Key '" + key + "' is overridden by both CLI (" + cli.at(key).origin +
                         ") and " + value.origin + ". Unset one of them.");
    }
  }

  // The base file's rules replace the registry default; later layers merge into them.
  apply_layer(config, base, ValueSource::kBase, /*replace_rules=*/true);
  bool replace_rules = layered_value("override_logical_axis_rules", config, cli, env).as_bool();

  std::string model_name =
      strip_instruct_suffix(layered_value("model_name", config, cli, env).as_string());
  if (model_name != "default") {
    std::string origin = config.entry("model_name").origin;
    if (auto it = cli.find("model_name"); it != cli.end()) origin = it->second.origin;
    PRECAST_ASSIGN_OR_RETURN(fs::path model_path,
                             find_model_file(model_name, config.model_dirs, origin));
    PRECAST_ASSIGN_OR_RETURN(FileValues model, read_config_file(model_path, nullptr));
    bool override_model = layered_value("override_model_config", config, cli, env).as_bool();
    if (!override_model) {
      std::vector<std::string> keys = conflicting_keys(model, cli);
      if (!keys.empty()) return model_conflict_error(keys, model, cli, "CLI/kwargs");
      keys = conflicting_keys(model, env);
      if (!keys.empty()) return model_conflict_error(keys, model, env, "environment variables");
    }
    apply_layer(config, model, ValueSource::kModel, replace_rules);
  }
  apply_layer(config, cli, ValueSource::kCommandLine, replace_rules);
  apply_layer(config, env, ValueSource::kEnvironment, replace_rules);
  PRECAST_RETURN_IF_ERROR(check_supported_values(config));
  return config;
}

std::string format_config(const Config& config, bool show_sources) {
  std::string out;
  for (const auto& [key, entry] : config.entries()) {
    const KeySpec* spec = find_key(key);
    bool rules = spec != nullptr &&
                 (spec->type == KeyType::kAxisRules || spec->type == KeyType::kStringLists);
    std::string value =
        entry.value.is_string() ? entry.value.as_string() : entry.value.to_python(rules);
    if (key == "decoder_block") {
      std::string upper = value;
      for (char& c : upper) c = static_cast<char>(std::toupper(c));
      value = "DecoderBlockType." + upper;
    }
    out += "Config param " + key + ": " + value;
    if (show_sources) {
      out += "  [" + std::string(value_source_name(entry.source));
      if (entry.source != ValueSource::kDefault && entry.source != ValueSource::kDerived) {
        out += ": " + entry.origin;
      }
      out += "]";
    }
    out += "\n";
  }
  return out;
}

}  // namespace precast
