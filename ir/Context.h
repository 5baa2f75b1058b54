// Interning tables shared by all functions of a module: strings (names, scopes, axis names),
// tensor types, per-dimension axis-name lists and attribute sets. Ops and values refer to them
// by 32-bit ids, which keeps a 100k-op module small and makes equality checks integer compares.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ir/Attributes.h"
#include "ir/Types.h"

namespace precast::ir {

using StringId = uint32_t;   // 0 = the empty string
using TypeId = uint32_t;
using AxesId = uint32_t;     // 0 = no axis names
using AttrSetId = uint32_t;  // 0 = the empty set
using ShardingId = uint32_t;  // 0 = no sharding (P() for a scalar is another id)

class Context {
 public:
  Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  StringId intern_string(std::string_view text);
  std::string_view string(StringId id) const { return strings_[id]; }

  TypeId intern_type(const TensorType& type);
  // References stay valid while the context lives (deque storage).
  const TensorType& type(TypeId id) const { return types_[id]; }

  // A list of per-dimension names; an all-empty list interns as 0.
  AxesId intern_axes(std::span<const StringId> names);
  std::span<const StringId> axes(AxesId id) const { return axes_[id]; }

  // A per-device layout: per dimension, the mesh axes it is split over (major to minor).
  ShardingId intern_sharding(std::span<const std::vector<StringId>> dims);
  std::span<const std::vector<StringId>> sharding(ShardingId id) const { return shardings_[id]; }

  AttrSetId intern_attrs(const AttrSet& attrs);
  const AttrSet& attrs(AttrSetId id) const { return attr_sets_[id]; }

  // The numbers of the block and site facts (Module.h's OpFacts) for ops created in a scope:
  // what the builder gives an op that does not inherit them. An op's block is its module
  // instance, the scope less its last component ("decoder/layers_3/self_attention" for
  // ".../query"; none for a scope of one component); its site is the scope with the decoder
  // layer's component made layer-free ("decoder/layers_3/mlp/wo" of layer 3 is the place
  // "decoder/layers_*/mlp/wo" of every layer). Each distinct module or place gets the next
  // number; 0 = none, also when the 16-bit numbers run out (fact_numbers_exhausted()).
  uint16_t block_of_scope(StringId scope);
  uint16_t site_of_scope(StringId scope, int16_t layer);
  bool fact_numbers_exhausted() const { return exhausted_; }
  // Numbers read from IR text are taken as they are; later ones are allocated above them.
  void note_fact_numbers(uint16_t block, uint16_t site);

 private:
  struct SpanHash {
    size_t operator()(const std::vector<int64_t>& key) const;
  };
  struct AttrHash {
    size_t operator()(const AttrSet* set) const { return set->hash(); }
  };
  struct AttrEqual {
    bool operator()(const AttrSet* a, const AttrSet* b) const { return *a == *b; }
  };

  std::deque<std::string> strings_;
  std::unordered_map<std::string_view, StringId> string_ids_;

  std::deque<TensorType> types_;
  std::vector<int64_t> type_key_;  // scratch, so lookups of known types do not allocate
  // Key: dtype followed by dims.
  std::unordered_map<std::vector<int64_t>, TypeId, SpanHash> type_ids_;

  std::deque<std::vector<StringId>> axes_;
  std::unordered_map<std::vector<int64_t>, AxesId, SpanHash> axes_ids_;

  std::deque<std::vector<std::vector<StringId>>> shardings_;
  std::unordered_map<std::vector<int64_t>, ShardingId, SpanHash> sharding_ids_;

  std::deque<AttrSet> attr_sets_;
  std::unordered_map<const AttrSet*, AttrSetId, AttrHash, AttrEqual> attr_set_ids_;

  uint16_t allocate(uint32_t& next);
  std::unordered_map<StringId, uint16_t> block_of_scope_;     // by scope
  std::unordered_map<StringId, uint16_t> block_of_path_;      // by the module's path
  std::unordered_map<uint64_t, uint16_t> site_of_scope_;      // by scope and layer
  std::unordered_map<StringId, uint16_t> site_of_path_;       // by the layer-free path
  uint32_t next_block_ = 1;
  uint32_t next_site_ = 1;
  bool exhausted_ = false;
};

}  // namespace precast::ir
