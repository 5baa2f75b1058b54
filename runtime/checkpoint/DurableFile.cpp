#include "runtime/checkpoint/DurableFile.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

namespace precast::checkpoint {
namespace {

Error io_error(std::string_view what, const std::string& path) {
  return Error(ExitCode::kFailure, fmt::format("{} {}: {}; check that the checkpoint directory is "
                                               "writable and the disk has room",
                                               what, path, std::strerror(errno)));
}

}  // namespace

Status write_file_durably(const std::string& path, const std::vector<ByteRange>& pieces) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("cannot create", path);
  for (const ByteRange& piece : pieces) {
    const char* p = static_cast<const char*>(piece.data);
    size_t left = piece.size;
    while (left > 0) {
      ssize_t n = ::write(fd, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        Error e = io_error("cannot write", path);
        ::close(fd);
        return e;
      }
      p += n;
      left -= static_cast<size_t>(n);
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

Expected<std::string> read_whole_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return Error(ExitCode::kIncompatible,
                 fmt::format("{}: cannot open it: {}", path, std::strerror(errno)));
  }
  std::string bytes;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size > 0) bytes.reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Error e(ExitCode::kIncompatible,
              fmt::format("{}: cannot read it: {}", path, std::strerror(errno)));
      ::close(fd);
      return e;
    }
    if (n == 0) break;
    bytes.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return bytes;
}

}  // namespace precast::checkpoint
