// SHA-256 (FIPS 180-4), written here so the artifact library needs no crypto dependency. It
// guards the artifact payload against damage; it is not used for anything security-related.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace precast::artifact {

using Sha256Digest = std::array<uint8_t, 32>;

// Incremental hasher: update() any number of times, then finish() once.
class Sha256 {
 public:
  Sha256();

  void update(const void* data, size_t size);
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }

  // Pads the message and returns the digest; the hasher must not be used afterwards.
  Sha256Digest finish();

 private:
  void compress_block(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> block_{};
  size_t block_used_ = 0;       // bytes waiting in block_
  uint64_t message_bytes_ = 0;  // total length, for the padding's length field
};

// One-shot digest of a byte string.
Sha256Digest sha256(std::string_view bytes);

// Lower-case hex, 64 characters.
std::string to_hex(const Sha256Digest& digest);

}  // namespace precast::artifact
