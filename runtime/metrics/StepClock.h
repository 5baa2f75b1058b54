// Role: honest step timing. A step's seconds run from the moment the previous step's loss was
// known (for the first step of the loop: the loop's start) to the moment its own loss is known,
// so whatever the loop does in between (checkpoint writes, eval, log and metrics writes, the next
// batch) is charged to the step during which it happened. The breakdown splits those seconds
// into compute (the step function and reading its metrics), checkpoint, eval and other (the
// rest); the four add up to the step's seconds.
#pragma once

#include <chrono>

namespace precast::runtime {

enum class StepPhase { kCompute, kCheckpoint, kEval };

struct StepTimes {
  double seconds = 0;  // the whole interval
  double compute_seconds = 0, checkpoint_seconds = 0, eval_seconds = 0, other_seconds = 0;
};

class StepClock {
 public:
  using Clock = std::chrono::steady_clock;

  // The first interval begins now.
  void start();
  // Charges `seconds` of the current interval to `phase`.
  void add(StepPhase phase, double seconds);
  // A step's loss is known: closes the current interval, returns its times, opens the next.
  StepTimes finish_step();

 private:
  Clock::time_point interval_start_ = Clock::now();
  double compute_ = 0, checkpoint_ = 0, eval_ = 0;
};

// Measures the scope it lives in and charges it to a phase of `clock`.
class PhaseTimer {
 public:
  PhaseTimer(StepClock& clock, StepPhase phase)
      : clock_(clock), phase_(phase), start_(StepClock::Clock::now()) {}
  ~PhaseTimer() {
    clock_.add(phase_, std::chrono::duration<double>(StepClock::Clock::now() - start_).count());
  }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  StepClock& clock_;
  StepPhase phase_;
  StepClock::Clock::time_point start_;
};

}  // namespace precast::runtime
