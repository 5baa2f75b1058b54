#include "ir/Types.h"

#include <array>

namespace precast::ir {
namespace {

constexpr std::array<std::string_view, kNumDTypes> kDTypeNames = {"f32", "f64", "bf16", "f16",
                                                                  "s32", "u32", "pred"};
constexpr std::array<int64_t, kNumDTypes> kDTypeBytes = {4, 8, 2, 2, 4, 4, 1};

}  // namespace

std::string_view dtype_name(DType dtype) { return kDTypeNames[static_cast<int>(dtype)]; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (kDTypeNames[i] == name) return static_cast<DType>(i);
  }
  return std::nullopt;
}

int64_t bytes_per_element(DType dtype) { return kDTypeBytes[static_cast<int>(dtype)]; }

bool is_floating(DType dtype) { return kFloatTypes.contains(dtype); }
bool is_integer(DType dtype) { return kIntegerTypes.contains(dtype); }

std::string DTypeSet::describe() const {
  std::vector<std::string_view> names;
  for (int i = 0; i < kNumDTypes; ++i) {
    if (contains(static_cast<DType>(i))) names.push_back(kDTypeNames[i]);
  }
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += (i + 1 == names.size()) ? " or " : ", ";
    out += names[i];
  }
  return out;
}

int64_t TensorType::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string to_string(const TensorType& type) {
  std::string out(dtype_name(type.dtype));
  out += '[';
  for (size_t i = 0; i < type.dims.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(type.dims[i]);
  }
  out += ']';
  return out;
}

std::vector<int64_t> row_major_strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) strides[i - 1] = strides[i] * dims[i];
  return strides;
}

}  // namespace precast::ir
