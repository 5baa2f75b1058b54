// The learning-rate schedule the runtime evaluates every step. Its inputs are run-time keys, so
// changing the schedule never needs a recompile. Follows MaxText's create_learning_rate_schedule
// (maxtext-facts §g): linear warmup, then cosine decay, or warmup-stable-decay (wsd).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ir/support/Error.h"

namespace precast {

enum class ScheduleType { kCosine, kWsd };      // lr_schedule_type
enum class WsdDecayStyle { kLinear, kCosine };  // wsd_decay_style

// The schedule's keys, named after configs/base.yml; defaults are base.yml's.
struct ScheduleSpec {
  ScheduleType type = ScheduleType::kCosine;               // lr_schedule_type
  double learning_rate = 3.0e-5;                           // learning_rate (the peak)
  int64_t schedule_steps = 150001;                         // learning_rate_schedule_steps, resolved
  double warmup_steps_fraction = 0.1;                      // warmup_steps_fraction
  double final_fraction = 0.1;                             // learning_rate_final_fraction
  double wsd_decay_steps_fraction = 0.1;                   // wsd_decay_steps_fraction
  WsdDecayStyle wsd_decay_style = WsdDecayStyle::kLinear;  // wsd_decay_style
};

// "cosine" | "wsd"; anything else is a usage error naming lr_schedule_type.
Expected<ScheduleType> parse_schedule_type(std::string_view text);
// "linear" | "cosine"; anything else is a usage error naming wsd_decay_style.
Expected<WsdDecayStyle> parse_wsd_decay_style(std::string_view text);
std::string_view schedule_type_name(ScheduleType type);
std::string_view wsd_decay_style_name(WsdDecayStyle style);

// MaxText's -1 rules (maxtext-facts §a): learning_rate_schedule_steps=-1 takes steps,
// steps=-1 takes learning_rate_schedule_steps; both -1, or anything below -1, is an error.
struct ResolvedSteps {
  int64_t steps = 0;
  int64_t schedule_steps = 0;
};
Expected<ResolvedSteps> resolve_steps(int64_t steps, int64_t learning_rate_schedule_steps);

// Checks every key of `spec`; the error names the key, its value and what to set instead.
Status validate_schedule(const ScheduleSpec& spec);

// Phase lengths in steps, as MaxText computes them (int() truncation of schedule_steps ×
// fraction). Cosine: warmup, then decay = schedule_steps - warmup. Wsd: warmup, stable, decay.
struct SchedulePhases {
  int64_t warmup_steps = 0;
  int64_t stable_steps = 0;  // wsd only; never negative here
  int64_t decay_steps = 0;
};
SchedulePhases schedule_phases(const ScheduleSpec& spec);

// The learning rate of training step `step` (0-based). Precondition: validate_schedule(spec)
// succeeded. Steps at or past schedule_steps get 0, as do negative steps (no such step trains).
double learning_rate_at(const ScheduleSpec& spec, int64_t step);

// `--print-schedule`: a header naming the keys and phases, then an aligned table of
// (step, learning rate) at the phase boundaries and at `samples` evenly spaced steps of
// [0, steps). Precondition: validate_schedule(spec) succeeded.
std::string format_schedule(const ScheduleSpec& spec, int64_t steps, int samples = 11);

}  // namespace precast
