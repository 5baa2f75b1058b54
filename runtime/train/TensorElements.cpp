#include "runtime/train/TensorElements.h"

#include <cmath>
#include <cstring>

namespace precast::runtime {

int64_t dtype_bytes(const std::string& dtype) {
  if (dtype == "f64") return 8;
  if (dtype == "f32" || dtype == "s32" || dtype == "u32") return 4;
  if (dtype == "bf16" || dtype == "f16") return 2;
  if (dtype == "pred") return 1;
  return 0;
}

int64_t elements(const artifact::TensorSignature& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  return n;
}

uint16_t to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

float from_bf16(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void store(void* base, int64_t index, const std::string& dtype, double v) {
  char* p = static_cast<char*>(base);
  if (dtype == "f32") {
    reinterpret_cast<float*>(p)[index] = static_cast<float>(v);
  } else if (dtype == "f64") {
    reinterpret_cast<double*>(p)[index] = v;
  } else if (dtype == "bf16") {
    reinterpret_cast<uint16_t*>(p)[index] = to_bf16(static_cast<float>(v));
  } else if (dtype == "f16") {
    reinterpret_cast<_Float16*>(p)[index] = static_cast<_Float16>(v);
  } else if (dtype == "s32") {
    reinterpret_cast<int32_t*>(p)[index] = static_cast<int32_t>(v);
  } else if (dtype == "u32") {
    reinterpret_cast<uint32_t*>(p)[index] = static_cast<uint32_t>(v);
  } else if (dtype == "pred") {
    reinterpret_cast<uint8_t*>(p)[index] = v != 0;
  }
}

double load(const void* base, const std::string& dtype) {
  if (dtype == "f32") return *static_cast<const float*>(base);
  if (dtype == "f64") return *static_cast<const double*>(base);
  if (dtype == "bf16") return from_bf16(*static_cast<const uint16_t*>(base));
  if (dtype == "f16") return static_cast<double>(*static_cast<const _Float16*>(base));
  if (dtype == "s32") return *static_cast<const int32_t*>(base);
  if (dtype == "u32") return *static_cast<const uint32_t*>(base);
  return *static_cast<const uint8_t*>(base);
}

double rounded(const std::string& dtype, double v) {
  alignas(8) unsigned char cell[8] = {};
  store(cell, 0, dtype, v);
  return load(cell, dtype);
}

}  // namespace precast::runtime
