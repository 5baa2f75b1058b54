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

namespace precast::ir {

uint16_t Context::allocate(uint32_t& next) {
  if (next > 0xffff) {
    exhausted_ = true;
    return 0;
  }
  return static_cast<uint16_t>(next++);
}

uint16_t Context::block_of_scope(StringId scope) {
  auto [at, added] = block_of_scope_.try_emplace(scope, 0);
  if (!added) return at->second;
  std::string_view path = string(scope);
  size_t last = path.rfind('/');
  // A scope of one component ("loss") is no module's: its ops share nothing.
  if (last == std::string_view::npos || path.find_first_not_of('/') >= last) return 0;
  auto [module, fresh] = block_of_path_.try_emplace(intern_string(path.substr(0, last)), 0);
  if (fresh) module->second = allocate(next_block_);
  at->second = module->second;
  return at->second;
}

uint16_t Context::site_of_scope(StringId scope, int16_t layer) {
  uint64_t key = uint64_t{scope} << 16 | static_cast<uint16_t>(layer);
  auto [at, added] = site_of_scope_.try_emplace(key, 0);
  if (!added) return at->second;
  // The first component that ends in "layers_<n>" names the layer (MaxText's "layers_3", and
  // deepseek's "dense_layers_0" and "moe_layers_0", whose numbers restart at each stack: the MoE
  // layer's n is not the decoder layer's index); failing that, the first that ends in "_<layer>".
  std::string path(string(scope));
  std::string index = "_" + std::to_string(layer);
  size_t begin = 0, named_end = std::string::npos, named_digits = 0,
         indexed_end = std::string::npos;
  while (begin <= path.size() && named_end == std::string::npos) {
    size_t end = std::min(path.find('/', begin), path.size());
    std::string_view component = std::string_view(path).substr(begin, end - begin);
    size_t digits_begin = component.find_last_not_of("0123456789") + 1;
    if (digits_begin < component.size() && component.substr(0, digits_begin).ends_with("layers_")) {
      named_end = end;
      named_digits = component.size() - digits_begin;
    } else if (indexed_end == std::string::npos && component.ends_with(index)) {
      indexed_end = end;
    }
    begin = end + 1;
  }
  if (named_end != std::string::npos) {
    path.replace(named_end - named_digits, named_digits, "*");
  } else if (indexed_end != std::string::npos) {
    path.replace(indexed_end - index.size(), index.size(), "_*");
  }
  auto [place, fresh] = site_of_path_.try_emplace(intern_string(path), 0);
  if (fresh) place->second = allocate(next_site_);
  at->second = place->second;
  return at->second;
}

void Context::note_fact_numbers(uint16_t block, uint16_t site) {
  next_block_ = std::max<uint32_t>(next_block_, uint32_t{block} + 1);
  next_site_ = std::max<uint32_t>(next_site_, uint32_t{site} + 1);
}

}  // namespace precast::ir
