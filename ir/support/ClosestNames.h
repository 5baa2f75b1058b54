// "Did you mean" support: ranks candidate names by edit distance to a misspelt one.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace precast {

// Levenshtein distance, case-sensitive.
inline size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      size_t substitute = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitute});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// Up to `count` candidates closest to `name`, nearest first. Ties prefer a candidate that
// contains `name` or is contained in it (a dropped or extra suffix), then the nearer length, then
// input order.
inline std::vector<std::string> closest_names(std::string_view name,
                                              const std::vector<std::string>& candidates,
                                              size_t count = 3) {
  struct Rank {
    size_t distance, unrelated, length_gap, index;
  };
  std::vector<Rank> ranked;
  ranked.reserve(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    const std::string& c = candidates[i];
    bool related = !name.empty() &&
                   (c.find(name) != std::string::npos || name.find(c) != std::string_view::npos);
    size_t gap = c.size() > name.size() ? c.size() - name.size() : name.size() - c.size();
    ranked.push_back({edit_distance(name, c), related ? 0u : 1u, gap, i});
  }
  std::sort(ranked.begin(), ranked.end(), [](const Rank& x, const Rank& y) {
    return std::tie(x.distance, x.unrelated, x.length_gap, x.index) <
           std::tie(y.distance, y.unrelated, y.length_gap, y.index);
  });
  std::vector<std::string> out;
  for (size_t i = 0; i < ranked.size() && out.size() < count; ++i) {
    out.push_back(candidates[ranked[i].index]);
  }
  return out;
}

// "'a', 'b' or 'c'" for messages.
inline std::string quoted_alternatives(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += (i + 1 == names.size()) ? " or " : ", ";
    out += "'" + names[i] + "'";
  }
  return out;
}

}  // namespace precast
