// Role: the hook the training loop and the step program call per step and per program entry, for
// the profiler (TraceRecorder.h) and the hang watchdog (HangWatchdog.h). Nothing is called when
// no observer is given, so a run without them pays one pointer test per step.
#pragma once

#include <cstddef>
#include <cstdint>

namespace precast::runtime {

class StepObserver {
 public:
  virtual ~StepObserver() = default;
  // Before training step `step` runs; true when the observer wants that step's program entries
  // (entry_begin/entry_end around each).
  virtual bool step_begin(int64_t step) = 0;
  // After step `step` has run and its metrics are read.
  virtual void step_end(int64_t step) = 0;
  // Around program entry `index` (the artifact's program order) of a step it asked for.
  virtual void entry_begin(size_t index) = 0;
  virtual void entry_end(size_t index) = 0;
};

}  // namespace precast::runtime
