// `precast compare A B`: two runs side by side as a run dashboard — parameters, final loss,
// per-device rates, seconds per step, memory, versions — with B − A per row marked as an
// improvement or a regression, and the config keys whose values differ.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compiler/driver/RunRecord.h"
#include "ir/support/Error.h"

namespace precast {

// --steps=FROM:TO: the steps compared, both ends included; either end may be left out.
struct StepWindow {
  std::optional<int64_t> from, to;
  bool contains(int64_t step) const { return (!from || step >= *from) && (!to || step <= *to); }
};

// Parses "FROM:TO", "FROM:" or ":TO" (non-negative integers, FROM <= TO); errors are kUsage.
Expected<StepWindow> parse_step_window(const std::string& text);

enum class Verdict { kNone, kSame, kChanged, kImprovement, kRegression };
const char* verdict_word(Verdict verdict);  // "", "same", "changed", "improvement", "regression"

struct ComparisonRow {
  std::string name;
  std::string a, b;        // formatted values; "n/a" where a run did not record it
  std::string difference;  // B − A, formatted; empty when the row has none
  Verdict verdict = Verdict::kNone;
};

struct ConfigDifference {
  std::string key;
  std::optional<std::string> a, b;  // absent: the key is not in that run's config
};

// A run's curves inside the window, for the page's charts.
struct RunCurves {
  std::vector<std::pair<double, double>> loss;     // (step, loss)
  std::vector<std::pair<double, double>> seconds;  // (step, seconds), steps after the first
};

struct Comparison {
  std::string a_label, b_label;  // "path (what was read)"
  std::string window_text;       // "all steps" or "steps 5..9"
  std::vector<ComparisonRow> rows;
  bool configs_compared = false;
  std::string config_note;                           // why keys are not compared, when they are not
  std::vector<ConfigDifference> config_differences;  // sorted by key
  RunCurves a_curves, b_curves;
};

// Builds the comparison of the steps inside `window`. A run with steps but none inside the
// window is an error (kUsage) naming the run and its step range. Means of per-step rates and
// seconds leave out each run's first recorded step (MaxText's step 0 includes compilation).
Expected<Comparison> compare_runs(const RunRecord& a, const RunRecord& b, const StepWindow& window);

// The table and the config differences as text; `colour` marks verdicts with ANSI colours
// (green improvement, red regression, yellow changed) instead of plain words only.
std::string format_comparison_text(const Comparison& comparison, bool colour);

}  // namespace precast
