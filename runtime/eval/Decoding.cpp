#include "runtime/eval/Decoding.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace precast::runtime {
namespace {

// splitmix64: a uniform double in [0, 1) from the top 53 bits.
double next_uniform(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

// How many of the first `n` sorted logits the nucleus keeps: those up to and including the first
// whose cumulative softmax probability reaches p (MaxText: cutoff = #(cumulative < p)).
size_t nucleus_size(const std::vector<Candidate>& sorted, size_t n, double p) {
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += std::exp(sorted[i].logit - sorted[0].logit);
  double cumulative = 0;
  size_t below = 0;
  for (size_t i = 0; i < n; ++i) {
    cumulative += std::exp(sorted[i].logit - sorted[0].logit) / total;
    if (cumulative < p) ++below;
  }
  return std::min(below + 1, n);
}

Expected<double> real_number(const std::map<std::string, std::string>& config,
                             const std::string& key, double fallback) {
  auto it = config.find(key);
  if (it == config.end()) return fallback;
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  if (it->second.empty() || *end != '\0') {
    return usage_error(fmt::format("{}={}: expected a number", key, it->second));
  }
  return v;
}

}  // namespace

int64_t DecodeSettings::candidates(int64_t vocab) const {
  if (strategy == "greedy") return 1;
  if (strategy == "topk" || strategy == "composite") return std::min(top_k, vocab);
  return vocab;
}

Expected<DecodeSettings> decode_settings(const std::map<std::string, std::string>& config) {
  DecodeSettings s;
  auto strategy = config.find("decode_sampling_strategy");
  if (strategy != config.end()) {
    s.strategy = strategy->second;
    if (s.strategy.size() >= 2 && (s.strategy.front() == '\'' || s.strategy.front() == '"')) {
      s.strategy = s.strategy.substr(1, s.strategy.size() - 2);
    }
  }
  auto top_k = config.find("decode_sampling_top_k");
  if (top_k != config.end()) {
    char* end = nullptr;
    s.top_k = std::strtoll(top_k->second.c_str(), &end, 10);
    if (top_k->second.empty() || *end != '\0') {
      return usage_error(
          fmt::format("decode_sampling_top_k={}: expected a whole number", top_k->second));
    }
  }
  PRECAST_ASSIGN_OR_RETURN(s.nucleus_p, real_number(config, "decode_sampling_nucleus_p", -1));
  PRECAST_ASSIGN_OR_RETURN(s.temperature, real_number(config, "decode_sampling_temperature", 1));
  const std::string& k = s.strategy;
  if (k != "greedy" && k != "weighted" && k != "nucleus" && k != "topk" && k != "composite") {
    return usage_error(fmt::format(
        "decode_sampling_strategy={}: MaxText's strategies are greedy, weighted, nucleus, topk "
        "and composite; give one of them",
        k));
  }
  if ((k == "topk" || k == "composite") && s.top_k <= 0) {
    return usage_error(
        fmt::format("decode_sampling_top_k={}: decode_sampling_strategy={} needs a top_k > 0 (e.g. "
                    "decode_sampling_top_k=10)",
                    s.top_k, k));
  }
  if ((k == "nucleus" || k == "composite") && !(s.nucleus_p > 0 && s.nucleus_p <= 1)) {
    return usage_error(fmt::format(
        "decode_sampling_nucleus_p={}: decode_sampling_strategy={} needs a probability in (0, 1] "
        "(e.g. decode_sampling_nucleus_p=0.9)",
        s.nucleus_p, k));
  }
  if (k != "greedy" && !(s.temperature > 0)) {
    return usage_error(fmt::format(
        "decode_sampling_temperature={}: decode_sampling_strategy={} draws from "
        "softmax(logits / temperature), which needs a temperature > 0 (greedy takes the argmax)",
        s.temperature, k));
  }
  return s;
}

uint32_t choose_token(const std::vector<Candidate>& sorted, const DecodeSettings& settings,
                      uint64_t& state) {
  const std::string& k = settings.strategy;
  if (k == "greedy" || sorted.size() == 1) return sorted[0].id;
  size_t n = sorted.size();
  if (k == "topk" || k == "composite") n = std::min(n, static_cast<size_t>(settings.top_k));
  if (k == "nucleus") {
    // Every logit at least the cutoff one stays (equal logits included), as MaxText's mask.
    const double cutoff = sorted[nucleus_size(sorted, n, settings.nucleus_p) - 1].logit;
    while (n > 1 && sorted[n - 1].logit < cutoff) --n;
  }
  if (k == "composite") n = nucleus_size(sorted, n, settings.nucleus_p);
  const double temperature = std::max(settings.temperature, 1e-6);
  double total = 0;
  for (size_t i = 0; i < n; ++i)
    total += std::exp((sorted[i].logit - sorted[0].logit) / temperature);
  const double u = next_uniform(state) * total;
  double cumulative = 0;
  for (size_t i = 0; i < n; ++i) {
    cumulative += std::exp((sorted[i].logit - sorted[0].logit) / temperature);
    if (u < cumulative) return sorted[i].id;
  }
  return sorted[n - 1].id;
}

}  // namespace precast::runtime
