// SPMD partitioning of a 2-layer llama train step: the per-device module verifies and parses
// back; run on every device of the mesh (the lockstep interpreter, collectives included) from
// each device's shards of the same global inputs, every device's outputs equal its shards of the
// single-device step's outputs (f64, so only summation order differs); and the collectives it
// holds are the ones counted by hand for FSDP and for tensor parallelism.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "compiler/analysis/Sharding.h"
#include "compiler/autodiff/Remat.h"
#include "compiler/autodiff/TrainStep.h"
#include "compiler/driver/Dump.h"
#include "compiler/frontend/Frontend.h"
#include "compiler/passes/SpmdPartition.h"
#include "ir/Interpreter.h"
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "tests/analysis/MeshTestUtil.h"
#include "tests/config/ConfigTestUtil.h"

namespace precast {
namespace {

using ir::DType;
using ir::HostTensor;

Mesh make_mesh(int64_t fsdp, int64_t tensor, int64_t slices) {
  return testing::fsdp_tensor_mesh(fsdp, tensor, slices);
}

struct Step {
  frontend::ForwardModel model;
  const ir::Function* function = nullptr;
  autodiff::TrainStepLayout layout;
};

// E 16, H 4, K kv_heads, D 4, M 32, V 32, T 8, remat full; `dtype` for weights and activations.
Step build_step(int64_t rows, DType dtype, int64_t kv_heads = 2) {
  Config config = testing::load_derived(
      testing::base_yml(),
      {"model_name=llama2-7b", "override_model_config=true", "base_emb_dim=16", "base_mlp_dim=32",
       "base_num_decoder_layers=2", "head_dim=4", "vocab_size=32", "max_target_length=8",
       "base_num_query_heads=4", "base_num_kv_heads=" + std::to_string(kv_heads)},
      1);
  Expected<ModelSpec> spec = model_spec_from_config(config);
  EXPECT_TRUE(spec.ok());
  frontend::ForwardOptions options;
  options.loss_sums = true;
  options.dtype_override = dtype;
  Expected<frontend::ForwardModel> model = frontend::lower_forward(*spec, rows, 8, options);
  EXPECT_TRUE(model.ok());
  Step step{std::move(*model), nullptr, {}};
  autodiff::TrainStepSpec train;
  train.mu_dtype = train.grad_dtype = dtype;
  Expected<autodiff::TrainStepLayout> layout = autodiff::add_train_step(
      step.model.module, step.model.module.function(0), step.model.weights.size(), train);
  EXPECT_TRUE(layout.ok()) << (layout.ok() ? "" : layout.error().message());
  step.layout = *layout;
  size_t index = step.model.module.num_functions() - 1;
  EXPECT_TRUE(autodiff::apply_remat(step.model.module, index, *autodiff::remat_policy("full")).ok());
  step.function = &step.model.module.function(index);
  return step;
}

std::vector<AxisRule> default_rules() {
  Config config = testing::load_derived(testing::base_yml(), {}, 1);
  Expected<std::vector<AxisRule>> rules = axis_rules_from_config(config);
  EXPECT_TRUE(rules.ok());
  return *rules;
}

// A linear congruential stream: deterministic inputs.
struct Stream {
  uint64_t state;
  double next() {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(state >> 11) * 0x1.0p-53;
  }
};

// Weights in [-0.3, 0.3] (norm scales around 1), zero Adam moments and count, one segment per
// row with random tokens, and the run-time scalars.
std::vector<HostTensor> global_arguments(const Step& step, uint64_t seed) {
  Stream random{seed};
  const ir::Function& f = *step.function;
  std::vector<HostTensor> args;
  for (size_t p = 0; p < f.params().size(); ++p) {
    const ir::TensorType& type = f.type(f.params()[p]);
    HostTensor t = HostTensor::filled(type, 0);
    if (p < step.layout.num_weights) {
      bool scale = step.model.weights[p].init == frontend::InitKind::kOnes;
      for (double& v : t.values) v = (scale ? 1.0 : 0.0) + 0.6 * (random.next() - 0.5);
    } else if (p >= step.layout.first_batch_param && p < step.layout.first_scalar_param) {
      size_t which = p - step.layout.first_batch_param;  // inputs, position, segmentation, ...
      int64_t length = type.dims[1];
      for (size_t e = 0; e < t.values.size(); ++e) {
        if (which % 3 == 0) t.values[e] = std::floor(random.next() * 32);
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

PartitionedModule partition(const Step& step, const std::vector<AxisRule>& rules, const Mesh& mesh) {
  Expected<ShardingAnalysis> analysis = analyze_sharding(*step.function, rules, mesh);
  EXPECT_TRUE(analysis.ok()) << analysis.error().message();
  Expected<PartitionedModule> partitioned = partition_spmd(*step.function, *analysis, mesh);
  EXPECT_TRUE(partitioned.ok()) << partitioned.error().message();
  return std::move(*partitioned);
}

// Runs the partitioned step on every device and compares each device's outputs with its shards
// of the global step's outputs.
void expect_matches_single_device(const Step& step, const PartitionedModule& partitioned,
                                  const Mesh& mesh, double tolerance) {
  std::vector<HostTensor> global = global_arguments(step, 17);
  ir::InterpreterOptions options;
  options.round_to_dtype = false;
  Expected<std::vector<HostTensor>> expected = ir::interpret(*step.function, global, options);
  ASSERT_TRUE(expected.ok()) << expected.error().message();
  std::vector<std::vector<HostTensor>> per_device;
  for (int64_t d = 0; d < mesh.num_devices; ++d) {
    std::vector<HostTensor> args;
    for (size_t p = 0; p < global.size(); ++p) {
      args.push_back(shard_of(global[p], partitioned.param_specs[p], mesh, d));
    }
    per_device.push_back(std::move(args));
  }
  auto got = ir::interpret_spmd(partitioned.module.function(0), interpreter_mesh(mesh), per_device,
                                options);
  ASSERT_TRUE(got.ok()) << got.error().message();
  double worst = 0;
  for (int64_t d = 0; d < mesh.num_devices; ++d) {
    for (size_t r = 0; r < expected->size(); ++r) {
      HostTensor want = shard_of((*expected)[r], partitioned.result_specs[r], mesh, d);
      const HostTensor& have = (*got)[static_cast<size_t>(d)][r];
      ASSERT_EQ(have.type, want.type) << "result " << r;
      for (size_t e = 0; e < want.values.size(); ++e) {
        double err = std::abs(have.values[e] - want.values[e]) / std::max(1.0, std::abs(want.values[e]));
        worst = std::max(worst, err);
        ASSERT_LE(err, tolerance) << "device " << d << " result " << r << " element " << e
                                  << ": " << have.values[e] << " vs " << want.values[e];
      }
    }
  }
  std::printf("worst relative difference over %lld devices: %.3g\n",
              static_cast<long long>(mesh.num_devices), worst);
}

void expect_round_trip(const PartitionedModule& partitioned) {
  std::string text = ir::print_module(partitioned.module);
  Expected<ir::Module> parsed = ir::parse_module(text);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message();
  EXPECT_EQ(ir::print_module(*parsed), text);
}

TEST(SpmdPartition, FsdpAndTensorStepEqualsTheSingleDeviceStep) {
  Step step = build_step(4, DType::kF64);
  Mesh mesh = make_mesh(2, 2, 1);
  PartitionedModule partitioned = partition(step, default_rules(), mesh);
  expect_round_trip(partitioned);
  expect_matches_single_device(step, partitioned, mesh, 1e-9);
}

TEST(SpmdPartition, MultiSliceDataParallelStepEqualsTheSingleDeviceStep) {
  Step step = build_step(4, DType::kF64);
  Mesh mesh = make_mesh(2, 1, 2);
  PartitionedModule partitioned = partition(step, default_rules(), mesh);
  expect_round_trip(partitioned);
  // The gradients are summed over the slices: collectives spanning `data` cross DCN.
  bool dcn = false;
  const ir::Function& f = partitioned.module.function(0);
  for (const ir::Op& op : f.ops()) {
    if (ir::is_collective(op.kind) && f.attrs(op).flag(ir::AttrKey::kDcn)) dcn = true;
  }
  EXPECT_TRUE(dcn);
  expect_matches_single_device(step, partitioned, mesh, 1e-9);
}

// The other axes MaxText's default rules use: sequence (context) parallelism, fsdp_transpose
// and tensor_sequence, each with fsdp, over 4 devices.
TEST(SpmdPartition, ContextFsdpTransposeAndTensorSequenceStepsEqualTheSingleDeviceStep) {
  Step step = build_step(4, DType::kF64);
  for (const auto& sizes : std::vector<std::vector<std::pair<std::string, int64_t>>>{
           {{"fsdp", 2}, {"context", 2}},
           {{"fsdp", 2}, {"fsdp_transpose", 2}},
           {{"fsdp", 2}, {"tensor_sequence", 2}}}) {
    Mesh mesh = testing::ici_mesh(sizes);
    SCOPED_TRACE(mesh.shape_string());
    PartitionedModule partitioned = partition(step, default_rules(), mesh);
    // The second axis really shards something: some per-device op spans it.
    const ir::Function& f = partitioned.module.function(0);
    bool spans = false;
    for (const ir::Op& op : f.ops()) {
      if (!ir::is_collective(op.kind) && op.kind != ir::OpKind::kShardSlice) continue;
      for (int64_t id : f.attrs(op).ints(ir::AttrKey::kMeshAxes)) {
        spans = spans || f.context().string(static_cast<ir::StringId>(id)) == sizes[1].first;
      }
    }
    EXPECT_TRUE(spans) << "no op spans " << sizes[1].first;
    expect_round_trip(partitioned);
    expect_matches_single_device(step, partitioned, mesh, 1e-9);
  }
}

// Four tensor-parallel devices and two kv heads: kv heads stay whole and their gradients are
// all-reduced over the query heads' axis.
TEST(SpmdPartition, TensorParallelWithFewerKvHeadsThanDevices) {
  Step step = build_step(2, DType::kF64);
  std::vector<AxisRule> rules = {{"activation_heads", {"tensor"}}, {"activation_kv_heads", {"tensor"}},
                                 {"activation_mlp", {"tensor"}},   {"activation_vocab", {"tensor"}},
                                 {"q_heads", {"tensor"}},          {"kv_heads", {"tensor"}},
                                 {"heads", {"tensor"}},            {"mlp", {"tensor"}},
                                 {"vocab", {"tensor"}}};
  Mesh mesh = make_mesh(1, 4, 1);
  PartitionedModule partitioned = partition(step, rules, mesh);
  expect_round_trip(partitioned);
  expect_matches_single_device(step, partitioned, mesh, 1e-9);
}

// The buffer-assignment dump (one comment per op) parses back as the same module.
TEST(SpmdPartition, BufferAssignmentDumpParsesBackAsTheSameModule) {
  Step step = build_step(4, DType::kF32);
  PartitionedModule partitioned = partition(step, default_rules(), make_mesh(2, 2, 1));
  std::string annotated = buffer_assignment_text(partitioned.module);
  EXPECT_NE(annotated.find("// buffer assignment of @train_step"), std::string::npos);
  EXPECT_NE(annotated.find("  // arena["), std::string::npos);
  Expected<ir::Module> parsed = ir::parse_module(annotated);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message();
  EXPECT_EQ(ir::print_module(*parsed), ir::print_module(partitioned.module));
}

struct Counts {
  int64_t weight_gathers = 0, other_gathers = 0, scatters = 0, dot_reduces = 0,
          tensor_reduces = 0, scalar_reduces = 0, all_to_alls = 0;
};

// Collectives of the per-device step by what they serve.
Counts count(const PartitionedModule& partitioned, size_t num_weights) {
  const ir::Function& f = partitioned.module.function(0);
  Counts c;
  for (const ir::Op& op : f.ops()) {
    ir::Value x = f.operands(op).empty() ? ir::Value{} : f.operands(op)[0];
    bool weight = x.valid() && f.is_param(x) && f.value_info(x).number < num_weights;
    bool from_dot = x.valid() && !f.is_param(x) && f.op(f.defining_op(x)).kind == ir::OpKind::kDotGeneral;
    switch (op.kind) {
      case ir::OpKind::kAllGather:
        ++(weight ? c.weight_gathers : c.other_gathers);
        break;
      case ir::OpKind::kReduceScatter:
        ++c.scatters;
        break;
      case ir::OpKind::kAllReduce:
        if (from_dot) ++c.dot_reduces;
        else if (f.type(x).rank() == 0) ++c.scalar_reduces;
        else ++c.tensor_reduces;
        break;
      case ir::OpKind::kAllToAll:
        ++c.all_to_alls;
        break;
      default:
        break;
    }
  }
  return c;
}

// Pure FSDP over 4 devices with MaxText's default rules: each weight is all-gathered before each
// matmul that reads it — forward 15, backward 15, remat's recomputed q, k, v, out, wi_0, wi_1 per
// layer 12: 42 (the count tests/analysis/sharding_test.cpp derives), plus the embedding table
// for the lookup: 43. The lookup's gradient gathers the token ids (1) and moves its batch-split
// updates onto the table's embed split with one all-to-all. Every matmul weight gradient is
// reduce-scattered onto its fsdp-sharded layout (15); the 5 norm scales, replicated, have their
// gradients all-reduced; the rest are scalar sums (losses, norms).
TEST(SpmdPartition, FsdpCollectivesMatchTheHandCount) {
  Step step = build_step(8, DType::kBF16);
  PartitionedModule partitioned = partition(step, default_rules(), make_mesh(4, 1, 1));
  Counts c = count(partitioned, step.layout.num_weights);
  EXPECT_EQ(c.weight_gathers, 43);
  EXPECT_EQ(c.other_gathers, 1);
  EXPECT_EQ(c.scatters, 15);
  EXPECT_EQ(c.dot_reduces, 0);
  EXPECT_EQ(c.tensor_reduces, 5);
  EXPECT_EQ(c.all_to_alls, 1);
  const ir::Function& f = partitioned.module.function(0);
  for (const ir::Op& op : f.ops()) {
    if (!ir::is_collective(op.kind)) continue;
    EXPECT_EQ(f.attrs(op).integer(ir::AttrKey::kGroupSize), 4);
    EXPECT_FALSE(f.attrs(op).flag(ir::AttrKey::kDcn));
  }
}

// Megatron-style tensor parallelism over 4 devices with 4 kv heads (the rules of
// sharding_test's hand count): every matmul contracting a tensor-split dimension on both sides
// is all-reduced — per layer out and wo forward, the q, k, v, wi_0, wi_1 input gradients, the
// recomputed out — 16, plus the logits' input gradient: 17. The only weight gathered is the
// vocab-split embedding table, for the lookup.
TEST(SpmdPartition, TensorParallelCollectivesMatchTheHandCount) {
  Step step = build_step(8, DType::kBF16, 4);
  std::vector<AxisRule> rules = {{"activation_batch", {}},    {"activation_embed", {}},
                                 {"activation_heads", {"tensor"}}, {"activation_kv_heads", {"tensor"}},
                                 {"activation_mlp", {"tensor"}},   {"activation_vocab", {"tensor"}},
                                 {"q_heads", {"tensor"}},          {"kv_heads", {"tensor"}},
                                 {"heads", {"tensor"}},            {"mlp", {"tensor"}},
                                 {"vocab", {"tensor"}}};
  PartitionedModule partitioned = partition(step, rules, make_mesh(1, 4, 1));
  Counts c = count(partitioned, step.layout.num_weights);
  EXPECT_EQ(c.dot_reduces, 17);
  EXPECT_EQ(c.weight_gathers, 1);
  EXPECT_EQ(c.scatters, 0);
}

}  // namespace
}  // namespace precast
