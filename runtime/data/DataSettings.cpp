#include "runtime/data/DataSettings.h"

#include <fmt/format.h>

#include <cstdlib>

namespace precast::data {
namespace {

std::string unquoted(std::string v) {
  if (v == "''" || v == "\"\"") return "";
  if (v.size() >= 2 && (v.front() == '\'' || v.front() == '"') && v.back() == v.front()) {
    return v.substr(1, v.size() - 2);
  }
  return v;
}

Expected<bool> flag(const std::map<std::string, std::string>& config, const std::string& key,
                    bool fallback) {
  auto it = config.find(key);
  if (it == config.end()) return fallback;
  const std::string& v = it->second;
  if (v == "True" || v == "true" || v == "1") return true;
  if (v == "False" || v == "false" || v == "0") return false;
  return usage_error(fmt::format("{}={}: expected true or false", key, v));
}

Expected<int64_t> integer(const std::map<std::string, std::string>& config, const std::string& key,
                          int64_t fallback) {
  auto it = config.find(key);
  if (it == config.end()) return fallback;
  const std::string& v = it->second;
  char* end = nullptr;
  long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0') {
    return usage_error(fmt::format("{}={}: expected a whole number", key, v));
  }
  return static_cast<int64_t>(n);
}

}  // namespace

Expected<DataSettings> data_settings(const std::map<std::string, std::string>& config) {
  DataSettings s;
  if (auto it = config.find("dataset_type"); it != config.end()) s.type = unquoted(it->second);
  if (auto it = config.find("dataset_path"); it != config.end()) s.path = unquoted(it->second);
  if (s.type != "synthetic" && s.type != "tokens" && s.type != "text") {
    return usage_error(fmt::format(
        "dataset_type={} is not supported yet: Precast reads synthetic data, token files "
        "(dataset_type=tokens, made by `precast tokenize`) and text files (dataset_type=text, "
        "byte-level tokens); convert the data with `precast tokenize` and set dataset_type=tokens",
        s.type));
  }
  if (s.type != "synthetic" && s.path.empty()) {
    return usage_error(fmt::format(
        "dataset_type={} needs dataset_path: set dataset_path=FILE, a directory or a glob "
        "(several separated by commas)",
        s.type));
  }
  PRECAST_ASSIGN_OR_RETURN(s.packing, flag(config, "packing", true));
  PRECAST_ASSIGN_OR_RETURN(s.shuffle, flag(config, "enable_data_shuffling", true));
  PRECAST_ASSIGN_OR_RETURN(int64_t seed, integer(config, "data_shuffle_seed", 0));
  s.shuffle_seed = static_cast<uint32_t>(seed);
  PRECAST_ASSIGN_OR_RETURN(s.num_epoch, integer(config, "num_epoch", 1));
  PRECAST_ASSIGN_OR_RETURN(s.add_bos, flag(config, "add_bos", true));
  PRECAST_ASSIGN_OR_RETURN(s.add_eos, flag(config, "add_eos", true));
  if (s.num_epoch < 1) {
    return usage_error(fmt::format(
        "num_epoch={}: must be a whole number >= 1 (passes over the dataset before the run ends)",
        s.num_epoch));
  }
  return s;
}

}  // namespace precast::data
