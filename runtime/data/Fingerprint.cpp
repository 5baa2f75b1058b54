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

// Eight bytes per CRC32 instruction; the same polynomial and bit order as the table. `crc` is
// the running state (no inversions here).
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

// The instruction's latency is three cycles and its throughput one a cycle, so three streams
// over three consecutive parts of a block run in the time of one. CRC is linear: the state
// after A then B is shift(state after A, |B|) ^ crc(0, B), where shift feeds |B| zero bytes.
constexpr size_t kStreamBytes = 8192;  // each stream's part of a block

// shift(state, kStreamBytes) as four byte tables (linear in the state's bits).
struct ShiftTables {
  std::array<std::array<uint32_t, 256>, 4> table{};
};

__attribute__((target("sse4.2"))) ShiftTables make_shift_tables() {
  static const std::array<unsigned char, kStreamBytes> zeros{};
  std::array<uint32_t, 32> bit{};
  for (int b = 0; b < 32; ++b) bit[b] = crc_instruction(uint32_t{1} << b, zeros.data(), zeros.size());
  ShiftTables t;
  for (int k = 0; k < 4; ++k) {
    for (uint32_t v = 0; v < 256; ++v) {
      uint32_t out = 0;
      for (int b = 0; b < 8; ++b) {
        if (v & (1u << b)) out ^= bit[8 * k + b];
      }
      t.table[k][v] = out;
    }
  }
  return t;
}

uint32_t shift(const ShiftTables& t, uint32_t crc) {
  return t.table[0][crc & 0xFF] ^ t.table[1][(crc >> 8) & 0xFF] ^ t.table[2][(crc >> 16) & 0xFF] ^
         t.table[3][crc >> 24];
}

__attribute__((target("sse4.2"))) uint32_t crc_three_streams(uint32_t crc, const unsigned char* p,
                                                            size_t size) {
  static const ShiftTables tables = make_shift_tables();
  for (; size >= 3 * kStreamBytes; size -= 3 * kStreamBytes, p += 3 * kStreamBytes) {
    uint64_t a = crc, b = 0, c = 0;
    const unsigned char* q = p;
    for (size_t i = 0; i < kStreamBytes; i += 8, q += 8) {
      uint64_t wa = 0, wb = 0, wc = 0;
      std::memcpy(&wa, q, 8);
      std::memcpy(&wb, q + kStreamBytes, 8);
      std::memcpy(&wc, q + 2 * kStreamBytes, 8);
      a = _mm_crc32_u64(a, wa);
      b = _mm_crc32_u64(b, wb);
      c = _mm_crc32_u64(c, wc);
    }
    crc = shift(tables, shift(tables, static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b)) ^
          static_cast<uint32_t>(c);
  }
  return crc_instruction(crc, p, size);
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
  return crc_three_streams(0xFFFFFFFFu, static_cast<const unsigned char*>(data), size) ^
         0xFFFFFFFFu;
}

FileFingerprint fingerprint_of(const std::string& path, const void* data, size_t size) {
  return FileFingerprint{path, size, content_crc32c(data, size)};
}

std::string fingerprint_text(uint32_t crc32c, uint64_t bytes) {
  return fmt::format("crc32c {:08x} of {} bytes", crc32c, bytes);
}

}  // namespace precast::data
