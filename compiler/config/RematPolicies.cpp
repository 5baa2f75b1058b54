#include "compiler/config/RematPolicies.h"

#include <algorithm>
#include <string>

namespace precast {
namespace {

using Names = std::vector<std::string_view>;

const Names kQkv = {"query_proj", "value_proj", "key_proj", "kv_proj", "qkv_proj"};
const Names kMinimal = {"query_proj", "value_proj", "key_proj", "kv_proj", "qkv_proj",
                        "out_proj",   "mlpwi_0",    "mlpwi_1",  "mlpwi",   "mlpwo"};

Names plus(Names a, const Names& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::vector<RematPolicyRow>& table() {
  static const std::vector<RematPolicyRow> rows = {
      {"full", {}, {}, 6, "recompute every layer from its input"},
      {"none", {}, {}, 0, "as full: MaxText's name for no policy"},
      {"minimal", kMinimal, {}, 2, "keep every projection (q, k, v, out, mlp)"},
      {"minimal_with_context",
       plus(kMinimal, {"context"}),
       {},
       1,
       "minimal and the attention context"},
      {"minimal_flash", plus(kMinimal, {"context"}), {}, 0, "as minimal_with_context"},
      {"minimal_with_quantization", kMinimal, {}, 0, "as minimal"},
      {"minimal_with_context_and_quantization",
       plus(kMinimal, {"context"}),
       {},
       0,
       "as minimal_with_context"},
      {"save_dot_with_context_except_mlp",
       plus(kQkv, {"context", "out_proj"}),
       {},
       0,
       "q, k, v, out and the context; recompute the mlp"},
      {"save_dot_except_mlpwi",
       plus(kQkv, {"out_proj", "mlpwo"}),
       {},
       0,
       "q, k, v, out and mlpwo; recompute mlpwi"},
      {"save_dot_except_mlp",
       plus(kQkv, {"out_proj"}),
       {},
       3,
       "q, k, v and out; recompute the mlp"},
      {"save_qkv_proj", kQkv, {}, 4, "q, k and v"},
      {"save_out_proj", {"out_proj"}, {}, 5, "the attention output projection"},
      {"qkv_proj_offloaded",
       {},
       {"query_proj", "value_proj", "key_proj", "kv_proj"},
       0,
       "q, k and v in host memory"},
      {"minimal_offloaded", {}, kMinimal, 7, "every projection in host memory"},
      {"custom", {}, {}, 0, "per checkpoint name: the keys query_proj=..., mlpwo=..., ..."},
  };
  return rows;
}

}  // namespace

std::span<const RematPolicyRow> remat_policy_table() {
  return table();
}

const RematPolicyRow* find_remat_policy(std::string_view name) {
  for (const RematPolicyRow& row : table()) {
    if (row.name == name) return &row;
  }
  return nullptr;
}

std::vector<std::string_view> remat_policy_search_order() {
  std::vector<const RematPolicyRow*> ranked;
  for (const RematPolicyRow& row : table()) {
    if (row.search_rank > 0) ranked.push_back(&row);
  }
  std::sort(ranked.begin(), ranked.end(), [](const RematPolicyRow* a, const RematPolicyRow* b) {
    return a->search_rank < b->search_rank;
  });
  std::vector<std::string_view> out;
  for (const RematPolicyRow* row : ranked) out.push_back(row->name);
  return out;
}

std::string_view remat_policy_names() {
  static const std::string names = [] {
    std::string out;
    for (const RematPolicyRow& row : table()) {
      out += out.empty() ? "" : ", ";
      out += row.name;
    }
    return out;
  }();
  return names;
}

}  // namespace precast
