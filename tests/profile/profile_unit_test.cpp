// runtime/profile without the binaries: MaxText's profile window, the profile keys' errors, the
// summary's exact totals of a hand-written trace and its errors, and a recorded trace that the
// summary reads back with one event per program entry per profiled step.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "runtime/profile/ProfileSettings.h"
#include "runtime/profile/TraceRecorder.h"
#include "runtime/profile/TraceSummary.h"

namespace precast::runtime {
namespace {

TEST(ProfileWindow, MaxTextsFirstAndLastProfilingSteps) {
  ProfileSettings s;  // skip 1, 5 steps: MaxText's defaults
  ProfileWindow w = profile_window(s, 0, 10);
  EXPECT_EQ(w.begin, 1);
  EXPECT_EQ(w.end, 6);           // steps 1..5
  w = profile_window(s, 4, 10);  // resumed at step 4: 5..9
  EXPECT_EQ(w.begin, 5);
  EXPECT_EQ(w.end, 10);
  w = profile_window(s, 0, 3);  // clipped to the last step, 2: steps 1..2
  EXPECT_EQ(w.begin, 1);
  EXPECT_EQ(w.end, 3);
  w = profile_window(s, 0, 1);  // starts past the end: nothing
  EXPECT_EQ(w.end - w.begin, 0);
  EXPECT_FALSE(w.contains(1));
}

TEST(ProfileSettings, ParsesTheKeysAndNamesABadValue) {
  Expected<ProfileSettings> s = profile_settings({{"profiler", "'trace'"},
                                                  {"profiler_steps", "3"},
                                                  {"skip_first_n_steps_for_profiler", "0"},
                                                  {"collect_stack_trace", "True"},
                                                  {"stack_trace_interval_seconds", "7"}});
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_TRUE(s->trace);
  EXPECT_EQ(s->profiler_steps, 3);
  EXPECT_EQ(s->skip_first_n_steps_for_profiler, 0);
  EXPECT_TRUE(s->collect_stack_trace);
  EXPECT_EQ(s->stack_trace_interval_seconds, 7);
  Expected<ProfileSettings> none = profile_settings({{"profiler", "''"}});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->trace);

  Expected<ProfileSettings> xplane = profile_settings({{"profiler", "xplane"}});
  ASSERT_FALSE(xplane.ok());
  EXPECT_EQ(xplane.error().exit_code(), 2);
  EXPECT_EQ(xplane.error().message().rfind("profiler=xplane: not supported yet", 0), 0u);
  Expected<ProfileSettings> zero = profile_settings({{"stack_trace_interval_seconds", "0"}});
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.error().message(), "stack_trace_interval_seconds=0: expected a whole number >= 1");
}

// Durations 1.5 + 2.25 + 0.001 + 10 us of entries (hand sum 13.751 us), two steps of 20 and
// 30.5 us; metadata and instant events are not counted.
constexpr const char* kTrace = R"({"traceEvents": [
  {"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "rank 0"}},
  {"name": "step 1", "cat": "step", "ph": "X", "ts": 100, "dur": 20, "pid": 0, "tid": 1},
  {"name": "dot_general a/b", "cat": "gemm", "ph": "X", "ts": 101, "dur": 1.5, "pid": 0,
   "tid": 1, "args": {"op": "dot_general", "scope": "a/b"}},
  {"name": "add a/b", "cat": "kernel_call", "ph": "X", "ts": 103, "dur": 2.25, "pid": 0,
   "tid": 1, "args": {"op": "add", "scope": "a/b"}},
  {"name": "marker", "ph": "i", "ts": 104, "pid": 0, "tid": 1},
  {"name": "step 2", "cat": "step", "ph": "X", "ts": 200, "dur": 30.5, "pid": 0, "tid": 1},
  {"name": "dot_general a/b", "cat": "gemm", "ph": "X", "ts": 201, "dur": 0.001, "pid": 0,
   "tid": 1, "args": {"op": "dot_general", "scope": "a/b"}},
  {"name": "add", "cat": "kernel_call", "ph": "X", "ts": 203, "dur": 10, "pid": 0, "tid": 1,
   "args": {"op": "add", "scope": ""}}
]})";

TEST(TraceSummary, TotalsAreTheExactSumsOfTheDurations) {
  Expected<TraceSummary> s = summarize_trace(kTrace, "t.json");
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(s->step_events, 2);
  EXPECT_EQ(s->step_nanoseconds, 50'500);
  EXPECT_EQ(s->entry_events, 4);
  EXPECT_EQ(s->entry_nanoseconds, 13'751);
  ASSERT_EQ(s->by_kind.size(), 2u);
  EXPECT_EQ(s->by_kind[0].name, "kernel_call");  // 12.25 us
  EXPECT_EQ(s->by_kind[0].nanoseconds, 12'250);
  EXPECT_EQ(s->by_kind[1].name, "gemm");
  EXPECT_EQ(s->by_kind[1].nanoseconds, 1'501);
  EXPECT_EQ(s->by_kind[1].events, 2);
  ASSERT_EQ(s->by_scope.size(), 2u);
  EXPECT_EQ(s->by_scope[0].name, "(none)");  // 10 us
  EXPECT_EQ(s->by_scope[1].name, "a/b");
  EXPECT_EQ(s->by_scope[1].nanoseconds, 3'751);
  ASSERT_EQ(s->by_name.size(), 3u);
  EXPECT_EQ(s->by_name[0].name, "add");
  std::string text = format_trace_summary(*s, "t.json");
  EXPECT_NE(text.find("  steps: 2 events, 50.500 us (0.051 ms)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  program entries: 4 events, 13.751 us"), std::string::npos) << text;
}

TEST(TraceSummary, ABadTraceIsAUsageErrorNamingTheFileAndTheEvent) {
  Expected<TraceSummary> truncated = summarize_trace(R"({"traceEvents": [)", "t.json");
  ASSERT_FALSE(truncated.ok());
  EXPECT_EQ(truncated.error().exit_code(), 2);
  EXPECT_EQ(truncated.error().message().rfind("t.json: not a Chrome trace", 0), 0u)
      << truncated.error().message();
  Expected<TraceSummary> no_dur =
      summarize_trace(R"([{"ph": "X", "name": "k", "ts": 1}])", "u.json");
  ASSERT_FALSE(no_dur.ok());
  EXPECT_NE(no_dur.error().message().find("complete event 0 (\"k\") has no non-negative \"dur\""),
            std::string::npos)
      << no_dur.error().message();
  Expected<TraceSummary> missing = summarize_trace_file("/nonexistent/trace.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().exit_code(), 2);
  EXPECT_EQ(missing.error().message().rfind("/nonexistent/trace.json: cannot read", 0), 0u);
}

TEST(TraceRecorder, OneEventPerEntryOfEachProfiledStepThatTheSummaryReadsBack) {
  artifact::Artifact a;
  a.program.resize(3);
  a.program[0].kind = artifact::StepKind::kGemm;
  a.program[0].op = "dot_general";
  a.program[0].scope = "decoder/mlp";
  a.program[1].kind = artifact::StepKind::kCollective;
  a.program[1].op = "all_reduce";
  a.program[2].kind = artifact::StepKind::kCopy;
  a.program[2].op = "result_copies";
  ProfileSettings settings;
  settings.trace = true;
  settings.skip_first_n_steps_for_profiler = 1;
  settings.profiler_steps = 2;
  TraceRecorder recorder(a, settings, 5, 3);
  for (int64_t step = 0; step < 5; ++step) {
    bool wanted = recorder.step_begin(step);
    EXPECT_EQ(wanted, step == 1 || step == 2) << step;
    if (wanted) {
      for (size_t i = 0; i < a.program.size(); ++i) {
        recorder.entry_begin(i);
        recorder.entry_end(i);
      }
    }
    recorder.step_end(step);
  }
  EXPECT_EQ(recorder.recorded_steps(), 2);
  std::string json = recorder.json();
  EXPECT_NE(json.find("\"name\": \"dot_general decoder/mlp\", \"cat\": \"gemm\""),
            std::string::npos);
  EXPECT_NE(json.find("\"name\": \"all_reduce\", \"cat\": \"collective\""), std::string::npos);
  EXPECT_NE(json.find("\"pid\": 3"), std::string::npos);
  Expected<TraceSummary> s = summarize_trace(json, "recorded");
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(s->step_events, 2);
  EXPECT_EQ(s->entry_events, 6);  // 3 entries x 2 steps
  EXPECT_EQ(s->by_kind.size(), 3u);
}

}  // namespace
}  // namespace precast::runtime
