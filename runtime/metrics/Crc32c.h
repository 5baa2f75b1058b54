// Role: CRC-32C (Castagnoli), the checksum TFRecord framing puts around each record of a
// TensorBoard event file, and TensorFlow's masked form of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace precast::runtime {

// CRC-32C of `size` bytes (reflected polynomial 0x82F63B78, initial and final XOR 0xFFFFFFFF):
// crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t size);
inline uint32_t crc32c(std::string_view bytes) {
  return crc32c(bytes.data(), bytes.size());
}

// TensorFlow's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8, so that a CRC of data that
// itself holds CRCs does not degenerate.
uint32_t masked_crc32c(const void* data, size_t size);

}  // namespace precast::runtime
