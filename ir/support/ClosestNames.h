// "Did you mean" support: ranks candidate names by edit distance to a misspelt one.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
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

// Up to `count` candidates closest to `name`, nearest first (ties keep input order). A candidate
// containing `name`, or contained in it, ranks as if one edit away.
inline std::vector<std::string> closest_names(std::string_view name,
                                              const std::vector<std::string>& candidates,
                                              size_t count = 3) {
  std::vector<std::pair<size_t, size_t>> ranked;  // (distance, index)
  ranked.reserve(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    size_t d = edit_distance(name, candidates[i]);
    bool related = !name.empty() && (candidates[i].find(name) != std::string::npos ||
                                     name.find(candidates[i]) != std::string_view::npos);
    if (related) d = std::min<size_t>(d, 1);
    ranked.emplace_back(d, i);
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<std::string> out;
  for (size_t i = 0; i < ranked.size() && out.size() < count; ++i) {
    out.push_back(candidates[ranked[i].second]);
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
