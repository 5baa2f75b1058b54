#include "runtime/data/TokenFile.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "runtime/checkpoint/DurableFile.h"

namespace precast::data {
namespace {

namespace fs = std::filesystem;

void put32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t get32(std::string_view in, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i)
    v = (v << 8) | static_cast<unsigned char>(in[at + static_cast<size_t>(i)]);
  return v;
}
uint64_t get64(std::string_view in, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | static_cast<unsigned char>(in[at + static_cast<size_t>(i)]);
  return v;
}

Error bad(const std::string& path, int64_t offset, const std::string& what) {
  return usage_error(fmt::format("{}: offset {}: {}", path, offset, what));
}

constexpr const char* kRemake =
    "re-create it with `precast tokenize TEXT... -o FILE.tokens` (runtime/data/README.md "
    "documents the format)";

}  // namespace

void TokenDocuments::add_document(const std::vector<uint32_t>& document) {
  tokens.insert(tokens.end(), document.begin(), document.end());
  starts.push_back(tokens.size());
}

void TokenDocuments::add_mapped_document(const MappedTokenFile& file, uint64_t begin,
                                         uint64_t end) {
  mapped_data.push_back(file.token_data(begin));
  mapped_width.push_back(static_cast<uint8_t>(file.width()));
  starts.push_back(starts.back() + (end - begin));
}

std::vector<uint32_t> TokenDocuments::document(size_t d) const {
  std::vector<uint32_t> out;
  out.reserve(static_cast<size_t>(starts[d + 1] - starts[d]));
  for (uint64_t k = 0; k < starts[d + 1] - starts[d]; ++k) out.push_back(token(d, k));
  return out;
}

int64_t token_offset(const TokenDocuments& documents, uint64_t index) {
  return kTokenFileHeaderBytes + 8 * static_cast<int64_t>(documents.starts.size()) +
         static_cast<int64_t>(index) * documents.token_bytes;
}

Status write_token_file(const std::string& path, const TokenDocuments& documents) {
  uint32_t width = 2;
  for (uint32_t t : documents.tokens) {
    if (t > 0xffff) width = 4;
  }
  std::string header(kTokenFileMagic, sizeof(kTokenFileMagic));
  put32(header, kTokenFileVersion);
  put32(header, width);
  put64(header, documents.tokens.size());
  put64(header, documents.document_count());
  put32(header, documents.bos);
  put32(header, documents.eos);
  put32(header, documents.pad);
  put32(header, 0);  // reserved
  for (uint64_t s : documents.starts) put64(header, s);
  std::string body;
  body.reserve(documents.tokens.size() * width);
  for (uint32_t t : documents.tokens) {
    body.push_back(static_cast<char>(t & 0xff));
    body.push_back(static_cast<char>((t >> 8) & 0xff));
    if (width == 4) {
      body.push_back(static_cast<char>((t >> 16) & 0xff));
      body.push_back(static_cast<char>((t >> 24) & 0xff));
    }
  }
  // A temporary name beside the target, made durable, then renamed over it: a reader sees the
  // old file or the whole new one, never a part.
  fs::path target(path);
  fs::path temp = target;
  temp += fmt::format(".tmp.{}", ::getpid());
  PRECAST_RETURN_IF_ERROR(checkpoint::write_file_durably(
      temp.string(), {{header.data(), header.size()}, {body.data(), body.size()}}));
  if (std::rename(temp.c_str(), target.c_str()) != 0) {
    std::string reason = std::strerror(errno);
    std::error_code ignored;
    fs::remove(temp, ignored);
    return Error(ExitCode::kFailure,
                 fmt::format("cannot rename {} to {}: {}", temp.string(), path, reason));
  }
  fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  return checkpoint::sync_directory(parent.string());
}

MappedTokenFile::~MappedTokenFile() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
}

int64_t MappedTokenFile::token_offset(uint64_t index) const {
  return kTokenFileHeaderBytes + 8 * static_cast<int64_t>(starts_.size()) +
         static_cast<int64_t>(index) * width_;
}

void MappedTokenFile::expect_random_access() const {
  if (map_ != nullptr) ::madvise(map_, map_bytes_, MADV_NORMAL);
}

Expected<std::shared_ptr<const MappedTokenFile>> MappedTokenFile::open(const std::string& path) {
  std::shared_ptr<MappedTokenFile> out(new MappedTokenFile());
  out->path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return usage_error(fmt::format("{}: cannot open it: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    std::string reason = std::strerror(errno);
    ::close(fd);
    return usage_error(fmt::format("{}: cannot read it: {}", path, reason));
  }
  if (st.st_size > 0) {
    void* p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      std::string reason = std::strerror(errno);
      ::close(fd);
      return usage_error(fmt::format("{}: cannot map it: {}", path, reason));
    }
    out->map_ = p;
    out->map_bytes_ = static_cast<size_t>(st.st_size);
    // Checked and fingerprinted front to back first: ask for read-ahead.
    ::madvise(p, out->map_bytes_, MADV_SEQUENTIAL);
  }
  ::close(fd);  // the mapping stays valid
  const std::string_view bytes =
      out->map_ == nullptr ? std::string_view()
                           : std::string_view(static_cast<const char*>(out->map_), out->map_bytes_);
  const int64_t size = static_cast<int64_t>(bytes.size());
  if (size < 8 || std::memcmp(bytes.data(), kTokenFileMagic, 8) != 0) {
    std::string seen;
    for (size_t i = 0; i < std::min<size_t>(8, bytes.size()); ++i) {
      seen += fmt::format("{:02x}", static_cast<unsigned char>(bytes[i]));
    }
    return bad(path, 0,
               fmt::format("the file starts with bytes {} ({} bytes long), not the magic PCTOKENS: "
                           "not a Precast token file; {}",
                           seen.empty() ? "(none)" : seen, size, kRemake));
  }
  if (size < kTokenFileHeaderBytes) {
    return bad(path, size,
               fmt::format("truncated: the file ends inside the {}-byte header; {}",
                           kTokenFileHeaderBytes, kRemake));
  }
  uint32_t version = get32(bytes, 8);
  if (version != kTokenFileVersion) {
    return bad(path, 8,
               fmt::format("version {}, but this precast reads version {}; {}", version,
                           kTokenFileVersion, kRemake));
  }
  uint32_t width = get32(bytes, 12);
  if (width != 2 && width != 4) {
    return bad(path, 12,
               fmt::format("token width {} bytes; it must be 2 (uint16) or 4 (uint32); {}", width,
                           kRemake));
  }
  uint64_t count = get64(bytes, 16);
  uint64_t documents = get64(bytes, 24);
  out->bos_ = get32(bytes, 32);
  out->eos_ = get32(bytes, 36);
  out->pad_ = get32(bytes, 40);
  out->width_ = width;
  // The counts decide the size; compare in floating point first so huge counts cannot overflow.
  double needed = static_cast<double>(kTokenFileHeaderBytes) +
                  8.0 * (static_cast<double>(documents) + 1) + static_cast<double>(count) * width;
  if (needed != static_cast<double>(size)) {
    return bad(path, size,
               fmt::format("{}: the header (offset 16) records {} tokens of {} bytes and {} "
                           "documents, which take {:.0f} bytes, but the file has {}; {}",
                           needed > static_cast<double>(size) ? "truncated" : "trailing bytes",
                           count, width, documents, needed, size, kRemake));
  }
  std::vector<uint64_t>& starts = out->starts_;
  starts.assign(documents + 1, 0);
  for (uint64_t d = 0; d <= documents; ++d) {
    size_t at = static_cast<size_t>(kTokenFileHeaderBytes) + 8 * d;
    starts[d] = get64(bytes, at);
    bool first_wrong = d == 0 && starts[d] != 0;
    bool decreasing = d > 0 && starts[d] < starts[d - 1];
    bool past_end = starts[d] > count || (d == documents && starts[d] != count);
    if (first_wrong || decreasing || past_end) {
      return bad(path, static_cast<int64_t>(at),
                 fmt::format("document offset {} is {}: offsets must start at 0, never decrease "
                             "and end at the token count {}; {}",
                             d, starts[d], count, kRemake));
    }
  }
  out->tokens_ = reinterpret_cast<const unsigned char*>(bytes.data()) +
                 static_cast<size_t>(kTokenFileHeaderBytes) + 8 * (documents + 1);
  out->fingerprint_ = fingerprint_of(path, bytes.data(), bytes.size());
  return std::shared_ptr<const MappedTokenFile>(std::move(out));
}

Expected<TokenDocuments> read_token_file(const std::string& path) {
  PRECAST_ASSIGN_OR_RETURN(std::shared_ptr<const MappedTokenFile> file,
                           MappedTokenFile::open(path));
  TokenDocuments out;
  out.bos = file->bos();
  out.eos = file->eos();
  out.pad = file->pad();
  out.token_bytes = file->width();
  out.starts = file->starts();
  out.sources.push_back(file->fingerprint());
  out.tokens.resize(file->token_count());
  for (uint64_t i = 0; i < out.tokens.size(); ++i) out.tokens[i] = file->token(i);
  return out;
}

}  // namespace precast::data
