// Role: `precast profile summary TRACE`: reads a Chrome trace (the JSON object or array form of
// the Trace Event Format) and totals its complete events ("ph":"X") by op kind (the event's
// category), by IR op and by scope, with the top ops by time. Durations are summed exactly (in
// nanoseconds, from the microsecond text), so the totals equal the sum of the events' "dur".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/support/Error.h"

namespace precast::runtime {

struct TraceTotal {
  std::string name;
  int64_t events = 0;
  int64_t nanoseconds = 0;
};

struct TraceSummary {
  int64_t step_events = 0;  // events of category "step"
  int64_t step_nanoseconds = 0;
  int64_t entry_events = 0;  // every other complete event
  int64_t entry_nanoseconds = 0;
  // Each sorted by time, longest first (ties by name).
  std::vector<TraceTotal> by_kind;   // the event's "cat"
  std::vector<TraceTotal> by_op;     // args.op, else the event's name
  std::vector<TraceTotal> by_scope;  // args.scope; "(none)" when empty or absent
  std::vector<TraceTotal> by_name;   // the event's name (op and scope)
};

// Summarises the trace text; errors (exit 2) name `file_name`, the event index and the field.
Expected<TraceSummary> summarize_trace(const std::string& text, const std::string& file_name);
// Reads and summarises the file; a missing or unreadable file is an error (exit 2) naming it.
Expected<TraceSummary> summarize_trace_file(const std::string& path);
// The tables `precast profile summary` prints: totals, by kind, by op, by scope, top `top` ops.
std::string format_trace_summary(const TraceSummary& summary, const std::string& file_name,
                                 size_t top = 20);

}  // namespace precast::runtime
