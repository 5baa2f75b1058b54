#include "ir/Parser.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <sstream>
#include <unordered_map>

#include "ir/FloatFormats.h"
#include "ir/support/ClosestNames.h"

namespace precast::ir {
namespace {

// ---------------------------------------------------------------------------------------------
// Lexer

enum class TokenKind {
  kEnd,
  kIdentifier,  // func, add, f32, true, inf, lhs_contract, ...
  kInteger,     // -12
  kReal,        // 1.5, -2e-3, -inf (inf and nan alone lex as identifiers)
  kString,      // "..." (decoded)
  kValue,       // %name or %12 (text without '%')
  kSymbol,      // @name or @"..." (decoded)
  kHash,        // #name or #"..." (decoded)
  kQuoted,      // 'name' (a mesh axis in a sharding; no escapes)
  kPunct,       // ( ) { } [ ] , : = and -> (punct '>')
  kInvalid,     // a lexing error; decoded holds the message
};

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string_view text;  // spelling (without the sigil for %, @, #)
  std::string decoded;    // unescaped string content, or the error for kInvalid
  char punct = 0;
  int line = 0;
  int col = 0;
};

bool is_identifier_head(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_identifier_tail(char c) {
  return is_identifier_head(c) || (c >= '0' && c <= '9') || c == '.';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

class Lexer {
 public:
  Lexer(std::string_view text, int first_line) : text_(text), line_(first_line) {}

  Token next() {
    skip_space_and_comments();
    Token t;
    t.line = line_;
    t.col = col_;
    if (pos_ >= text_.size()) return t;
    char c = text_[pos_];
    if (c == '%' || c == '@' || c == '#') return lex_sigil(t, c);
    if (c == '"') return lex_string(t, TokenKind::kString);
    if (c == '\'') return lex_quoted(t);
    if (c == '-' && peek(1) == '>') {
      advance(2);
      t.kind = TokenKind::kPunct;
      t.punct = '>';
      t.text = "->";
      return t;
    }
    if (is_digit(c) || (c == '-' && (is_digit(peek(1)) || is_identifier_head(peek(1))))) {
      return lex_number(t);
    }
    if (is_identifier_head(c)) {
      t.kind = TokenKind::kIdentifier;
      t.text = take_identifier();
      return t;
    }
    if (std::string_view("(){}[],:=").find(c) != std::string_view::npos) {
      t.kind = TokenKind::kPunct;
      t.punct = c;
      t.text = text_.substr(pos_, 1);
      advance(1);
      return t;
    }
    return invalid(t, fmt::format("unexpected character '{}'", printable(c)));
  }

 private:
  char peek(size_t ahead) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }
  void advance(size_t n) {
    for (size_t i = 0; i < n && pos_ < text_.size(); ++i) {
      if (text_[pos_] == '\n') {
        ++line_;
        col_ = 1;
      } else {
        ++col_;
      }
      ++pos_;
    }
  }
  static std::string printable(char c) {
    auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte >= 0x7f) return fmt::format("\\x{:02x}", byte);
    return std::string(1, c);
  }
  static Token invalid(Token t, std::string message) {
    t.kind = TokenKind::kInvalid;
    t.decoded = std::move(message);
    return t;
  }

  void skip_space_and_comments() {
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        advance(1);
      } else if (c == '/' && peek(1) == '/') {
        while (pos_ < text_.size() && text_[pos_] != '\n') advance(1);
      } else {
        return;
      }
    }
  }

  std::string_view take_identifier() {
    size_t begin = pos_;
    while (pos_ < text_.size() && is_identifier_tail(text_[pos_])) advance(1);
    return text_.substr(begin, pos_ - begin);
  }

  Token lex_sigil(Token t, char sigil) {
    advance(1);
    t.kind = sigil == '%'   ? TokenKind::kValue
             : sigil == '@' ? TokenKind::kSymbol
                            : TokenKind::kHash;
    char c = peek(0);
    if (sigil != '%' && c == '"') return lex_string(t, t.kind);
    if (sigil == '%' && is_digit(c)) {
      size_t begin = pos_;
      while (is_digit(peek(0))) advance(1);
      t.text = text_.substr(begin, pos_ - begin);
      return t;
    }
    if (!is_identifier_head(c)) {
      return invalid(t, fmt::format("expected a name after '{}'", sigil));
    }
    t.text = take_identifier();
    if (sigil != '%') t.decoded = std::string(t.text);  // values are looked up by text
    return t;
  }

  Token lex_string(Token t, TokenKind kind) {
    advance(1);  // opening quote
    size_t begin = pos_;
    // Fast path: no escapes and no newline before the closing quote (every scope we print).
    size_t close = text_.find_first_of("\"\\\n", pos_);
    if (close != std::string_view::npos && text_[close] == '"') {
      t.kind = kind;
      t.text = text_.substr(begin, close - begin);
      t.decoded = std::string(t.text);
      col_ += static_cast<int>(close + 1 - pos_);
      pos_ = close + 1;
      return t;
    }
    std::string decoded;
    while (true) {
      if (pos_ >= text_.size() || text_[pos_] == '\n') {
        return invalid(t, "unterminated string");
      }
      char c = text_[pos_];
      if (c == '"') break;
      if (c != '\\') {
        decoded += c;
        advance(1);
        continue;
      }
      char e = peek(1);
      if (e == '"' || e == '\\') {
        decoded += e;
        advance(2);
        continue;
      }
      int value = 0;
      auto [end, ec] = std::from_chars(text_.data() + pos_ + 1,
                                       text_.data() + std::min(pos_ + 3, text_.size()), value, 16);
      if (ec != std::errc() || end != text_.data() + pos_ + 3) {
        return invalid(t, "bad escape in string (use \\\", \\\\ or \\XX hex)");
      }
      decoded += static_cast<char>(value);
      advance(3);
    }
    t.text = text_.substr(begin, pos_ - begin);
    advance(1);  // closing quote
    t.kind = kind;
    t.decoded = std::move(decoded);
    return t;
  }

  Token lex_quoted(Token t) {
    size_t close = text_.find_first_of("'\n", pos_ + 1);
    if (close == std::string_view::npos || text_[close] != '\'') {
      return invalid(t, "unterminated quoted name");
    }
    t.kind = TokenKind::kQuoted;
    t.text = text_.substr(pos_ + 1, close - pos_ - 1);
    t.decoded = std::string(t.text);
    advance(close + 1 - pos_);
    return t;
  }

  Token lex_number(Token t) {
    size_t begin = pos_;
    if (peek(0) == '-') advance(1);
    if (is_identifier_head(peek(0))) {  // -inf, -nan
      std::string_view word = take_identifier();
      t.text = text_.substr(begin, pos_ - begin);
      if (word != "inf" && word != "nan") {
        return invalid(t, fmt::format("unexpected '-{}'", word));
      }
      t.kind = TokenKind::kReal;
      return t;
    }
    bool real = false;
    while (is_digit(peek(0))) advance(1);
    if (peek(0) == '.' && is_digit(peek(1))) {
      real = true;
      advance(1);
      while (is_digit(peek(0))) advance(1);
    }
    if (peek(0) == 'e' || peek(0) == 'E') {
      size_t sign = (peek(1) == '+' || peek(1) == '-') ? 1 : 0;
      if (is_digit(peek(1 + sign))) {
        real = true;
        advance(1 + sign);
        while (is_digit(peek(0))) advance(1);
      }
    }
    t.kind = real ? TokenKind::kReal : TokenKind::kInteger;
    t.text = text_.substr(begin, pos_ - begin);
    return t;
  }

  std::string_view text_;
  size_t pos_ = 0;
  int line_;
  int col_ = 1;
};

// ---------------------------------------------------------------------------------------------
// Parser

constexpr int64_t kMaxDimension = int64_t{1} << 40;
constexpr int64_t kMaxElements = int64_t{1} << 53;

struct LiteralToken {
  double value;
  bool is_integer;
  bool is_boolean;
  Token token;
};

class Parser {
 public:
  Parser(std::string_view text, const ParseOptions& options)
      : lexer_(text, options.first_line), source_(options.source_name) {
    module_.set_source_name(options.source_name);
    advance();
  }

  Expected<Module> parse() {
    while (token_.kind != TokenKind::kEnd) {
      if (!at_identifier("func")) return expected("'func'");
      PRECAST_RETURN_IF_ERROR(parse_function());
    }
    return std::move(module_);
  }

 private:
  Context& context() { return module_.context(); }
  void advance() { token_ = lexer_.next(); }
  bool at_punct(char p) const { return token_.kind == TokenKind::kPunct && token_.punct == p; }
  bool at_identifier(std::string_view word) const {
    return token_.kind == TokenKind::kIdentifier && token_.text == word;
  }

  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kEnd:
        return "end of input";
      case TokenKind::kValue:
        return fmt::format("'%{}'", t.text);
      case TokenKind::kSymbol:
        return fmt::format("'@{}'", t.decoded);
      case TokenKind::kHash:
        return fmt::format("'#{}'", t.decoded);
      case TokenKind::kString:
        return fmt::format("string \"{}\"", t.decoded);
      case TokenKind::kQuoted:
        return fmt::format("'{}'", t.decoded);
      default:
        return fmt::format("'{}'", t.text);
    }
  }

  Error error_at(const Token& t, std::string_view message) const {
    return usage_error(fmt::format("{}:{}:{}: {}", source_, t.line, t.col, message));
  }
  Error expected(std::string_view what) const {
    if (token_.kind == TokenKind::kInvalid) return error_at(token_, token_.decoded);
    return error_at(token_, fmt::format("expected {}, found {}", what, describe(token_)));
  }
  Status expect_punct(char p, std::string_view what) {
    if (!at_punct(p)) return expected(what);
    advance();
    return Status::success();
  }

  // ---- Types --------------------------------------------------------------------------------

  Expected<int64_t> parse_integer(std::string_view what) {
    if (token_.kind != TokenKind::kInteger) return expected(what);
    int64_t value = 0;
    auto [end, ec] =
        std::from_chars(token_.text.data(), token_.text.data() + token_.text.size(), value);
    if (ec != std::errc() || end != token_.text.data() + token_.text.size()) {
      return error_at(token_, fmt::format("integer {} is out of range", token_.text));
    }
    advance();
    return value;
  }

  Expected<std::vector<int64_t>> parse_integer_list(std::string_view what) {
    PRECAST_RETURN_IF_ERROR(expect_punct('[', fmt::format("'[' starting {}", what)));
    std::vector<int64_t> values;
    while (!at_punct(']')) {
      if (!values.empty()) PRECAST_RETURN_IF_ERROR(expect_punct(',', "',' or ']'"));
      PRECAST_ASSIGN_OR_RETURN(int64_t v, parse_integer("an integer"));
      values.push_back(v);
    }
    advance();
    return values;
  }

  struct ParsedType {
    TypeId type;
    AxesId axes;
  };

  Expected<ParsedType> parse_type() {
    if (token_.kind != TokenKind::kIdentifier) {
      return expected("an element type (f32, f64, bf16, f16, s32, u32, pred)");
    }
    std::optional<DType> dtype = dtype_from_name(token_.text);
    if (!dtype) return expected("an element type (f32, f64, bf16, f16, s32, u32, pred)");
    advance();
    TensorType type{*dtype, {}};
    PRECAST_RETURN_IF_ERROR(expect_punct('[', "'[' after the element type"));
    int64_t elements = 1;
    while (!at_punct(']')) {
      if (!type.dims.empty()) PRECAST_RETURN_IF_ERROR(expect_punct(',', "',' or ']'"));
      Token dim_token = token_;
      PRECAST_ASSIGN_OR_RETURN(int64_t d, parse_integer("a dimension size"));
      if (d < 0 || d > kMaxDimension) {
        return error_at(dim_token, fmt::format("dimension size {} is outside [0, 2^40]", d));
      }
      elements = d == 0 ? 0 : elements;
      if (d > 0 && elements > kMaxElements / d) {
        return error_at(dim_token, "tensor has more than 2^53 elements");
      }
      elements *= d == 0 ? 1 : d;
      type.dims.push_back(d);
    }
    advance();
    ParsedType parsed{context().intern_type(type), 0};
    if (at_punct('{')) {
      PRECAST_ASSIGN_OR_RETURN(parsed.axes, parse_axes(type.rank()));
    }
    return parsed;
  }

  Expected<AxesId> parse_axes(int64_t rank) {
    Token open = token_;
    advance();
    std::vector<StringId> names;
    while (!at_punct('}')) {
      if (!names.empty()) PRECAST_RETURN_IF_ERROR(expect_punct(',', "',' or '}'"));
      if (token_.kind == TokenKind::kIdentifier) {
        names.push_back(token_.text == "_" ? 0 : context().intern_string(token_.text));
      } else if (token_.kind == TokenKind::kString) {
        names.push_back(context().intern_string(token_.decoded));
      } else {
        return expected("an axis name or '_'");
      }
      advance();
    }
    advance();
    if (static_cast<int64_t>(names.size()) != rank) {
      return error_at(open,
                      fmt::format("{} axis names given for a rank-{} type", names.size(), rank));
    }
    return context().intern_axes(names);
  }

  // ---- Values -------------------------------------------------------------------------------

  Expected<Value> parse_use() {
    if (token_.kind != TokenKind::kValue) return expected("a value (%name)");
    auto it = values_.find(token_.text);
    if (it == values_.end()) {
      return error_at(token_, fmt::format("use of undefined value %{}", token_.text));
    }
    advance();
    return it->second;
  }

  Status define(const Token& t, Value v) {
    if (!values_.emplace(t.text, v).second) {
      return error_at(t, fmt::format("redefinition of %{}", t.text));
    }
    if (!is_digit(t.text[0])) function_->set_value_name(v, context().intern_string(t.text));
    return Status::success();
  }

  // ---- Functions ----------------------------------------------------------------------------

  Status parse_function() {
    advance();  // func
    if (token_.kind != TokenKind::kSymbol) return expected("a function name (@name)");
    Token name = token_;
    if (module_.find_function(name.decoded)) {
      return error_at(name, fmt::format("redefinition of function @{}", name.decoded));
    }
    function_ = &module_.add_function(name.decoded);
    values_.clear();
    advance();
    PRECAST_RETURN_IF_ERROR(expect_punct('(', "'(' starting the parameter list"));
    while (!at_punct(')')) {
      if (!function_->params().empty()) PRECAST_RETURN_IF_ERROR(expect_punct(',', "',' or ')'"));
      PRECAST_RETURN_IF_ERROR(parse_param());
    }
    advance();
    PRECAST_RETURN_IF_ERROR(expect_punct('>', "'->'"));
    PRECAST_RETURN_IF_ERROR(expect_punct('(', "'(' starting the result types"));
    std::vector<std::pair<Token, ParsedType>> signature;
    std::vector<std::pair<size_t, int32_t>> aliases;
    while (!at_punct(')')) {
      if (!signature.empty()) PRECAST_RETURN_IF_ERROR(expect_punct(',', "',' or ')'"));
      Token at = token_;
      PRECAST_ASSIGN_OR_RETURN(ParsedType t, parse_type());
      signature.emplace_back(at, t);
      if (at_identifier("aliases")) {
        advance();
        PRECAST_ASSIGN_OR_RETURN(int32_t param, parse_aliased_param());
        aliases.emplace_back(signature.size() - 1, param);
      }
    }
    advance();
    PRECAST_RETURN_IF_ERROR(expect_punct('{', "'{' starting the function body"));
    while (!at_identifier("return")) {
      if (token_.kind != TokenKind::kValue) return expected("an op (%result = ...) or 'return'");
      PRECAST_RETURN_IF_ERROR(parse_op());
    }
    PRECAST_RETURN_IF_ERROR(parse_return(signature));
    for (auto [result, param] : aliases) function_->set_result_alias(result, param);
    return expect_punct('}', "'}' closing the function");
  }

  // "aliases %param": the parameter a result may reuse the buffer of.
  Expected<int32_t> parse_aliased_param() {
    if (token_.kind != TokenKind::kValue) return expected("a parameter (%name) after 'aliases'");
    Token name = token_;
    PRECAST_ASSIGN_OR_RETURN(Value v, parse_use());
    if (!function_->is_param(v)) {
      return error_at(name,
                      fmt::format("'aliases' must name a parameter of @{}, and %{} is not one",
                                  function_->name(), name.text));
    }
    return static_cast<int32_t>(function_->value_info(v).number);
  }

  Status parse_param() {
    if (token_.kind != TokenKind::kValue) return expected("a parameter (%name)");
    Token name = token_;
    advance();
    PRECAST_RETURN_IF_ERROR(expect_punct(':', "':' after the parameter name"));
    PRECAST_ASSIGN_OR_RETURN(ParsedType t, parse_type());
    Value v = function_->add_param(t.type, t.axes);
    if (at_identifier("P")) {
      PRECAST_ASSIGN_OR_RETURN(ShardingId sharding, parse_sharding());
      function_->set_sharding(v, sharding);
    }
    if (at_identifier("role")) {
      advance();
      PRECAST_RETURN_IF_ERROR(expect_punct('=', "'=' after 'role'"));
      PRECAST_ASSIGN_OR_RETURN(ParamRole role, parse_param_role());
      function_->set_param_role(function_->params().size() - 1, role);
    }
    return define(name, v);
  }

  Expected<ParamRole> parse_param_role() {
    if (token_.kind == TokenKind::kIdentifier) {
      for (int r = 1; r < static_cast<int>(ParamRole::kCount); ++r) {
        auto role = static_cast<ParamRole>(r);
        if (token_.text == param_role_name(role)) {
          advance();
          return role;
        }
      }
    }
    return expected("a parameter role (optimizer_state)");
  }

  // P('fsdp', None, ('tensor', 'sequence')): per dimension None, one mesh axis or a tuple.
  Expected<ShardingId> parse_sharding() {
    advance();  // P
    PRECAST_RETURN_IF_ERROR(expect_punct('(', "'(' after 'P'"));
    std::vector<std::vector<StringId>> dims;
    while (!at_punct(')')) {
      if (!dims.empty()) PRECAST_RETURN_IF_ERROR(expect_punct(',', "',' or ')'"));
      std::vector<StringId>& axes = dims.emplace_back();
      if (at_identifier("None")) {
        advance();
      } else if (token_.kind == TokenKind::kQuoted) {
        axes.push_back(context().intern_string(token_.decoded));
        advance();
      } else if (at_punct('(')) {
        advance();
        while (!at_punct(')')) {
          if (!axes.empty()) PRECAST_RETURN_IF_ERROR(expect_punct(',', "',' or ')'"));
          if (token_.kind != TokenKind::kQuoted) return expected("a mesh axis ('name')");
          axes.push_back(context().intern_string(token_.decoded));
          advance();
        }
        advance();
      } else {
        return expected("None, a mesh axis ('name') or a tuple of them");
      }
    }
    advance();
    return context().intern_sharding(dims);
  }

  // [backward | recompute] [layer=N] [region=NAME] [block=N] [site=N] after an op's scope and
  // checkpoint.
  Expected<OpFacts> parse_facts() {
    OpFacts facts;
    for (int p = 1; p < static_cast<int>(OpPhase::kCount); ++p) {  // forward is not written
      if (at_identifier(phase_name(static_cast<OpPhase>(p)))) {
        facts.phase = static_cast<OpPhase>(p);
        advance();
        break;
      }
    }
    if (at_identifier("layer")) {
      advance();
      PRECAST_RETURN_IF_ERROR(expect_punct('=', "'=' after 'layer'"));
      Token at = token_;
      PRECAST_ASSIGN_OR_RETURN(int64_t layer, parse_integer("a layer index"));
      if (layer < 0 || layer > std::numeric_limits<int16_t>::max()) {
        return error_at(at, fmt::format("layer index {} is outside [0, {}]", layer,
                                        std::numeric_limits<int16_t>::max()));
      }
      facts.layer = static_cast<int16_t>(layer);
    }
    if (at_identifier("region")) {
      advance();
      PRECAST_RETURN_IF_ERROR(expect_punct('=', "'=' after 'region'"));
      bool found = false;
      for (int r = 1; r < static_cast<int>(OpRegion::kCount) && !found; ++r) {
        auto region = static_cast<OpRegion>(r);
        if (token_.kind == TokenKind::kIdentifier && token_.text == region_name(region)) {
          facts.region = region;
          found = true;
        }
      }
      if (!found) return expected("a region (logits, optimizer)");
      advance();
    }
    PRECAST_ASSIGN_OR_RETURN(facts.block, parse_fact_number("block"));
    PRECAST_ASSIGN_OR_RETURN(facts.site, parse_fact_number("site"));
    context().note_fact_numbers(facts.block, facts.site);
    return facts;
  }

  // [NAME=N] with N in [1, 65535], or 0 when NAME is absent.
  Expected<uint16_t> parse_fact_number(std::string_view name) {
    if (!at_identifier(name)) return uint16_t{0};
    advance();
    PRECAST_RETURN_IF_ERROR(expect_punct('=', fmt::format("'=' after '{}'", name)));
    Token at = token_;
    PRECAST_ASSIGN_OR_RETURN(int64_t number, parse_integer(fmt::format("a {} number", name)));
    if (number < 1 || number > std::numeric_limits<uint16_t>::max()) {
      return error_at(at, fmt::format("{} number {} is outside [1, {}]", name, number,
                                      std::numeric_limits<uint16_t>::max()));
    }
    return static_cast<uint16_t>(number);
  }

  Status parse_return(const std::vector<std::pair<Token, ParsedType>>& signature) {
    Token at = token_;
    advance();  // return
    std::vector<Value> results;
    std::vector<Token> tokens;
    bool more = token_.kind == TokenKind::kValue;
    while (more) {
      tokens.push_back(token_);
      PRECAST_ASSIGN_OR_RETURN(Value v, parse_use());
      results.push_back(v);
      more = at_punct(',');
      if (more) advance();
    }
    if (results.size() != signature.size()) {
      return error_at(at, fmt::format("return has {} values but the signature declares {} results",
                                      results.size(), signature.size()));
    }
    for (size_t i = 0; i < results.size(); ++i) {
      const ValueInfo& info = function_->value_info(results[i]);
      const ParsedType& declared = signature[i].second;
      if (info.type != declared.type || info.axes != declared.axes) {
        return error_at(tokens[i],
                        fmt::format("returned value %{} has type {} but the signature declares {}",
                                    tokens[i].text, print_type(info.type, info.axes),
                                    print_type(declared.type, declared.axes)));
      }
    }
    function_->set_results(results);
    return Status::success();
  }

  std::string print_type(TypeId type, AxesId axes) {
    std::string out = to_string(context().type(type));
    std::span<const StringId> names = context().axes(axes);
    if (names.empty()) return out;
    out += '{';
    for (size_t i = 0; i < names.size(); ++i) {
      if (i > 0) out += ',';
      out += names[i] == 0 ? std::string_view("_") : context().string(names[i]);
    }
    return out + '}';
  }

  // ---- Ops ----------------------------------------------------------------------------------

  Status parse_op() {
    std::vector<Token> result_tokens{token_};
    advance();
    while (at_punct(',')) {
      advance();
      if (token_.kind != TokenKind::kValue) return expected("a result name (%name)");
      result_tokens.push_back(token_);
      advance();
    }
    PRECAST_RETURN_IF_ERROR(expect_punct('=', "'=' after the result names"));
    if (token_.kind != TokenKind::kIdentifier) return expected("an op name");
    Token op_token = token_;
    std::optional<OpKind> kind = op_kind_from_name(token_.text);
    if (!kind) return unknown_op(op_token);
    const OpInfo& info = op_info(*kind);
    advance();
    if (result_tokens.size() != info.num_results) {
      return error_at(op_token,
                      fmt::format("{} has {} result{}, found {} names", info.name, info.num_results,
                                  info.num_results == 1 ? "" : "s", result_tokens.size()));
    }

    AttrSet attrs;
    std::vector<LiteralToken> literal;
    operands_.clear();
    if (*kind == OpKind::kConstant) {
      PRECAST_RETURN_IF_ERROR(parse_literal(literal));
    } else {
      PRECAST_RETURN_IF_ERROR(parse_operands());
      if (at_punct('{')) PRECAST_RETURN_IF_ERROR(parse_attributes(info, attrs));
    }
    PRECAST_RETURN_IF_ERROR(expect_punct(':', "':' before the result type"));
    PRECAST_RETURN_IF_ERROR(check_operand_count(op_token, info));
    std::vector<TypeId> types;
    std::vector<AxesId> axes;
    std::vector<ShardingId> shardings;
    for (size_t i = 0; i < result_tokens.size(); ++i) {
      if (i > 0) PRECAST_RETURN_IF_ERROR(expect_punct(',', "',' before the next result type"));
      PRECAST_ASSIGN_OR_RETURN(ParsedType t, parse_type());
      types.push_back(t.type);
      axes.push_back(t.axes);
      ShardingId sharding = 0;
      if (at_identifier("P")) {
        PRECAST_ASSIGN_OR_RETURN(sharding, parse_sharding());
      }
      shardings.push_back(sharding);
    }
    if (*kind == OpKind::kConstant) {
      PRECAST_RETURN_IF_ERROR(literal_to_attribute(literal, context().type(types[0]).dtype, attrs));
    }
    StringId scope = 0, checkpoint = 0;
    if (token_.kind == TokenKind::kSymbol) {
      if (token_.decoded.empty()) {
        return error_at(token_, "scope must not be empty");
      }
      scope = context().intern_string(token_.decoded);
      advance();
    }
    if (token_.kind == TokenKind::kHash) {
      checkpoint = context().intern_string(token_.decoded);
      advance();
    }
    PRECAST_ASSIGN_OR_RETURN(OpFacts facts, parse_facts());

    drop_zero_optional_attributes(*kind, attrs);
    OpIndex index =
        function_->append_op(*kind, operands_, types, context().intern_attrs(attrs), scope,
                             checkpoint, static_cast<uint32_t>(op_token.line), facts);
    for (size_t i = 0; i < result_tokens.size(); ++i) {
      Value v = function_->result(function_->op(index), static_cast<uint32_t>(i));
      function_->set_axes(v, axes[i]);
      function_->set_sharding(v, shardings[i]);
      PRECAST_RETURN_IF_ERROR(define(result_tokens[i], v));
    }
    return Status::success();
  }

  Error unknown_op(const Token& t) const {
    std::vector<std::string> close = closest_names(t.text, all_op_names(), 3);
    return error_at(
        t, fmt::format("unknown op '{}'; did you mean {}?", t.text, quoted_alternatives(close)));
  }

  Status check_operand_count(const Token& op_token, const OpInfo& info) const {
    size_t n = operands_.size();
    bool variadic = info.max_operands == kVariadic;
    if (n >= info.min_operands && (variadic || n <= info.max_operands)) return Status::success();
    std::string want = variadic ? fmt::format("at least {}", info.min_operands)
                       : info.min_operands == info.max_operands
                           ? fmt::format("{}", info.min_operands)
                           : fmt::format("{} to {}", info.min_operands, info.max_operands);
    return error_at(op_token, fmt::format("{} expects {} operands, found {}", info.name, want, n));
  }

  Status parse_operands() {
    if (token_.kind != TokenKind::kValue) return Status::success();
    PRECAST_ASSIGN_OR_RETURN(Value first, parse_use());
    operands_.push_back(first);
    while (at_punct(',')) {
      advance();
      PRECAST_ASSIGN_OR_RETURN(Value v, parse_use());
      operands_.push_back(v);
    }
    return Status::success();
  }

  Status parse_attributes(const OpInfo& info, AttrSet& attrs) {
    advance();  // {
    bool first = true;
    while (!at_punct('}')) {
      if (!first) PRECAST_RETURN_IF_ERROR(expect_punct(',', "',' or '}'"));
      first = false;
      if (token_.kind != TokenKind::kIdentifier) return expected("an attribute name");
      Token key_token = token_;
      std::optional<AttrKey> key = attr_key_from_name(token_.text);
      bool allowed = key && std::any_of(info.attrs.begin(), info.attrs.end(),
                                        [&](const AttrSpec& s) { return s.key == *key; });
      if (!allowed) return unknown_attribute(key_token, info);
      if (attrs.has(*key)) {
        return error_at(key_token, fmt::format("attribute '{}' given twice", key_token.text));
      }
      advance();
      PRECAST_RETURN_IF_ERROR(expect_punct('=', "'=' after the attribute name"));
      PRECAST_RETURN_IF_ERROR(parse_attribute_value(*key, attrs));
    }
    advance();
    return Status::success();
  }

  Error unknown_attribute(const Token& t, const OpInfo& info) const {
    std::vector<std::string> names;
    for (const AttrSpec& s : info.attrs) names.emplace_back(attr_key_info(s.key).name);
    if (names.empty())
      return error_at(t, fmt::format("{} takes no attributes, found '{}'", info.name, t.text));
    return error_at(t, fmt::format("{} has no attribute '{}'; expected {}", info.name, t.text,
                                   quoted_alternatives(names)));
  }

  Status parse_attribute_value(AttrKey key, AttrSet& attrs) {
    switch (attr_key_info(key).kind) {
      case AttrKind::kInt: {
        PRECAST_ASSIGN_OR_RETURN(int64_t v, parse_integer("an integer"));
        attrs.set_int(key, v);
        return Status::success();
      }
      case AttrKind::kFlag:
        if (!at_identifier("true") && !at_identifier("false")) return expected("true or false");
        attrs.set_flag(key, token_.text == "true");
        advance();
        return Status::success();
      case AttrKind::kDirection: {
        std::optional<ComparisonDirection> d;
        if (token_.kind == TokenKind::kIdentifier) d = direction_from_name(token_.text);
        if (!d) return expected("a comparison direction (eq, ne, lt, le, gt, ge)");
        attrs.set_direction(*d);
        advance();
        return Status::success();
      }
      case AttrKind::kReal: {
        PRECAST_ASSIGN_OR_RETURN(double v, parse_real());
        attrs.set_real(key, v);
        return Status::success();
      }
      case AttrKind::kInts: {
        PRECAST_ASSIGN_OR_RETURN(std::vector<int64_t> v, parse_integer_list("an integer list"));
        attrs.set_ints(key, std::move(v));
        return Status::success();
      }
      case AttrKind::kNames: {
        PRECAST_RETURN_IF_ERROR(expect_punct('[', "'[' starting a list of names"));
        std::vector<int64_t> names;
        while (!at_punct(']')) {
          if (!names.empty()) PRECAST_RETURN_IF_ERROR(expect_punct(',', "',' or ']'"));
          if (token_.kind == TokenKind::kIdentifier) {
            names.push_back(context().intern_string(token_.text));
          } else if (token_.kind == TokenKind::kString) {
            names.push_back(context().intern_string(token_.decoded));
          } else {
            return expected("a mesh axis name");
          }
          advance();
        }
        advance();
        attrs.set_ints(key, std::move(names));
        return Status::success();
      }
      case AttrKind::kReals:
        return expected("no literal here (use constant's literal syntax)");
    }
    return Status::success();
  }

  // The decimal order of magnitude of an unsigned real literal ("1.5e3": 3, "0.02": -2), for
  // telling an overflowing literal from an underflowing one; 0 for a zero mantissa.
  static int64_t decimal_order(std::string_view body) {
    size_t e = body.find_first_of("eE");
    std::string_view mantissa = body.substr(0, e);
    int64_t exponent = 0;
    if (e != std::string_view::npos) {
      std::string_view digits = body.substr(e + 1);
      bool minus = !digits.empty() && digits[0] == '-';
      if (!digits.empty() && (digits[0] == '-' || digits[0] == '+')) digits.remove_prefix(1);
      auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), exponent);
      if (ec == std::errc::result_out_of_range) exponent = int64_t{1} << 40;
      if (minus) exponent = -exponent;
    }
    size_t point = mantissa.find('.');
    size_t integer_digits = point == std::string_view::npos ? mantissa.size() : point;
    for (size_t i = 0; i < mantissa.size(); ++i) {
      if (mantissa[i] == '.' || mantissa[i] == '0') continue;
      int64_t order = i < integer_digits ? static_cast<int64_t>(integer_digits - i) - 1
                                         : -static_cast<int64_t>(i - integer_digits);
      return order + exponent;
    }
    return 0;
  }

  static std::optional<double> read_real(const Token& t) {
    std::string_view s = t.text;
    bool negative = !s.empty() && s[0] == '-';
    std::string_view body = negative ? s.substr(1) : s;
    double value;
    if (body == "inf") {
      value = std::numeric_limits<double>::infinity();
    } else if (body == "nan") {
      value = std::numeric_limits<double>::quiet_NaN();
    } else {
      auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
      // Out-of-range reals name a real value all the same: too large saturates to infinity,
      // too small rounds to the nearest subnormal or zero (strtod's reading, in the C locale
      // every Precast program keeps), each with the literal's sign.
      if (ec == std::errc::result_out_of_range && end == s.data() + s.size()) {
        if (decimal_order(body) >= 0) return negative ? -HUGE_VAL : HUGE_VAL;
        std::string text(s);
        return std::strtod(text.c_str(), nullptr);
      }
      if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
      return value;
    }
    return negative ? -value : value;
  }

  Expected<double> parse_real() {
    bool numeric = token_.kind == TokenKind::kReal || token_.kind == TokenKind::kInteger ||
                   at_identifier("inf") || at_identifier("nan");
    if (!numeric) return expected("a number");
    std::optional<double> v = read_real(token_);
    if (!v) return error_at(token_, fmt::format("bad number '{}'", token_.text));
    advance();
    return *v;
  }

  Status parse_literal_element(std::vector<LiteralToken>& out) {
    LiteralToken element{0.0, false, false, token_};
    if (at_identifier("true") || at_identifier("false")) {
      element.value = at_identifier("true") ? 1.0 : 0.0;
      element.is_boolean = true;
      advance();
    } else {
      element.is_integer = token_.kind == TokenKind::kInteger;
      PRECAST_ASSIGN_OR_RETURN(element.value, parse_real());
    }
    out.push_back(std::move(element));
    return Status::success();
  }

  Status parse_literal(std::vector<LiteralToken>& out) {
    if (!at_punct('[')) return parse_literal_element(out);
    Token open = token_;
    advance();
    while (!at_punct(']')) {
      if (!out.empty()) PRECAST_RETURN_IF_ERROR(expect_punct(',', "',' or ']'"));
      PRECAST_RETURN_IF_ERROR(parse_literal_element(out));
    }
    advance();
    if (out.empty()) return error_at(open, "a literal needs at least one value");
    return Status::success();
  }

  Status literal_to_attribute(const std::vector<LiteralToken>& literal, DType dtype,
                              AttrSet& attrs) {
    std::vector<double> values;
    values.reserve(literal.size());
    for (const LiteralToken& e : literal) {
      if (dtype == DType::kPred && !e.is_boolean) {
        return error_at(e.token, "expected true or false in a pred literal");
      }
      if (dtype != DType::kPred && e.is_boolean) {
        return error_at(e.token,
                        fmt::format("expected a number in a {} literal", dtype_name(dtype)));
      }
      if (is_integer(dtype) && !e.is_integer) {
        return error_at(e.token,
                        fmt::format("expected an integer in a {} literal", dtype_name(dtype)));
      }
      values.push_back(is_floating(dtype) ? round_to_dtype(dtype, e.value) : e.value);
    }
    attrs.set_reals(AttrKey::kValue, std::move(values));
    return Status::success();
  }

  Lexer lexer_;
  std::string source_;
  Token token_;
  Module module_;
  Function* function_ = nullptr;
  std::unordered_map<std::string_view, Value> values_;
  std::vector<Value> operands_;
};

}  // namespace

Expected<Module> parse_module(std::string_view text, const ParseOptions& options) {
  Parser parser(text, options);
  return parser.parse();
}

Expected<Module> parse_module_file(const std::string& path) {
  std::stringstream buffer;
  if (path == "-") {
    buffer << std::cin.rdbuf();
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) return usage_error(fmt::format("{}: cannot open file", path));
    buffer << in.rdbuf();
  }
  std::string text = buffer.str();
  ParseOptions options;
  options.source_name = path == "-" ? "<stdin>" : path;
  return parse_module(text, options);
}

}  // namespace precast::ir
