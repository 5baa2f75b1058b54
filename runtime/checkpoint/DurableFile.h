// Role: the file operations a checkpoint's crash safety rests on: whole-file writes that reach
// the disk (fsync) before the call returns, directory fsyncs so names survive a crash, and
// whole-file reads with errors that name the file. Large files move in 4 MiB chunks, each hashed
// (SHA-256) right before it is written or right after it is read, while it is still in the
// cache: one pass over memory for both.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/artifact/Sha256.h"
#include "ir/support/Error.h"

namespace precast::checkpoint {

struct ByteRange {
  const void* data;
  size_t size;
};

// Creates (or truncates) `path`, writes the ranges in order, fsyncs and closes it. With `hasher`,
// every byte written is also fed to it, in order. The kernel is asked to start writing each chunk
// back as soon as it is written (sync_file_range), so the disk works while the next chunk is
// hashed and the final fsync has little left to wait for. Errors (exit 1) name the file and the
// system's reason.
Status write_file_durably(const std::string& path, const std::vector<ByteRange>& pieces,
                          artifact::Sha256* hasher = nullptr);
// fsyncs a directory, so that the entries created or renamed in it are durable.
Status sync_directory(const std::string& path);
// The whole file; a missing or unreadable file is an Error (exit 4) naming it. With `hasher`,
// every byte read is also fed to it.
Expected<std::string> read_whole_file(const std::string& path, artifact::Sha256* hasher = nullptr);
// A file's size and SHA-256, read in chunks without holding it; errors as read_whole_file's.
struct FileDigest {
  int64_t bytes = 0;
  artifact::Sha256Digest sha256{};
};
Expected<FileDigest> hash_file(const std::string& path);

}  // namespace precast::checkpoint
