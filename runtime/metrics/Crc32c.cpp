#include "runtime/metrics/Crc32c.h"

#include "runtime/data/Fingerprint.h"

namespace precast::runtime {

// One CRC-32C in the runtime: the data pipeline's (the CRC32 instruction in three streams where
// the CPU has SSE4.2, else a table), which gives the same values.
uint32_t crc32c(const void* data, size_t size) {
  return data::content_crc32c(data, size);
}

uint32_t masked_crc32c(const void* data, size_t size) {
  uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

}  // namespace precast::runtime
