// Role: reading and writing single elements of a step's buffers by IR dtype name ("f32",
// "bf16", ...), as the runtime does for scalars, metrics, the synthetic batch and initialisers.
#pragma once

#include <cstdint>
#include <string>

#include "compiler/artifact/Artifact.h"

namespace precast::runtime {

// Bytes of one element of an IR dtype name ("f32", "bf16", ...); 0 when unknown.
int64_t dtype_bytes(const std::string& dtype);
// Elements of a tensor (the product of its per-device dims).
int64_t elements(const artifact::TensorSignature& t);
// Bytes of a tensor's buffer.
inline int64_t tensor_bytes(const artifact::TensorSignature& t) {
  return elements(t) * dtype_bytes(t.dtype);
}

// bfloat16 <-> float, rounding to nearest even (NaN stays NaN).
uint16_t to_bf16(float f);
float from_bf16(uint16_t h);

// Writes v, converted to `dtype`, as element `index` of `base`; an unknown dtype writes nothing.
void store(void* base, int64_t index, const std::string& dtype, double v);
// The element at `base` as a double.
double load(const void* base, const std::string& dtype);
// v rounded to the dtype, as a double.
double rounded(const std::string& dtype, double v);

}  // namespace precast::runtime
