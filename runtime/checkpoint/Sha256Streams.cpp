#include "runtime/checkpoint/Sha256Streams.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <stdexcept>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace precast::checkpoint {
namespace {

// FIPS 180-4 §4.2.2: the first 32 bits of the fractional parts of the cube roots of the first 64
// primes.
alignas(64) constexpr uint32_t kRoundConstants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

// FIPS 180-4 §5.3.3: the initial hash value.
constexpr uint32_t kInitialState[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                       0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

// Fewer streams than this sharing blocks go one at a time: a sixteen-lane pass costs the same
// with empty lanes, and one lane of it is ~2.4x slower than the SHA extensions alone.
constexpr size_t kMinLanesForWideKernel = 8;
constexpr size_t kLanes = 16;

uint32_t rotr(uint32_t x, int n) {
  return (x >> n) | (x << (32 - n));
}

uint32_t load_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// FIPS 180-4 §6.2.2, one block at a time.
void compress_portable(uint32_t* state, const uint8_t* p, size_t blocks) {
  for (size_t b = 0; b < blocks; ++b, p += 64) {
    uint32_t w[64];
    for (int t = 0; t < 16; ++t) w[t] = load_be32(p + 4 * t);
    for (int t = 16; t < 64; ++t) {
      uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
      uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
      w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = state[0], bb = state[1], c = state[2], d = state[3];
    uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
    for (int t = 0; t < 64; ++t) {
      uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) +
                    kRoundConstants[t] + w[t];
      uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & bb) ^ (a & c) ^ (bb & c));
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = bb;
      bb = a;
      a = t1 + t2;
    }
    state[0] += a;
    state[1] += bb;
    state[2] += c;
    state[3] += d;
    state[4] += e;
    state[5] += f;
    state[6] += g;
    state[7] += h;
  }
}

#if defined(__x86_64__)

// The SHA extensions keep the state as two registers, (A, B, E, F) and (C, D, G, H) from the
// highest lane down; sha256rnds2 does two rounds, sha256msg1/msg2 the two halves of the message
// schedule (Intel's SHA extensions reference).
__attribute__((target("sha,sse4.1,ssse3"))) void compress_sha_ni(uint32_t* state, const uint8_t* p,
                                                                 size_t blocks) {
  const __m128i byte_swap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  __m128i dcba = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state));
  __m128i hgfe = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state + 4));
  __m128i cdab = _mm_shuffle_epi32(dcba, 0xB1);
  __m128i efgh = _mm_shuffle_epi32(hgfe, 0x1B);
  __m128i abef = _mm_alignr_epi8(cdab, efgh, 8);
  __m128i cdgh = _mm_blend_epi16(efgh, cdab, 0xF0);
  for (size_t b = 0; b < blocks; ++b, p += 64) {
    const __m128i saved_abef = abef, saved_cdgh = cdgh;
    __m128i m[4];
    for (int q = 0; q < 4; ++q) {
      m[q] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * q)),
                              byte_swap);
    }
    for (int r = 0; r < 16; ++r) {  // four rounds each
      __m128i w = m[r & 3];
      if (r >= 4) {
        // W[t] for t = 4r..4r+3 from W[t-16..t-13] (m[r&3]), W[t-15..t-12], W[t-7..t-4] and
        // W[t-2..t-1].
        __m128i partial = _mm_add_epi32(_mm_sha256msg1_epu32(m[r & 3], m[(r + 1) & 3]),
                                        _mm_alignr_epi8(m[(r + 3) & 3], m[(r + 2) & 3], 4));
        w = _mm_sha256msg2_epu32(partial, m[(r + 3) & 3]);
        m[r & 3] = w;
      }
      const __m128i wk = _mm_add_epi32(
          w, _mm_load_si128(reinterpret_cast<const __m128i*>(kRoundConstants + 4 * r)));
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);
      abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(wk, 0x0E));
    }
    abef = _mm_add_epi32(abef, saved_abef);
    cdgh = _mm_add_epi32(cdgh, saved_cdgh);
  }
  __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
  __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state), _mm_blend_epi16(feba, dchg, 0xF0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state + 4), _mm_alignr_epi8(dchg, feba, 8));
}

// GCC 12's AVX-512 intrinsics start several results from _mm512_undefined_epi32(), a
// self-initialised variable that -Wuninitialized reports where they are inlined at -O3 (a
// false positive in the compiler's own header); silenced for this one function.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// Sixteen streams, one per 32-bit lane: the portable rounds with each operation on sixteen
// words. Each block's message words are gathered across the lanes from a small transposing
// buffer; the three-input xors and the choose/majority functions are single ternary-logic ops.
__attribute__((target("avx512f,avx512bw"))) void compress_avx512_x16(uint32_t* const* states,
                                                                     const uint8_t* const* data,
                                                                     size_t blocks) {
  alignas(64) uint32_t lanes[kLanes];
  __m512i s[8];
  for (int i = 0; i < 8; ++i) {
    for (size_t l = 0; l < kLanes; ++l) lanes[l] = states[l][i];
    s[i] = _mm512_load_si512(lanes);
  }
  const __m512i byte_swap =
      _mm512_broadcast_i32x4(_mm_set_epi8(12, 13, 14, 15, 8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3));
  // Word t of lane l sits at blocks_by_lane[l * 16 + t].
  alignas(64) uint32_t blocks_by_lane[kLanes * 16];
  const __m512i lane_index =
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         _mm512_set1_epi32(16));
  constexpr int kXor3 = 0x96, kChoose = 0xCA, kMajority = 0xE8;  // ternary-logic truth tables
  for (size_t b = 0; b < blocks; ++b) {
    for (size_t l = 0; l < kLanes; ++l) {
      _mm512_store_si512(blocks_by_lane + 16 * l, _mm512_loadu_si512(data[l] + 64 * b));
    }
    __m512i w[16];
    for (int t = 0; t < 16; ++t) {
      w[t] =
          _mm512_shuffle_epi8(_mm512_i32gather_epi32(lane_index, blocks_by_lane + t, 4), byte_swap);
    }
    __m512i a = s[0], bb = s[1], c = s[2], d = s[3], e = s[4], f = s[5], g = s[6], h = s[7];
    for (int t = 0; t < 64; ++t) {
      __m512i wt = w[t & 15];
      if (t >= 16) {
        const __m512i w15 = w[(t - 15) & 15], w2 = w[(t - 2) & 15];
        const __m512i s0 = _mm512_ternarylogic_epi32(
            _mm512_ror_epi32(w15, 7), _mm512_ror_epi32(w15, 18), _mm512_srli_epi32(w15, 3), kXor3);
        const __m512i s1 = _mm512_ternarylogic_epi32(
            _mm512_ror_epi32(w2, 17), _mm512_ror_epi32(w2, 19), _mm512_srli_epi32(w2, 10), kXor3);
        wt = _mm512_add_epi32(_mm512_add_epi32(wt, s0), _mm512_add_epi32(w[(t - 7) & 15], s1));
        w[t & 15] = wt;
      }
      const __m512i sigma1 = _mm512_ternarylogic_epi32(
          _mm512_ror_epi32(e, 6), _mm512_ror_epi32(e, 11), _mm512_ror_epi32(e, 25), kXor3);
      const __m512i choose = _mm512_ternarylogic_epi32(e, f, g, kChoose);
      const __m512i t1 = _mm512_add_epi32(
          _mm512_add_epi32(h, sigma1),
          _mm512_add_epi32(
              choose,
              _mm512_add_epi32(wt, _mm512_set1_epi32(static_cast<int>(kRoundConstants[t])))));
      const __m512i sigma0 = _mm512_ternarylogic_epi32(
          _mm512_ror_epi32(a, 2), _mm512_ror_epi32(a, 13), _mm512_ror_epi32(a, 22), kXor3);
      const __m512i majority = _mm512_ternarylogic_epi32(a, bb, c, kMajority);
      h = g;
      g = f;
      f = e;
      e = _mm512_add_epi32(d, t1);
      d = c;
      c = bb;
      bb = a;
      a = _mm512_add_epi32(t1, _mm512_add_epi32(sigma0, majority));
    }
    s[0] = _mm512_add_epi32(s[0], a);
    s[1] = _mm512_add_epi32(s[1], bb);
    s[2] = _mm512_add_epi32(s[2], c);
    s[3] = _mm512_add_epi32(s[3], d);
    s[4] = _mm512_add_epi32(s[4], e);
    s[5] = _mm512_add_epi32(s[5], f);
    s[6] = _mm512_add_epi32(s[6], g);
    s[7] = _mm512_add_epi32(s[7], h);
  }
  for (int i = 0; i < 8; ++i) {
    _mm512_store_si512(lanes, s[i]);
    for (size_t l = 0; l < kLanes; ++l) states[l][i] = lanes[l];
  }
}
#pragma GCC diagnostic pop

struct CpuFeatures {
  bool sha_ni = false;
  bool avx512 = false;  // AVX-512 F and BW, with the operating system saving the registers
};

CpuFeatures detect_cpu_features() {
  CpuFeatures out;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return out;
  const bool ssse3 = (ecx & (1u << 9)) != 0, sse41 = (ecx & (1u << 19)) != 0;
  const bool osxsave = (ecx & (1u << 27)) != 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return out;
  out.sha_ni = ssse3 && sse41 && (ebx & (1u << 29)) != 0;
  const bool avx512_cpu = (ebx & (1u << 16)) != 0 && (ebx & (1u << 30)) != 0;
  if (avx512_cpu && osxsave) {
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    // XMM, YMM, opmask, the upper halves of ZMM0-15 and ZMM16-31 (XCR0 bits 1, 2, 5, 6, 7).
    out.avx512 = (lo & 0xE6u) == 0xE6u;
  }
  return out;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect_cpu_features();
  return features;
}

#endif  // __x86_64__

}  // namespace

bool sha256_kernel_supported(Sha256Kernel kernel) {
  switch (kernel) {
    case Sha256Kernel::kPortable:
      return true;
#if defined(__x86_64__)
    case Sha256Kernel::kShaNi:
      return cpu_features().sha_ni;
    case Sha256Kernel::kAvx512x16:
      return cpu_features().avx512;
#else
    case Sha256Kernel::kShaNi:
    case Sha256Kernel::kAvx512x16:
      return false;
#endif
  }
  return false;
}

Sha256Kernel best_sha256_kernel() {
  if (sha256_kernel_supported(Sha256Kernel::kAvx512x16)) return Sha256Kernel::kAvx512x16;
  if (sha256_kernel_supported(Sha256Kernel::kShaNi)) return Sha256Kernel::kShaNi;
  return Sha256Kernel::kPortable;
}

const char* sha256_kernel_name(Sha256Kernel kernel) {
  switch (kernel) {
    case Sha256Kernel::kPortable:
      return "portable";
    case Sha256Kernel::kShaNi:
      return "sha-ni";
    case Sha256Kernel::kAvx512x16:
      return "avx512x16";
  }
  return "?";
}

Sha256Streams::Sha256Streams(size_t count, Sha256Kernel kernel) : kernel_(kernel), streams_(count) {
  if (!sha256_kernel_supported(kernel)) {
    throw std::invalid_argument(std::string("SHA-256 kernel ") + sha256_kernel_name(kernel) +
                                " is not supported by this CPU");
  }
  for (Stream& s : streams_) std::memcpy(s.state, kInitialState, sizeof(kInitialState));
}

void Sha256Streams::compress_one(Stream& s, const uint8_t* blocks, size_t n) {
  if (n == 0) return;
#if defined(__x86_64__)
  if (kernel_ != Sha256Kernel::kPortable && cpu_features().sha_ni) {
    compress_sha_ni(s.state, blocks, n);
    return;
  }
#endif
  compress_portable(s.state, blocks, n);
}

std::string_view Sha256Streams::absorb_partial(Stream& s, std::string_view piece) {
  if (s.partial_bytes == 0) return piece;
  size_t take = std::min(piece.size(), 64 - s.partial_bytes);
  std::memcpy(s.partial + s.partial_bytes, piece.data(), take);
  s.partial_bytes += take;
  if (s.partial_bytes == 64) {
    compress_one(s, s.partial, 1);
    s.partial_bytes = 0;
  }
  return piece.substr(take);
}

void Sha256Streams::update_one(size_t stream, std::string_view piece) {
  std::vector<std::string_view> pieces(streams_.size());
  pieces[stream] = piece;
  update(pieces);
}

void Sha256Streams::update(const std::vector<std::string_view>& pieces) {
  if (pieces.size() != streams_.size()) {
    throw std::invalid_argument("Sha256Streams::update: one piece per stream");
  }
  // Each stream's whole blocks, after its partial block is filled.
  std::vector<std::string_view> rest(streams_.size());
  for (size_t i = 0; i < streams_.size(); ++i) {
    streams_[i].total_bytes += pieces[i].size();
    rest[i] = absorb_partial(streams_[i], pieces[i]);
  }
  auto blocks_left = [&](size_t i) { return rest[i].size() / 64; };
  auto consume = [&](size_t i, size_t blocks) { rest[i] = rest[i].substr(64 * blocks); };
#if defined(__x86_64__)
  if (kernel_ == Sha256Kernel::kAvx512x16) {
    // Sixteen streams at a time, those with the most blocks left first, for as many blocks as
    // the shortest of them has; empty lanes repeat lane 0's input into a discarded state.
    for (;;) {
      std::vector<size_t> order(streams_.size());
      std::iota(order.begin(), order.end(), size_t{0});
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t x, size_t y) { return blocks_left(x) > blocks_left(y); });
      size_t group = 0;
      while (group < std::min(order.size(), kLanes) && blocks_left(order[group]) > 0) ++group;
      if (group < kMinLanesForWideKernel) break;
      const size_t blocks = blocks_left(order[group - 1]);
      uint32_t discarded[kLanes][8];
      uint32_t* states[kLanes];
      const uint8_t* data[kLanes];
      for (size_t l = 0; l < kLanes; ++l) {
        const size_t i = order[l < group ? l : 0];
        states[l] = l < group ? streams_[i].state : discarded[l];
        if (l >= group) std::memcpy(discarded[l], streams_[i].state, sizeof(discarded[l]));
        data[l] = reinterpret_cast<const uint8_t*>(rest[i].data());
      }
      compress_avx512_x16(states, data, blocks);
      for (size_t l = 0; l < group; ++l) consume(order[l], blocks);
    }
  }
#endif
  for (size_t i = 0; i < streams_.size(); ++i) {
    Stream& s = streams_[i];
    const size_t blocks = blocks_left(i);
    compress_one(s, reinterpret_cast<const uint8_t*>(rest[i].data()), blocks);
    consume(i, blocks);
    if (rest[i].empty()) continue;  // (a partial block still filling has nothing left here)
    std::memcpy(s.partial, rest[i].data(), rest[i].size());
    s.partial_bytes = rest[i].size();
  }
}

std::vector<artifact::Sha256Digest> Sha256Streams::finish() {
  std::vector<artifact::Sha256Digest> out;
  out.reserve(streams_.size());
  for (Stream& s : streams_) {
    // FIPS 180-4 §5.1.1: a 1 bit, zeros up to 56 bytes mod 64, the length in bits, big-endian.
    uint8_t tail[128] = {};
    std::memcpy(tail, s.partial, s.partial_bytes);
    tail[s.partial_bytes] = 0x80;
    const size_t tail_bytes = s.partial_bytes + 1 + 8 <= 64 ? 64 : 128;
    const uint64_t bits = s.total_bytes * 8;
    for (int k = 0; k < 8; ++k) tail[tail_bytes - 1 - k] = static_cast<uint8_t>(bits >> (8 * k));
    compress_one(s, tail, tail_bytes / 64);
    artifact::Sha256Digest digest{};
    for (int i = 0; i < 8; ++i) {
      for (int k = 0; k < 4; ++k)
        digest[4 * i + k] = static_cast<uint8_t>(s.state[i] >> (24 - 8 * k));
    }
    out.push_back(digest);
  }
  return out;
}

}  // namespace precast::checkpoint
