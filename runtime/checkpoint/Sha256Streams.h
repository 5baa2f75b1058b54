// Role: SHA-256 (FIPS 180-4) of several independent byte streams at once, for checkpoints split
// into several files (each file's digest is an ordinary SHA-256, as `sha256sum` gives). One
// stream is serial (each 64-byte block needs the previous block's state), so a single file hashes
// no faster than one core's SHA extensions (~1.4-1.9 GB/s here); sixteen streams advance together
// in the lanes of AVX-512 registers (one 32-bit lane per stream), about 2.4x the SHA extensions'
// throughput per CPU second on this host (benchmarks/README.md, "Hashing several files at once").
// The kernel is chosen at run time from what the CPU has; every kernel gives the same digests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "compiler/artifact/Sha256.h"

namespace precast::checkpoint {

// How 64-byte blocks are compressed.
enum class Sha256Kernel {
  kPortable,  // plain C++, one stream at a time
  kShaNi,     // the x86 SHA extensions, one stream at a time
  kAvx512x16  // AVX-512: sixteen streams in the lanes of one register (single streams: the best
              // one-stream kernel the CPU has)
};

// The fastest kernel this CPU (and its operating system's saved register state) supports.
Sha256Kernel best_sha256_kernel();
// Whether this CPU can run `kernel`.
bool sha256_kernel_supported(Sha256Kernel kernel);
const char* sha256_kernel_name(Sha256Kernel kernel);

// `count` SHA-256 streams. update() feeds one piece to each stream (any sizes, empty allowed);
// the blocks the streams have in common are compressed together (sixteen at a time with
// kAvx512x16), the rest one stream at a time. Feeding equal-sized pieces to sixteen (or more)
// streams keeps every lane busy. finish() pads each stream and returns its digest, in order.
class Sha256Streams {
 public:
  // `kernel` must be supported (sha256_kernel_supported); the default picks the best.
  explicit Sha256Streams(size_t count, Sha256Kernel kernel = best_sha256_kernel());

  // pieces[i] goes to stream i; pieces.size() must equal the stream count.
  void update(const std::vector<std::string_view>& pieces);
  // One stream alone.
  void update_one(size_t stream, std::string_view piece);
  std::vector<artifact::Sha256Digest> finish();
  size_t count() const { return streams_.size(); }

 private:
  struct Stream {
    uint32_t state[8];
    uint8_t partial[64];  // bytes fed but not yet compressed (fewer than a block)
    size_t partial_bytes = 0;
    uint64_t total_bytes = 0;
  };
  // Fills a stream's partial block from the front of `piece` (compressing it when full); the
  // rest of the piece, starting at a block boundary of the stream.
  std::string_view absorb_partial(Stream& s, std::string_view piece);
  void compress_one(Stream& s, const uint8_t* blocks, size_t n);

  Sha256Kernel kernel_;
  std::vector<Stream> streams_;
};

}  // namespace precast::checkpoint
