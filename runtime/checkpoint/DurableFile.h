// Role: the file operations a checkpoint's crash safety rests on: whole-file writes that reach
// the disk (fsync) before the call returns, directory fsyncs so names survive a crash, and
// whole-file reads with errors that name the file. Large files move in 4 MiB chunks, each hashed
// (SHA-256) right before it is written or right after it is read, while it is still in the
// cache: one pass over memory for both. Aligned memory can be written with O_DIRECT (no copy into
// the page cache).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
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

// O_DIRECT needs the memory address, the file offset and the length of each write aligned to the
// device's logical block; 4096 covers every block size Linux disks use.
inline constexpr size_t kDirectIoAlignment = 4096;

// Whether write_file_durably may bypass the page cache.
enum class DirectIo {
  kNever,         // every byte through the page cache (buffered write(2))
  kWhereAligned,  // O_DIRECT for the aligned blocks of the ranges (see write_file_durably)
};

// How many bytes went each way: for benchmarks and tests.
struct WriteReport {
  int64_t direct_bytes = 0;
  int64_t buffered_bytes = 0;
  bool direct_refused = false;  // the file system refused O_DIRECT: everything was buffered
};

// Creates (or truncates) `path`, writes the ranges in order, fsyncs and closes it. With `hasher`,
// every byte written is also fed to it, in order, each chunk just before it is written (one pass
// over memory). Ranges that follow each other in memory are written as one.
// Buffered chunks: the kernel is asked to start writing each back as soon as it is written
// (sync_file_range), so the disk works while the next chunk is hashed and the final fsync has
// little left to wait for. With DirectIo::kWhereAligned, the whole blocks of a range that starts
// at an aligned address and an aligned file offset are written with O_DIRECT, straight from the
// caller's memory to the disk: no copy into the page cache, no page-cache allocation, no
// writeback by the kernel's flusher threads; the rest (an unaligned header, a range's tail) is
// buffered. A file system that refuses O_DIRECT (EINVAL) gets buffered writes for the whole file;
// the bytes on disk are the same either way. Errors (exit 1) name the file and the system's
// reason.
Status write_file_durably(const std::string& path, const std::vector<ByteRange>& pieces,
                          artifact::Sha256* hasher = nullptr, DirectIo direct = DirectIo::kNever,
                          WriteReport* report = nullptr);
// The pieces with those that follow each other in memory joined into one (empty ones dropped).
std::vector<ByteRange> join_adjacent_ranges(const std::vector<ByteRange>& pieces);

// One file written piece by piece, for writers that interleave several files (a state saved as
// shards, each shard's next piece hashed together with the others' before it is written): the
// same writes as write_file_durably's (O_DIRECT for the aligned blocks where allowed, the rest
// buffered), the fsync and close in finish(). Destroyed unfinished, it closes the file.
class DurableFileWriter {
 public:
  static Expected<std::unique_ptr<DurableFileWriter>> create(const std::string& path,
                                                              DirectIo direct);
  ~DurableFileWriter();
  DurableFileWriter(const DurableFileWriter&) = delete;
  DurableFileWriter& operator=(const DurableFileWriter&) = delete;

  // Appends [data, data + size).
  Status write(const void* data, size_t size);
  // fsyncs and closes the file; `report`, when given, receives how the bytes went.
  Status finish(WriteReport* report = nullptr);

 private:
  struct Impl;
  explicit DurableFileWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

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
