// MaxText's learning-rate schedule, evaluated in double precision. The schedule is a list of
// pieces joined the way optax.join_schedules joins them: each piece applies from the step where
// the previous one ends and sees the step count relative to that boundary.
//
// MaxText evaluates the same formulas in float32 (JAX's default), so the learning rate it logs
// can differ from ours in the seventh significant digit; the step program receives ours.
#include "runtime/schedule/Schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <set>

namespace precast {
namespace {

enum class Shape { kLinear, kCosine, kConstant };

struct Piece {
  Shape shape = Shape::kConstant;
  int64_t begin = 0;  // first step the piece applies to
  double init = 0;
  double end = 0;
  int64_t length = 0;  // kLinear: optax's transition_steps; kCosine: MaxText's len_steps
};

// At most warmup + stable + decay. MaxText appends a constant-0 piece from schedule_steps on when
// steps > schedule_steps; learning_rate_at returns 0 there directly.
struct Pieces {
  std::array<Piece, 3> items;
  int count = 0;
};

// optax.linear_schedule: (init - end) * (1 - clamp(s, 0, T) / T) + end. A transition of T <= 0
// steps holds init: this is why MaxText's linear wsd decay over a single step stays at
// learning_rate (transition_steps = decay - 1 = 0) instead of reaching the final value.
double linear_value(const Piece& piece, int64_t s) {
  if (piece.length <= 0) return piece.init;
  auto count = static_cast<double>(std::clamp<int64_t>(s, 0, piece.length));
  double frac = 1.0 - count / static_cast<double>(piece.length);
  return (piece.init - piece.end) * frac + piece.end;
}

// MaxText's make_cos_schedule: pct = s / (len - 1), or 1.0 when len <= 1 (a one-step cosine is
// already at its final value); a = (cos(pi * pct) + 1) / 2; init * a + end * (1 - a).
double cosine_value(const Piece& piece, int64_t s) {
  double pct =
      piece.length > 1 ? static_cast<double>(s) / static_cast<double>(piece.length - 1) : 1.0;
  double a = 0.5 * (std::cos(std::numbers::pi * pct) + 1.0);
  return piece.init * a + piece.end * (1.0 - a);
}

double piece_value(const Piece& piece, int64_t step) {
  int64_t s = step - piece.begin;
  switch (piece.shape) {
    case Shape::kLinear:
      return linear_value(piece, s);
    case Shape::kCosine:
      return cosine_value(piece, s);
    case Shape::kConstant:
      break;
  }
  return piece.init;
}

// Python's int(steps * fraction): the product in double, truncated toward zero.
int64_t fraction_of(int64_t steps, double fraction) {
  return static_cast<int64_t>(static_cast<double>(steps) * fraction);
}

// MaxText's create_learning_rate_schedule, piece by piece. `boundary` is where MaxText's
// boundaries list says the piece ends; the next piece begins there. Pieces of length 0 are left
// out, as MaxText leaves them out.
Pieces build_pieces(const ScheduleSpec& spec) {
  Pieces pieces;
  int64_t begin = 0;
  auto add = [&](Shape shape, double init, double end, int64_t length, int64_t boundary) {
    pieces.items[static_cast<size_t>(pieces.count++)] = Piece{shape, begin, init, end, length};
    begin = boundary;
  };
  const double lr = spec.learning_rate;
  const double final_lr = lr * spec.final_fraction;
  const int64_t total = spec.schedule_steps;
  const int64_t warmup = fraction_of(total, spec.warmup_steps_fraction);

  // Warmup reaches lr at step == warmup (transition_steps = warmup), where the next piece begins
  // at lr too. (Some 2026 MaxText trees used transition_steps = warmup - 1, reaching lr one step
  // earlier; HEAD and maxtext-facts §g use warmup.)
  if (warmup > 0) add(Shape::kLinear, 0.0, lr, warmup, warmup);
  if (spec.type == ScheduleType::kCosine) {
    int64_t cosine_steps = total - warmup;
    if (cosine_steps > 0) add(Shape::kCosine, lr, final_lr, cosine_steps, warmup + cosine_steps);
    return pieces;
  }
  int64_t decay = fraction_of(total, spec.wsd_decay_steps_fraction);
  int64_t stable = total - warmup - decay;
  if (stable > 0) add(Shape::kConstant, lr, lr, 0, warmup + stable);
  if (decay > 0) {
    // Linear decay uses transition_steps = decay - 1, so the last schedule step is at final_lr.
    if (spec.wsd_decay_style == WsdDecayStyle::kLinear) {
      add(Shape::kLinear, lr, final_lr, decay - 1, warmup + stable + decay);
    } else {
      add(Shape::kCosine, lr, final_lr, decay, warmup + stable + decay);
    }
  }
  return pieces;
}

double evaluate(const Pieces& pieces, int64_t step) {
  int chosen = 0;
  for (int i = 1; i < pieces.count; ++i) {
    if (step >= pieces.items[static_cast<size_t>(i)].begin) chosen = i;
  }
  return piece_value(pieces.items[static_cast<size_t>(chosen)], step);
}

Status check_fraction(std::string_view key, double value, std::string_view meaning) {
  if (std::isfinite(value) && value >= 0.0 && value <= 1.0) return Status::success();
  return usage_error(fmt::format("{}={}: must be between 0 and 1 ({}); set e.g. {}=0.1.", key,
                                 value, meaning, key));
}

std::string describe_piece(const Piece& piece) {
  switch (piece.shape) {
    case Shape::kLinear:
      return fmt::format("linear {} -> {}", piece.init, piece.end);
    case Shape::kCosine:
      return fmt::format("cosine {} -> {}", piece.init, piece.end);
    case Shape::kConstant:
      break;
  }
  return fmt::format("constant {}", piece.init);
}

std::string phase_line(int64_t first, int64_t last, const std::string& what) {
  return fmt::format("  steps {:>10} .. {:<10} {}\n", first, last, what);
}

}  // namespace

Expected<ScheduleType> parse_schedule_type(std::string_view text) {
  if (text == "cosine") return ScheduleType::kCosine;
  if (text == "wsd") return ScheduleType::kWsd;
  return usage_error(fmt::format(
      "lr_schedule_type='{}': unknown learning-rate schedule; set lr_schedule_type to 'cosine' "
      "(warmup then cosine decay) or 'wsd' (warmup, stable, decay).",
      text));
}

Expected<WsdDecayStyle> parse_wsd_decay_style(std::string_view text) {
  if (text == "linear") return WsdDecayStyle::kLinear;
  if (text == "cosine") return WsdDecayStyle::kCosine;
  return usage_error(fmt::format(
      "wsd_decay_style='{}': unknown decay style; set wsd_decay_style to 'linear' or 'cosine'.",
      text));
}

std::string_view schedule_type_name(ScheduleType type) {
  return type == ScheduleType::kWsd ? "wsd" : "cosine";
}

std::string_view wsd_decay_style_name(WsdDecayStyle style) {
  return style == WsdDecayStyle::kCosine ? "cosine" : "linear";
}

Expected<ResolvedSteps> resolve_steps(int64_t steps, int64_t learning_rate_schedule_steps) {
  if (steps == -1 && learning_rate_schedule_steps == -1) {
    return usage_error(
        "steps=-1 and learning_rate_schedule_steps=-1: each takes the other's value, so at least "
        "one must be set to a step count.");
  }
  if (steps < -1) {
    return usage_error(fmt::format(
        "steps={}: must be -1 (use learning_rate_schedule_steps) or a step count >= 0.", steps));
  }
  if (learning_rate_schedule_steps < -1) {
    return usage_error(
        fmt::format("learning_rate_schedule_steps={}: must be -1 (use steps) or a step count >= 0.",
                    learning_rate_schedule_steps));
  }
  ResolvedSteps resolved{steps, learning_rate_schedule_steps};
  if (resolved.schedule_steps == -1) resolved.schedule_steps = steps;
  if (resolved.steps == -1) resolved.steps = learning_rate_schedule_steps;
  return resolved;
}

Status validate_schedule(const ScheduleSpec& spec) {
  if (!std::isfinite(spec.learning_rate) || spec.learning_rate < 0.0) {
    return usage_error(fmt::format(
        "learning_rate={}: the peak learning rate must be a finite number >= 0; set e.g. "
        "learning_rate=3e-05.",
        spec.learning_rate));
  }
  if (spec.schedule_steps < 0) {
    return usage_error(fmt::format(
        "learning_rate_schedule_steps={}: must be a step count >= 0 (-1, meaning steps, is "
        "resolved before the schedule is built); set it to the schedule's length in steps.",
        spec.schedule_steps));
  }
  // MaxText accepts any float here; a negative final fraction would make the learning rate
  // negative (gradient ascent), which is never what a run means, so we refuse it.
  if (!std::isfinite(spec.final_fraction) || spec.final_fraction < 0.0) {
    return usage_error(fmt::format(
        "learning_rate_final_fraction={}: the final learning rate is learning_rate times this "
        "fraction and must be a finite number >= 0; set e.g. learning_rate_final_fraction=0.1.",
        spec.final_fraction));
  }
  PRECAST_RETURN_IF_ERROR(check_fraction("warmup_steps_fraction", spec.warmup_steps_fraction,
                                         "the share of learning_rate_schedule_steps spent "
                                         "warming up"));
  PRECAST_RETURN_IF_ERROR(check_fraction("wsd_decay_steps_fraction", spec.wsd_decay_steps_fraction,
                                         "the share of learning_rate_schedule_steps spent "
                                         "decaying in the wsd schedule"));
  // MaxText's own check (types.py): warmup and decay may not overlap in a wsd schedule.
  double both = spec.warmup_steps_fraction + spec.wsd_decay_steps_fraction;
  if (spec.type == ScheduleType::kWsd && both > 1.0) {
    return usage_error(fmt::format(
        "warmup_steps_fraction={} + wsd_decay_steps_fraction={} = {}: the wsd schedule's warmup "
        "and decay overlap; lower one of them so that they sum to at most 1.",
        spec.warmup_steps_fraction, spec.wsd_decay_steps_fraction, both));
  }
  return Status::success();
}

SchedulePhases schedule_phases(const ScheduleSpec& spec) {
  SchedulePhases phases;
  phases.warmup_steps = fraction_of(spec.schedule_steps, spec.warmup_steps_fraction);
  if (spec.type == ScheduleType::kCosine) {
    phases.decay_steps = spec.schedule_steps - phases.warmup_steps;
    return phases;
  }
  phases.decay_steps = fraction_of(spec.schedule_steps, spec.wsd_decay_steps_fraction);
  phases.stable_steps =
      std::max<int64_t>(0, spec.schedule_steps - phases.warmup_steps - phases.decay_steps);
  return phases;
}

double learning_rate_at(const ScheduleSpec& spec, int64_t step) {
  // From schedule_steps on MaxText joins a constant 0 (when steps > schedule_steps; otherwise
  // training never reaches those steps), and no step before 0 trains.
  if (step < 0 || step >= spec.schedule_steps) return 0.0;
  return evaluate(build_pieces(spec), step);
}

std::string format_schedule(const ScheduleSpec& spec, int64_t steps, int samples) {
  std::string out = fmt::format(
      "Learning-rate schedule: lr_schedule_type={}, learning_rate={}, "
      "learning_rate_final_fraction={}, warmup_steps_fraction={}",
      schedule_type_name(spec.type), spec.learning_rate, spec.final_fraction,
      spec.warmup_steps_fraction);
  if (spec.type == ScheduleType::kWsd) {
    out += fmt::format(", wsd_decay_steps_fraction={}, wsd_decay_style={}",
                       spec.wsd_decay_steps_fraction, wsd_decay_style_name(spec.wsd_decay_style));
  }
  out += fmt::format(", learning_rate_schedule_steps={}, steps={}\n", spec.schedule_steps, steps);

  Pieces pieces = build_pieces(spec);
  std::set<int64_t> rows{0, spec.schedule_steps - 1, spec.schedule_steps, steps - 1};
  for (int i = 0; i < pieces.count; ++i) {
    const Piece& piece = pieces.items[static_cast<size_t>(i)];
    int64_t next =
        i + 1 < pieces.count ? pieces.items[static_cast<size_t>(i + 1)].begin : spec.schedule_steps;
    out += phase_line(piece.begin, next - 1, describe_piece(piece));
    rows.insert(piece.begin);
  }
  if (steps > spec.schedule_steps) {
    out += phase_line(spec.schedule_steps, steps - 1, "constant 0");
  }
  if (steps <= 0) return out + "  (no training steps)\n";

  for (int i = 0; i < samples && samples > 1; ++i) {
    rows.insert((steps - 1) * i / (samples - 1));
  }
  out += fmt::format("  {:>10}  {}\n", "step", "learning rate");
  for (int64_t step : rows) {
    if (step < 0 || step >= steps) continue;
    out += fmt::format("  {:>10}  {:.6e}\n", step, learning_rate_at(spec, step));
  }
  return out;
}

}  // namespace precast
