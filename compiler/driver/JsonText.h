// JSON text for the commands' --format=json output: string literals with escapes.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace precast {

// A JSON string literal: quotes and backslashes escaped, newlines as \n, other control
// characters as \u00XX.
inline std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else {
      out.push_back(c);
    }
  }
  return out + "\"";
}

}  // namespace precast
