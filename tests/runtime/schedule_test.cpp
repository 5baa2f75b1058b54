// The learning-rate schedule against MaxText's create_learning_rate_schedule (maxtext-facts §g):
// every boundary of the cosine and wsd schedules, the -1 step rules (§a) and each error path.
//
// Expected values are worked by hand below. Where a cosine is not at a round angle the literal
// comes from an independent Python transcription of optax.linear_schedule, optax.join_schedules
// and MaxText's make_cos_schedule, run with /usr/bin/python3 (double precision), e.g.
//   python3 -c "import math; a=0.5*(math.cos(math.pi/99)+1); print(repr(1e-3*a+1e-4*(1-a)))"
// Notation: S = learning_rate_schedule_steps, W = int(S * warmup_steps_fraction), lr = peak,
// final = lr * learning_rate_final_fraction; a piece sees s = step - (its first step).
// Warmup: (0 - lr) * (1 - s/W) + lr.  Cosine over L steps: a = (cos(pi * s/(L-1)) + 1) / 2,
// lr*a + final*(1-a).  Wsd linear decay over D steps: (lr - final) * (1 - s/(D-1)) + final.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "runtime/schedule/Schedule.h"

namespace precast {
namespace {

// Exact for 0 (the warmup start and the tail must be exactly 0), 1e-12 relative otherwise.
void expect_lr(const ScheduleSpec& spec, int64_t step, double expected) {
  double got = learning_rate_at(spec, step);
  if (expected == 0.0) {
    EXPECT_EQ(got, 0.0) << "step " << step;
  } else {
    EXPECT_NEAR(got, expected, 1e-12 * std::abs(expected)) << "step " << step;
  }
}

ScheduleSpec cosine(double lr, int64_t schedule_steps, double warmup_fraction) {
  ScheduleSpec spec;
  spec.type = ScheduleType::kCosine;
  spec.learning_rate = lr;
  spec.schedule_steps = schedule_steps;
  spec.warmup_steps_fraction = warmup_fraction;
  spec.final_fraction = 0.1;
  EXPECT_TRUE(validate_schedule(spec).ok());
  return spec;
}

ScheduleSpec wsd(int64_t schedule_steps, double decay_fraction, WsdDecayStyle style) {
  ScheduleSpec spec;
  spec.type = ScheduleType::kWsd;
  spec.learning_rate = 1e-3;
  spec.schedule_steps = schedule_steps;
  spec.warmup_steps_fraction = 0.1;
  spec.final_fraction = 0.1;
  spec.wsd_decay_steps_fraction = decay_fraction;
  spec.wsd_decay_style = style;
  EXPECT_TRUE(validate_schedule(spec).ok());
  return spec;
}

std::string error_of(const ScheduleSpec& spec) {
  Status status = validate_schedule(spec);
  EXPECT_FALSE(status.ok());
  return status.ok() ? "" : status.error().message();
}

// lr 1e-3, S 101: W = int(101 * 0.1 = 10.1) = 10; cosine over L = 91 steps (s / 90).
TEST(CosineSchedule, EveryPhase) {
  ScheduleSpec spec = cosine(1e-3, 101, 0.1);
  SchedulePhases phases = schedule_phases(spec);
  EXPECT_EQ(phases.warmup_steps, 10);
  EXPECT_EQ(phases.stable_steps, 0);
  EXPECT_EQ(phases.decay_steps, 91);

  expect_lr(spec, 0, 0.0);       // warmup start: (0 - lr) * (1 - 0) + lr = 0
  expect_lr(spec, 3, 3e-4);      // (0 - lr) * (1 - 3/10) + lr = 0.3 lr
  expect_lr(spec, 5, 5e-4);      // warmup middle: 0.5 lr
  expect_lr(spec, 9, 9e-4);      // last warmup step: 0.9 lr
  expect_lr(spec, 10, 1e-3);     // step == W: the cosine at s = 0, a = 1: lr
  expect_lr(spec, 40, 7.75e-4);  // s 30, pct 1/3, cos 0.5, a 0.75: 0.75 lr + 0.25 * 0.1 lr
  expect_lr(spec, 55, 5.5e-4);   // cosine middle: s 45, pct 1/2, a 1/2: 0.5 lr + 0.05 lr
  expect_lr(spec, 70, 3.25e-4);  // s 60, pct 2/3, cos -0.5, a 0.25: 0.25 lr + 0.075 lr
  expect_lr(spec, 100, 1e-4);    // last schedule step: s 90, pct 1, a 0: final = 0.1 lr
  expect_lr(spec, 101, 0.0);     // past the end (steps > S joins a constant 0)
  expect_lr(spec, 119, 0.0);
  expect_lr(spec, 1000000, 0.0);
  expect_lr(spec, -1, 0.0);  // no step before 0 trains
}

// base.yml's defaults: lr 3e-5, S = steps = 150001, W = int(15000.1) = 15000, L = 135001.
TEST(CosineSchedule, BaseYmlDefaults) {
  ScheduleSpec spec;  // every field at its base.yml default
  ASSERT_TRUE(validate_schedule(spec).ok());
  EXPECT_EQ(schedule_phases(spec).warmup_steps, 15000);
  EXPECT_EQ(schedule_phases(spec).decay_steps, 135001);
  expect_lr(spec, 0, 0.0);
  expect_lr(spec, 7500, 1.5e-5);      // 0.5 lr
  expect_lr(spec, 14999, 2.9998e-5);  // 14999/15000 lr
  expect_lr(spec, 15000, 3e-5);       // lr
  expect_lr(spec, 82500, 1.65e-5);    // s 67500 = 135000/2: 0.55 lr
  expect_lr(spec, 150000, 3e-6);      // final
}

// warmup_steps_fraction 0: no warmup piece, so step 0 is already at lr (not 0).
TEST(CosineSchedule, NoWarmup) {
  ScheduleSpec spec = cosine(1e-3, 100, 0.0);
  EXPECT_EQ(schedule_phases(spec).warmup_steps, 0);
  expect_lr(spec, 0, 1e-3);
  // s 1 of L 100: a = (cos(pi/99) + 1)/2; lr*a + 0.1 lr (1 - a) (Python, see the file header).
  expect_lr(spec, 1, 9.997734440724334e-4);
  expect_lr(spec, 99, 1e-4);
  expect_lr(spec, 100, 0.0);
}

// Tiny schedules: a cosine of L <= 1 steps uses pct = 1.0, i.e. it is already at final.
TEST(CosineSchedule, TinySchedules) {
  ScheduleSpec one = cosine(1e-3, 1, 0.1);  // W = int(0.1) = 0, L = 1
  expect_lr(one, 0, 1e-4);
  expect_lr(one, 1, 0.0);

  ScheduleSpec two = cosine(1e-3, 2, 0.1);  // W = 0, L = 2: pct = s / 1
  expect_lr(two, 0, 1e-3);
  expect_lr(two, 1, 1e-4);

  ScheduleSpec late = cosine(1e-3, 10, 0.9);  // W = int(9.0) = 9, L = 1
  expect_lr(late, 0, 0.0);
  expect_lr(late, 8, 8.888888888888888e-4);  // 8/9 lr
  expect_lr(late, 9, 1e-4);                  // step == W, but L = 1: final, not lr
  expect_lr(late, 10, 0.0);

  ScheduleSpec empty = cosine(1e-3, 0, 0.1);  // S 0: nothing but the constant 0
  expect_lr(empty, 0, 0.0);
}

// warmup_steps_fraction 1: the warmup is the whole schedule and never quite reaches lr.
TEST(CosineSchedule, AllWarmup) {
  ScheduleSpec spec = cosine(1e-3, 10, 1.0);  // W = 10, L = 0 (no cosine piece)
  expect_lr(spec, 0, 0.0);
  expect_lr(spec, 5, 5e-4);
  expect_lr(spec, 9, 9e-4);
  expect_lr(spec, 10, 0.0);
}

// lr 1e-3, S 100: W = 10, D = int(100 * 0.11 = 11.0) = 11, stable = 100 - 10 - 11 = 79, so the
// decay covers steps 89..99.
TEST(WsdSchedule, LinearDecay) {
  ScheduleSpec spec = wsd(100, 0.11, WsdDecayStyle::kLinear);
  SchedulePhases phases = schedule_phases(spec);
  EXPECT_EQ(phases.warmup_steps, 10);
  EXPECT_EQ(phases.stable_steps, 79);
  EXPECT_EQ(phases.decay_steps, 11);

  expect_lr(spec, 0, 0.0);
  expect_lr(spec, 5, 5e-4);
  expect_lr(spec, 10, 1e-3);  // step == W: the stable piece
  expect_lr(spec, 50, 1e-3);
  expect_lr(spec, 88, 1e-3);    // last stable step
  expect_lr(spec, 89, 1e-3);    // decay s 0: (lr - final) * 1 + final
  expect_lr(spec, 91, 8.2e-4);  // s 2 of D-1 = 10: 0.9e-3 * 0.8 + 1e-4
  expect_lr(spec, 94, 5.5e-4);  // decay middle, s 5: 0.9e-3 * 0.5 + 1e-4
  expect_lr(spec, 99, 1e-4);    // last schedule step: final
  expect_lr(spec, 100, 0.0);    // past the end
  expect_lr(spec, 109, 0.0);
}

// Same phases; the decay is MaxText's cosine over L = D = 11 steps (s / 10).
TEST(WsdSchedule, CosineDecay) {
  ScheduleSpec spec = wsd(100, 0.11, WsdDecayStyle::kCosine);
  expect_lr(spec, 0, 0.0);
  expect_lr(spec, 5, 5e-4);
  expect_lr(spec, 10, 1e-3);
  expect_lr(spec, 88, 1e-3);
  expect_lr(spec, 89, 1e-3);  // s 0, a 1
  // s 2, pct 0.2: cos(36 deg) = (1 + sqrt 5)/4, a = (5 + sqrt 5)/8, lr (0.1 + 0.9 a)
  expect_lr(spec, 91, 1e-3 * (0.1 + 0.9 * (5.0 + std::sqrt(5.0)) / 8.0));
  expect_lr(spec, 91, 9.140576474687263e-4);  // the same, from the Python reference
  expect_lr(spec, 94, 5.5e-4);                // s 5, pct 1/2, a 1/2: 0.55 lr
  expect_lr(spec, 99, 1e-4);                  // s 10, pct 1, a 0: final
  expect_lr(spec, 100, 0.0);
}

// S 10: W = int(1.0) = 1, D = int(1.0) = 1, stable 8. A one-step linear decay has optax
// transition_steps = D - 1 = 0, which holds init: MaxText's last step stays at lr. A one-step
// cosine decay has pct = 1.0: final.
TEST(WsdSchedule, OneStepDecay) {
  ScheduleSpec linear = wsd(10, 0.1, WsdDecayStyle::kLinear);
  expect_lr(linear, 0, 0.0);
  expect_lr(linear, 1, 1e-3);
  expect_lr(linear, 8, 1e-3);
  expect_lr(linear, 9, 1e-3);
  expect_lr(linear, 10, 0.0);

  ScheduleSpec cosine_decay = wsd(10, 0.1, WsdDecayStyle::kCosine);
  expect_lr(cosine_decay, 8, 1e-3);
  expect_lr(cosine_decay, 9, 1e-4);
  expect_lr(cosine_decay, 10, 0.0);

  ScheduleSpec no_decay = wsd(10, 0.0, WsdDecayStyle::kLinear);  // D 0: stable to the end
  expect_lr(no_decay, 9, 1e-3);
  expect_lr(no_decay, 10, 0.0);
}

TEST(WsdSchedule, NoWarmup) {
  ScheduleSpec spec = wsd(100, 0.11, WsdDecayStyle::kLinear);
  spec.warmup_steps_fraction = 0.0;  // stable 89 from step 0, decay 89..99 as before
  ASSERT_TRUE(validate_schedule(spec).ok());
  expect_lr(spec, 0, 1e-3);
  expect_lr(spec, 94, 5.5e-4);
  expect_lr(spec, 99, 1e-4);
}

// maxtext-facts §a: schedule -1 takes steps, steps -1 takes the schedule, not both.
TEST(ScheduleSteps, MinusOneRules) {
  Expected<ResolvedSteps> from_steps = resolve_steps(150001, -1);
  ASSERT_TRUE(from_steps.ok());
  EXPECT_EQ(from_steps->steps, 150001);
  EXPECT_EQ(from_steps->schedule_steps, 150001);

  Expected<ResolvedSteps> from_schedule = resolve_steps(-1, 500);
  ASSERT_TRUE(from_schedule.ok());
  EXPECT_EQ(from_schedule->steps, 500);
  EXPECT_EQ(from_schedule->schedule_steps, 500);

  Expected<ResolvedSteps> both = resolve_steps(200, 100);  // steps 100..199 train at lr 0
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(both->steps, 200);
  EXPECT_EQ(both->schedule_steps, 100);

  Expected<ResolvedSteps> neither = resolve_steps(-1, -1);
  ASSERT_FALSE(neither.ok());
  EXPECT_EQ(neither.error().code(), ExitCode::kUsage);
  EXPECT_NE(neither.error().message().find("steps=-1 and learning_rate_schedule_steps=-1"),
            std::string::npos);
  EXPECT_FALSE(resolve_steps(-2, 10).ok());
  EXPECT_FALSE(resolve_steps(10, -7).ok());
}

TEST(ScheduleSpecParsing, NamesRoundTripAndUnknownNamesFail) {
  EXPECT_EQ(*parse_schedule_type("cosine"), ScheduleType::kCosine);
  EXPECT_EQ(*parse_schedule_type("wsd"), ScheduleType::kWsd);
  EXPECT_EQ(schedule_type_name(ScheduleType::kWsd), "wsd");
  EXPECT_EQ(*parse_wsd_decay_style("linear"), WsdDecayStyle::kLinear);
  EXPECT_EQ(*parse_wsd_decay_style("cosine"), WsdDecayStyle::kCosine);
  EXPECT_EQ(wsd_decay_style_name(WsdDecayStyle::kCosine), "cosine");

  Expected<ScheduleType> bad_type = parse_schedule_type("linear");
  ASSERT_FALSE(bad_type.ok());
  EXPECT_EQ(bad_type.error().code(), ExitCode::kUsage);
  EXPECT_NE(bad_type.error().message().find("lr_schedule_type='linear'"), std::string::npos);
  EXPECT_NE(bad_type.error().message().find("'wsd'"), std::string::npos);

  Expected<WsdDecayStyle> bad_style = parse_wsd_decay_style("exp");
  ASSERT_FALSE(bad_style.ok());
  EXPECT_NE(bad_style.error().message().find("wsd_decay_style='exp'"), std::string::npos);
}

TEST(ScheduleValidation, EachBadKeyIsNamedWithItsValue) {
  ScheduleSpec spec;
  spec.learning_rate = -1e-3;
  EXPECT_NE(error_of(spec).find("learning_rate=-0.001:"), std::string::npos);
  spec.learning_rate = NAN;
  EXPECT_NE(error_of(spec).find("learning_rate=nan:"), std::string::npos);

  spec = ScheduleSpec();
  spec.schedule_steps = -1;
  EXPECT_NE(error_of(spec).find("learning_rate_schedule_steps=-1:"), std::string::npos);

  spec = ScheduleSpec();
  spec.warmup_steps_fraction = 1.5;
  std::string message = error_of(spec);
  EXPECT_NE(message.find("warmup_steps_fraction=1.5: must be between 0 and 1"), std::string::npos);
  EXPECT_NE(message.find("set e.g. warmup_steps_fraction=0.1"), std::string::npos);

  spec = ScheduleSpec();
  spec.wsd_decay_steps_fraction = -0.1;
  EXPECT_NE(error_of(spec).find("wsd_decay_steps_fraction=-0.1:"), std::string::npos);

  spec = ScheduleSpec();
  spec.final_fraction = -0.5;
  EXPECT_NE(error_of(spec).find("learning_rate_final_fraction=-0.5:"), std::string::npos);

  // MaxText's wsd check: warmup + decay fractions may not exceed 1 (cosine ignores the decay).
  spec = ScheduleSpec();
  spec.warmup_steps_fraction = 0.6;
  spec.wsd_decay_steps_fraction = 0.5;
  EXPECT_TRUE(validate_schedule(spec).ok());
  spec.type = ScheduleType::kWsd;
  EXPECT_NE(error_of(spec).find("warmup_steps_fraction=0.6 + wsd_decay_steps_fraction=0.5"),
            std::string::npos);
  EXPECT_EQ(validate_schedule(spec).error().code(), ExitCode::kUsage);

  spec.wsd_decay_steps_fraction = 0.4;  // exactly 1 is allowed: stable is 0 steps
  EXPECT_TRUE(validate_schedule(spec).ok());
}

TEST(ScheduleTable, ShowsPhasesAndBoundaryRows) {
  ScheduleSpec spec = cosine(1e-3, 101, 0.1);
  std::string table = format_schedule(spec, 120, 5);
  EXPECT_NE(table.find("lr_schedule_type=cosine, learning_rate=0.001"), std::string::npos);
  EXPECT_NE(table.find("learning_rate_schedule_steps=101, steps=120"), std::string::npos);
  EXPECT_NE(table.find("steps          0 .. 9          linear 0 -> 0.001"), std::string::npos)
      << table;
  EXPECT_NE(table.find("steps         10 .. 100        cosine 0.001 -> 0.0001"), std::string::npos)
      << table;
  EXPECT_NE(table.find("steps        101 .. 119        constant 0"), std::string::npos) << table;
  // Rows: the boundaries 0, 10, 100 (last schedule step), 101 (first step at 0), 119 (last
  // step), and 5 samples of [0, 120): 119 * i / 4 = 0, 29, 59, 89, 119. Eight distinct steps.
  EXPECT_NE(table.find("           0  0.000000e+00\n"), std::string::npos) << table;
  EXPECT_NE(table.find("          10  1.000000e-03\n"), std::string::npos) << table;
  EXPECT_EQ(table.find("          40  "), std::string::npos) << table;  // not a row
  EXPECT_NE(table.find("          59  "), std::string::npos) << table;
  EXPECT_NE(table.find("         100  1.000000e-04\n"), std::string::npos) << table;
  EXPECT_NE(table.find("         101  0.000000e+00\n"), std::string::npos) << table;
  EXPECT_NE(table.find("         119  0.000000e+00\n"), std::string::npos) << table;
  size_t header = table.find("step  learning rate\n");
  ASSERT_NE(header, std::string::npos) << table;
  std::string rows = table.substr(header);
  EXPECT_EQ(std::count(rows.begin(), rows.end(), '\n'), 1 + 8) << table;  // header + 8 rows
}

TEST(ScheduleTable, WsdHeaderNamesTheDecay) {
  ScheduleSpec spec = wsd(100, 0.11, WsdDecayStyle::kCosine);
  std::string table = format_schedule(spec, 100);
  EXPECT_NE(table.find("wsd_decay_steps_fraction=0.11, wsd_decay_style=cosine"), std::string::npos);
  EXPECT_NE(table.find("steps         10 .. 88         constant 0.001"), std::string::npos)
      << table;
  EXPECT_NE(table.find("steps         89 .. 99         cosine 0.001 -> 0.0001"), std::string::npos)
      << table;
  EXPECT_EQ(table.find("constant 0\n"), std::string::npos) << table;  // steps == S: no tail

  std::string empty = format_schedule(spec, 0);
  EXPECT_TRUE(empty.ends_with("  (no training steps)\n")) << empty;
}

}  // namespace
}  // namespace precast
