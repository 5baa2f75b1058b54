// Reading back precast-run's files in tests: a file's bytes, one metric's values, and the
// metrics lines by step without the fields that differ between two runs of the same steps (the
// timed perf/ fields — step time, its breakdown, the rates and MFU derived from it — and the run
// name), so that "bitwise equal runs" can compare the rest line for line.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <string>
#include <vector>

namespace precast::testing {

inline std::string file_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Complete lines only (a killed run may leave a partial last line), keyed by their "step".
inline std::map<int, std::string> metrics_by_step(const std::filesystem::path& file) {
  std::map<int, std::string> out;
  std::string text = file_bytes(file);
  const std::regex time_field(
      R"re("perf/(step_time_seconds|per_device_tflops_per_sec|per_device_tokens_per_sec|mfu|)re"
      R"re(compute_seconds|checkpoint_seconds|eval_seconds|other_seconds)": [^,]+, |)re"
      R"re(, "run_name": "[^"]*")re");
  const std::regex step_field(R"("step": (\d+)\.0)");
  size_t start = 0;
  for (size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
    std::string line = std::regex_replace(text.substr(start, end - start), time_field, "");
    std::smatch m;
    if (std::regex_search(line, m, step_field)) out[std::stoi(m[1])] = line;
  }
  return out;
}

// "learning/<key>": its value in each line of a metrics file, as printed (shortest round trip),
// parsed back to the same double.
inline std::vector<double> metric_values(const std::filesystem::path& file,
                                         const std::string& key) {
  std::ifstream in(file);
  std::vector<double> values;
  std::string line, field = "\"learning/" + key + "\": ";
  while (std::getline(in, line)) {
    size_t at = line.find(field);
    if (at == std::string::npos) continue;
    values.push_back(std::strtod(line.c_str() + at + field.size(), nullptr));
  }
  return values;
}

}  // namespace precast::testing
