// The counter-based random numbers behind rng_bits / rng_uniform / rng_normal. Element i of a
// result depends only on (seed, stream, i), so any executor (interpreter, code generator, a
// sharded run computing a slice) reproduces the same values without shared state.
#pragma once

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

inline uint32_t random_bits(uint32_t seed, uint32_t stream, uint64_t index) {
  uint64_t key = mix64((static_cast<uint64_t>(seed) << 32) | stream);
  return static_cast<uint32_t>(mix64(key + index * 0x9e3779b97f4a7c15ULL) >> 32);
}

// Uniform in [0, 1) with 24 random bits (exact in every float format we have).
inline double random_uniform(uint32_t seed, uint32_t stream, uint64_t index) {
  return static_cast<double>(random_bits(seed, stream, index) >> 8) * 0x1p-24;
}

// Standard normal by Box-Muller from draws 2i and 2i+1; u1 in (0, 1] keeps the log finite.
inline double random_normal(uint32_t seed, uint32_t stream, uint64_t index) {
  double u1 = static_cast<double>((random_bits(seed, stream, 2 * index) >> 8) + 1) * 0x1p-24;
  double u2 = random_uniform(seed, stream, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace precast::ir
