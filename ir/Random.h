// The counter-based random numbers behind rng_bits / rng_uniform / rng_normal. Element i of a
// result depends only on (seed, stream, i), so any executor (interpreter, code generator, a
// sharded run computing a slice) reproduces the same values without shared state.
//
// The normal draw's logarithm and cosine are our own, in plain IEEE double arithmetic (no libm,
// no fused multiply-add), so the bits are the same on every platform and every executor can
// repeat them operation for operation: the CPU backend emits exactly this sequence
// (compiler/backend/cpu/Kernels.cpp, emit_rng). Change one, change the other.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <numbers>

namespace precast::ir {

// MurmurHash3's 64-bit finaliser: a bijection that mixes every input bit into every output bit.
inline uint64_t mix64(uint64_t z) {
  z ^= z >> 33;
  z *= 0xff51afd7ed558ccdULL;
  z ^= z >> 33;
  z *= 0xc4ceb9fe1a85ec53ULL;
  z ^= z >> 33;
  return z;
}

// random_bits in two parts, for loops that draw many elements of one (seed, stream): the key
// once, then one mix per element.
inline uint64_t random_key(uint32_t seed, uint32_t stream) {
  return mix64((static_cast<uint64_t>(seed) << 32) | stream);
}
inline uint32_t keyed_random_bits(uint64_t key, uint64_t index) {
  return static_cast<uint32_t>(mix64(key + index * 0x9e3779b97f4a7c15ULL) >> 32);
}
inline uint32_t random_bits(uint32_t seed, uint32_t stream, uint64_t index) {
  return keyed_random_bits(random_key(seed, stream), index);
}

// Uniform in [0, 1) with as many random bits as the result's format holds exactly below 1: 24
// for f32 and f64, 11 for f16, 8 for bf16 (a 24-bit draw would round up to 1.0 there).
inline int uniform_bits(bool is_bf16, bool is_f16) { return is_bf16 ? 8 : is_f16 ? 11 : 24; }
inline double random_uniform(uint32_t seed, uint32_t stream, uint64_t index, int bits = 24) {
  return std::ldexp(static_cast<double>(random_bits(seed, stream, index) >> (32 - bits)), -bits);
}

// Coefficients of fdlibm's log, sin and cos kernels (e_log.c, k_sin.c, k_cos.c; each within
// 1 ulp on its interval), evaluated here by Horner's rule.
inline constexpr double kLn2High = 0x1.62e42fee00000p-1;  // ln 2, top 32 bits: k * high is exact
inline constexpr double kLn2Low = 0x1.a39ef35793c76p-33;
// ln((1 + s) / (1 - s)) = 2s + s * z * P(z), z = s^2, |s| <= 0.1716.
inline constexpr double kLogCoefficients[] = {
    0x1.5555555555593p-1, 0x1.999999997fa04p-2, 0x1.2492494229359p-2, 0x1.c71c51d8e78afp-3,
    0x1.7466496cb03dep-3, 0x1.39a09d078c69fp-3, 0x1.2f112df3e5244p-3};
// sin x = x + x * z * P(z), z = x^2, |x| <= pi/4.
inline constexpr double kSinCoefficients[] = {-0x1.5555555555549p-3, 0x1.111111110f8a6p-7,
                                              -0x1.a01a019c161d5p-13, 0x1.71de357b1fe7dp-19,
                                              -0x1.ae5e68a2b9cebp-26, 0x1.5d93a5acfd57cp-33};
// cos x = 1 - z/2 + z * z * P(z), z = x^2, |x| <= pi/4.
inline constexpr double kCosCoefficients[] = {0x1.555555555554cp-5,  -0x1.6c16c16c15177p-10,
                                              0x1.a01a019cb1590p-16, -0x1.27e4f809c52adp-22,
                                              0x1.1ee9ebdb4b1c4p-29, -0x1.8fae9be8838d4p-37};
// One step of the 2^24 equal steps of a turn: 2 pi / 2^24 (pi's double scaled exactly).
inline constexpr double kTurnStep = std::numbers::pi * 0x1p-23;

// c[0] + z * (c[1] + z * (... + z * c[n-1])).
template <size_t N>
double horner(const double (&c)[N], double z) {
  double p = c[N - 1];
  for (size_t i = N - 1; i-- > 0;) p = p * z + c[i];
  return p;
}

// ln(a * 2^-24) for a in [1, 2^24], to within an ulp. fdlibm's method: a = 2^k m with m in
// [sqrt(2)/2, sqrt(2)], ln m = ln((1 + s) / (1 - s)) with s = f / (2 + f), f = m - 1 (exact).
inline double log_of_fraction(uint32_t a) {
  // a <= 2^24 and |k| < 64: signed 32-bit conversions give the same values and vectorise
  // where unsigned and 64-bit ones do not.
  uint64_t bits = std::bit_cast<uint64_t>(static_cast<double>(static_cast<int32_t>(a)));
  int32_t k = static_cast<int32_t>(bits >> 52) - 1023 - 24;
  uint64_t m_bits = (bits & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL;  // m in [1, 2)
  // Above sqrt(2), halve m (one less in the exponent field) and count it in k. Integer
  // arithmetic, not a branch: which way it goes is random per element.
  uint64_t halve = m_bits > std::bit_cast<uint64_t>(std::numbers::sqrt2) ? 1 : 0;
  double m = std::bit_cast<double>(m_bits - (halve << 52));
  k += static_cast<int32_t>(halve);
  double f = m - 1.0;
  double s = f / (2.0 + f);
  double z = s * s;
  double r = z * horner(kLogCoefficients, z);
  double half_f_squared = 0.5 * f * f;
  double dk = static_cast<double>(k);
  return dk * kLn2High - ((half_f_squared - (s * (half_f_squared + r) + dk * kLn2Low)) - f);
}

// sin x and cos x for |x| <= pi/4 (fdlibm's kernels, the tail argument zero).
inline double sin_kernel(double x) {
  double z = x * x;
  return x + z * x * horner(kSinCoefficients, z);
}
inline double cos_kernel(double x) {
  double z = x * x;
  double r = z * horner(kCosCoefficients, z);
  double half_z = 0.5 * z;
  double w = 1.0 - half_z;
  return w + (((1.0 - w) - half_z) + z * r);
}

// cos(2 pi b 2^-24) for b in [0, 2^24), to within an ulp. The reduction is exact integer
// arithmetic: quadrant q = b / 2^22, then the angle phi in the quadrant is folded to [0, pi/4]
// (phi > pi/4 becomes pi/2 - phi, swapping sin and cos).
inline double cos_of_turn_fraction(uint32_t b) {
  uint32_t quadrant = b >> 22;
  uint32_t steps = b & 0x3fffffu;
  uint32_t fold = steps > 0x200000u ? 1u : 0u;
  steps = fold != 0 ? 0x400000u - steps : steps;
  double x = static_cast<double>(static_cast<int32_t>(steps)) * kTurnStep;  // steps <= 2^22
  double sin_x = sin_kernel(x), cos_x = cos_kernel(x);
  // cos(q pi/2 + phi) = cos phi, -sin phi, -cos phi, sin phi for q = 0..3. Chosen with bit
  // operations, not branches (the choice is a coin flip per element): sin where q is odd
  // xor folded, negated where q is 1 or 2 (bit 0 of q xor q/2).
  uint64_t use_sin = uint64_t{0} - static_cast<uint64_t>((quadrant & 1u) ^ fold);
  uint64_t negate = static_cast<uint64_t>((quadrant ^ (quadrant >> 1)) & 1u);
  uint64_t v = (std::bit_cast<uint64_t>(sin_x) & use_sin) | (std::bit_cast<uint64_t>(cos_x) & ~use_sin);
  return std::bit_cast<double>(v ^ (negate << 63));
}

// Standard normal by Box-Muller from draws 2i and 2i+1: sqrt(-2 ln u1) cos(2 pi u2) with
// u1 = a 2^-24 in (0, 1] (keeps the log finite) and u2 = b 2^-24 in [0, 1).
inline double normal_of_bits(uint32_t a, uint32_t b) {
  return std::sqrt(-2.0 * log_of_fraction(a)) * cos_of_turn_fraction(b);
}
inline uint32_t normal_log_operand(uint64_t key, uint64_t index) {
  return (keyed_random_bits(key, 2 * index) >> 8) + 1;
}
inline uint32_t normal_cos_operand(uint64_t key, uint64_t index) {
  return keyed_random_bits(key, 2 * index + 1) >> 8;
}
inline double random_normal(uint32_t seed, uint32_t stream, uint64_t index) {
  uint64_t key = random_key(seed, stream);
  return normal_of_bits(normal_log_operand(key, index), normal_cos_operand(key, index));
}

// A normal draw truncated to [-bound, bound] by redrawing: attempt a of element i is the normal
// draw of index i + a * 2^40 (so attempts never share counters with other elements), the first
// inside the bound is kept, and after kTruncationAttempts the last is clamped to the bound (at
// bound 2: a chance of 0.0455^8, about 2e-11, per element).
inline constexpr int kTruncationAttempts = 8;
inline constexpr double kMinTruncation = 1.5;  // below this, clamping would not be negligible
inline constexpr uint64_t kTruncationAttemptStride = uint64_t{1} << 40;
inline double random_truncated_normal(uint32_t seed, uint32_t stream, uint64_t index,
                                      double bound) {
  double z = 0.0;
  for (int a = 0; a < kTruncationAttempts; ++a) {
    z = random_normal(seed, stream, index + static_cast<uint64_t>(a) * kTruncationAttemptStride);
    if (std::fabs(z) <= bound) return z;
  }
  return z < 0 ? -bound : bound;
}

}  // namespace precast::ir
