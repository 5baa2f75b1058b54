// Value: a handle to an SSA value of one function (a parameter or an op result).
#pragma once

#include <compare>
#include <cstdint>

namespace precast::ir {

struct Value {
  static constexpr uint32_t kInvalid = UINT32_MAX;
  uint32_t id = kInvalid;

  bool valid() const { return id != kInvalid; }
  friend auto operator<=>(Value, Value) = default;
};

}  // namespace precast::ir
