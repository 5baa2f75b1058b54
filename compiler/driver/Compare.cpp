#include "compiler/driver/Compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <map>
#include <set>

namespace precast {
namespace {

enum class Better { kLower, kHigher, kNeither };

std::optional<int64_t> parse_step(const std::string& text) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0) return std::nullopt;
  return value;
}

// The steps of `run` inside the window.
std::vector<StepRecord> in_window(const RunRecord& run, const StepWindow& window) {
  std::vector<StepRecord> steps;
  for (const StepRecord& s : run.steps) {
    if (window.contains(s.step)) steps.push_back(s);
  }
  return steps;
}

// The mean of one per-step figure over the window's steps, the run's first step left out.
std::optional<double> mean_after_first(const RunRecord& run, const std::vector<StepRecord>& steps,
                                       std::optional<double> StepRecord::*field) {
  double sum = 0;
  int64_t count = 0;
  for (const StepRecord& s : steps) {
    if (s.step == run.steps.front().step || !(s.*field)) continue;
    sum += *(s.*field);
    ++count;
  }
  if (count == 0) return std::nullopt;
  return sum / static_cast<double>(count);
}

std::optional<double> final_loss(const std::vector<StepRecord>& steps) {
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (it->loss) return it->loss;
  }
  return std::nullopt;
}

std::string steps_text(const std::vector<StepRecord>& steps) {
  if (steps.empty()) return "none";
  return fmt::format("{}..{} ({})", steps.front().step, steps.back().step, steps.size());
}

// A numeric row: values printed by `format`, B − A with its relative change, and the verdict
// by which direction is better. Equal printed values are "same" (a difference below the
// printed precision is not reported as one).
ComparisonRow numeric_row(const std::string& name, std::optional<double> a, std::optional<double> b,
                          const std::function<std::string(double)>& format, Better better) {
  ComparisonRow row;
  row.name = name;
  row.a = a ? format(*a) : "n/a";
  row.b = b ? format(*b) : "n/a";
  if (!a || !b) return row;
  if (row.a == row.b) {
    row.difference = "0";
    row.verdict = Verdict::kSame;
    return row;
  }
  double difference = *b - *a;
  std::string signed_value = format(std::fabs(difference));
  row.difference = (difference < 0 ? "-" : "+") + signed_value;
  if (*a != 0) row.difference += fmt::format(" ({:+.2f}%)", 100.0 * difference / std::fabs(*a));
  if (better == Better::kNeither) {
    row.verdict = Verdict::kChanged;
  } else {
    bool improved = better == Better::kLower ? difference < 0 : difference > 0;
    row.verdict = improved ? Verdict::kImprovement : Verdict::kRegression;
  }
  return row;
}

ComparisonRow text_row(const std::string& name, const std::optional<std::string>& a,
                       const std::optional<std::string>& b) {
  ComparisonRow row;
  row.name = name;
  row.a = a ? *a : "n/a";
  row.b = b ? *b : "n/a";
  if (a && b) row.verdict = *a == *b ? Verdict::kSame : Verdict::kChanged;
  return row;
}

std::optional<std::string> version_of(const RunRecord& run, const std::string& component) {
  for (const auto& [name, version] : run.versions) {
    if (name == component) return version;
  }
  return std::nullopt;
}

std::optional<double> as_double(std::optional<int64_t> value) {
  if (!value) return std::nullopt;
  return static_cast<double>(*value);
}

std::string label(const RunRecord& run) {
  return fmt::format("{} ({})", run.source, run.description);
}

RunCurves curves(const RunRecord& run, const std::vector<StepRecord>& steps) {
  RunCurves c;
  for (const StepRecord& s : steps) {
    if (s.loss) c.loss.emplace_back(static_cast<double>(s.step), *s.loss);
    if (s.seconds && s.step != run.steps.front().step) {
      c.seconds.emplace_back(static_cast<double>(s.step), *s.seconds);
    }
  }
  return c;
}

void compare_configs(const RunRecord& a, const RunRecord& b, Comparison& out) {
  if (!a.config || !b.config) {
    out.config_note = !a.config && !b.config
                          ? "neither run has a config"
                          : fmt::format("only {} has a config", a.config ? "A" : "B");
    out.config_note +=
        " (config.yml in a run directory, or a log's `Config param` lines): "
        "config keys not compared";
    return;
  }
  out.configs_compared = true;
  std::set<std::string> keys;
  for (const auto& [key, value] : *a.config) keys.insert(key);
  for (const auto& [key, value] : *b.config) keys.insert(key);
  for (const std::string& key : keys) {
    auto in_a = a.config->find(key);
    auto in_b = b.config->find(key);
    ConfigDifference d;
    d.key = key;
    if (in_a != a.config->end()) d.a = in_a->second;
    if (in_b != b.config->end()) d.b = in_b->second;
    if (d.a != d.b) out.config_differences.push_back(d);
  }
}

const char* colour_code(Verdict verdict) {
  switch (verdict) {
    case Verdict::kImprovement:
      return "\033[32m";
    case Verdict::kRegression:
      return "\033[31m";
    case Verdict::kChanged:
      return "\033[33m";
    default:
      return "";
  }
}

}  // namespace

const char* verdict_word(Verdict verdict) {
  switch (verdict) {
    case Verdict::kSame:
      return "same";
    case Verdict::kChanged:
      return "changed";
    case Verdict::kImprovement:
      return "improvement";
    case Verdict::kRegression:
      return "regression";
    case Verdict::kNone:
      break;
  }
  return "";
}

Expected<StepWindow> parse_step_window(const std::string& text) {
  size_t colon = text.find(':');
  auto bad = [&](const std::string& why) {
    return usage_error(
        fmt::format("--steps={}: {}; write FROM:TO (both included), FROM: or :TO, "
                    "e.g. --steps=10:99",
                    text, why));
  };
  if (colon == std::string::npos) return bad("no ':'");
  StepWindow window;
  std::string from = text.substr(0, colon), to = text.substr(colon + 1);
  if (!from.empty()) {
    window.from = parse_step(from);
    if (!window.from) return bad("'" + from + "' is not a step number");
  }
  if (!to.empty()) {
    window.to = parse_step(to);
    if (!window.to) return bad("'" + to + "' is not a step number");
  }
  if (window.from && window.to && *window.from > *window.to) return bad("FROM is after TO");
  return window;
}

Expected<Comparison> compare_runs(const RunRecord& a, const RunRecord& b,
                                  const StepWindow& window) {
  std::vector<StepRecord> a_steps = in_window(a, window), b_steps = in_window(b, window);
  auto outside = [](const char* name, const RunRecord& run) {
    return usage_error(
        fmt::format("{} ({}): no step inside the --steps window; its steps are "
                    "{}..{}",
                    name, run.source, run.steps.front().step, run.steps.back().step));
  };
  if (!a.steps.empty() && a_steps.empty()) return outside("A", a);
  if (!b.steps.empty() && b_steps.empty()) return outside("B", b);
  Comparison out;
  out.a_label = label(a);
  out.b_label = label(b);
  out.window_text =
      !window.from && !window.to
          ? std::string("all steps")
          : fmt::format("steps {}..{}", window.from ? std::to_string(*window.from) : "",
                        window.to ? std::to_string(*window.to) : "");
  auto fixed = [](int digits) {
    return [digits](double v) { return fmt::format("{:.{}f}", v, digits); };
  };
  ComparisonRow steps_row = text_row("steps", steps_text(a_steps), steps_text(b_steps));
  steps_row.verdict = Verdict::kNone;
  out.rows.push_back(steps_row);
  out.rows.push_back(numeric_row("parameters (billion)", a.parameters_billion, b.parameters_billion,
                                 fixed(3), Better::kNeither));
  out.rows.push_back(numeric_row("TFLOPs per step per device", a.tflops_per_step, b.tflops_per_step,
                                 fixed(2), Better::kNeither));
  out.rows.push_back(numeric_row("devices", as_double(a.num_devices), as_double(b.num_devices),
                                 fixed(0), Better::kNeither));
  out.rows.push_back(numeric_row("final loss", final_loss(a_steps), final_loss(b_steps), fixed(4),
                                 Better::kLower));
  out.rows.push_back(numeric_row(
      "mean TFLOP/s/device", mean_after_first(a, a_steps, &StepRecord::tflops_per_second),
      mean_after_first(b, b_steps, &StepRecord::tflops_per_second), fixed(3), Better::kHigher));
  out.rows.push_back(numeric_row(
      "mean tokens/s/device", mean_after_first(a, a_steps, &StepRecord::tokens_per_second),
      mean_after_first(b, b_steps, &StepRecord::tokens_per_second), fixed(1), Better::kHigher));
  out.rows.push_back(
      numeric_row("average s/step", mean_after_first(a, a_steps, &StepRecord::seconds),
                  mean_after_first(b, b_steps, &StepRecord::seconds), fixed(4), Better::kLower));
  out.rows.push_back(numeric_row("memory used (%)", a.memory_used_percent, b.memory_used_percent,
                                 fixed(2), Better::kLower));
  out.rows.push_back(numeric_row("estimated memory (GB)", a.estimated_memory_gb,
                                 b.estimated_memory_gb, fixed(1), Better::kLower));
  std::vector<std::string> components;
  for (const RunRecord* run : {&a, &b}) {
    for (const auto& [name, version] : run->versions) {
      if (std::find(components.begin(), components.end(), name) == components.end()) {
        components.push_back(name);
      }
    }
  }
  if (components.empty()) {
    out.rows.push_back(text_row("versions", std::nullopt, std::nullopt));
  }
  for (const std::string& component : components) {
    out.rows.push_back(
        text_row("version: " + component, version_of(a, component), version_of(b, component)));
  }
  compare_configs(a, b, out);
  out.a_curves = curves(a, a_steps);
  out.b_curves = curves(b, b_steps);
  return out;
}

std::string format_comparison_text(const Comparison& c, bool colour) {
  std::string out = fmt::format(
      "A: {}\nB: {}\nWindow: {}; means leave out each run's first step "
      "(MaxText's step 0 includes compilation)\n\n",
      c.a_label, c.b_label, c.window_text);
  size_t name_width = 4, a_width = 1, b_width = 1, difference_width = 5;
  for (const ComparisonRow& row : c.rows) {
    name_width = std::max(name_width, row.name.size());
    a_width = std::max(a_width, row.a.size());
    b_width = std::max(b_width, row.b.size());
    difference_width = std::max(difference_width, row.difference.size());
  }
  auto line = [&](const std::string& name, const std::string& a, const std::string& b,
                  const std::string& difference, Verdict verdict) {
    std::string text = fmt::format("{:<{}}  {:>{}}  {:>{}}  {:>{}}", name, name_width, a, a_width,
                                   b, b_width, difference, difference_width);
    std::string word = verdict_word(verdict);
    if (!word.empty()) {
      text += "  ";
      const char* code = colour_code(verdict);
      text += colour && *code != '\0' ? fmt::format("{}{}\033[0m", code, word) : word;
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    return text + "\n";
  };
  out += line("", "A", "B", "B - A", Verdict::kNone);
  for (const ComparisonRow& row : c.rows) {
    out += line(row.name, row.a, row.b, row.difference, row.verdict);
  }
  out += "\n";
  if (!c.configs_compared) {
    out += "Config: " + c.config_note + "\n";
  } else if (c.config_differences.empty()) {
    out += "Config keys that differ: none\n";
  } else {
    out += fmt::format("Config keys that differ ({}):\n", c.config_differences.size());
    for (const ConfigDifference& d : c.config_differences) {
      out +=
          fmt::format("  {}: {} -> {}\n", d.key, d.a ? *d.a : "(absent)", d.b ? *d.b : "(absent)");
    }
  }
  return out;
}

}  // namespace precast
