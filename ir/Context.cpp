#include "ir/Context.h"

#include <algorithm>

namespace precast::ir {

Context::Context() {
  intern_string("");
  axes_.emplace_back();
  axes_ids_.emplace(std::vector<int64_t>{}, 0);
  shardings_.emplace_back();  // id 0: none
  attr_sets_.emplace_back();
  attr_set_ids_.emplace(&attr_sets_.back(), 0);
}

size_t Context::SpanHash::operator()(const std::vector<int64_t>& key) const {
  size_t h = key.size();
  for (int64_t v : key) h ^= static_cast<size_t>(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h;
}

StringId Context::intern_string(std::string_view text) {
  auto it = string_ids_.find(text);
  if (it != string_ids_.end()) return it->second;
  auto id = static_cast<StringId>(strings_.size());
  strings_.emplace_back(text);
  string_ids_.emplace(strings_.back(), id);
  return id;
}

TypeId Context::intern_type(const TensorType& type) {
  type_key_.clear();
  type_key_.push_back(static_cast<int64_t>(type.dtype));
  type_key_.insert(type_key_.end(), type.dims.begin(), type.dims.end());
  auto it = type_ids_.find(type_key_);
  if (it != type_ids_.end()) return it->second;
  auto id = static_cast<TypeId>(types_.size());
  types_.push_back(type);
  type_ids_.emplace(type_key_, id);
  return id;
}

AxesId Context::intern_axes(std::span<const StringId> names) {
  bool all_empty = std::all_of(names.begin(), names.end(), [](StringId s) { return s == 0; });
  if (all_empty) return 0;
  std::vector<int64_t> key(names.begin(), names.end());
  auto it = axes_ids_.find(key);
  if (it != axes_ids_.end()) return it->second;
  auto id = static_cast<AxesId>(axes_.size());
  axes_.emplace_back(names.begin(), names.end());
  axes_ids_.emplace(std::move(key), id);
  return id;
}

ShardingId Context::intern_sharding(std::span<const std::vector<StringId>> dims) {
  // Key: the rank, then per dimension its axis count and axes (rank 0 is a key too: P()).
  std::vector<int64_t> key{static_cast<int64_t>(dims.size())};
  for (const std::vector<StringId>& axes : dims) {
    key.push_back(static_cast<int64_t>(axes.size()));
    key.insert(key.end(), axes.begin(), axes.end());
  }
  auto it = sharding_ids_.find(key);
  if (it != sharding_ids_.end()) return it->second;
  auto id = static_cast<ShardingId>(shardings_.size());
  shardings_.emplace_back(dims.begin(), dims.end());
  sharding_ids_.emplace(std::move(key), id);
  return id;
}

AttrSetId Context::intern_attrs(const AttrSet& attrs) {
  auto it = attr_set_ids_.find(&attrs);
  if (it != attr_set_ids_.end()) return it->second;
  auto id = static_cast<AttrSetId>(attr_sets_.size());
  attr_sets_.push_back(attrs);
  attr_set_ids_.emplace(&attr_sets_.back(), id);
  return id;
}

}  // namespace precast::ir
