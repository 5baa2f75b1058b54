// Element types and statically shaped tensor types: the only kind of type an IR value has.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace precast::ir {

enum class DType : uint8_t { kF32, kF64, kBF16, kF16, kS32, kU32, kPred };
inline constexpr int kNumDTypes = 7;

// "f32", "bf16", "pred", ...: the spelling used in the IR text.
std::string_view dtype_name(DType dtype);
std::optional<DType> dtype_from_name(std::string_view name);

// Storage size of one element; pred takes a byte.
int64_t bytes_per_element(DType dtype);

bool is_floating(DType dtype);
bool is_integer(DType dtype);  // s32, u32 (pred is not an integer)

// A set of dtypes, for the op table's "which element types does this op accept".
class DTypeSet {
 public:
  constexpr DTypeSet() = default;
  constexpr DTypeSet(std::initializer_list<DType> dtypes) {
    for (DType d : dtypes) bits_ |= bit(d);
  }
  constexpr bool contains(DType d) const { return (bits_ & bit(d)) != 0; }
  constexpr bool empty() const { return bits_ == 0; }
  constexpr DTypeSet operator|(DTypeSet other) const { return from_bits(bits_ | other.bits_); }
  // "f32, f64, bf16 or f16", for messages.
  std::string describe() const;

 private:
  static constexpr uint8_t bit(DType d) { return static_cast<uint8_t>(1u << static_cast<int>(d)); }
  static constexpr DTypeSet from_bits(uint8_t bits) {
    DTypeSet s;
    s.bits_ = bits;
    return s;
  }
  uint8_t bits_ = 0;
};

inline constexpr DTypeSet kFloatTypes{DType::kF32, DType::kF64, DType::kBF16, DType::kF16};
inline constexpr DTypeSet kIntegerTypes{DType::kS32, DType::kU32};
inline constexpr DTypeSet kNumericTypes = kFloatTypes | kIntegerTypes;
inline constexpr DTypeSet kLogicalTypes = kIntegerTypes | DTypeSet{DType::kPred};
inline constexpr DTypeSet kAllTypes = kNumericTypes | DTypeSet{DType::kPred};

// A statically shaped tensor type. Rank 0 is a scalar.
struct TensorType {
  DType dtype = DType::kF32;
  std::vector<int64_t> dims;

  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  bool is_scalar() const { return dims.empty(); }
  int64_t num_elements() const;
  int64_t byte_size() const { return num_elements() * bytes_per_element(dtype); }

  friend bool operator==(const TensorType&, const TensorType&) = default;
};

// "f32[8,128]" (no axis names; those belong to values, not types).
std::string to_string(const TensorType& type);

// Row-major strides in elements.
std::vector<int64_t> row_major_strides(const std::vector<int64_t>& dims);

}  // namespace precast::ir
