// Role: the safetensors format, written and read here: an 8-byte little-endian header length, a
// JSON header mapping each tensor name to {dtype, shape, data_offsets} (offsets into the data
// that follows, which the tensors cover without holes), then the raw little-endian data. Dtypes
// are the IR's: f64 F64, f32 F32, bf16 BF16, f16 F16, s32 I32, u32 U32, pred BOOL.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/support/Error.h"

namespace precast::checkpoint {

// A tensor to write: its bytes stay owned by the caller.
struct TensorView {
  std::string name;
  std::string dtype;  // IR dtype name
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

// A tensor read back.
struct Tensor {
  std::string name;
  std::string dtype;  // IR dtype name
  std::vector<int64_t> shape;
  std::string bytes;
};

// "F32" for "f32", ...; empty when the IR dtype has no safetensors name.
std::string_view safetensors_dtype(std::string_view ir_dtype);
// "f32" for "F32", ...; empty when Precast has no IR dtype for it.
std::string_view ir_dtype_from_safetensors(std::string_view dtype);
// Bytes of one element of a safetensors dtype; 0 when unknown.
int64_t safetensors_element_bytes(std::string_view dtype);

// Where a file's tensor data starts: a multiple of this (the header padded with spaces).
inline constexpr uint64_t kSafetensorsDataAlignment = 4096;

// The file's bytes as pieces: the header (length + JSON, padded with spaces so that the data
// starts at a multiple of kSafetensorsDataAlignment) in `header`, then each tensor's data in
// order. An IR dtype with no safetensors name is an
// internal error naming the tensor.
Status encode_safetensors(const std::vector<TensorView>& tensors, std::string& header);
// Bytes of a tensor view (elements × dtype size).
int64_t tensor_view_bytes(const TensorView& t);

// Decodes a whole safetensors file held in `bytes`, in header order of data offsets. `file`
// names it in errors (exit 4), which give the offset or field, the value found and the fix.
Expected<std::vector<Tensor>> decode_safetensors(const std::string& bytes, const std::string& file);

// One tensor of a safetensors header: name, dtype and shape (`bytes` left empty) and where its
// data lies in the file.
struct TensorPlace {
  Tensor tensor;
  uint64_t file_offset = 0;  // the first byte of its data in the file
  uint64_t bytes = 0;
};

// The length field of a safetensors file's first 8 bytes.
uint64_t safetensors_header_length(std::string_view first_8_bytes);

// Decodes the header of a safetensors file of `file_size` bytes from `prefix`, which holds at
// least its first 8 bytes and, when the length field is in range, the whole header. The tensors
// come in data-offset order and cover the data without holes. Errors as decode_safetensors's
// (the same checks, so a restore that reads the data straight into place refuses what a whole
// decode refuses).
Expected<std::vector<TensorPlace>> decode_safetensors_header(std::string_view prefix,
                                                             uint64_t file_size,
                                                             const std::string& file);

}  // namespace precast::checkpoint
