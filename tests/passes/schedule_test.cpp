// Memory-aware scheduling: on a hand-built function whose order keeps two big buffers alive the
// scheduler finds the order that keeps one (exact bytes from plan_memory, counted by hand); on
// train steps the order is a valid, deterministic topological order, the rebuilt function
// verifies, parses back and computes bitwise the same results, and the temp bytes never grow.
// The last tests print what scheduling saves on real model sizes and how long it takes.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "compiler/Pipeline.h"
#include "compiler/analysis/BufferAssignment.h"
#include "compiler/analysis/Bytes.h"
#include "compiler/autodiff/Remat.h"
#include "compiler/autodiff/TrainStep.h"
#include "compiler/driver/Analyze.h"
#include "compiler/frontend/Frontend.h"
#include "compiler/passes/AssignBuffers.h"
#include "compiler/passes/Schedule.h"
#include "ir/Builder.h"
#include "ir/Interpreter.h"
#include "ir/Parser.h"
#include "ir/PassManager.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"
#include "ir/passes/IrPasses.h"
#include "tests/support/ConfigTestUtil.h"
#include "tests/support/Random.h"

namespace precast {
namespace {

using ir::DType;
using ir::HostTensor;
using ir::OpIndex;
using ir::TensorType;
using ir::Value;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int64_t type_bytes(const ir::Function& f, Value v) {
  return f.type(v).byte_size();
}

// Every op once, each after the ops defining its operands.
void expect_topological(const ir::Function& f, const std::vector<OpIndex>& order) {
  ASSERT_EQ(order.size(), f.num_ops());
  std::vector<bool> placed(f.num_ops(), false);
  for (OpIndex i : order) {
    ASSERT_LT(i, f.num_ops());
    ASSERT_FALSE(placed[i]) << "op " << i << " twice";
    for (Value u : f.operands(f.op(i))) {
      if (f.is_param(u)) continue;
      ASSERT_TRUE(placed[f.defining_op(u)]) << "op " << i << " too early";
    }
    placed[i] = true;
  }
}

// Two independent chains, each a big buffer reduced to a scalar, written as "allocate A,
// allocate B, reduce A, reduce B": both 8 KiB buffers are live together.
ir::Module two_chains() {
  ir::Module m;
  ir::Function& f = m.add_function("two_chains");
  ir::Builder b(f);
  Value x = b.param(TensorType{DType::kF32, {1024}}, "x");
  Value y = b.param(TensorType{DType::kF32, {1024}}, "y");
  Value xs[] = {x, x};
  Value ys[] = {y, y};
  Value big_a = b.concatenate(xs, 0);  // f32[2048]: 8 KiB, not fusible
  Value big_b = b.concatenate(ys, 0);
  Value sum_a = b.reduce_sum(big_a, {0});
  Value sum_b = b.reduce_sum(big_b, {0});
  b.set_results({b.add(sum_a, sum_b)});
  EXPECT_TRUE(b.ok());
  return m;
}

TEST(Schedule, TwoChainsKeepOneBigBufferLiveInsteadOfTwo) {
  ir::Module m = two_chains();
  const ir::Function& f = m.function(0);
  // Original order, positions 0..4: A [0,2], B [1,3], rA [2,4], rB [3,4] (scalars, 64 aligned).
  // Largest first: A at 0, B at 8192 (overlaps A); rA overlaps both -> 16384; rB fits the gap
  // A left at 0. Arena 16384 + 64; live at op 2: A + B + rA = 16388 bytes.
  MemoryPlan before = plan_memory(f);
  EXPECT_EQ(before.temp_bytes, 16448);
  EXPECT_EQ(before.peak_live_bytes, 16388);

  // A frees 8 KiB when reduced: the reduction runs as soon as it is ready.
  std::function<int64_t(Value)> bytes = [&](Value v) { return type_bytes(f, v); };
  std::vector<OpIndex> order = memory_aware_order(f, bytes);
  EXPECT_EQ(order, (std::vector<OpIndex>{0, 2, 1, 3, 4}));

  Expected<ScheduleResult> result = schedule_for_memory(m, 0);
  ASSERT_TRUE(result.ok()) << result.error().message();
  EXPECT_TRUE(result->changed);
  // New order A [0,1], rA [1,4], B [2,3], rB [3,4]: A and B share offset 0; rA at 8192, rB
  // (overlapping B and rA) at 8256. Arena 8320; live at op 3: B + rA + rB = 8200 bytes.
  MemoryPlan after = plan_memory(m.function(0));
  EXPECT_EQ(after.temp_bytes, 8320);
  EXPECT_EQ(after.peak_live_bytes, 8200);
  EXPECT_EQ(result->temp_bytes_before, 16448);
  EXPECT_EQ(result->temp_bytes_after, 8320);
  EXPECT_TRUE(ir::verify_function(m.function(0)).ok());

  // A second schedule finds nothing better and leaves the module alone.
  std::string text = ir::print_module(m);
  Expected<ScheduleResult> again = schedule_for_memory(m, 0);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->changed);
  EXPECT_EQ(again->window, -1);
  EXPECT_EQ(ir::print_module(m), text);
}

TEST(Schedule, FusedValuesAreReadThroughAndPlacedBeforeTheirReader) {
  // exp(A) is fused into the reduction: A stays live until the reduction, and the exp moves with
  // it rather than being scheduled (and judged) on its own.
  ir::Module m;
  ir::Function& f = m.add_function("fused");
  ir::Builder b(f);
  Value x = b.param(TensorType{DType::kF32, {1024}}, "x");
  Value y = b.param(TensorType{DType::kF32, {1024}}, "y");
  Value xs[] = {x, x};
  Value ys[] = {y, y};
  Value big_a = b.concatenate(xs, 0);
  Value big_b = b.concatenate(ys, 0);
  Value exp_a = b.exp(big_a);
  Value sum_a = b.reduce_sum(exp_a, {0});
  Value sum_b = b.reduce_sum(big_b, {0});
  b.set_results({b.add(sum_a, sum_b)});
  ASSERT_TRUE(b.ok());
  std::vector<bool> materialized = materialized_values(f);
  EXPECT_FALSE(materialized[exp_a.id]);
  EXPECT_TRUE(materialized[big_a.id]);

  ScheduleOptions options;
  options.buffers = value_buffers(f);
  std::function<int64_t(Value)> bytes = [&](Value v) { return type_bytes(f, v); };
  EXPECT_EQ(memory_aware_order(f, bytes, options), (std::vector<OpIndex>{0, 2, 3, 1, 4, 5}));
  Expected<ScheduleResult> result = schedule_for_memory(m, 0);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->temp_bytes_before, 16448);
  EXPECT_EQ(result->temp_bytes_after, 8320);
}

TEST(Schedule, RejectsAnOrderThatIsNotTopological) {
  ir::Module m = two_chains();
  Expected<bool> swapped = apply_schedule(m, 0, {2, 0, 1, 3, 4});
  ASSERT_FALSE(swapped.ok());
  EXPECT_EQ(swapped.error().code(), ExitCode::kUsage);
  EXPECT_NE(swapped.error().message().find("defines its operand"), std::string::npos);
  Expected<bool> short_order = apply_schedule(m, 0, {0, 1, 2});
  ASSERT_FALSE(short_order.ok());
  Expected<bool> identity = apply_schedule(m, 0, {0, 1, 2, 3, 4});
  ASSERT_TRUE(identity.ok());
  EXPECT_FALSE(*identity);
}

// ---- train steps ----

struct Step {
  frontend::ForwardModel model;
  autodiff::TrainStepLayout layout;
  size_t index = 0;
  const ir::Function& function() const { return model.module.function(index); }
};

// A two-layer model of `family`'s decoder, remat `policy`.
Step tiny_step(const std::string& family, const std::string& policy = "full") {
  std::string kv_heads = family.starts_with("gpt3") ? "4" : "2";
  Config config = testing::load_derived(
      testing::base_yml(),
      {"model_name=" + family, "override_model_config=true", "base_emb_dim=16", "base_mlp_dim=24",
       "base_num_decoder_layers=2", "head_dim=4", "vocab_size=32", "max_target_length=8",
       "per_device_batch_size=2", "dtype=float32", "base_num_query_heads=4",
       "base_num_kv_heads=" + kv_heads, "remat_policy=" + policy},
      1);
  Expected<ModelSpec> spec = model_spec_from_config(config);
  EXPECT_TRUE(spec.ok()) << (spec.ok() ? "" : spec.error().message());
  frontend::ForwardOptions options;
  options.loss_sums = true;
  Expected<frontend::ForwardModel> model = frontend::lower_forward(*spec, 2, 8, options);
  EXPECT_TRUE(model.ok()) << (model.ok() ? "" : model.error().message());
  Step step{std::move(*model), {}, 0};
  Expected<autodiff::TrainStepLayout> layout = autodiff::add_train_step(
      step.model.module, step.model.module.function(0), step.model.weights.size(), {});
  EXPECT_TRUE(layout.ok()) << (layout.ok() ? "" : layout.error().message());
  step.layout = *layout;
  step.index = step.model.module.num_functions() - 1;
  Expected<autodiff::RematPolicy> remat = autodiff::remat_policy(policy);
  EXPECT_TRUE(remat.ok());
  EXPECT_TRUE(autodiff::apply_remat(step.model.module, step.index, *remat).ok());
  return step;
}

using testing::Random;

// Weights and moments in [-0.3, 0.3] (norm scales around 1), count 3, random tokens in one
// segment per row, and the run-time scalars.
std::vector<HostTensor> random_arguments(const Step& step, uint64_t seed) {
  Random random{seed};
  const ir::Function& f = step.function();
  std::vector<HostTensor> args;
  for (size_t p = 0; p < f.params().size(); ++p) {
    const TensorType& type = f.type(f.params()[p]);
    HostTensor t = HostTensor::filled(type, 0);
    if (p < step.layout.num_state) {
      bool scale =
          p < step.layout.num_weights && step.model.weights[p].init == frontend::InitKind::kOnes;
      for (double& v : t.values) v = (scale ? 1.0 : 0.0) + 0.6 * (random.uniform() - 0.5);
      if (type.is_scalar()) t.values = {3};
      if (p >= step.layout.num_weights && !type.is_scalar()) {
        for (double& v : t.values) v = std::abs(v);  // nu must be non-negative
      }
    } else if (p < step.layout.first_scalar_param) {
      size_t which = p - step.layout.first_batch_param;  // inputs, position, segmentation, ...
      int64_t length = type.dims[1];
      for (size_t e = 0; e < t.values.size(); ++e) {
        if (which % 3 == 0) t.values[e] = std::floor(random.uniform() * 32);
        if (which % 3 == 1) t.values[e] = static_cast<double>(static_cast<int64_t>(e) % length);
        if (which % 3 == 2) t.values[e] = 1;
      }
    }
    args.push_back(std::move(t));
  }
  std::vector<double> scalars = {1e-2, 0.9, 0.95, 1e-8, 0.0, 0.1, 1.0};
  for (size_t k = 0; k < scalars.size(); ++k) {
    args[step.layout.first_scalar_param + k].values = {scalars[k]};
  }
  return args;
}

TEST(Schedule, TrainStepOrderIsValidDeterministicAndComputesTheSameBits) {
  Step step = tiny_step("llama2-7b");
  const ir::Function& f = step.function();
  std::function<int64_t(Value)> bytes = [&](Value v) { return type_bytes(f, v); };
  for (uint32_t window : {0u, 8u, kDefaultScheduleWindow}) {
    ScheduleOptions options;
    options.buffers = value_buffers(f);
    options.window = window;
    std::vector<OpIndex> order = memory_aware_order(f, bytes, options);
    expect_topological(f, order);
    EXPECT_EQ(memory_aware_order(f, bytes, options), order);
  }

  std::vector<HostTensor> args = random_arguments(step, 11);
  Expected<std::vector<HostTensor>> want = ir::interpret(f, args);
  ASSERT_TRUE(want.ok()) << want.error().message();

  // The unbounded list schedule moves the most ops: rebuild with it, whatever its bytes.
  ScheduleOptions options;
  options.buffers = value_buffers(f);
  options.window = 0;
  std::vector<OpIndex> order = memory_aware_order(f, bytes, options);
  std::string original_text = ir::print_module(step.model.module);
  size_t num_values = f.num_values();
  std::vector<std::string> scopes, checkpoints;  // of the op at each new position
  for (OpIndex i : order) {
    scopes.emplace_back(f.scope(f.op(i)));
    checkpoints.emplace_back(f.checkpoint(f.op(i)));
  }
  std::vector<Value> value_map;
  Expected<bool> changed = apply_schedule(step.model.module, step.index, order, &value_map);
  ASSERT_TRUE(changed.ok()) << changed.error().message();
  EXPECT_TRUE(*changed);
  // `f` is gone: the module holds the rebuilt function.
  const ir::Function& g = step.function();
  ASSERT_TRUE(ir::verify_function(g).ok());
  EXPECT_NE(ir::print_module(step.model.module), original_text);
  ASSERT_EQ(g.params().size(), args.size());
  ASSERT_EQ(g.results().size(), want->size());
  ASSERT_EQ(value_map.size(), num_values);
  for (size_t k = 0; k < g.results().size(); ++k) {
    EXPECT_EQ(g.result_alias(k), k < step.layout.num_state ? static_cast<int32_t>(k) : -1);
  }
  for (size_t k = 0; k < g.num_ops(); ++k) {
    EXPECT_EQ(g.scope(g.op(static_cast<OpIndex>(k))), scopes[k]);
    EXPECT_EQ(g.checkpoint(g.op(static_cast<OpIndex>(k))), checkpoints[k]);
  }

  std::string text = ir::print_module(step.model.module);
  Expected<ir::Module> parsed = ir::parse_module(text);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message();
  EXPECT_EQ(ir::print_module(*parsed), text);

  Expected<std::vector<HostTensor>> got = ir::interpret(g, args);
  ASSERT_TRUE(got.ok()) << got.error().message();
  for (size_t r = 0; r < want->size(); ++r) {
    ASSERT_EQ((*got)[r].type, (*want)[r].type) << "result " << r;
    for (size_t e = 0; e < (*want)[r].values.size(); ++e) {
      double a = (*got)[r].values[e], w = (*want)[r].values[e];
      ASSERT_TRUE(a == w || (std::isnan(a) && std::isnan(w)))
          << "result " << r << " element " << e << ": " << a << " vs " << w;
    }
  }
}

TEST(Schedule, TrainStepsNeverGetMoreTempBytes) {
  for (const std::string family : {"llama2-7b", "gemma2-2b", "gpt3-6b"}) {
    for (const std::string policy : {"full", "minimal", "none"}) {
      SCOPED_TRACE(family + " remat " + policy);
      Step step = tiny_step(family, policy);
      BufferOptions options;
      options.stacked_layer_gradients = true;
      MemoryPlan before = plan_memory(step.function(), options);
      Expected<ScheduleResult> result = schedule_for_memory(step.model.module, step.index, options);
      ASSERT_TRUE(result.ok()) << result.error().message();
      ASSERT_TRUE(ir::verify_function(step.function()).ok());
      MemoryPlan after = plan_memory(step.function(), options);
      EXPECT_EQ(result->temp_bytes_before, before.temp_bytes);
      EXPECT_EQ(result->temp_bytes_after, after.temp_bytes);
      EXPECT_LE(after.temp_bytes, before.temp_bytes);
      std::printf(
          "%-10s remat %-8s temp %7lld -> %7lld bytes (window %lld), peak live %7lld -> "
          "%7lld\n",
          family.c_str(), policy.c_str(), static_cast<long long>(before.temp_bytes),
          static_cast<long long>(after.temp_bytes), static_cast<long long>(result->window),
          static_cast<long long>(result->peak_live_bytes_before),
          static_cast<long long>(result->peak_live_bytes_after));
    }
  }
}

// XLA's unbounded list scheduler runs the recomputation of rematerialised layers in the forward
// pass, where it allocates least: more temp bytes, so the original order is kept.
TEST(Schedule, AnOrderWithMoreTempBytesIsNotApplied) {
  Step step = tiny_step("llama2-7b", "full");
  std::string text = ir::print_module(step.model.module);
  const ir::Function& f = step.function();
  ScheduleOptions unbounded;
  unbounded.buffers = value_buffers(f);
  unbounded.window = 0;
  std::vector<OpIndex> order = memory_aware_order(
      f, [&](Value v) { return type_bytes(f, v); }, unbounded);
  Expected<ir::Module> parsed = ir::parse_module(text);
  ASSERT_TRUE(parsed.ok());
  ir::Module copy = std::move(parsed).value();
  ASSERT_TRUE(apply_schedule(copy, step.index, order).ok());
  int64_t unbounded_temp = plan_memory(copy.function(step.index)).temp_bytes;
  int64_t original_temp = plan_memory(f).temp_bytes;
  EXPECT_GT(unbounded_temp, original_temp);

  const uint32_t windows[] = {0};
  Expected<ScheduleResult> result = schedule_for_memory(step.model.module, step.index, {}, windows);
  ASSERT_TRUE(result.ok());
  EXPECT_FALSE(result->changed);
  EXPECT_EQ(result->temp_bytes_after, original_temp);
  EXPECT_EQ(ir::print_module(step.model.module), text);
}

// ---- real sizes: what the schedule gains in `precast analyze`'s per-device plan, and its cost ----

void report_real_size(const std::vector<std::string>& overrides) {
  ConfigRequest request;
  request.config_file = testing::base_yml();
  request.overrides = overrides;
  request.read_environment = false;
  std::filesystem::path topologies = testing::source_dir() / "configs" / "topologies.yml";
  Expected<AnalysisReport> report = analyze(request, topologies);
  ASSERT_TRUE(report.ok()) << report.error().message();

  // The same per-device step without the schedule: the pipeline with its schedule stage off.
  const ResolvedConfig& resolved = report->resolved;
  PipelineOptions unscheduled_options;
  unscheduled_options.schedule = false;
  auto start = std::chrono::steady_clock::now();
  Expected<TrainProgram> unscheduled =
      run_pipeline(resolved.config, resolved.topology, resolved.mesh, unscheduled_options);
  double plan_seconds = seconds_since(start);
  ASSERT_TRUE(unscheduled.ok()) << unscheduled.error().message();
  ASSERT_TRUE(unscheduled->plan.has_value());
  ir::Module& module = unscheduled->module;
  std::optional<size_t> index;
  for (size_t i = 0; i < module.num_functions(); ++i) {
    if (&module.function(i) == unscheduled->layout.function) index = i;
  }
  ASSERT_TRUE(index.has_value());
  Expected<BufferPlanSettings> settings = buffer_plan_settings(resolved.config, resolved.topology);
  ASSERT_TRUE(settings.ok()) << settings.error().message();
  BufferOptions options = buffer_options(module.function(*index), *settings);
  start = std::chrono::steady_clock::now();
  Expected<ScheduleResult> result = schedule_for_memory(module, *index, options);
  double schedule_seconds = seconds_since(start);
  ASSERT_TRUE(result.ok()) << result.error().message();

  // The scheduler never raises the arena, and analyze reports what it kept (on a TPU its temp adds
  // XLA's on-chip arenas and the estimated extra to that arena).
  const MemoryPlan& analyzed = report->memory.plan;
  EXPECT_EQ(result->temp_bytes_before, unscheduled->plan->arena_bytes());
  EXPECT_LE(result->temp_bytes_after, result->temp_bytes_before);
  EXPECT_EQ(analyzed.arena_bytes(), result->temp_bytes_after);
  EXPECT_EQ(analyzed.argument_bytes, unscheduled->plan->argument_bytes);
  std::string name;
  for (const std::string& o : overrides) name += o + " ";
  std::printf(
      "%s(%zu ops per device, %s): temp %s -> %s with the schedule (window %lld, peak live %s "
      "-> %s); total %s\n  pipeline without the schedule %.3f s; schedule_for_memory (plan, "
      "order, rebuild, plan) %.3f s\n",
      name.c_str(), report->device_step_ops, report->resolved.topology.name.c_str(),
      format_bytes(result->temp_bytes_before).c_str(),
      format_bytes(result->temp_bytes_after).c_str(), static_cast<long long>(result->window),
      format_bytes(result->peak_live_bytes_before).c_str(),
      format_bytes(result->peak_live_bytes_after).c_str(),
      format_bytes(analyzed.total_bytes()).c_str(), plan_seconds, schedule_seconds);
}

TEST(ScheduleRealSize, DefaultModel) {
  report_real_size({});
}

TEST(ScheduleRealSize, Llama2_7b) {
  report_real_size({"model_name=llama2-7b"});
}

// Layers unrolled without the scan's stacked gradient buffer: the peak moves into the backward
// of the first layer, where the order of the weight-gradient dots matters.
TEST(ScheduleRealSize, Llama2_7bWithoutScan) {
  report_real_size({"model_name=llama2-7b", "scan_layers=false"});
}

// Per-device sizes on a v5p-8 (FSDP), gathered weights, and activations offloaded to the host.
TEST(ScheduleRealSize, Llama2_7bShardedAndOffloaded) {
  report_real_size({"model_name=llama2-7b", "scan_layers=false", "compile_topology=v5p-8",
                    "remat_policy=minimal_offloaded"});
}

// 126 layers, ~85k ops: what scheduling costs at the largest shipped size.
TEST(ScheduleRealSize, Llama3_1_405b) {
  report_real_size({"model_name=llama3.1-405b"});
}

}  // namespace
}  // namespace precast
