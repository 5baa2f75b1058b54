#include "runtime/checkpoint/DurableFile.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>

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

// One file being written chunk by chunk, buffered or, where allowed and aligned, with O_DIRECT.
class ChunkWriter {
 public:
  ChunkWriter(int fd, const std::string& path, DirectIo direct)
      : fd_(fd), path_(path), direct_allowed_(direct == DirectIo::kWhereAligned) {}

  // Writes [p, p + size), hashed chunk by chunk just before each write.
  Status write_range(const char* p, size_t size, artifact::Sha256* hasher) {
    while (size > 0) {
      size_t n = std::min(size, kChunkBytes);
      const bool aligned = direct_allowed_ && n >= kDirectIoAlignment &&
                           reinterpret_cast<uintptr_t>(p) % kDirectIoAlignment == 0 &&
                           static_cast<size_t>(offset_) % kDirectIoAlignment == 0;
      if (aligned) n -= n % kDirectIoAlignment;  // the whole blocks; the tail goes buffered
      if (hasher != nullptr) hasher->update(p, n);
      bool written_direct = false;
      if (aligned) {
        PRECAST_ASSIGN_OR_RETURN(written_direct, write_direct(p, n));
      }
      if (!written_direct) PRECAST_RETURN_IF_ERROR(write_buffered(p, n));
      offset_ += static_cast<off_t>(n);
      p += n;
      size -= n;
    }
    return Status::success();
  }

  const WriteReport& report() const { return report_; }

 private:
  // Turns O_DIRECT on or off for the file; false when the file system refuses it.
  Expected<bool> set_direct(bool on) {
    if (direct_on_ == on) return true;
    int flags = ::fcntl(fd_, F_GETFL);
    if (flags < 0 || ::fcntl(fd_, F_SETFL, on ? (flags | O_DIRECT) : (flags & ~O_DIRECT)) != 0) {
      if (on && errno == EINVAL) return false;
      return io_error(on ? "cannot turn on O_DIRECT for" : "cannot turn off O_DIRECT for", path_);
    }
    direct_on_ = on;
    return true;
  }
  Status direct_off() {
    PRECAST_ASSIGN_OR_RETURN(bool off, set_direct(false));
    (void)off;  // turning O_DIRECT off is never refused
    return Status::success();
  }

  // A refusal of O_DIRECT (EINVAL: the file system or the device's block size): every later
  // chunk of the file goes buffered.
  Status refuse_direct() {
    direct_allowed_ = false;
    report_.direct_refused = true;
    return direct_off();
  }

  // One aligned chunk with O_DIRECT; false when O_DIRECT is refused and nothing was written (the
  // caller writes the chunk buffered).
  Expected<bool> write_direct(const char* p, size_t n) {
    PRECAST_ASSIGN_OR_RETURN(bool on, set_direct(true));
    if (!on) {
      PRECAST_RETURN_IF_ERROR(refuse_direct());
      return false;
    }
    ssize_t w = 0;
    do {
      w = ::write(fd_, p, n);
    } while (w < 0 && errno == EINTR);
    if (w < 0 && errno == EINVAL) {
      PRECAST_RETURN_IF_ERROR(refuse_direct());
      return false;
    }
    if (w <= 0) return io_error("cannot write", path_);
    report_.direct_bytes += w;
    if (static_cast<size_t>(w) < n) {
      // A short direct write (the disk filling up): the rest of the chunk buffered, where a full
      // disk gives its error.
      PRECAST_RETURN_IF_ERROR(direct_off());
      const size_t rest = n - static_cast<size_t>(w);
      if (!write_all(fd_, p + w, rest)) return io_error("cannot write", path_);
      report_.buffered_bytes += static_cast<int64_t>(rest);
    }
    return true;
  }

  Status write_buffered(const char* p, size_t n) {
    PRECAST_RETURN_IF_ERROR(direct_off());
    if (!write_all(fd_, p, n)) return io_error("cannot write", path_);
    report_.buffered_bytes += static_cast<int64_t>(n);
    // Starts the chunk's writeback now; only a hint (the fsync is what makes the file durable),
    // so its failure is not an error.
    if (n == kChunkBytes) ::sync_file_range(fd_, offset_, static_cast<off_t>(n), SYNC_FILE_RANGE_WRITE);
    return Status::success();
  }

  int fd_;
  const std::string& path_;
  bool direct_allowed_;
  bool direct_on_ = false;
  off_t offset_ = 0;
  WriteReport report_;
};

// The pieces with those that follow each other in memory joined (the tensors of one snapshot
// buffer become one range, so its blocks stay aligned across tensor boundaries).
std::vector<ByteRange> joined(const std::vector<ByteRange>& pieces) {
  std::vector<ByteRange> out;
  for (const ByteRange& piece : pieces) {
    if (piece.size == 0) continue;
    if (!out.empty() &&
        static_cast<const char*>(out.back().data) + out.back().size == piece.data) {
      out.back().size += piece.size;
    } else {
      out.push_back(piece);
    }
  }
  return out;
}

}  // namespace

std::vector<ByteRange> join_adjacent_ranges(const std::vector<ByteRange>& pieces) {
  return joined(pieces);
}

struct DurableFileWriter::Impl {
  Impl(int fd_in, std::string path_in, DirectIo direct)
      : fd(fd_in), path(std::move(path_in)), chunks(fd_in, path, direct) {}
  int fd;
  std::string path;  // before `chunks`, which keeps a reference to it
  ChunkWriter chunks;
};

DurableFileWriter::DurableFileWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DurableFileWriter::~DurableFileWriter() {
  if (impl_ != nullptr && impl_->fd >= 0) ::close(impl_->fd);
}

Expected<std::unique_ptr<DurableFileWriter>> DurableFileWriter::create(const std::string& path,
                                                                       DirectIo direct) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("cannot create", path);
  return std::unique_ptr<DurableFileWriter>(
      new DurableFileWriter(std::make_unique<Impl>(fd, path, direct)));
}

Status DurableFileWriter::write(const void* data, size_t size) {
  return impl_->chunks.write_range(static_cast<const char*>(data), size, nullptr);
}

Status DurableFileWriter::finish(WriteReport* report) {
  const int fd = std::exchange(impl_->fd, -1);
  if (::fsync(fd) != 0) {
    Error e = io_error("cannot fsync", impl_->path);
    ::close(fd);
    return e;
  }
  if (::close(fd) != 0) return io_error("cannot close", impl_->path);
  if (report != nullptr) *report = impl_->chunks.report();
  return Status::success();
}

Status write_file_durably(const std::string& path, const std::vector<ByteRange>& pieces,
                          artifact::Sha256* hasher, DirectIo direct, WriteReport* report) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("cannot create", path);
  ChunkWriter writer(fd, path, direct);
  for (const ByteRange& range : joined(pieces)) {
    Status written = writer.write_range(static_cast<const char*>(range.data), range.size, hasher);
    if (!written.ok()) {
      ::close(fd);
      return written;
    }
  }
  if (::fsync(fd) != 0) {
    Error e = io_error("cannot fsync", path);
    ::close(fd);
    return e;
  }
  if (::close(fd) != 0) return io_error("cannot close", path);
  if (report != nullptr) *report = writer.report();
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
