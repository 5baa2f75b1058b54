// Role: the file operations a checkpoint's crash safety rests on: whole-file writes that reach
// the disk (fsync) before the call returns, directory fsyncs so names survive a crash, and
// whole-file reads with errors that name the file.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "ir/support/Error.h"

namespace precast::checkpoint {

struct ByteRange {
  const void* data;
  size_t size;
};

// Creates (or truncates) `path`, writes the ranges in order, fsyncs and closes it. Errors
// (exit 1) name the file and the system's reason.
Status write_file_durably(const std::string& path, const std::vector<ByteRange>& pieces);
// fsyncs a directory, so that the entries created or renamed in it are durable.
Status sync_directory(const std::string& path);
// The whole file; a missing or unreadable file is an Error (exit 4) naming it.
Expected<std::string> read_whole_file(const std::string& path);

}  // namespace precast::checkpoint
