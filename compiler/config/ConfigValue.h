// A typed configuration value as YAML gives it: none, bool, integer, float, string or list.
// Printing follows the two forms users see: YAML flow style and MaxText's Python `str(v)`.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace YAML {
class Node;
}

namespace precast {

class ConfigValue {
 public:
  using List = std::vector<ConfigValue>;

  ConfigValue() = default;  // none
  static ConfigValue none() { return ConfigValue(); }
  static ConfigValue boolean(bool v) { return ConfigValue(Data(v)); }
  static ConfigValue integer(int64_t v) { return ConfigValue(Data(v)); }
  static ConfigValue floating(double v) { return ConfigValue(Data(v)); }
  static ConfigValue string(std::string v) { return ConfigValue(Data(std::move(v))); }
  static ConfigValue list(List v) { return ConfigValue(Data(std::move(v))); }

  bool is_none() const { return std::holds_alternative<std::monostate>(data_); }
  bool is_bool() const { return std::holds_alternative<bool>(data_); }
  bool is_int() const { return std::holds_alternative<int64_t>(data_); }
  bool is_float() const { return std::holds_alternative<double>(data_); }
  bool is_number() const { return is_int() || is_float(); }
  bool is_string() const { return std::holds_alternative<std::string>(data_); }
  bool is_list() const { return std::holds_alternative<List>(data_); }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return std::get<int64_t>(data_); }
  double as_float() const {
    return is_int() ? static_cast<double>(as_int()) : std::get<double>(data_);
  }
  const std::string& as_string() const { return std::get<std::string>(data_); }
  const List& as_list() const { return std::get<List>(data_); }

  // "none", "bool", "integer", "float", "string", "list": for error messages.
  std::string_view kind_name() const;

  // YAML flow style that parses back to the same value: ['a', ['b', 'c']], 1.0e-05, true.
  std::string to_yaml() const;
  // Python's str() of the value as MaxText prints it: "('a', ('b', 'c'))" for tuples of rules
  // when `tuples` is set, "['a']" otherwise; True/False/None; floats as Python repr.
  std::string to_python(bool tuples = false) const;

  friend bool operator==(const ConfigValue& a, const ConfigValue& b);
  friend bool operator!=(const ConfigValue& a, const ConfigValue& b) { return !(a == b); }

 private:
  using Data = std::variant<std::monostate, bool, int64_t, double, std::string, List>;
  explicit ConfigValue(Data d) : data_(std::move(d)) {}
  Data data_;
};

// Types a plain YAML scalar the way OmegaConf/PyYAML do for MaxText: `24` -> integer,
// `1e-3`, `1.e-05` -> float, `500_000` -> integer, `true`/`False` -> bool,
// `null`/`~`/`None` -> none, anything else -> string. Quoted scalars stay strings.
ConfigValue type_plain_scalar(std::string_view text);

// Converts a parsed YAML node (scalar, sequence; maps are rejected by the caller).
ConfigValue config_value_from_yaml(const YAML::Node& node);

// Python's repr() of a float: shortest round-trip digits, "1e-05", "3e-05", "0.1", "12.0".
std::string python_float_repr(double v);

}  // namespace precast
