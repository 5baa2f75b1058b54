#include "runtime/checkpoint/DurableFile.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace precast::checkpoint {
namespace {

// Large enough that a syscall per chunk costs nothing, small enough that a chunk hashed just
// before its write (or just after its read) is still in the cache.
constexpr size_t kChunkBytes = size_t{4} << 20;

Error io_error(std::string_view what, const std::string& path) {
  return Error(ExitCode::kFailure, fmt::format("{} {}: {}; check that the checkpoint directory is "
                                               "writable and the disk has room",
                                               what, path, std::strerror(errno)));
}

Error read_error(std::string_view what, const std::string& path) {
  return Error(ExitCode::kIncompatible,
               fmt::format("{}: cannot {} it: {}", path, what, std::strerror(errno)));
}

// write(2) until all of [data, data + size) is written.
bool write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// read(2) until `size` bytes or the end of the file; the count read, -1 on an error.
ssize_t read_full(int fd, char* data, size_t size) {
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::read(fd, data + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

}  // namespace

Status write_file_durably(const std::string& path, const std::vector<ByteRange>& pieces,
                          artifact::Sha256* hasher) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("cannot create", path);
  off_t written = 0;
  for (const ByteRange& piece : pieces) {
    const char* p = static_cast<const char*>(piece.data);
    size_t left = piece.size;
    while (left > 0) {
      size_t n = std::min(left, kChunkBytes);
      if (hasher != nullptr) hasher->update(p, n);
      if (!write_all(fd, p, n)) {
        Error e = io_error("cannot write", path);
        ::close(fd);
        return e;
      }
      // Starts the chunk's writeback now; only a hint (the fsync below is what makes the file
      // durable), so its failure is not an error.
      if (n == kChunkBytes) {
        ::sync_file_range(fd, written, static_cast<off_t>(n), SYNC_FILE_RANGE_WRITE);
      }
      written += static_cast<off_t>(n);
      p += n;
      left -= n;
    }
  }
  if (::fsync(fd) != 0) {
    Error e = io_error("cannot fsync", path);
    ::close(fd);
    return e;
  }
  if (::close(fd) != 0) return io_error("cannot close", path);
  return Status::success();
}

Status sync_directory(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return io_error("cannot open the directory", path);
  int rc = ::fsync(fd);
  Error e = io_error("cannot fsync the directory", path);
  ::close(fd);
  if (rc != 0) return e;
  return Status::success();
}

Expected<std::string> read_whole_file(const std::string& path, artifact::Sha256* hasher) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return read_error("open", path);
  std::string bytes;
  struct stat st {};
  // Sized from fstat and read straight into place; a file that grows meanwhile is read to its end.
  if (::fstat(fd, &st) == 0 && st.st_size > 0) bytes.resize(static_cast<size_t>(st.st_size));
  size_t filled = 0;
  for (;;) {
    char* into = nullptr;
    size_t want = 0;
    char probe[1 << 16];
    if (filled < bytes.size()) {
      into = bytes.data() + filled;
      want = std::min(bytes.size() - filled, kChunkBytes);
    } else {  // at the expected end: anything more (a growing file) is appended
      into = probe;
      want = sizeof(probe);
    }
    ssize_t n = read_full(fd, into, want);
    if (n < 0) {
      Error e = read_error("read", path);
      ::close(fd);
      return e;
    }
    if (hasher != nullptr) hasher->update(into, static_cast<size_t>(n));
    if (into == probe) bytes.append(probe, static_cast<size_t>(n));
    filled += static_cast<size_t>(n);
    if (static_cast<size_t>(n) < want) break;  // the end of the file
  }
  ::close(fd);
  bytes.resize(filled);
  return bytes;
}

Expected<FileDigest> hash_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return read_error("open", path);
  std::string chunk(kChunkBytes, '\0');
  artifact::Sha256 hasher;
  FileDigest out;
  for (;;) {
    ssize_t n = read_full(fd, chunk.data(), chunk.size());
    if (n < 0) {
      Error e = read_error("read", path);
      ::close(fd);
      return e;
    }
    hasher.update(chunk.data(), static_cast<size_t>(n));
    out.bytes += n;
    if (static_cast<size_t>(n) < chunk.size()) break;
  }
  ::close(fd);
  out.sha256 = hasher.finish();
  return out;
}

}  // namespace precast::checkpoint
