// Role: Precast's token file (.tokens): token ids of a corpus, uint16 or uint32, with its
// documents' boundaries in an offsets section. The layout is in runtime/data/README.md. Writes
// are atomic (a temporary name, fsync, rename); reads check every field and name the file and
// byte offset of what is wrong.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/support/Error.h"

namespace precast::data {

inline constexpr char kTokenFileMagic[8] = {'P', 'C', 'T', 'O', 'K', 'E', 'N', 'S'};
inline constexpr uint32_t kTokenFileVersion = 1;
inline constexpr int64_t kTokenFileHeaderBytes = 48;
inline constexpr uint32_t kNoSpecialToken = 0xffffffffu;  // bos/eos/pad field: none

// A corpus of documents: document d is tokens[starts[d] .. starts[d + 1]).
struct TokenDocuments {
  std::vector<uint32_t> tokens;
  std::vector<uint64_t> starts{
      0};  // document count + 1 entries, the first 0, the last tokens.size()
  uint32_t bos = kNoSpecialToken, eos = kNoSpecialToken, pad = kNoSpecialToken;
  uint32_t token_bytes = 4;  // as read: 2 (uint16) or 4 (uint32)

  size_t document_count() const { return starts.size() - 1; }
  void add_document(const std::vector<uint32_t>& document);
  std::vector<uint32_t> document(size_t d) const;
};

// Writes `documents` to `path` atomically, as uint16 when every id is below 65536, else uint32.
// I/O errors are exit 1 naming the file.
Status write_token_file(const std::string& path, const TokenDocuments& documents);

// Reads and checks a token file, mapped read-only (mmap: no copy of the whole file is made; the
// ids are decoded from the mapping). Errors (exit 2) name the file and the byte offset: another magic
// (offset 0), version (8) or token width (12), a size that disagrees with the header's counts
// (truncated or trailing bytes), offsets that do not start at 0, decrease or end past the tokens.
Expected<TokenDocuments> read_token_file(const std::string& path);

// The byte offset in the token file `documents` was read from of its token `index` (messages).
int64_t token_offset(const TokenDocuments& documents, uint64_t index);

}  // namespace precast::data
