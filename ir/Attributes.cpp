#include "ir/Attributes.h"

#include <algorithm>
#include <array>
#include <bit>

namespace precast::ir {
namespace {

constexpr std::array<AttrKeyInfo, static_cast<size_t>(AttrKey::kCount)> kAttrKeys = {{
    {"value", AttrKind::kReals},
    {"dimension", AttrKind::kInt},
    {"dims", AttrKind::kInts},
    {"permutation", AttrKind::kInts},
    {"start", AttrKind::kInts},
    {"limit", AttrKind::kInts},
    {"stride", AttrKind::kInts},
    {"low", AttrKind::kInts},
    {"high", AttrKind::kInts},
    {"interior", AttrKind::kInts},
    {"axis", AttrKind::kInt},
    {"lhs_batch", AttrKind::kInts},
    {"rhs_batch", AttrKind::kInts},
    {"lhs_contract", AttrKind::kInts},
    {"rhs_contract", AttrKind::kInts},
    {"direction", AttrKind::kDirection},
    {"stream", AttrKind::kInt},
    {"scale", AttrKind::kReal},
    {"causal", AttrKind::kFlag},
    {"sliding_window", AttrKind::kInt},
    {"softcap", AttrKind::kReal},
    {"flash", AttrKind::kFlag},
    {"mesh_axes", AttrKind::kNames},
    {"group_size", AttrKind::kInt},
    {"dcn", AttrKind::kFlag},
    {"split_dimension", AttrKind::kInt},
    {"shift", AttrKind::kInt},
    {"max", AttrKind::kFlag},
    {"positions", AttrKind::kFlag},
    {"truncate", AttrKind::kReal},
    {"k", AttrKind::kInt},
    {"capacity", AttrKind::kInt},
    {"combine", AttrKind::kFlag},
}};

constexpr std::array<std::string_view, 6> kDirectionNames = {"eq", "ne", "lt", "le", "gt", "ge"};

size_t mix(size_t seed, uint64_t value) {
  // boost::hash_combine's constant; good enough for interning tables.
  return seed ^ (value + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2));
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::bit_cast<uint64_t>(a[i]) != std::bit_cast<uint64_t>(b[i])) return false;
  }
  return true;
}

}  // namespace

const AttrKeyInfo& attr_key_info(AttrKey key) { return kAttrKeys[static_cast<size_t>(key)]; }

std::optional<AttrKey> attr_key_from_name(std::string_view name) {
  for (size_t i = 0; i < kAttrKeys.size(); ++i) {
    if (kAttrKeys[i].name == name) return static_cast<AttrKey>(i);
  }
  return std::nullopt;
}

std::string_view direction_name(ComparisonDirection direction) {
  return kDirectionNames[static_cast<size_t>(direction)];
}

std::optional<ComparisonDirection> direction_from_name(std::string_view name) {
  for (size_t i = 0; i < kDirectionNames.size(); ++i) {
    if (kDirectionNames[i] == name) return static_cast<ComparisonDirection>(i);
  }
  return std::nullopt;
}

void AttrSet::put(AttrKey key, std::vector<int64_t> ints, std::vector<double> reals) {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), key,
                             [](const Attribute& a, AttrKey k) { return a.key < k; });
  if (it != entries_.end() && it->key == key) {
    it->ints = std::move(ints);
    it->reals = std::move(reals);
    return;
  }
  entries_.insert(it, Attribute{key, std::move(ints), std::move(reals)});
}

void AttrSet::erase(AttrKey key) {
  std::erase_if(entries_, [key](const Attribute& a) { return a.key == key; });
}

const Attribute* AttrSet::find(AttrKey key) const {
  for (const Attribute& a : entries_) {
    if (a.key == key) return &a;
  }
  return nullptr;
}

int64_t AttrSet::integer(AttrKey key) const {
  const Attribute* a = find(key);
  return (a && !a->ints.empty()) ? a->ints[0] : 0;
}

double AttrSet::real(AttrKey key) const {
  const Attribute* a = find(key);
  return (a && !a->reals.empty()) ? a->reals[0] : 0.0;
}

std::span<const int64_t> AttrSet::ints(AttrKey key) const {
  const Attribute* a = find(key);
  return a ? std::span<const int64_t>(a->ints) : std::span<const int64_t>();
}

std::span<const double> AttrSet::reals(AttrKey key) const {
  const Attribute* a = find(key);
  return a ? std::span<const double>(a->reals) : std::span<const double>();
}

bool AttrSet::is_zero(const Attribute& attribute) {
  switch (attr_key_info(attribute.key).kind) {
    case AttrKind::kInt:
    case AttrKind::kFlag:
      return attribute.ints.empty() || attribute.ints[0] == 0;
    case AttrKind::kReal:
      // Bitwise, so -0.0 is kept.
      return attribute.reals.empty() || std::bit_cast<uint64_t>(attribute.reals[0]) == 0;
    case AttrKind::kInts:
    case AttrKind::kNames:
      return attribute.ints.empty();
    case AttrKind::kReals:
      return attribute.reals.empty();
    case AttrKind::kDirection:
      return false;  // eq is a real choice, not an absent one
  }
  return false;
}

size_t AttrSet::hash() const {
  size_t h = entries_.size();
  for (const Attribute& a : entries_) {
    h = mix(h, static_cast<uint64_t>(a.key));
    for (int64_t v : a.ints) h = mix(h, static_cast<uint64_t>(v));
    for (double v : a.reals) h = mix(h, std::bit_cast<uint64_t>(v));
  }
  return h;
}

bool operator==(const AttrSet& a, const AttrSet& b) {
  if (a.entries_.size() != b.entries_.size()) return false;
  for (size_t i = 0; i < a.entries_.size(); ++i) {
    const Attribute& x = a.entries_[i];
    const Attribute& y = b.entries_[i];
    if (x.key != y.key || x.ints != y.ints || !same_bits(x.reals, y.reals)) return false;
  }
  return true;
}

}  // namespace precast::ir
