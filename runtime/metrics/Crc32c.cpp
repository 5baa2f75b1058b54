#include "runtime/metrics/Crc32c.h"

#include <array>

namespace precast::runtime {
namespace {

// One table entry per byte value: the CRC of that byte alone, bit by bit (Sarwate's method).
std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    table[byte] = crc;
  }
  return table;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  static const std::array<uint32_t, 256> table = make_table();
  const auto* bytes = static_cast<const unsigned char*>(data);
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ bytes[i]) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

}  // namespace precast::runtime
