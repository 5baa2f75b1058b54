#include "compiler/driver/RunRecord.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

namespace precast {
namespace {

namespace fs = std::filesystem;

Expected<std::string> read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return usage_error(fmt::format("{}: cannot read it ({}); check the path", path.string(),
                                   fs::exists(path) ? "permission denied" : "no such file"));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return usage_error(fmt::format("{}: read failed", path.string()));
  return text.str();
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// The number at the start of `s` (after blanks); `used` gets the characters it took.
std::optional<double> leading_number(std::string_view s, size_t* used = nullptr) {
  size_t skip = 0;
  while (skip < s.size() && s[skip] == ' ') ++skip;
  double value = 0;
  const char* begin = s.data() + skip;
  if (skip < s.size() && s[skip] == '+') ++begin;  // from_chars takes no leading '+'
  auto [end, ec] = std::from_chars(begin, s.data() + s.size(), value);
  if (ec != std::errc() || end == begin) return std::nullopt;
  if (used != nullptr) *used = static_cast<size_t>(end - s.data());
  return value;
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// ---- MaxText log lines ------------------------------------------------------------------

struct LogLine {
  const std::string& file;
  size_t number;  // 1-based
  std::string_view text;

  Error malformed(std::string_view what, std::string_view example) const {
    return usage_error(fmt::format("{}:{}: {} in '{}'; MaxText writes it as `{}`", file, number,
                                   what, trim(text), example));
  }
};

constexpr std::string_view kStepExample =
    "completed step: 7, seconds: 1.234, TFLOP/s/device: 100.000, Tokens/s/device: 2000.000, "
    "total_weights: 4096, loss: 7.123";

// `completed step: N, seconds: t, TFLOP/s/device: x, Tokens/s/device: y, ..., loss: l, ...`
Expected<StepRecord> parse_step_line(const LogLine& line, std::string_view rest) {
  StepRecord record;
  bool have_step = false;
  size_t position = 0;
  bool first = true;
  while (position <= rest.size()) {
    size_t comma = rest.find(", ", position);
    if (comma == std::string_view::npos) comma = rest.size();
    std::string_view part = trim(rest.substr(position, comma - position));
    position = comma + 2;
    if (first) {
      first = false;
      std::optional<double> step = leading_number(part);
      if (!step || *step != std::floor(*step)) {
        return line.malformed("no step number after 'completed step:'", kStepExample);
      }
      record.step = static_cast<int64_t>(*step);
      have_step = true;
      continue;
    }
    size_t colon = part.find(": ");
    if (colon == std::string_view::npos) continue;
    std::string_view name = part.substr(0, colon);
    std::optional<double>* field = nullptr;
    if (name == "seconds") field = &record.seconds;
    if (name == "TFLOP/s/device") field = &record.tflops_per_second;
    if (name == "Tokens/s/device") field = &record.tokens_per_second;
    if (name == "loss") field = &record.loss;
    if (field == nullptr) continue;
    std::optional<double> value = leading_number(part.substr(colon + 2));
    if (!value) {
      return line.malformed(fmt::format("no number after '{}:'", name), kStepExample);
    }
    *field = *value;
  }
  if (!have_step) return line.malformed("no step number", kStepExample);
  return record;
}

// Finds `marker` in the line and returns what follows it.
std::optional<std::string_view> after(std::string_view text, std::string_view marker) {
  size_t at = text.find(marker);
  if (at == std::string_view::npos) return std::nullopt;
  return text.substr(at + marker.size());
}

void add_version(RunRecord& run, std::string component, std::string version) {
  for (const auto& [name, value] : run.versions) {
    if (name == component) return;  // the first line that names it wins
  }
  run.versions.emplace_back(std::move(component), std::move(version));
}

// Reads the version lines: MaxText's `System Information: Jax Version: 0.4.38`, `...: Jax
// Backend: ...`, and Precast's start-up line `Precast 0.1.0 (JITLink from LLVM 19.1.7), ...`.
void read_version_line(RunRecord& run, std::string_view text) {
  if (auto rest = after(text, "System Information: ")) {
    size_t version = rest->find(" Version: ");
    if (version != std::string_view::npos) {
      add_version(run, std::string(rest->substr(0, version)),
                  std::string(trim(rest->substr(version + 10))));
    } else if (auto backend = after(*rest, "Jax Backend: ")) {
      add_version(run, "Jax backend", std::string(trim(*backend)));
    }
    return;
  }
  std::string_view line = trim(text);
  if (line.rfind("Precast ", 0) == 0 && line.size() > 8 &&
      std::isdigit(static_cast<unsigned char>(line[8]))) {
    std::string_view version = line.substr(8);
    version = version.substr(0, version.find_first_of(" ,("));
    add_version(run, "Precast", std::string(version));
    if (auto llvm = after(line, "LLVM ")) {
      add_version(run, "LLVM", std::string(llvm->substr(0, llvm->find_first_of(" ,)"))));
    }
  }
}

// `\tUsing (GB) 12.5 / 95.74 (13.056413%) on TPU_0(...)`: the percentage.
Expected<std::optional<double>> memory_percent(const LogLine& line, std::string_view rest) {
  size_t slash = rest.find(" / ");
  size_t open = rest.find(" (");
  if (slash == std::string_view::npos || open == std::string_view::npos || open < slash) {
    return std::optional<double>();  // Precast's CPU form has no limit: no percentage
  }
  std::optional<double> percent = leading_number(rest.substr(open + 2));
  if (!percent) {
    return line.malformed("no percentage after '/ LIMIT ('",
                          "Using (GB) 12.5 / 95.74 (13.056413%) on TPU_0");
  }
  return percent;
}

// Sorts by step and keeps the last record read for each step (a resumed run repeats steps).
std::vector<StepRecord> last_per_step(std::vector<StepRecord> steps) {
  std::stable_sort(steps.begin(), steps.end(),
                   [](const StepRecord& a, const StepRecord& b) { return a.step < b.step; });
  std::vector<StepRecord> out;
  for (const StepRecord& s : steps) {
    if (!out.empty() && out.back().step == s.step) {
      out.back() = s;
    } else {
      out.push_back(s);
    }
  }
  return out;
}

// ---- JSON lines (metrics_file) ----------------------------------------------------------

// A flat JSON object's members: numbers as numbers, anything else as absent-but-present.
class JsonObjectReader {
 public:
  JsonObjectReader(std::string_view text, const std::string& file, size_t line)
      : text_(text), file_(file), line_(line) {}

  Expected<std::map<std::string, std::optional<double>>> read() {
    std::map<std::string, std::optional<double>> members;
    skip_blanks();
    if (!consume('{')) return fail("expected '{' (each line of a metrics file is one JSON object)");
    skip_blanks();
    if (consume('}')) return members;
    while (true) {
      skip_blanks();
      PRECAST_ASSIGN_OR_RETURN(std::string key, read_string());
      skip_blanks();
      if (!consume(':')) return fail("expected ':' after the key \"" + key + "\"");
      skip_blanks();
      PRECAST_ASSIGN_OR_RETURN(std::optional<double> value, read_value());
      members[key] = value;
      skip_blanks();
      if (consume(',')) continue;
      if (consume('}')) break;
      return fail("expected ',' or '}'");
    }
    skip_blanks();
    if (position_ != text_.size()) return fail("unexpected text after the object");
    return members;
  }

 private:
  Error fail(const std::string& what) const {
    return usage_error(
        fmt::format("{}:{}:{}: not a metrics line: {}; a metrics file has one "
                    "JSON object per line, e.g. {{\"learning/loss\": 7.1, "
                    "\"perf/step_time_seconds\": 0.5, \"step\": 3.0}}",
                    file_, line_, position_ + 1, what));
  }
  void skip_blanks() {
    while (position_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[position_]))) {
      ++position_;
    }
  }
  bool consume(char c) {
    if (position_ < text_.size() && text_[position_] == c) {
      ++position_;
      return true;
    }
    return false;
  }
  Expected<std::string> read_string() {
    if (!consume('"')) return fail("expected a string");
    std::string out;
    while (position_ < text_.size() && text_[position_] != '"') {
      char c = text_[position_++];
      if (c == '\\') {
        if (position_ >= text_.size()) break;
        char escaped = text_[position_++];
        if (escaped == 'u') {
          PRECAST_ASSIGN_OR_RETURN(unsigned code, read_hex4());
          append_utf8(out, code);
          continue;
        }
        switch (escaped) {
          case 'n':
            out.push_back('\n');
            break;
          case 't':
            out.push_back('\t');
            break;
          case 'r':
            out.push_back('\r');
            break;
          case 'b':
            out.push_back('\b');
            break;
          case 'f':
            out.push_back('\f');
            break;
          default:
            out.push_back(escaped);
        }
        continue;
      }
      out.push_back(c);
    }
    if (!consume('"')) return fail("unterminated string");
    return out;
  }
  // The four hex digits of a \u escape (a surrogate half is kept as its own code point: the
  // strings read here are only compared, never decoded further).
  Expected<unsigned> read_hex4() {
    if (position_ + 4 > text_.size()) return fail("a \\u escape needs four hex digits");
    unsigned code = 0;
    auto [end, ec] =
        std::from_chars(text_.data() + position_, text_.data() + position_ + 4, code, 16);
    if (ec != std::errc() || end != text_.data() + position_ + 4) {
      return fail("a \\u escape needs four hex digits");
    }
    position_ += 4;
    return code;
  }
  static void append_utf8(std::string& out, unsigned code) {
    if (code < 0x80) {
      out.push_back(static_cast<char>(code));
    } else if (code < 0x800) {
      out.push_back(static_cast<char>(0xc0 | (code >> 6)));
      out.push_back(static_cast<char>(0x80 | (code & 0x3f)));
    } else {
      out.push_back(static_cast<char>(0xe0 | (code >> 12)));
      out.push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3f)));
      out.push_back(static_cast<char>(0x80 | (code & 0x3f)));
    }
  }
  // Skips a nested array or object, strings inside included.
  Status skip_nested() {
    int depth = 0;
    while (position_ < text_.size()) {
      char c = text_[position_];
      if (c == '"') {
        PRECAST_ASSIGN_OR_RETURN(std::string ignored, read_string());
        (void)ignored;
        continue;
      }
      ++position_;
      if (c == '[' || c == '{') ++depth;
      if ((c == ']' || c == '}') && --depth == 0) return Status::success();
    }
    return fail("unterminated array or object");
  }
  Expected<std::optional<double>> read_value() {
    if (position_ >= text_.size()) return fail("expected a value");
    char c = text_[position_];
    if (c == '"') {
      PRECAST_ASSIGN_OR_RETURN(std::string ignored, read_string());
      (void)ignored;
      return std::optional<double>();
    }
    if (c == '[' || c == '{') {
      PRECAST_RETURN_IF_ERROR(skip_nested());
      return std::optional<double>();
    }
    for (std::string_view word : {"true", "false", "null", "NaN", "Infinity", "-Infinity"}) {
      if (text_.substr(position_, word.size()) == word) {
        position_ += word.size();
        if (word == "NaN") return std::optional<double>(std::nan(""));
        if (word == "Infinity") return std::optional<double>(INFINITY);
        if (word == "-Infinity") return std::optional<double>(-INFINITY);
        return std::optional<double>();
      }
    }
    size_t used = 0;
    std::optional<double> number = leading_number(text_.substr(position_), &used);
    if (!number) return fail("expected a number, string, true, false or null");
    position_ += used;
    return number;
  }

  std::string_view text_;
  const std::string& file_;
  size_t line_;
  size_t position_ = 0;
};

// ---- run directories --------------------------------------------------------------------

bool first_line_is_json(std::string_view text) {
  for (std::string_view line : split_lines(text)) {
    std::string_view t = trim(line);
    if (!t.empty()) return t.front() == '{';
  }
  return false;
}

// The metrics files of a run directory: every file under metrics/ by name (MaxText's
// metrics_step_* pieces too), else a metrics.jsonl or metrics.txt in the directory itself.
std::vector<fs::path> metrics_files(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  if (fs::is_directory(dir / "metrics", ec)) {
    for (const auto& entry : fs::directory_iterator(dir / "metrics", ec)) {
      if (entry.is_regular_file(ec)) files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    if (!files.empty()) return files;
  }
  for (const char* name : {"metrics.jsonl", "metrics.txt"}) {
    if (fs::is_regular_file(dir / name, ec)) return {dir / name};
  }
  return files;
}

Expected<std::vector<fs::path>> log_files(const fs::path& dir) {
  std::vector<fs::path> logs;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::error_code unreadable;  // an entry that cannot be examined is not a log
    if (entry.is_regular_file(unreadable) && entry.path().extension() == ".log") {
      logs.push_back(entry.path());
    }
  }
  if (ec) return usage_error(fmt::format("{}: cannot list it: {}", dir.string(), ec.message()));
  std::sort(logs.begin(), logs.end());
  return logs;
}

std::string yaml_value_text(const YAML::Node& node) {
  if (node.IsScalar()) return node.Scalar();
  if (node.IsNull()) return "";
  YAML::Emitter out;
  out << YAML::Flow << node;
  return out.c_str();
}

Expected<std::map<std::string, std::string>> read_config_yml(const fs::path& path) {
  PRECAST_ASSIGN_OR_RETURN(std::string text, read_text(path));
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return usage_error(
        fmt::format("{}:{}:{}: not YAML: {}; config.yml holds the run's resolved "
                    "config as `key: value` lines",
                    path.string(), e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  std::map<std::string, std::string> config;
  if (root.IsNull()) return config;
  if (!root.IsMap()) {
    return usage_error(
        fmt::format("{}: expected a mapping of config keys to values", path.string()));
  }
  for (const auto& member : root)
    config[member.first.as<std::string>()] = yaml_value_text(member.second);
  return config;
}

Expected<RunRecord> read_run_directory(const fs::path& dir, const std::string& source) {
  std::vector<fs::path> metrics = metrics_files(dir);
  PRECAST_ASSIGN_OR_RETURN(std::vector<fs::path> logs, log_files(dir));
  if (logs.size() > 1) {
    return usage_error(fmt::format(
        "{}: holds {} logs ({}, {}, ...): name the one to compare "
        "instead of the directory",
        dir.string(), logs.size(), logs[0].filename().string(), logs[1].filename().string()));
  }
  if (metrics.empty() && logs.empty()) {
    return usage_error(fmt::format(
        "{}: no metrics file and no log in this run directory (looked for metrics/*, "
        "metrics.jsonl, metrics.txt and *.log); give precast-run metrics_file=... or name a "
        "metrics file or MaxText log",
        dir.string()));
  }
  RunRecord run;
  std::vector<std::string> read;
  if (!logs.empty()) {
    PRECAST_ASSIGN_OR_RETURN(std::string text, read_text(logs[0]));
    PRECAST_ASSIGN_OR_RETURN(run, parse_maxtext_log(text, logs[0].string()));
    read.push_back("log " + logs[0].filename().string());
  }
  if (!metrics.empty()) {
    std::vector<StepRecord> from_log = std::move(run.steps);
    std::vector<StepRecord> steps;
    for (const fs::path& file : metrics) {
      PRECAST_ASSIGN_OR_RETURN(std::string text, read_text(file));
      PRECAST_ASSIGN_OR_RETURN(std::vector<StepRecord> part,
                               parse_metrics_lines(text, file.string()));
      steps.insert(steps.end(), part.begin(), part.end());
      bool in_metrics = file.parent_path() == dir / "metrics";
      read.push_back(std::string("metrics ") + (in_metrics ? "metrics/" : "") +
                     file.filename().string());
    }
    run.steps = last_per_step(std::move(steps));
    // Today's metrics files carry no per-device rates: take them from the log's same step.
    for (StepRecord& s : run.steps) {
      auto match =
          std::lower_bound(from_log.begin(), from_log.end(), s.step,
                           [](const StepRecord& r, int64_t step) { return r.step < step; });
      if (match == from_log.end() || match->step != s.step) continue;
      if (!s.tflops_per_second) s.tflops_per_second = match->tflops_per_second;
      if (!s.tokens_per_second) s.tokens_per_second = match->tokens_per_second;
    }
  }
  std::error_code ec;
  if (fs::is_regular_file(dir / "config.yml", ec)) {
    PRECAST_ASSIGN_OR_RETURN(run.config, read_config_yml(dir / "config.yml"));
    read.push_back("config.yml");
  }
  run.source = source;
  run.description = fmt::format("run directory: {}", fmt::join(read, ", "));
  return run;
}

}  // namespace

Expected<RunRecord> parse_maxtext_log(const std::string& text, const std::string& name) {
  RunRecord run;
  run.source = name;
  run.description = "MaxText log";
  bool recognised = false;
  std::vector<StepRecord> steps;
  std::vector<std::string_view> lines = split_lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    LogLine line{name, i + 1, lines[i]};
    std::string_view t = lines[i];
    if (auto rest = after(t, "completed step: ")) {
      PRECAST_ASSIGN_OR_RETURN(StepRecord step, parse_step_line(line, *rest));
      steps.push_back(step);
      recognised = true;
    } else if (auto params = after(t, "number parameters: ")) {
      std::optional<double> billions = leading_number(*params);
      if (!billions) return line.malformed("no number", "number parameters: 1.104 billion");
      run.parameters_billion = billions;
      recognised = true;
    } else if (auto tflops = after(t, "Total TFLOPs: ")) {
      std::optional<double> value = leading_number(*tflops);
      if (!value) return line.malformed("no number", " Total TFLOPs: 13.59 ");
      run.tflops_per_step = value;
      recognised = true;
    } else if (auto devices = after(t, "Num_devices: ")) {
      std::optional<double> n = leading_number(*devices);
      if (!n || *n < 1 || *n != std::floor(*n)) {
        return line.malformed("no device count", "Num_devices: 64, shape (1, 64, 1)");
      }
      run.num_devices = static_cast<int64_t>(*n);
      recognised = true;
    } else if (auto using_line = after(t, "Using (GB) ")) {
      PRECAST_ASSIGN_OR_RETURN(std::optional<double> percent, memory_percent(line, *using_line));
      if (percent && (!run.memory_used_percent || *percent > *run.memory_used_percent)) {
        run.memory_used_percent = percent;
      }
      recognised = true;
    } else if (auto memory = after(t, "Total estimated memory size: ")) {
      std::optional<double> gb = leading_number(*memory);
      if (!gb) {
        return line.malformed("no number", "Total estimated memory size: 20.3 GB, estimated ...");
      }
      run.estimated_memory_gb = gb;
      recognised = true;
    } else if (auto param = after(t, "Config param ")) {
      size_t colon = param->find(':');
      if (colon == std::string_view::npos) {
        return line.malformed("no ':' after the key", "Config param learning_rate: 3e-05");
      }
      if (!run.config) run.config.emplace();
      (*run.config)[std::string(trim(param->substr(0, colon)))] =
          std::string(trim(param->substr(colon + 1)));
      recognised = true;
    } else {
      size_t before = run.versions.size();
      read_version_line(run, t);
      recognised = recognised || run.versions.size() != before;
    }
  }
  if (!recognised) {
    return usage_error(fmt::format(
        "{}:1: not a MaxText log or a metrics file: no line of MaxText's formats (`completed "
        "step: ...`, `number parameters: ...`, `Num_devices: ...`) and no JSON object per line; "
        "pass a run directory, a metrics file or a MaxText log",
        name));
  }
  run.steps = last_per_step(std::move(steps));
  return run;
}

Expected<std::vector<StepRecord>> parse_metrics_lines(const std::string& text,
                                                      const std::string& name) {
  std::vector<StepRecord> steps;
  std::vector<std::string_view> lines = split_lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    if (trim(lines[i]).empty()) continue;
    JsonObjectReader reader(lines[i], name, i + 1);
    PRECAST_ASSIGN_OR_RETURN(auto members, reader.read());
    auto number = [&](const char* key) -> std::optional<double> {
      auto it = members.find(key);
      return it == members.end() ? std::nullopt : it->second;
    };
    std::optional<double> step = number("step");
    if (!step || *step != std::floor(*step)) {
      return usage_error(
          fmt::format("{}:{}: no numeric \"step\" in this metrics line; MaxText's "
                      "metrics_file lines end with \"step\": 3.0",
                      name, i + 1));
    }
    StepRecord record;
    record.step = static_cast<int64_t>(*step);
    record.loss = number("learning/loss");
    record.seconds = number("perf/step_time_seconds");
    record.tflops_per_second = number("perf/per_device_tflops_per_sec");
    record.tokens_per_second = number("perf/per_device_tokens_per_sec");
    bool timed = record.seconds && *record.seconds > 0;
    if (!record.tflops_per_second && timed && number("perf/per_device_tflops")) {
      record.tflops_per_second = *number("perf/per_device_tflops") / *record.seconds;
    }
    if (!record.tokens_per_second && timed && number("perf/per_device_tokens")) {
      record.tokens_per_second = *number("perf/per_device_tokens") / *record.seconds;
    }
    steps.push_back(record);
  }
  return last_per_step(std::move(steps));
}

Expected<RunRecord> read_run(const std::string& path) {
  std::error_code ec;
  fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status)) {
    return usage_error(
        fmt::format("{}: no such file or directory; name a run directory, a "
                    "metrics file or a MaxText log",
                    path));
  }
  if (fs::is_directory(status)) return read_run_directory(path, path);
  PRECAST_ASSIGN_OR_RETURN(std::string text, read_text(path));
  if (first_line_is_json(text)) {
    RunRecord run;
    run.source = path;
    run.description = "metrics file";
    PRECAST_ASSIGN_OR_RETURN(run.steps, parse_metrics_lines(text, path));
    return run;
  }
  PRECAST_ASSIGN_OR_RETURN(RunRecord run, parse_maxtext_log(text, path));
  run.source = path;
  return run;
}

}  // namespace precast
