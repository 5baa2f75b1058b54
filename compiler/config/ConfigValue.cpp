#include "compiler/config/ConfigValue.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <cstdio>

namespace precast {
namespace {

bool parse_integer(std::string_view text, int64_t& out) {
  std::string digits;
  for (char c : text) {
    if (c != '_') digits.push_back(c);
  }
  if (digits.empty()) return false;
  size_t start = (digits[0] == '+' || digits[0] == '-') ? 1 : 0;
  if (start == digits.size()) return false;
  for (size_t i = start; i < digits.size(); ++i) {
    if (digits[i] < '0' || digits[i] > '9') return false;
  }
  const char* first = digits.data() + (digits[0] == '+' ? 1 : 0);
  auto [ptr, ec] = std::from_chars(first, digits.data() + digits.size(), out);
  return ec == std::errc() && ptr == digits.data() + digits.size();
}

// A float in YAML 1.2 / OmegaConf terms: digits with a dot and/or exponent; `.inf`, `.nan`.
bool parse_float(std::string_view text, double& out) {
  std::string s;
  for (char c : text) {
    if (c != '_') s.push_back(c);
  }
  if (s == ".inf" || s == "+.inf" || s == ".Inf") {
    out = INFINITY;
    return true;
  }
  if (s == "-.inf" || s == "-.Inf") {
    out = -INFINITY;
    return true;
  }
  if (s == ".nan" || s == ".NaN") {
    out = NAN;
    return true;
  }
  bool digit = false, dot = false, exp = false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c >= '0' && c <= '9') {
      digit = true;
    } else if (c == '.' && !dot && !exp) {
      dot = true;
    } else if ((c == 'e' || c == 'E') && digit && !exp) {
      exp = true;
      if (i + 1 < s.size() && (s[i + 1] == '+' || s[i + 1] == '-')) ++i;
      if (i + 1 >= s.size()) return false;
    } else if ((c == '+' || c == '-') && i == 0) {
    } else {
      return false;
    }
  }
  if (!digit || (!dot && !exp)) return false;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

void append_python_string(std::string& out, const std::string& s) {
  // Python prefers single quotes unless the string contains one and no double quote.
  char quote = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  out.push_back(quote);
  for (char c : s) {
    if (c == '\\' || c == quote) out.push_back('\\');
    out.push_back(c);
  }
  out.push_back(quote);
}

void append_yaml_string(std::string& out, const std::string& s) {
  out.push_back('\'');
  for (char c : s) {
    if (c == '\'') out.push_back('\'');
    out.push_back(c);
  }
  out.push_back('\'');
}

}  // namespace

std::string python_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  // Shortest digits that round-trip, then Python's choice of fixed vs scientific notation.
  char buf[64];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string sci(buf, ptr);
  size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  int exponent = std::stoi(sci.substr(e + 1));
  std::string digits;
  bool negative = mantissa[0] == '-';
  for (char c : mantissa) {
    if (c >= '0' && c <= '9') digits.push_back(c);
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+',
                  std::abs(exponent));
    return out + exp_buf;
  }
  if (exponent < 0) {
    return out + "0." + std::string(-exponent - 1, '0') + digits;
  }
  size_t int_len = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= int_len) {
    return out + digits + std::string(int_len - digits.size(), '0') + ".0";
  }
  return out + digits.substr(0, int_len) + "." + digits.substr(int_len);
}

std::string_view ConfigValue::kind_name() const {
  if (is_none()) return "none";
  if (is_bool()) return "bool";
  if (is_int()) return "integer";
  if (is_float()) return "float";
  if (is_string()) return "string";
  return "list";
}

std::string ConfigValue::to_yaml() const {
  if (is_none()) return "null";
  if (is_bool()) return as_bool() ? "true" : "false";
  if (is_int()) return std::to_string(as_int());
  if (is_float()) {
    std::string s = python_float_repr(as_float());
    // Keep a dot so YAML 1.1 readers also see a float ("1e-05" -> "1.0e-05").
    if (s.find('.') == std::string::npos && s.find('e') != std::string::npos) {
      s.insert(s.find('e'), ".0");
    }
    if (s == "inf") return ".inf";
    if (s == "-inf") return "-.inf";
    if (s == "nan") return ".nan";
    return s;
  }
  std::string out;
  if (is_string()) {
    append_yaml_string(out, as_string());
    return out;
  }
  out.push_back('[');
  bool first = true;
  for (const ConfigValue& item : as_list()) {
    if (!first) out += ", ";
    first = false;
    out += item.to_yaml();
  }
  out.push_back(']');
  return out;
}

std::string ConfigValue::to_python(bool tuples) const {
  if (is_none()) return "None";
  if (is_bool()) return as_bool() ? "True" : "False";
  if (is_int()) return std::to_string(as_int());
  if (is_float()) return python_float_repr(as_float());
  std::string out;
  if (is_string()) {
    append_python_string(out, as_string());
    return out;
  }
  const List& items = as_list();
  out.push_back(tuples ? '(' : '[');
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ", ";
    out += items[i].to_python(tuples);
  }
  if (tuples && items.size() == 1) out.push_back(',');
  out.push_back(tuples ? ')' : ']');
  return out;
}

bool operator==(const ConfigValue& a, const ConfigValue& b) {
  // Numbers compare by value across int/float, as Python's == does (1 == 1.0).
  if (a.is_number() && b.is_number() && a.is_int() != b.is_int()) {
    return a.as_float() == b.as_float();
  }
  return a.data_ == b.data_;
}

ConfigValue type_plain_scalar(std::string_view text) {
  if (text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL" ||
      text == "None" || text == "none") {
    return ConfigValue::none();
  }
  if (text == "true" || text == "True" || text == "TRUE") return ConfigValue::boolean(true);
  if (text == "false" || text == "False" || text == "FALSE") return ConfigValue::boolean(false);
  int64_t i = 0;
  if (parse_integer(text, i)) return ConfigValue::integer(i);
  double d = 0;
  if (parse_float(text, d)) return ConfigValue::floating(d);
  return ConfigValue::string(std::string(text));
}

ConfigValue config_value_from_yaml(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return ConfigValue::none();
  if (node.IsSequence()) {
    ConfigValue::List items;
    items.reserve(node.size());
    for (const YAML::Node& item : node) items.push_back(config_value_from_yaml(item));
    return ConfigValue::list(std::move(items));
  }
  if (node.IsMap()) {
    // Maps are not a value type of any key we accept; callers report the key.
    return ConfigValue::none();
  }
  // Quoted scalars carry the non-specific tag "!": they are strings, never numbers.
  if (node.Tag() == "!") return ConfigValue::string(node.Scalar());
  return type_plain_scalar(node.Scalar());
}

}  // namespace precast
