// Op attributes: a small keyed set of integers, integer lists, reals, flags and enums. A set is
// a plain value; the Context interns sets so ops hold a 4-byte id and equal sets compare by id.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace precast::ir {

enum class AttrKey : uint8_t {
  kValue,          // constant literal (reals, row-major; one element = splat)
  kDimension,      // iota / concatenate dimension
  kDims,           // broadcast_in_dim operand→result mapping; reduce dimensions
  kPermutation,    // transpose
  kStart,          // slice
  kLimit,          // slice
  kStride,         // slice (absent = all ones)
  kLow,            // pad
  kHigh,           // pad
  kInterior,       // pad (absent = all zeros)
  kAxis,           // take / scatter_add
  kLhsBatch,       // dot_general
  kRhsBatch,       // dot_general
  kLhsContract,    // dot_general
  kRhsContract,    // dot_general
  kDirection,      // compare
  kStream,         // rng_*: distinguishes call sites sharing a seed
  kScale,          // attention: multiplies q·k
  kCausal,         // attention
  kSlidingWindow,  // attention: |t - s| < window (0 = unlimited)
  kSoftcap,        // attention: cap * tanh(score / cap) (0 = off)
  kFlash,          // attention: never materialise the [T,S] scores
  kMeshAxes,       // collectives: the mesh axes the device group spans (major to minor)
  kGroupSize,      // collectives: devices in one group (product of the mesh axes' sizes)
  kDcn,            // collectives: the group spans slices (data-center network, not ICI)
  kSplitDimension, // all_to_all: the dimension split across the group
  kShift,          // collective_permute: position i receives from position i - shift
  kMax,            // all_reduce: the group's elementwise maximum instead of its sum
  kPositions,      // attention: the last two operands are the query and key positions the
                   // causal and window masks compare (default: 0..T-1 and 0..S-1)
  kTruncate,       // rng_normal: draws outside [-truncate, truncate] are redrawn (0 = none)
  kK,              // top_k: how many entries to select
  kCapacity,       // ragged_all_to_all: rows each sender may place at a receiver
  kCombine,        // ragged_all_to_all: the reverse exchange (rows back to their senders)
  kCount,
};

// kNames: a list of identifiers, held as the module Context's StringIds in `ints`.
enum class AttrKind : uint8_t { kInt, kReal, kFlag, kInts, kReals, kDirection, kNames };

struct AttrKeyInfo {
  std::string_view name;
  AttrKind kind;
};
const AttrKeyInfo& attr_key_info(AttrKey key);
std::optional<AttrKey> attr_key_from_name(std::string_view name);

enum class ComparisonDirection : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe };
std::string_view direction_name(ComparisonDirection direction);
std::optional<ComparisonDirection> direction_from_name(std::string_view name);

// One attribute. Scalars live in element 0 of the matching vector (flags and directions as ints).
struct Attribute {
  AttrKey key;
  std::vector<int64_t> ints;
  std::vector<double> reals;
};

// Attributes of one op, kept sorted by key. An absent attribute reads as its zero value (0,
// false, empty list), which is why op builders drop optional attributes equal to zero.
class AttrSet {
 public:
  void set_int(AttrKey key, int64_t value) { put(key, {value}, {}); }
  void set_real(AttrKey key, double value) { put(key, {}, {value}); }
  void set_flag(AttrKey key, bool value) { put(key, {value ? 1 : 0}, {}); }
  void set_ints(AttrKey key, std::vector<int64_t> values) { put(key, std::move(values), {}); }
  void set_reals(AttrKey key, std::vector<double> values) { put(key, {}, std::move(values)); }
  void set_direction(ComparisonDirection d) {
    put(AttrKey::kDirection, {static_cast<int64_t>(d)}, {});
  }
  void erase(AttrKey key);

  bool has(AttrKey key) const { return find(key) != nullptr; }
  int64_t integer(AttrKey key) const;
  double real(AttrKey key) const;
  bool flag(AttrKey key) const { return integer(key) != 0; }
  std::span<const int64_t> ints(AttrKey key) const;
  std::span<const double> reals(AttrKey key) const;
  ComparisonDirection direction() const {
    return static_cast<ComparisonDirection>(integer(AttrKey::kDirection));
  }

  const std::vector<Attribute>& entries() const { return entries_; }
  bool empty() const { return entries_.empty(); }
  // True when the attribute holds its zero value (0, 0.0, false, empty list).
  static bool is_zero(const Attribute& attribute);

  size_t hash() const;
  // Reals compare bit for bit, so NaN literals intern and -0.0 stays distinct from 0.0.
  friend bool operator==(const AttrSet& a, const AttrSet& b);

 private:
  void put(AttrKey key, std::vector<int64_t> ints, std::vector<double> reals);
  const Attribute* find(AttrKey key) const;

  std::vector<Attribute> entries_;
};

}  // namespace precast::ir
