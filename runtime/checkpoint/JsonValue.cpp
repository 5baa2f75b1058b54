#include "runtime/checkpoint/JsonValue.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>

namespace precast::checkpoint {
namespace {

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Expected<JsonValue> document() {
    JsonValue v;
    PRECAST_RETURN_IF_ERROR(value(v, 0));
    skip_space();
    if (pos_ != text_.size()) return fail("end of the document");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 64;

  Error fail(std::string_view expected) const {
    return Error(ExitCode::kIncompatible,
                 fmt::format("invalid JSON at byte {}: expected {}", pos_, expected));
  }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool take(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool take_word(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Status value(JsonValue& out, int depth) {
    if (depth > kMaxDepth) return fail("nesting under 64 levels");
    skip_space();
    if (pos_ >= text_.size()) return fail("a value");
    char c = text_[pos_];
    if (c == '{') return object(out, depth);
    if (c == '[') return array(out, depth);
    if (c == '"') {
      out.kind = JsonValue::Kind::kString;
      return string(out.text);
    }
    if (take_word("true") || take_word("false")) {
      out.kind = JsonValue::Kind::kBool;
      out.boolean = c == 't';
      return Status::success();
    }
    if (take_word("null")) return Status::success();
    return number(out);
  }

  Status object(JsonValue& out, int depth) {
    out.kind = JsonValue::Kind::kObject;
    ++pos_;
    if (take('}')) return Status::success();
    do {
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != '"') return fail("a member name");
      std::string key;
      PRECAST_RETURN_IF_ERROR(string(key));
      if (!take(':')) return fail("':'");
      JsonValue member;
      PRECAST_RETURN_IF_ERROR(value(member, depth + 1));
      if (!out.members.emplace(key, std::move(member)).second) {
        return fail(fmt::format("no second member named {}", json_quote(key)));
      }
    } while (take(','));
    if (!take('}')) return fail("',' or '}'");
    return Status::success();
  }

  Status array(JsonValue& out, int depth) {
    out.kind = JsonValue::Kind::kArray;
    ++pos_;
    if (take(']')) return Status::success();
    do {
      out.items.emplace_back();
      PRECAST_RETURN_IF_ERROR(value(out.items.back(), depth + 1));
    } while (take(','));
    if (!take(']')) return fail("',' or ']'");
    return Status::success();
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  Status hex4(uint32_t& out) {
    if (pos_ + 4 > text_.size()) return fail("four hex digits");
    auto r = std::from_chars(text_.data() + pos_, text_.data() + pos_ + 4, out, 16);
    if (r.ptr != text_.data() + pos_ + 4) return fail("four hex digits");
    pos_ += 4;
    return Status::success();
  }

  Status string(std::string& out) {
    ++pos_;  // the opening quote
    while (pos_ < text_.size() && text_[pos_] != '"') {
      char c = text_[pos_++];
      if (static_cast<unsigned char>(c) < 0x20) return fail("no raw control character in a string");
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (pos_ >= text_.size()) break;
      char e = text_[pos_++];
      switch (e) {
        case '"': case '\\': case '/': out.push_back(e); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'u': {
          uint32_t cp = 0;
          PRECAST_RETURN_IF_ERROR(hex4(cp));
          if (cp >= 0xD800 && cp < 0xDC00 && take_word("\\u")) {
            uint32_t low = 0;
            PRECAST_RETURN_IF_ERROR(hex4(low));
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default: return fail("a valid escape");
      }
    }
    if (pos_ >= text_.size()) return fail("the closing '\"' of a string");
    ++pos_;
    return Status::success();
  }

  Status number(JsonValue& out) {
    size_t start = pos_;
    if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
    while (pos_ < text_.size() &&
           (std::isdigit(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '.' ||
            text_[pos_] == 'e' || text_[pos_] == 'E' || text_[pos_] == '+' || text_[pos_] == '-')) {
      ++pos_;
    }
    if (pos_ == start) return fail("a value");
    out.kind = JsonValue::Kind::kNumber;
    out.text = std::string(text_.substr(start, pos_ - start));
    return Status::success();
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

const JsonValue* JsonValue::find(const std::string& key) const {
  if (kind != Kind::kObject) return nullptr;
  auto it = members.find(key);
  return it == members.end() ? nullptr : &it->second;
}

bool JsonValue::as_int(int64_t& out) const {
  if (kind != Kind::kNumber) return false;
  auto r = std::from_chars(text.data(), text.data() + text.size(), out);
  return r.ec == std::errc() && r.ptr == text.data() + text.size();
}

Expected<JsonValue> parse_json(std::string_view text) { return Parser(text).document(); }

std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else {
      out.push_back(c);
    }
  }
  return out + "\"";
}

}  // namespace precast::checkpoint
