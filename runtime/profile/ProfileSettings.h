// Role: the run-time keys of the profiler and of the hang diagnostics, parsed from a run's
// resolved config (key -> printed value), with MaxText's meaning.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "ir/support/Error.h"

namespace precast::runtime {

struct ProfileSettings {
  // profiler: '' (none) or 'trace' (a Chrome trace JSON per rank). MaxText's other values
  // (xplane, nsys) are refused with "not supported yet".
  bool trace = false;
  // MaxText's window: steps [first_step + skip_first_n_steps_for_profiler, + profiler_steps),
  // clipped to the run's last step, where first_step is the run's first (after a resume).
  int64_t skip_first_n_steps_for_profiler = 1;
  int64_t profiler_steps = 5;
  // collect_stack_trace: every thread's stack to the log when no step completes within
  // stack_trace_interval_seconds, and on a fatal signal.
  bool collect_stack_trace = false;
  int64_t stack_trace_interval_seconds = 600;
};

// The profile keys of `config`; a key the config lacks keeps its default (an artifact compiled
// before the key existed). Errors (exit 2) name the key, the value and what is accepted.
Expected<ProfileSettings> profile_settings(const std::map<std::string, std::string>& config);

// The steps the trace covers, [begin, end): MaxText's first and last profiling steps for a run
// of steps [first_step, steps). Empty (begin == end) when the window starts past the end.
struct ProfileWindow {
  int64_t begin = 0, end = 0;
  bool contains(int64_t step) const { return step >= begin && step < end; }
};
ProfileWindow profile_window(const ProfileSettings& settings, int64_t first_step, int64_t steps);

}  // namespace precast::runtime
