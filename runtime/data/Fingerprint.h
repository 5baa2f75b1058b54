// Role: a dataset file's content fingerprint, recorded in every checkpoint (the "files" list of
// metadata.json's "data") so that a resume onto other data with the same document and token
// counts is refused. The fingerprint is the CRC-32C of the file's whole bytes, computed while the
// file is read at start-up (the reader touches every token anyway, to check ids against
// vocab_size): with the CPU's CRC32 instruction (SSE4.2), three streams at once, it costs about
// a tenth of that pass (0.07 CPU s per GB, benchmarks/README.md).
// Not a cryptographic hash: it tells datasets apart, it does not defend against forgery.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace precast::data {

struct FileFingerprint {
  std::string path;
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
};

// CRC-32C (Castagnoli: reflected polynomial 0x82F63B78, initial and final XOR 0xFFFFFFFF) of
// `size` bytes: content_crc32c("123456789", 9) == 0xE3069283. The CRC32 instruction where the
// CPU has SSE4.2 (three interleaved streams per 24 KiB block), else a table (the same values).
uint32_t content_crc32c(const void* data, size_t size);
// The table method alone (tests hold both methods to the same values).
uint32_t content_crc32c_portable(const void* data, size_t size);

// The fingerprint of `size` bytes read from `path`.
FileFingerprint fingerprint_of(const std::string& path, const void* data, size_t size);

// "crc32c e3069283 of 9 bytes", for messages and metadata.
std::string fingerprint_text(uint32_t crc32c, uint64_t bytes);

}  // namespace precast::data
