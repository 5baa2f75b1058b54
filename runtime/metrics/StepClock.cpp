#include "runtime/metrics/StepClock.h"

namespace precast::runtime {

void StepClock::start() {
  interval_start_ = Clock::now();
  compute_ = checkpoint_ = eval_ = 0;
}

void StepClock::add(StepPhase phase, double seconds) {
  switch (phase) {
    case StepPhase::kCompute:
      compute_ += seconds;
      break;
    case StepPhase::kCheckpoint:
      checkpoint_ += seconds;
      break;
    case StepPhase::kEval:
      eval_ += seconds;
      break;
  }
}

StepTimes StepClock::finish_step() {
  Clock::time_point now = Clock::now();
  StepTimes t;
  t.seconds = std::chrono::duration<double>(now - interval_start_).count();
  t.compute_seconds = compute_;
  t.checkpoint_seconds = checkpoint_;
  t.eval_seconds = eval_;
  // The remainder: the phases are disjoint parts of the interval, so it is never negative
  // beyond rounding, and the four add up to the interval.
  t.other_seconds = t.seconds - compute_ - checkpoint_ - eval_;
  interval_start_ = now;
  compute_ = checkpoint_ = eval_ = 0;
  return t;
}

}  // namespace precast::runtime
