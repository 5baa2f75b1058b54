// Role: Precast's token file (.tokens): token ids of a corpus, uint16 or uint32, with its
// documents' boundaries in an offsets section. The layout is in runtime/data/README.md. Writes
// are atomic (a temporary name, fsync, rename); reads check every field and name the file and
// byte offset of what is wrong.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/support/Error.h"
#include "runtime/data/Fingerprint.h"

namespace precast::data {

inline constexpr char kTokenFileMagic[8] = {'P', 'C', 'T', 'O', 'K', 'E', 'N', 'S'};
inline constexpr uint32_t kTokenFileVersion = 1;
inline constexpr int64_t kTokenFileHeaderBytes = 48;
inline constexpr uint32_t kNoSpecialToken = 0xffffffffu;  // bos/eos/pad field: none

class MappedTokenFile;

// A corpus of documents: document d is tokens[starts[d] .. starts[d + 1]), or, for documents
// served from token files' mappings (add_mapped_document: load_corpus's training documents), the
// mapped ids at mapped_data[d] (`tokens` then stays empty). The two are not mixed.
struct TokenDocuments {
  std::vector<uint32_t> tokens;
  std::vector<uint64_t> starts{
      0};  // document count + 1 entries, the first 0, the last tokens.size()
  uint32_t bos = kNoSpecialToken, eos = kNoSpecialToken, pad = kNoSpecialToken;
  uint32_t token_bytes = 4;  // as read: 2 (uint16) or 4 (uint32)
  // The files the documents were read from, in order, each with its content fingerprint (a
  // checkpoint records them; a resume onto other content is refused). Empty when built in memory.
  std::vector<FileFingerprint> sources;

  // Mapped documents: where document d's ids lie in its file's mapping, their width (2 or 4
  // bytes, little-endian), and the files, kept mapped while the documents live.
  std::vector<const unsigned char*> mapped_data;
  std::vector<uint8_t> mapped_width;
  std::vector<std::shared_ptr<const MappedTokenFile>> mappings;

  size_t document_count() const { return starts.size() - 1; }
  uint64_t token_count() const { return starts.back(); }
  void add_document(const std::vector<uint32_t>& document);
  // Tokens [begin, end) of `file` as the next document, served from its mapping (no copy); the
  // caller keeps `file` in `mappings`.
  void add_mapped_document(const MappedTokenFile& file, uint64_t begin, uint64_t end);
  // Token k of document d.
  uint32_t token(size_t d, uint64_t k) const {
    if (mapped_data.empty()) return tokens[starts[d] + k];
    const unsigned char* p = mapped_data[d] + k * mapped_width[d];
    uint32_t v = static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8);
    if (mapped_width[d] == 4) {
      v |= (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
    }
    return v;
  }
  std::vector<uint32_t> document(size_t d) const;
};

// A token file mapped read-only (mmap) and checked as read_token_file checks it; its ids are
// decoded from the mapping when asked for, never copied or widened. The mapping lives as long
// as the object.
class MappedTokenFile {
 public:
  // Maps and checks `path`: read_token_file's errors (exit 2, the file and byte offset).
  static Expected<std::shared_ptr<const MappedTokenFile>> open(const std::string& path);
  ~MappedTokenFile();
  MappedTokenFile(const MappedTokenFile&) = delete;
  MappedTokenFile& operator=(const MappedTokenFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t width() const { return width_; }  // 2 (uint16) or 4 (uint32)
  uint64_t token_count() const { return starts_.back(); }
  size_t document_count() const { return starts_.size() - 1; }
  const std::vector<uint64_t>& starts() const { return starts_; }
  uint32_t bos() const { return bos_; }
  uint32_t eos() const { return eos_; }
  uint32_t pad() const { return pad_; }
  // The bytes of token `index` in the mapping, and its id.
  const unsigned char* token_data(uint64_t index) const { return tokens_ + index * width_; }
  uint32_t token(uint64_t index) const {
    const unsigned char* p = token_data(index);
    uint32_t v = static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8);
    if (width_ == 4) v |= (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
    return v;
  }
  // The byte offset of token `index` in the file (messages).
  int64_t token_offset(uint64_t index) const;
  // The CRC-32C of the whole file (Fingerprint.h), computed when it was opened.
  const FileFingerprint& fingerprint() const { return fingerprint_; }
  // The mapping was read front to back once (the checks); later reads are in document order.
  void expect_random_access() const;

 private:
  MappedTokenFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const unsigned char* tokens_ = nullptr;
  uint32_t width_ = 4;
  std::vector<uint64_t> starts_{0};
  uint32_t bos_ = kNoSpecialToken, eos_ = kNoSpecialToken, pad_ = kNoSpecialToken;
  FileFingerprint fingerprint_;
};

// Writes `documents` to `path` atomically, as uint16 when every id is below 65536, else uint32.
// I/O errors are exit 1 naming the file.
Status write_token_file(const std::string& path, const TokenDocuments& documents);

// Reads and checks a token file, mapped read-only (mmap: no copy of the whole file is made; the
// ids are decoded from the mapping). Errors (exit 2) name the file and the byte offset: another magic
// (offset 0), version (8) or token width (12), a size that disagrees with the header's counts
// (truncated or trailing bytes), offsets that do not start at 0, decrease or end past the tokens.
// `sources` holds the file's fingerprint (the CRC-32C of its bytes, Fingerprint.h).
Expected<TokenDocuments> read_token_file(const std::string& path);

// The byte offset in the token file `documents` was read from of its token `index` (messages).
int64_t token_offset(const TokenDocuments& documents, uint64_t index);

}  // namespace precast::data
