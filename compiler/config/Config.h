// The resolved configuration: every registered key with its value and where the value came from
// (base file, model file, command line, environment, derived), plus MaxText's layering loader.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "compiler/config/ConfigValue.h"
#include "compiler/config/KeyRegistry.h"
#include "ir/support/Error.h"

namespace precast {

enum class ValueSource { kDefault, kBase, kModel, kCommandLine, kEnvironment, kDerived };
std::string_view value_source_name(ValueSource source);

struct ConfigEntry {
  ConfigValue value;
  ValueSource source = ValueSource::kDefault;
  std::string origin;  // "configs/base.yml:12", "command line argument 3", "environment M_STEPS"
};

class Config {
 public:
  bool has(std::string_view key) const { return entries_.count(std::string(key)) > 0; }
  const ConfigEntry& entry(std::string_view key) const;
  const ConfigValue& get(std::string_view key) const { return entry(key).value; }

  // Typed accessors for registered keys; the registry guarantees the type after loading.
  int64_t get_int(std::string_view key) const { return get(key).as_int(); }
  double get_float(std::string_view key) const { return get(key).as_float(); }
  bool get_bool(std::string_view key) const { return get(key).as_bool(); }
  const std::string& get_string(std::string_view key) const { return get(key).as_string(); }
  std::vector<std::string> get_string_list(std::string_view key) const;

  void set(std::string_view key, ConfigValue value, ValueSource source, std::string origin);
  // For derived keys and the -1 rules.
  void set_derived(std::string_view key, ConfigValue value);

  const std::map<std::string, ConfigEntry, std::less<>>& entries() const { return entries_; }

  // The YAML file the user named, and the folders searched for models/<model_name>.yml.
  std::filesystem::path config_file;
  std::vector<std::filesystem::path> model_dirs;

 private:
  std::map<std::string, ConfigEntry, std::less<>> entries_;
};

struct ConfigRequest {
  std::filesystem::path config_file;   // e.g. configs/base.yml
  std::vector<std::string> overrides;  // "key=value", in command-line order
  // Index of overrides[0] on the command line, for "command line argument N" in errors.
  int first_override_position = 1;
  bool read_environment = true;  // M_<KEY> variables, as MaxText reads them
};

// Layers base.yml (with its base_config chain), configs/models/<model_name>.yml, the command line
// and the environment (maxtext-facts §a). Derived keys are not computed here (see DerivedKeys.h).
Expected<Config> load_config(const ConfigRequest& request);

// Splits "key=value" and types the value as YAML; errors name the argument.
struct Override {
  std::string key;
  ConfigValue value;
  std::string origin;
};
Expected<Override> parse_override(const std::string& argument, const std::string& origin);

// The "not supported yet" check of load_config for bare key=value overrides (precast-run given
// an artifact and no config): a registered key of a feature Precast lacks, set off its default,
// is refused. Unknown keys and type errors are left to the caller's own checks.
Status check_overrides_supported(const std::vector<std::string>& overrides,
                                 int first_override_position);

// Known MaxText model names whose decoder family Precast does not support yet, read from
// <models dir>/unsupported.yml ("name: family").
std::map<std::string, std::string> read_unsupported_models(const std::filesystem::path& models_dir);

// MaxText's config print: "Config param <key>: <value>" sorted by key; with `show_sources`
// each line ends with "  [source: origin]".
std::string format_config(const Config& config, bool show_sources);

}  // namespace precast
