// Role: a small JSON reader for the two documents a checkpoint holds (the safetensors header and
// metadata.json), and the string escaping their writers use. Numbers keep their text so integers
// such as byte offsets are read exactly.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ir/support/Error.h"

namespace precast::checkpoint {

struct JsonValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  std::string text;  // kString: the decoded string; kNumber: the number as written
  std::vector<JsonValue> items;
  std::map<std::string, JsonValue> members;

  bool is_object() const { return kind == Kind::kObject; }
  // nullptr when this is not an object or has no such member.
  const JsonValue* find(const std::string& key) const;
  // The number as an integer; false when this is not a number or not an integer in range.
  bool as_int(int64_t& out) const;
};

// Parses one JSON document. On failure the message names the byte offset and what was expected;
// the caller adds the file's name.
Expected<JsonValue> parse_json(std::string_view text);

// A JSON string literal with quotes, backslashes and control characters escaped.
std::string json_quote(std::string_view s);

}  // namespace precast::checkpoint
