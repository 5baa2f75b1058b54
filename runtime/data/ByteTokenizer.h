// Role: the byte-level tokenizer of dataset_type=text and `precast tokenize`: token i < 256 is
// byte i, then BOS, EOS and PAD. A document is BOS, its bytes, EOS; detokenizing drops BOS and
// EOS, so text -> tokens -> text gives back the same bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/support/Error.h"

namespace precast::data {

inline constexpr uint32_t kByteBos = 256;
inline constexpr uint32_t kByteEos = 257;
inline constexpr uint32_t kBytePad = 258;
inline constexpr int64_t kByteVocabSize = 259;  // the smallest vocab_size that holds them all

// BOS (unless !bos), one token per byte of `text`, EOS (unless !eos).
std::vector<uint32_t> tokenize_bytes(std::string_view text, bool bos = true, bool eos = true);

// The bytes of a document's tokens, without its BOS and EOS. A token that is neither a byte nor
// BOS/EOS (PAD included) is an Error naming its index.
Expected<std::string> detokenize_bytes(const std::vector<uint32_t>& tokens);

// Splits `text` into documents at every line that holds exactly `separator` (fortune files: a
// line "%"). The separator lines themselves are dropped; the documents keep their own newlines.
// A separator line ends in "\n"; the text before the first and after the last separator are
// documents too (possibly empty), so join_documents(split_documents(t, s), s) == t. An empty
// separator gives the whole text as one document.
std::vector<std::string> split_documents(std::string_view text, std::string_view separator);

// The inverse of split_documents: the documents with a separator line between each two.
std::string join_documents(const std::vector<std::string>& documents, std::string_view separator);

}  // namespace precast::data
