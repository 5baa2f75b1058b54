#include "runtime/data/Fingerprint.h"

#include <fmt/format.h>
#include <nmmintrin.h>

#include <array>
#include <cstring>

namespace precast::data {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // CRC-32C, reflected

// One entry per byte value: the CRC of that byte alone, bit by bit.
std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1) ? (crc >> 1) ^ kPolynomial : crc >> 1;
    table[byte] = crc;
  }
  return table;
}

// Eight bytes per CRC32 instruction; the same polynomial and bit order as the table.
__attribute__((target("sse4.2"))) uint32_t crc_instruction(uint32_t crc, const unsigned char* p,
                                                          size_t size) {
  uint64_t wide = crc;
  for (; size >= 8; size -= 8, p += 8) {
    uint64_t word = 0;
    std::memcpy(&word, p, 8);
    wide = _mm_crc32_u64(wide, word);
  }
  crc = static_cast<uint32_t>(wide);
  for (; size > 0; --size, ++p) crc = _mm_crc32_u8(crc, *p);
  return crc;
}

bool has_crc_instruction() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}

}  // namespace

uint32_t content_crc32c_portable(const void* data, size_t size) {
  static const std::array<uint32_t, 256> table = make_table();
  const auto* bytes = static_cast<const unsigned char*>(data);
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ bytes[i]) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t content_crc32c(const void* data, size_t size) {
  if (!has_crc_instruction()) return content_crc32c_portable(data, size);
  return crc_instruction(0xFFFFFFFFu, static_cast<const unsigned char*>(data), size) ^
         0xFFFFFFFFu;
}

FileFingerprint fingerprint_of(const std::string& path, const void* data, size_t size) {
  return FileFingerprint{path, size, content_crc32c(data, size)};
}

std::string fingerprint_text(uint32_t crc32c, uint64_t bytes) {
  return fmt::format("crc32c {:08x} of {} bytes", crc32c, bytes);
}

}  // namespace precast::data
