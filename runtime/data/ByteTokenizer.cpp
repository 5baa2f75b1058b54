#include "runtime/data/ByteTokenizer.h"

#include <fmt/format.h>

namespace precast::data {

std::vector<uint32_t> tokenize_bytes(std::string_view text, bool bos, bool eos) {
  std::vector<uint32_t> tokens;
  tokens.reserve(text.size() + 2);
  if (bos) tokens.push_back(kByteBos);
  for (char c : text) tokens.push_back(static_cast<unsigned char>(c));
  if (eos) tokens.push_back(kByteEos);
  return tokens;
}

Expected<std::string> detokenize_bytes(const std::vector<uint32_t>& tokens) {
  std::string text;
  text.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    uint32_t t = tokens[i];
    if (t < 256) {
      text.push_back(static_cast<char>(static_cast<unsigned char>(t)));
    } else if (t != kByteBos && t != kByteEos) {
      return usage_error(fmt::format(
          "token {} is {}, which the byte-level tokenizer does not produce (bytes 0-255, BOS {}, "
          "EOS {})",
          i, t, kByteBos, kByteEos));
    }
  }
  return text;
}

std::vector<std::string> split_documents(std::string_view text, std::string_view separator) {
  if (separator.empty()) return {std::string(text)};
  std::vector<std::string> documents;
  std::string current;
  size_t start = 0;
  while (start < text.size()) {
    size_t newline = text.find('\n', start);
    if (newline == std::string_view::npos) {
      current.append(text.substr(start));  // a last line without "\n" is text, never a separator
      break;
    }
    std::string_view line = text.substr(start, newline - start);
    if (line == separator) {
      documents.push_back(std::move(current));
      current.clear();
    } else {
      current.append(text.substr(start, newline + 1 - start));
    }
    start = newline + 1;
  }
  documents.push_back(std::move(current));
  return documents;
}

std::string join_documents(const std::vector<std::string>& documents, std::string_view separator) {
  std::string text;
  for (size_t i = 0; i < documents.size(); ++i) {
    if (i > 0) {
      text.append(separator);
      text.push_back('\n');
    }
    text.append(documents[i]);
  }
  return text;
}

}  // namespace precast::data
