// SPMD partitioning of a 2-layer llama train step: the per-device module verifies and parses
// back; run on every device of the mesh (the lockstep interpreter, collectives included) from
// each device's shards of the same global inputs, every device's outputs equal its shards of the
// single-device step's outputs (f64, so only summation order differs); and the collectives it
// holds are the ones counted by hand for FSDP and for tensor parallelism.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <cmath>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/analysis/BufferAssignment.h"
#include "compiler/analysis/Sharding.h"
#include "compiler/autodiff/Remat.h"
#include "compiler/autodiff/TrainStep.h"
#include "compiler/frontend/Frontend.h"
#include "compiler/passes/AssignBuffers.h"
#include "compiler/passes/Schedule.h"
#include "compiler/passes/WidenContractions.h"
#include "compiler/passes/SpmdPartition.h"
#include "ir/Builder.h"
#include "ir/Interpreter.h"
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "tests/support/ConfigTestUtil.h"
#include "tests/support/MeshTestUtil.h"

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
// `extra` overrides more keys (another model_name comes after llama2-7b and wins).
Step build_step(int64_t rows, DType dtype, int64_t kv_heads = 2,
                const std::vector<std::string>& extra = {}) {
  std::vector<std::string> overrides = {"model_name=llama2-7b",
                                        "override_model_config=true",
                                        "base_emb_dim=16",
                                        "base_mlp_dim=32",
                                        "base_num_decoder_layers=2",
                                        "head_dim=4",
                                        "vocab_size=32",
                                        "max_target_length=8",
                                        "base_num_query_heads=4",
                                        "base_num_kv_heads=" + std::to_string(kv_heads)};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  Config config = testing::load_derived(testing::base_yml(), overrides, 1);
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
  EXPECT_TRUE(
      autodiff::apply_remat(step.model.module, index, *autodiff::remat_policy("full")).ok());
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
// row with random tokens (or, `packed`, two: row r's second starts at position 3 + r % 3, and
// positions restart there), and the run-time scalars.
std::vector<HostTensor> global_arguments(const Step& step, uint64_t seed, bool packed = false) {
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
        int64_t row = static_cast<int64_t>(e) / length, position = static_cast<int64_t>(e) % length;
        int64_t second = packed ? 3 + row % 3 : length;
        if (which % 3 == 0) t.values[e] = std::floor(random.next() * 32);
        if (which % 3 == 1)
          t.values[e] = static_cast<double>(position < second ? position : position - second);
        if (which % 3 == 2) t.values[e] = position < second ? 1 : 2;
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

PartitionedModule partition(const Step& step, const std::vector<AxisRule>& rules, const Mesh& mesh,
                            const PartitionOptions& options = {}) {
  Expected<ShardingAnalysis> analysis = analyze_sharding(*step.function, rules, mesh);
  EXPECT_TRUE(analysis.ok()) << analysis.error().message();
  Expected<PartitionedModule> partitioned =
      partition_spmd(*step.function, *analysis, mesh, options);
  EXPECT_TRUE(partitioned.ok()) << partitioned.error().message();
  return std::move(*partitioned);
}

// Runs the partitioned step on every device and compares each device's outputs with its shards
// of the global step's outputs.
void expect_matches_single_device(const Step& step, const PartitionedModule& partitioned,
                                  const Mesh& mesh, double tolerance, bool packed = false) {
  std::vector<HostTensor> global = global_arguments(step, 17, packed);
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
        double err =
            std::abs(have.values[e] - want.values[e]) / std::max(1.0, std::abs(want.values[e]));
        worst = std::max(worst, err);
        ASSERT_LE(err, tolerance) << "device " << d << " result " << r << " element " << e << ": "
                                  << have.values[e] << " vs " << want.values[e];
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

// sparse_matmul's grouped matmuls (mixtral, top 2 of 4 experts) on fsdp 2 x tensor 2: each
// device multiplies its own rows by the gathered expert stack and the weight gradients' partial
// sums are reduced; the step equals the single-device one.
TEST(SpmdPartition, GroupedExpertsStepEqualsTheSingleDeviceStep) {
  Step step = build_step(4, DType::kF64, 2,
                         {"model_name=mixtral-8x7b", "num_experts=4", "num_experts_per_tok=2",
                          "base_moe_mlp_dim=32"});
  Mesh mesh = make_mesh(2, 2, 1);
  PartitionedModule partitioned = partition(step, default_rules(), mesh);
  expect_round_trip(partitioned);
  const ir::Function& f = partitioned.module.function(0);
  int64_t grouped = 0;
  for (const ir::Op& op : f.ops()) grouped += op.kind == ir::OpKind::kGroupedDotWeightGrad;
  EXPECT_EQ(grouped, 2 * 3);  // 2 layers x (wi_0, wi_1, wo)
  expect_matches_single_device(step, partitioned, mesh, 1e-9);
}

// MaxText's dense MoE path with token dropping (mixtral, top 2 of 4 experts, capacity_factor 1:
// C = ceil(8 x 2 / 4) = 4 slots per expert and row) and moe_dispatch_no_expert_sharding: the
// dispatched tokens and the expert MLP are split over the experts on `expert`, the batch over
// the rest. One expert-parallel mesh per case: expert 2 on one slice, and expert 2 across two
// slices (dcn_expert_parallelism) x fsdp 2.
struct ExpertDispatchCase {
  const char* name;
  Mesh mesh;
  int64_t rows_per_device;  // of the 4 rows: the batch split over fsdp x expert
  bool dcn;                 // the expert axis crosses the slices
};

Mesh dcn_expert_mesh() {
  MeshRequest request;
  request.axes = testing::kMaxTextMeshAxes;
  request.ici.assign(request.axes.size(), 1);
  request.dcn.assign(request.axes.size(), 1);
  request.ici[3] = 2;   // fsdp
  request.dcn[10] = 2;  // expert
  request.num_slices = 2;
  request.num_devices = 4;
  Expected<Mesh> m = build_mesh(request);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.error().message());
  return m.ok() ? *m : Mesh{};
}

TEST(SpmdPartition, ExpertParallelDispatchAndCombineAreAllToAllsOverExpert) {
  const std::vector<std::string> moe = {"model_name=mixtral-8x7b", "num_experts=4",
                                        "num_experts_per_tok=2", "base_moe_mlp_dim=32",
                                        "sparse_matmul=false", "capacity_factor=1",
                                        "moe_dispatch_no_expert_sharding=true"};
  Step step = build_step(4, DType::kF64, 2, moe);
  for (const ExpertDispatchCase& c :
       {ExpertDispatchCase{"expert 2", testing::ici_mesh({{"expert", 2}}), 2, false},
        ExpertDispatchCase{"dcn expert 2 x fsdp 2", dcn_expert_mesh(), 1, true}}) {
    SCOPED_TRACE(c.name);
    ASSERT_EQ(c.mesh.axis_size("expert"), 2);
    PartitionedModule partitioned = partition(step, default_rules(), c.mesh);
    expect_round_trip(partitioned);
    const ir::Function& f = partitioned.module.function(0);
    // Every collective over `expert` in the experts' part of each MoE layer (the router's
    // kernel [E, X], like the embed-split kernels outside the experts, is gathered as
    // everywhere; the expert stacks never are), per device, r = rows per device, f64 values.
    //
    // Forward: the dispatch moves the slot mask [R, T=8, X=4, C=4] from batch-split to
    // expert-split (an all-to-all, operand r x 8 x 4 x 4) and gathers the tokens [R, 8, E=16]
    // of the expert group (r x 8 x 16), so each device fills its own 2 experts' slots from all
    // 2r rows; the combine moves the experts' outputs [X=4, R, C=4, E=16] back from
    // expert-split to batch-split (an all-to-all, 2 x 2r x 4 x 16). remat_policy=full
    // recomputes the dispatch before the backward: its two collectives again.
    //
    // Backward, the forward mirrored (the gradients take their activations' logical axes):
    // the combine's gradient reaches the experts' outputs as the dispatch reached the experts
    // (the output gradient [R, 8, 16] gathered over the group, r x 8 x 16, and the combine
    // weights [R, 8, 4, 4] moved to expert-split, r x 8 x 4 x 4), and the combine weights'
    // gradient reads the recomputed outputs batch-split (2 x 2r x 4 x 16, as the forward's
    // combine); the dispatch's gradient returns the slots' gradient [X, R, C, E] from
    // expert-split to batch-split (an all-to-all, 2 x 2r x 4 x 16, the combine's mirror), and
    // the token gradient is computed on each device's own rows. Without the gradients' axes the
    // backward gathered the expert stacks and the slots' gradients instead.
    const int64_t r = c.rows_per_device, f64 = 8;
    const int64_t mask = r * 8 * 4 * 4 * f64, tokens = r * 8 * 16 * f64,
                  outputs = 2 * (2 * r) * 4 * 16 * f64;
    // Per op kind and scope below MoeBlock_0, the operands' bytes in program order (2 layers).
    std::map<std::string, std::vector<int64_t>> want = {
        {"all_to_all dispatch", {mask, mask}},
        {"all_gather dispatch", {tokens, tokens}},
        {"all_to_all combine", {outputs, outputs}},
        {"all_gather dispatch/remat", {tokens, tokens}},
        {"all_to_all dispatch/remat", {mask, mask}},
        {"all_gather combine/backward", {tokens, tokens}},
        {"all_to_all combine/backward", {outputs, mask, outputs, mask}},
        {"all_to_all dispatch/backward", {outputs, outputs}},
    };
    std::map<std::string, std::vector<int64_t>> got;
    for (const ir::Op& op : f.ops()) {
      if (!ir::is_collective(op.kind)) continue;
      std::span<const int64_t> axes = f.attrs(op).ints(ir::AttrKey::kMeshAxes);
      bool over_expert = std::any_of(axes.begin(), axes.end(), [&](int64_t id) {
        return f.context().string(static_cast<ir::StringId>(id)) == "expert";
      });
      std::string_view scope = f.scope(op);
      size_t block = scope.find("MoeBlock_0/");
      if (!over_expert || block == std::string_view::npos) continue;
      std::string_view part = scope.substr(block + std::string_view("MoeBlock_0/").size());
      if (part.starts_with("gate")) continue;
      EXPECT_EQ(axes.size(), 1u) << scope;
      EXPECT_EQ(f.attrs(op).flag(ir::AttrKey::kDcn), c.dcn) << scope;
      ir::OpPhase phase = part.ends_with("/backward") ? ir::OpPhase::kBackward
                          : part.ends_with("/remat")  ? ir::OpPhase::kRecompute
                                                      : ir::OpPhase::kForward;
      EXPECT_EQ(op.facts.phase, phase) << scope;
      got[fmt::format("{} {}", ir::op_name(op.kind), part)].push_back(
          f.type(f.operands(op)[0]).num_elements() * f64);
    }
    EXPECT_EQ(got, want);
    expect_matches_single_device(step, partitioned, c.mesh, 1e-9);
  }
}

// MaxText's sparse path (sparse_matmul=true, its megablox grouped matmuls) under expert
// parallelism: the tiny mixtral (top 2 of 4 experts, T 8, so 16 rows per batch row) on expert 2,
// on expert 4 (one expert per device, fewer than the 2 a token picks) and on dcn expert 2 x ici
// fsdp 2. The rows go to their experts' devices with a ragged_all_to_all, each device runs its
// own experts' grouped matmuls on its own slice of the stacks, and the rows come back with the
// reverse exchange; the backward mirrors it; the expert stacks are never gathered over expert.
struct SparseExpertCase {
  const char* name;
  Mesh mesh;
  int64_t group;     // expert-parallel devices
  int64_t rows;      // of the 4 batch rows, per device
  int64_t capacity;  // the buffer's rows per sender
  bool dcn;
};

TEST(SpmdPartition, SparseExpertParallelRowsTravelByRaggedAllToAll) {
  const std::vector<std::string> moe = {"model_name=mixtral-8x7b", "num_experts=4",
                                        "num_experts_per_tok=2", "base_moe_mlp_dim=32",
                                        "sparse_matmul=true"};
  Step step = build_step(4, DType::kF64, 2, moe);
  // The buffer (MaxText's get_ragged_buffer_size, worst case): a sender's n = rows x 16 rows
  // hold n / 2 tokens, each with at most min(2, local experts) rows for one device: expert 2
  // (2 local experts) n = 32 -> 32; dcn expert 2 x fsdp 2, n = 16 -> 16; expert 4 (1 local
  // expert), n = 16 -> 8 x 1 = 8.
  for (const SparseExpertCase& c :
       {SparseExpertCase{"expert 2", testing::ici_mesh({{"expert", 2}}), 2, 2, 32, false},
        SparseExpertCase{"expert 4", testing::ici_mesh({{"expert", 4}}), 4, 1, 8, false},
        SparseExpertCase{"dcn expert 2 x fsdp 2", dcn_expert_mesh(), 2, 1, 16, true}}) {
    SCOPED_TRACE(c.name);
    PartitionedModule partitioned = partition(step, default_rules(), c.mesh);
    expect_round_trip(partitioned);
    const ir::Function& f = partitioned.module.function(0);
    // Per layer, bytes per device (r rows, f64 values, s32 ids), a dispatch counted by the rows
    // it sends (its operand) and a combine by the rows it gets back (its result):
    // forward: the ids (r x 16 s32), the token rows (r x 16 x 16) and the routing weights
    // (r x 16, read by the hidden rows' scaling) go out; the experts' outputs (r x 16 x 16) come
    // back. remat_policy=full recomputes the router, so the recomputed ids go out again, at
    // their first use: the backward's first grouped matmul (wo's input gradient); the recomputed
    // token rows and routing weights go out in the recomputation (the layer's output itself is
    // not needed again, so nothing comes back there). Backward: the output rows' gradient goes
    // out (r x 16 x 16: the combine mirrored); the routing weights' gradient (a sum over the
    // hidden features, r x 16) and the token rows' gradient (wi_0's and wi_1's summed,
    // r x 16 x 16) come back: 4 + 2 + 4 exchanges per layer. The weight gradients are each device's own experts' (no collective over
    // expert); the gate, up and hidden rows are never combined.
    const int64_t r = c.rows, f64 = 8, s32 = 4;
    const int64_t ids = r * 16 * s32, tokens = r * 16 * 16 * f64, weights = r * 16 * f64;
    auto twice = [](std::vector<int64_t> v) {
      std::vector<int64_t> out = v;
      out.insert(out.end(), v.begin(), v.end());
      std::sort(out.begin(), out.end());
      return out;
    };
    std::map<std::string, std::vector<int64_t>> want = {
        {"forward dispatch", twice({ids, tokens, weights})},
        {"forward combine", twice({tokens})},
        {"recompute dispatch", twice({tokens, weights})},
        {"backward dispatch", twice({ids, tokens})},
        {"backward combine", twice({weights, tokens})},
    };
    std::map<std::string, std::vector<int64_t>> got;
    for (const ir::Op& op : f.ops()) {
      if (!ir::is_collective(op.kind)) continue;
      std::span<const int64_t> axes = f.attrs(op).ints(ir::AttrKey::kMeshAxes);
      bool over_expert = std::any_of(axes.begin(), axes.end(), [&](int64_t id) {
        return f.context().string(static_cast<ir::StringId>(id)) == "expert";
      });
      std::string_view scope = f.scope(op);
      if (op.kind != ir::OpKind::kRaggedAllToAll) {
        // Nothing else over expert in the experts' part (the router's kernel is gathered as
        // everywhere).
        if (over_expert && scope.find("MoeBlock") != std::string_view::npos) {
          EXPECT_NE(scope.find("/gate"), std::string_view::npos)
              << ir::op_name(op.kind) << " over expert in " << scope;
        }
        continue;
      }
      EXPECT_EQ(axes.size(), 1u) << scope;
      EXPECT_TRUE(over_expert) << scope;
      EXPECT_EQ(f.attrs(op).integer(ir::AttrKey::kGroupSize), c.group);
      EXPECT_EQ(f.attrs(op).integer(ir::AttrKey::kCapacity), c.capacity);
      EXPECT_EQ(f.attrs(op).flag(ir::AttrKey::kDcn), c.dcn) << scope;
      bool back = f.attrs(op).flag(ir::AttrKey::kCombine);
      const ir::TensorType& buffer = f.type(back ? f.operands(op)[0] : f.result(op));
      EXPECT_EQ(buffer.dims[0], c.group);
      EXPECT_EQ(buffer.dims[1], c.capacity);
      const char* phase = op.facts.phase == ir::OpPhase::kBackward    ? "backward"
                          : op.facts.phase == ir::OpPhase::kRecompute ? "recompute"
                                                                      : "forward";
      int64_t bytes = back ? f.type(f.result(op)).byte_size() : f.type(f.operands(op)[0]).byte_size();
      got[fmt::format("{} {}", phase, back ? "combine" : "dispatch")].push_back(bytes);
    }
    for (auto& [key, list] : got) std::sort(list.begin(), list.end());
    EXPECT_EQ(got, want);
    EXPECT_EQ(partitioned.stats.ragged_all_to_alls, 2 * 10);
    expect_matches_single_device(step, partitioned, c.mesh, 1e-9);
  }
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
  std::vector<AxisRule> rules = testing::megatron_rules();
  Mesh mesh = make_mesh(1, 4, 1);
  PartitionedModule partitioned = partition(step, rules, mesh);
  expect_round_trip(partitioned);
  expect_matches_single_device(step, partitioned, mesh, 1e-9);
}

// The buffer-assignment dump (one comment per op) parses back as the same module.
TEST(SpmdPartition, BufferAssignmentDumpParsesBackAsTheSameModule) {
  Step step = build_step(4, DType::kF32);
  PartitionedModule partitioned = partition(step, default_rules(), make_mesh(2, 2, 1));
  const ir::Function& f = partitioned.module.function(0);
  std::string annotated =
      buffer_assignment_text(partitioned.module, std::string(f.name()), plan_memory(f));
  EXPECT_NE(annotated.find("// buffer assignment of @train_step"), std::string::npos);
  EXPECT_NE(annotated.find("  // arena["), std::string::npos);
  Expected<ir::Module> parsed = ir::parse_module(annotated);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message();
  EXPECT_EQ(ir::print_module(*parsed), ir::print_module(partitioned.module));
}

struct Counts {
  int64_t weight_gathers = 0, other_gathers = 0, scatters = 0, dot_reduces = 0, tensor_reduces = 0,
          scalar_reduces = 0, all_to_alls = 0, max_reduces = 0;
  // Bytes of the whole buffers: gathered weights, and the partial sums reduce-scattered or
  // all-reduced after matmuls.
  int64_t weight_gather_bytes = 0, scatter_bytes = 0, dot_reduce_bytes = 0;
};

// Collectives of the per-device step by what they serve.
Counts count(const PartitionedModule& partitioned, size_t num_weights) {
  const ir::Function& f = partitioned.module.function(0);
  Counts c;
  for (const ir::Op& op : f.ops()) {
    ir::Value x = f.operands(op).empty() ? ir::Value{} : f.operands(op)[0];
    bool weight = x.valid() && f.is_param(x) && f.value_info(x).number < num_weights;
    bool from_dot =
        x.valid() && !f.is_param(x) && f.op(f.defining_op(x)).kind == ir::OpKind::kDotGeneral;
    switch (op.kind) {
      case ir::OpKind::kAllGather:
        ++(weight ? c.weight_gathers : c.other_gathers);
        if (weight) c.weight_gather_bytes += f.type(f.result(op)).byte_size();
        break;
      case ir::OpKind::kReduceScatter:
        ++c.scatters;
        c.scatter_bytes += f.type(x).byte_size();
        break;
      case ir::OpKind::kAllReduce:
        if (f.attrs(op).flag(ir::AttrKey::kMax))
          ++c.max_reduces;
        else if (from_dot) {
          ++c.dot_reduces;
          c.dot_reduce_bytes += f.type(x).byte_size();
        }
        else if (f.type(x).rank() == 0)
          ++c.scalar_reduces;
        else
          ++c.tensor_reduces;
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
// layer 12: 42, plus the embedding table
// for the lookup: 43. The lookup's gradient gathers the token ids (1) and moves its batch-split
// updates onto the table's embed split with one all-to-all. Every matmul weight gradient is
// reduce-scattered onto its fsdp-sharded layout (15); the 5 norm scales, replicated, have their
// gradients all-reduced; the rest are scalar sums (losses, norms).
// Bytes (bf16 weights, gathered whole): per layer q 16x4x4, k and v 16x2x4, out 4x4x16, wi_0,
// wi_1, wo 16x32 -> 256 + 2 x 128 + 256 + 3 x 512 = 2304 elements; logits 16x32 and the
// embedding 32x16, 512 each. Forward and backward gather every matmul weight, the recomputation
// all but wo, and the lookup the embedding; each reduce-scatter reduces a whole weight-shaped
// partial sum.
TEST(SpmdPartition, FsdpCollectivesMatchTheHandCount) {
  Step step = build_step(8, DType::kBF16);
  PartitionedModule partitioned = partition(step, default_rules(), make_mesh(4, 1, 1));
  Counts c = count(partitioned, step.layout.num_weights);
  const int64_t layer = 2304, logits = 512, wo = 512, embedding = 512;
  EXPECT_EQ(c.weight_gather_bytes,
            2 * (2 * (2 * layer + logits) + 2 * (layer - wo) + embedding));
  EXPECT_EQ(c.scatter_bytes, 2 * (2 * layer + logits));
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

// Megatron-style tensor parallelism over 4 devices with 4 kv heads (heads, mlp and vocab split,
// the residual stream whole): every matmul contracting a tensor-split dimension on both sides
// is all-reduced — per layer out and wo forward, the q, k, v, wi_0, wi_1 input gradients, the
// recomputed out — 16, plus the logits' input gradient: 17. The only weight gathered is the
// vocab-split embedding table, for the lookup.
TEST(SpmdPartition, TensorParallelCollectivesMatchTheHandCount) {
  Step step = build_step(8, DType::kBF16, 4);
  std::vector<AxisRule> rules = testing::megatron_rules();
  PartitionedModule partitioned = partition(step, rules, make_mesh(1, 4, 1));
  Counts c = count(partitioned, step.layout.num_weights);
  EXPECT_EQ(c.dot_reduces, 17);
  // Each is the residual stream's partial sum, [8, 8, 16] in bf16.
  EXPECT_EQ(c.dot_reduce_bytes, 17 * 8 * 8 * 16 * 2);
  EXPECT_EQ(c.weight_gathers, 1);
  EXPECT_EQ(c.scatters, 0);
  // The logits stay split by vocab: the loss's max over the vocabulary (its logsumexp, which
  // the backward reuses) is one local reduce_max and one all_reduce max, and nothing gathers
  // the logits.
  EXPECT_EQ(c.max_reduces, 1);
  EXPECT_EQ(c.other_gathers, 0);
}

// MaxText's default rules shard the activations' embed dimension over `tensor` between layers
// (Megatron's sequence-parallel layout). Over 4 tensor devices with 4 kv heads, per layer:
// - the row-parallel matmuls (self_attention/out, mlp/wo) read their tensor-split inputs
//   unchanged and reduce-scatter their partial sums onto the embed dimension: 2 forward, and
//   the recomputed out under remat full: 3 per layer, 6 in all;
// - the column-parallel matmuls' input gradients (q, k, v, wi_0, wi_1 per layer, and the
//   logits'), partial sums over the tensor-split heads, mlp or vocab, are reduce-scattered onto
//   the embed split the gradient flows on in: 11, and no matmul's partial sums are all-reduced;
// - each weight gradient is computed in its weight's layout: the only all_to_all is the
//   forward lookup's, which moves the vocab-split embedding table onto the embed split its
//   output takes;
// - the loss's one-hot mask of the targets is generated per vocab shard: no pred value holds
//   the whole vocabulary;
// - one gather of a value serves a block's ops (XLA's CSE of identical collectives): per layer
//   the attention input for q, k, v and the mlp input for wi_0, wi_1, forward and recomputed
//   (4); in the backward pass dy for wo's input gradient and, after the recomputation, again for
//   its weight gradient (2), the mlp input for wi_0's and wi_1's weight gradients (1), dy for
//   out's two gradients (1), the attention input for q's, k's and v's weight gradients (1):
//   9 per layer, 18 in all.
// Every device's outputs equal its shards of the single-device step.
TEST(SpmdPartition, DefaultRulesTensorParallelIsSequenceParallel) {
  Step step = build_step(4, DType::kF64, 4);
  Mesh mesh = make_mesh(1, 4, 1);
  PartitionedModule partitioned = partition(step, default_rules(), mesh);
  const ir::Function& f = partitioned.module.function(0);
  int64_t row_parallel_scatters = 0, row_parallel_gathered_inputs = 0, all_to_alls = 0;
  int64_t gradient_scatters = 0, dot_all_reduces = 0, layer_gathers = 0;
  auto defining = [&](ir::Value v) -> const ir::Op* {
    return f.is_param(v) ? nullptr : &f.op(f.defining_op(v));
  };
  auto row_parallel = [&](const ir::Op& op) {
    std::string scope(f.context().string(op.scope));
    return op.facts.phase != ir::OpPhase::kBackward &&
           (scope.ends_with("mlp/wo") || scope.ends_with("self_attention/out") ||
            scope.ends_with("mlp/wo/remat") || scope.ends_with("self_attention/out/remat"));
  };
  for (const ir::Op& op : f.ops()) {
    if (op.kind == ir::OpKind::kAllToAll) ++all_to_alls;
    const ir::Op* source = f.operands(op).empty() ? nullptr : defining(f.operands(op)[0]);
    bool from_dot = source && source->kind == ir::OpKind::kDotGeneral;
    if (op.kind == ir::OpKind::kReduceScatter && from_dot) {
      if (row_parallel(*source)) ++row_parallel_scatters;
      if (source->facts.phase == ir::OpPhase::kBackward) ++gradient_scatters;
    }
    if (op.kind == ir::OpKind::kAllReduce && from_dot) ++dot_all_reduces;
    if (op.kind == ir::OpKind::kAllGather && op.facts.in_layer()) ++layer_gathers;
    if (op.kind == ir::OpKind::kDotGeneral && row_parallel(op)) {
      const ir::Op* input = defining(f.operands(op)[0]);
      if (input && input->kind == ir::OpKind::kAllGather) ++row_parallel_gathered_inputs;
    }
    ir::Value r = f.result(op);
    if (r.valid() && f.type(r).dtype == DType::kPred && f.type(r).rank() == 3) {
      EXPECT_EQ(f.type(r).dims[2], 32 / 4) << "a pred value holds the whole vocabulary";
    }
  }
  EXPECT_EQ(row_parallel_scatters, 6);
  EXPECT_EQ(gradient_scatters, 11);
  EXPECT_EQ(dot_all_reduces, 0);
  EXPECT_EQ(layer_gathers, 18);
  EXPECT_EQ(row_parallel_gathered_inputs, 0);
  EXPECT_EQ(all_to_alls, 1);
  expect_matches_single_device(step, partitioned, mesh, 1e-9);
}

// ---- Ring attention (context_parallel_strategy=ring) ----

PartitionOptions ring_options() {
  PartitionOptions options;
  options.ring_attention = true;
  return options;
}

int64_t count_ops(const ir::Function& f, ir::OpKind kind) {
  int64_t n = 0;
  for (const ir::Op& op : f.ops()) n += op.kind == kind ? 1 : 0;
  return n;
}

// Every collective_permute is a shift by 1 over the context axis of the whole context group.
void expect_context_ring(const PartitionedModule& partitioned, int64_t context) {
  const ir::Function& f = partitioned.module.function(0);
  for (const ir::Op& op : f.ops()) {
    if (op.kind != ir::OpKind::kCollectivePermute) continue;
    const ir::AttrSet& attrs = f.attrs(op);
    EXPECT_EQ(attrs.integer(ir::AttrKey::kShift), 1);
    EXPECT_EQ(attrs.integer(ir::AttrKey::kGroupSize), context);
    ASSERT_EQ(attrs.ints(ir::AttrKey::kMeshAxes).size(), 1u);
    EXPECT_EQ(f.context().string(static_cast<ir::StringId>(attrs.ints(ir::AttrKey::kMeshAxes)[0])),
              "context");
  }
}

// Under context_parallel_strategy=all_gather every attention and attention_grad keeps its
// T / g local query rows and compares global positions (`positions`), against the whole
// sequence's keys; nothing goes around a ring.
void expect_gathered_kv(const PartitionedModule& partitioned, int64_t length, int64_t context) {
  const ir::Function& f = partitioned.module.function(0);
  int64_t attentions = 0;
  for (const ir::Op& op : f.ops()) {
    EXPECT_NE(op.kind, ir::OpKind::kCollectivePermute);
    if (op.kind != ir::OpKind::kAttention && op.kind != ir::OpKind::kAttentionGrad) continue;
    ++attentions;
    EXPECT_TRUE(f.attrs(op).flag(ir::AttrKey::kPositions));
    EXPECT_EQ(f.type(f.operands(op)[0]).dims[1], length / context);
    EXPECT_EQ(f.type(f.operands(op)[1]).dims[1], length);
  }
  EXPECT_GT(attentions, 0);
}

// The packed step partitioned over the mesh of `sizes` with ring attention and with gathered
// kv (each checked for its own structure) equals the single-device step on every device.
void expect_context_parallel_steps_match(
    const Step& step, const std::vector<std::pair<std::string, int64_t>>& sizes) {
  Mesh mesh = testing::ici_mesh(sizes);
  int64_t context = 1;
  for (const auto& [axis, size] : sizes) context = axis == "context" ? size : context;
  for (bool ring : {true, false}) {
    SCOPED_TRACE(mesh.shape_string() + (ring ? " ring" : " all_gather"));
    PartitionedModule partitioned =
        partition(step, default_rules(), mesh, ring ? ring_options() : PartitionOptions{});
    if (ring) {
      EXPECT_GT(partitioned.stats.collective_permutes, 0);
      expect_context_ring(partitioned, context);
    } else {
      expect_gathered_kv(partitioned, 8, context);
    }
    expect_round_trip(partitioned);
    expect_matches_single_device(step, partitioned, mesh, 1e-9, /*packed=*/true);
  }
}

// A llama-style step (causal, GQA: 4 query heads over 2 kv heads, two packed segments per row)
// under ring and all_gather context parallelism over 2 and 4 devices, alone, with fsdp 2, with
// tensor 4 (more head shards than kv heads: each device repeats the kv heads it needs) and with
// fsdp 2 x tensor 2: every device's outputs equal its shards of the single-device step.
TEST(SpmdPartitionRing, LlamaPackedGqaStepsEqualTheSingleDeviceStep) {
  Step step = build_step(4, DType::kF64, 2);
  for (const auto& sizes : std::vector<std::vector<std::pair<std::string, int64_t>>>{
           {{"context", 2}},
           {{"context", 4}},
           {{"fsdp", 2}, {"context", 2}},
           {{"fsdp", 2}, {"context", 4}},
           {{"context", 2}, {"tensor", 4}},
           {{"fsdp", 2}, {"context", 2}, {"tensor", 2}}}) {
    expect_context_parallel_steps_match(step, sizes);
  }
}

// gemma2 (local sliding-window layers of window 3 alternating with global ones, attention
// logits soft-capped at 50, 2 kv heads) with packed rows: the window and the soft cap follow
// global positions across chunks.
TEST(SpmdPartitionRing, Gemma2SlidingWindowSoftcapStepsEqualTheSingleDeviceStep) {
  Step step = build_step(4, DType::kF64, 2, {"model_name=gemma2-2b", "sliding_window_size=3"});
  int64_t windowed = 0;
  for (const ir::Op& op : step.function->ops()) {
    if (op.kind != ir::OpKind::kAttention) continue;
    const ir::AttrSet& attrs = step.function->attrs(op);
    if (attrs.integer(ir::AttrKey::kSlidingWindow) == 3) ++windowed;
    EXPECT_EQ(attrs.real(ir::AttrKey::kSoftcap), 50.0);
  }
  EXPECT_GT(windowed, 0);
  for (const auto& sizes : std::vector<std::vector<std::pair<std::string, int64_t>>>{
           {{"context", 4}}, {{"fsdp", 2}, {"context", 2}}}) {
    expect_context_parallel_steps_match(step, sizes);
  }
}

// A tiny llama4 (llama4-17b-128e's layout: 4 layers, layers 1 and 3 MoE with top 1 of 4 experts
// and a shared expert, 0 and 2 dense; layer 3 NoPE with global attention, the others RoPE with
// qk-norm and attention in chunks of 4 of the 8 positions), sparse (grouped) or dense experts.
Step llama4_step(bool sparse) {
  return build_step(4, DType::kF64, 2,
                    {"model_name=llama4-17b-128e", "base_num_decoder_layers=4", "num_experts=4",
                     "base_moe_mlp_dim=32", "chunk_attn_window_size=4", "use_qk_norm=true",
                     sparse ? "sparse_matmul=true" : "sparse_matmul=false"});
}

// llama4 under expert parallelism (expert 2; expert 2 x fsdp 2; dcn expert 2 x fsdp 2), both
// expert paths: every device's outputs equal its shards of the single-device step.
TEST(SpmdPartitionLlama4, ExpertParallelStepsEqualTheSingleDeviceStep) {
  for (bool sparse : {true, false}) {
    Step step = llama4_step(sparse);
    int64_t chunked = 0, global = 0;
    for (const ir::Op& op : step.function->ops()) {
      if (op.kind != ir::OpKind::kAttention) continue;
      // The chunked layers' attention reads segment ids made of the chunk index; the NoPE layer's
      // reads the rows' own. Forward and remat: 3 chunked layers and 1 global, twice.
      bool uses_chunks = step.function->scope(op).find("layers_3/") == std::string_view::npos;
      (uses_chunks ? chunked : global) += 1;
    }
    ASSERT_EQ(chunked, 6);
    ASSERT_EQ(global, 2);
    for (const Mesh& mesh : {testing::ici_mesh({{"expert", 2}}),
                             testing::ici_mesh({{"fsdp", 2}, {"expert", 2}}), dcn_expert_mesh()}) {
      SCOPED_TRACE(mesh.shape_string() + (sparse ? " sparse" : " dense"));
      PartitionedModule partitioned = partition(step, default_rules(), mesh);
      // The expert stacks [X, ...] are split over `expert` (their `exp` axis): some collective
      // of the experts' weights spans it.
      const ir::Function& f = partitioned.module.function(0);
      int64_t over_expert = 0;
      for (const ir::Op& op : f.ops()) {
        if (!ir::is_collective(op.kind)) continue;
        if (f.scope(op).find("MoeBlock_0/w") == std::string_view::npos) continue;
        for (int64_t id : f.attrs(op).ints(ir::AttrKey::kMeshAxes)) {
          over_expert += f.context().string(static_cast<ir::StringId>(id)) == "expert";
        }
      }
      EXPECT_GT(over_expert, 0);
      expect_round_trip(partitioned);
      expect_matches_single_device(step, partitioned, mesh, 1e-9);
    }
  }
}

// llama4 under context parallelism (context 2 alone, with fsdp 2, and with expert 2), ring and
// all_gather, packed rows: the chunks and the segments follow global positions across devices.
TEST(SpmdPartitionLlama4, ContextParallelStepsEqualTheSingleDeviceStep) {
  Step step = llama4_step(true);
  for (const auto& sizes : std::vector<std::vector<std::pair<std::string, int64_t>>>{
           {{"context", 2}}, {{"fsdp", 2}, {"context", 2}}, {{"context", 2}, {"expert", 2}}}) {
    expect_context_parallel_steps_match(step, sizes);
  }
}

// The hand count for the 2-layer llama step (causal, packed) under remat full: per layer the
// forward attention, remat's recomputation of it and its attention_grad. A forward ring pass
// shifts its chunk g - 1 times, and the chunk is four tensors (k, v, key positions for the
// causal mask, kv segment ids): 4 (g - 1). The gradient reuses the recomputation's softmax
// statistics, shifts the chunk as the forward does, 4 (g - 1), and shifts the dk and dv
// accumulators after each of its g steps, 2 g. Per layer 12 (g - 1) + 2 g; two layers:
// g = 2: 32, g = 4: 88. With all_gather (the default) there is none.
TEST(SpmdPartitionRing, CollectivePermutesMatchTheHandCount) {
  Step step = build_step(4, DType::kBF16, 2);
  ASSERT_EQ(count_ops(*step.function, ir::OpKind::kAttention), 4);  // 2 layers, forward + remat
  ASSERT_EQ(count_ops(*step.function, ir::OpKind::kAttentionGrad), 2);
  for (int64_t g : {2, 4}) {
    Mesh mesh = testing::ici_mesh({{"context", g}});
    PartitionedModule ring = partition(step, default_rules(), mesh, ring_options());
    int64_t per_layer = 12 * (g - 1) + 2 * g;
    EXPECT_EQ(count_ops(ring.module.function(0), ir::OpKind::kCollectivePermute), 2 * per_layer)
        << "g = " << g;
    EXPECT_EQ(ring.stats.collective_permutes, 2 * per_layer);
    // The ring's attention runs block by block: no whole-sequence attention is left; each
    // forward pass (the forward's and remat's, per layer) is g attention_stats blocks, and each
    // gradient g attention_grad blocks (it reuses the recomputation's statistics).
    EXPECT_EQ(count_ops(ring.module.function(0), ir::OpKind::kAttention), 0);
    EXPECT_EQ(count_ops(ring.module.function(0), ir::OpKind::kAttentionStats), 2 * 2 * g);
    EXPECT_EQ(count_ops(ring.module.function(0), ir::OpKind::kAttentionGrad), 2 * g);
    // Nothing holds a block's scores ([B, K, T/g, G, T/g], the rank-5 product of q and k).
    const ir::Function& f = ring.module.function(0);
    for (const ir::Op& op : f.ops()) {
      if (op.kind == ir::OpKind::kDotGeneral) {
        EXPECT_LT(f.type(f.result(op)).rank(), 5);
      }
    }
    PartitionedModule gathered = partition(step, default_rules(), mesh);
    EXPECT_EQ(count_ops(gathered.module.function(0), ir::OpKind::kCollectivePermute), 0);
    EXPECT_EQ(gathered.stats.collective_permutes, 0);
    EXPECT_EQ(count_ops(gathered.module.function(0), ir::OpKind::kAttention), 4);
  }
}

// Where the ring does not apply (no context axis, or a context axis of size 1) the partitioned
// step is exactly the all_gather one.
TEST(SpmdPartitionRing, WithoutContextShardingTheStepIsUnchanged) {
  Step step = build_step(4, DType::kF32, 2);
  for (const auto& sizes : std::vector<std::vector<std::pair<std::string, int64_t>>>{
           {{"fsdp", 4}}, {{"fsdp", 2}, {"tensor", 2}}, {{"fsdp", 2}, {"context", 1}}}) {
    Mesh mesh = testing::ici_mesh(sizes);
    SCOPED_TRACE(mesh.shape_string());
    PartitionedModule ring = partition(step, default_rules(), mesh, ring_options());
    PartitionedModule gathered = partition(step, default_rules(), mesh);
    EXPECT_EQ(ir::print_module(ring.module), ir::print_module(gathered.module));
    EXPECT_EQ(ring.stats.collective_permutes, 0);
  }
}

// attention and attention_grad on their own against the composites' decompositions, on 4
// context devices, ring and all_gather: with rows whose queries see no key at all (segment 3
// has no keys: the composite averages v over every key), causal or sliding window, soft cap and
// GQA; the gradient after the forward op (the ring reuses the forward's statistics) or alone
// (the ring finds none and runs its own forward pass first).
TEST(SpmdPartitionRing, AttentionAndGradientAloneMatchTheComposite) {
  struct Case {
    bool causal;
    int64_t window;
    double softcap;
    bool with_forward;
  };
  for (const Case& c : {Case{true, 0, 0.0, true}, Case{false, 3, 0.0, true},
                        Case{true, 5, 20.0, true}, Case{true, 5, 20.0, false}}) {
    SCOPED_TRACE(fmt::format("causal {} window {} softcap {} forward {}", c.causal, c.window,
                             c.softcap, c.with_forward));
    ir::Module module;
    ir::Function& f = module.add_function("attend");
    ir::Builder b(f);
    const int64_t batch = 2, length = 8, heads = 4, kv_heads = 2, dim = 3;
    ir::TensorType q_type{DType::kF64, {batch, length, heads, dim}};
    ir::TensorType kv_type{DType::kF64, {batch, length, kv_heads, dim}};
    ir::TensorType segment_type{DType::kS32, {batch, length}};
    std::initializer_list<std::string_view> q_axes = {"activation_batch", "activation_length",
                                                      "activation_heads", "activation_kv"};
    std::initializer_list<std::string_view> kv_axes = {"activation_batch", "activation_length",
                                                       "activation_kv_heads", "activation_kv"};
    ir::Value q = b.param(q_type, "q", q_axes);
    ir::Value k = b.param(kv_type, "k", kv_axes);
    ir::Value v = b.param(kv_type, "v", kv_axes);
    ir::Value out = b.param(q_type, "out", q_axes);
    ir::Value dout = b.param(q_type, "dout", q_axes);
    ir::Value q_segment =
        b.param(segment_type, "q_segment", {"activation_batch", "activation_length"});
    ir::Value kv_segment =
        b.param(segment_type, "kv_segment", {"activation_batch", "activation_length"});
    ir::AttentionOptions options{0.7, c.causal, c.window, c.softcap, false};
    std::vector<ir::Value> results;
    if (c.with_forward) results.push_back(b.attention(q, k, v, q_segment, kv_segment, options));
    std::array<ir::Value, 3> grads =
        b.attention_grad(q, k, v, out, dout, q_segment, kv_segment, options);
    results.insert(results.end(), grads.begin(), grads.end());
    b.set_results(results);
    ASSERT_TRUE(b.ok()) << b.status().error().message();

    for (bool ring : {true, false}) {
      SCOPED_TRACE(ring ? "ring" : "all_gather");
      Mesh mesh = testing::ici_mesh({{"context", 4}});
      std::vector<AxisRule> rules = {{"activation_length", {"context"}}};
      Expected<ShardingAnalysis> analysis = analyze_sharding(f, rules, mesh);
      ASSERT_TRUE(analysis.ok()) << analysis.error().message();
      Expected<PartitionedModule> partitioned =
          partition_spmd(f, *analysis, mesh, ring ? ring_options() : PartitionOptions{});
      ASSERT_TRUE(partitioned.ok()) << partitioned.error().message();
      if (ring) {
        // A chunk is k, v, key positions (each case has a position mask) and kv segment ids: the
        // forward pass (the op's, or the gradient's own) 4 (g - 1), the gradient's 4 (g - 1) + 2 g.
        const int64_t g = 4, chunk_parts = 4;
        EXPECT_EQ(partitioned->stats.collective_permutes, 2 * chunk_parts * (g - 1) + 2 * g);
      } else {
        // Each op gathers k, v and the kv segment ids; the gradient reduce-scatters dk and dv.
        int64_t ops = c.with_forward ? 2 : 1;
        EXPECT_EQ(partitioned->stats.collective_permutes, 0);
        EXPECT_EQ(partitioned->stats.all_gathers, 3 * ops);
        EXPECT_EQ(partitioned->stats.reduce_scatters, 2);
        expect_gathered_kv(*partitioned, length, 4);
      }
      expect_round_trip(*partitioned);

      Stream random{5};
      std::vector<HostTensor> global;
      for (ir::Value p : f.params()) {
        HostTensor t = HostTensor::filled(f.type(p), 0);
        for (double& x : t.values) x = 2.0 * (random.next() - 0.5);
        global.push_back(std::move(t));
      }
      // Segments: row 0 two (split at 5), row 1 queries of segment 3 at positions 2 and 6 that no
      // key shares.
      for (int64_t r = 0; r < batch; ++r) {
        for (int64_t t = 0; t < length; ++t) {
          size_t e = static_cast<size_t>(r * length + t);
          global[5].values[e] = r == 0 ? (t < 5 ? 1 : 2) : ((t == 2 || t == 6) ? 3 : 1);
          global[6].values[e] = r == 0 ? (t < 5 ? 1 : 2) : 1;
        }
      }
      ir::InterpreterOptions interpret_options;
      interpret_options.round_to_dtype = false;
      interpret_options.decompose_composites = true;
      Expected<std::vector<HostTensor>> expected = ir::interpret(f, global, interpret_options);
      ASSERT_TRUE(expected.ok()) << expected.error().message();
      std::vector<std::vector<HostTensor>> per_device;
      for (int64_t d = 0; d < mesh.num_devices; ++d) {
        std::vector<HostTensor> args;
        for (size_t p = 0; p < global.size(); ++p) {
          args.push_back(shard_of(global[p], partitioned->param_specs[p], mesh, d));
        }
        per_device.push_back(std::move(args));
      }
      auto got = ir::interpret_spmd(partitioned->module.function(0), interpreter_mesh(mesh),
                                    per_device, interpret_options);
      ASSERT_TRUE(got.ok()) << got.error().message();
      for (int64_t d = 0; d < mesh.num_devices; ++d) {
        for (size_t r = 0; r < expected->size(); ++r) {
          // Each result is sequence-sharded over the ring: device d holds rows [2d, 2d + 2).
          EXPECT_EQ(partitioned->result_specs[r].dims[1], std::vector<std::string>{"context"});
          HostTensor want = shard_of((*expected)[r], partitioned->result_specs[r], mesh, d);
          const HostTensor& have = (*got)[static_cast<size_t>(d)][r];
          ASSERT_EQ(have.type, want.type);
          for (size_t e = 0; e < want.values.size(); ++e) {
            ASSERT_NEAR(have.values[e], want.values[e],
                        1e-12 * std::max(1.0, std::abs(want.values[e])))
                << "device " << d << " result " << r << " element " << e;
          }
        }
      }
    }
  }
}

// The per-device step's values carry their shardings as IR annotations (no side table): the
// parameters the partitioner's, through widening (bf16 contractions in f32) and the schedule; the
// text parses back identically and the memory breakdown reads them.
TEST(SpmdPartition, DeviceStepValuesCarryTheirShardingsInTheIr) {
  Step step = build_step(4, DType::kBF16);
  Mesh mesh = make_mesh(2, 2, 1);
  std::vector<std::string> param_specs;
  for (const ShardingSpec& spec : partition(step, default_rules(), mesh).param_specs) {
    param_specs.push_back(spec.to_string());
  }
  ir::Module& module = step.model.module;
  size_t index = module.num_functions() - 1;
  std::vector<ir::ParamRole> roles;
  for (size_t i = 0; i < step.function->params().size(); ++i) {
    roles.push_back(step.function->param_role(i));
  }
  ASSERT_TRUE(partition_spmd_in_place(module, index, default_rules(), mesh).ok());
  Expected<int64_t> widened = widen_low_precision_contractions(module, index);
  ASSERT_TRUE(widened.ok()) << widened.error().message();
  EXPECT_GT(*widened, 0);
  Expected<ScheduleResult> scheduled = schedule_for_memory(module, index);
  ASSERT_TRUE(scheduled.ok()) << scheduled.error().message();
  const ir::Function& f = module.function(index);
  ASSERT_EQ(f.params().size(), param_specs.size());
  for (size_t i = 0; i < param_specs.size(); ++i) {
    EXPECT_EQ(ir::print_sharding(f, f.params()[i]), param_specs[i]) << i;
    EXPECT_EQ(f.param_role(i), roles[i]) << i;  // the partitioner keeps parameter roles
  }
  EXPECT_GT(scheduled->plan
                .argument_by_category[static_cast<size_t>(MemoryCategory::kOptimizerState)],
            0);
  int64_t annotated = 0, sharded = 0;
  for (uint32_t id = 0; id < f.num_values(); ++id) {
    if (!f.has_sharding(ir::Value{id})) continue;
    ++annotated;
    for (const auto& axes : f.sharding(ir::Value{id})) sharded += !axes.empty();
  }
  EXPECT_GT(annotated, static_cast<int64_t>(f.params().size()));
  EXPECT_GT(sharded, 0);
  std::string text = ir::print_module(module);
  EXPECT_NE(text.find(" P('fsdp'"), std::string::npos);
  Expected<ir::Module> parsed = ir::parse_module(text);
  ASSERT_TRUE(parsed.ok()) << parsed.error().message();
  EXPECT_EQ(ir::print_module(*parsed), text);
  std::string breakdown = format_memory_breakdown(f, scheduled->plan, 10, true);
  EXPECT_NE(breakdown.find(" P("), std::string::npos) << breakdown;
  EXPECT_EQ(format_memory_breakdown(f, scheduled->plan, 10).find(" P("), std::string::npos);
}

}  // namespace
}  // namespace precast

namespace precast {
namespace {

// shard_optimizer_over_data (ZeRO-1) on fsdp 2 x data 2 (two slices): Adam's moments take `data`
// on top of their weight's layout (on the dimension MaxText's add_data_to_sharding picks, as its
// minor axis), the weights keep theirs, and the step computes what the single-device step does.
TEST(SpmdPartition, ZeroOneStepEqualsTheSingleDeviceStep) {
  Step step = build_step(4, DType::kF64);
  Mesh mesh = make_mesh(2, 1, 2);
  ShardingOptions zero1;
  zero1.shard_optimizer_over_data = true;
  Expected<ShardingAnalysis> analysis =
      analyze_sharding(*step.function, default_rules(), mesh, zero1);
  ASSERT_TRUE(analysis.ok()) << analysis.error().message();
  Expected<PartitionedModule> partitioned = partition_spmd(*step.function, *analysis, mesh, {});
  ASSERT_TRUE(partitioned.ok()) << partitioned.error().message();
  const ir::Function& f = *step.function;
  size_t weights = step.layout.num_weights;
  auto uses_data = [](const ShardingSpec& spec) {
    for (const auto& axes : spec.dims) {
      if (std::find(axes.begin(), axes.end(), "data") != axes.end()) return true;
    }
    return false;
  };
  // The token embedding [32, 16] (vocab, embed_vocab): vocab's rule names `tensor` (size 1 here,
  // still in the spec, so add_data_to_sharding skips that dimension); embed_vocab is fsdp's,
  // 16 / 2 = 8 per shard, which data = 2 divides: its mu is P(None, ('fsdp', 'data')).
  EXPECT_EQ(partitioned->param_specs[0].to_string(), "P(None, 'fsdp')");
  EXPECT_EQ(partitioned->param_specs[weights].to_string(), "P(None, ('fsdp', 'data'))");
  EXPECT_EQ(f.type(f.params()[weights]).dims, (std::vector<int64_t>{32, 16}));
  for (size_t p = 0; p < weights; ++p) EXPECT_FALSE(uses_data(partitioned->param_specs[p])) << p;
  expect_matches_single_device(step, *partitioned, mesh, 1e-9);
}

// The collectives of a per-device step by kind and mesh axes ("reduce_scatter fsdp,data"; an
// all_reduce of a scalar as "all_reduce scalar"), with their operand bytes (an all-gather's: its
// result's).
struct GroupTotals {
  int64_t count = 0;
  int64_t bytes = 0;
  bool operator==(const GroupTotals&) const = default;
};
std::map<std::string, GroupTotals> collectives_by_group(const ir::Function& f) {
  std::map<std::string, GroupTotals> out;
  for (const ir::Op& op : f.ops()) {
    if (!ir::is_collective(op.kind)) continue;
    std::vector<std::string> axes;
    for (int64_t id : f.attrs(op).ints(ir::AttrKey::kMeshAxes)) {
      axes.emplace_back(f.context().string(static_cast<ir::StringId>(id)));
    }
    ir::Value x = f.operands(op)[0];
    std::string key = op.kind == ir::OpKind::kAllReduce && f.type(x).rank() == 0
                          ? "all_reduce scalar"
                          : fmt::format("{} {}", ir::op_name(op.kind), fmt::join(axes, ","));
    GroupTotals& t = out[key];
    t.count += 1;
    t.bytes += op.kind == ir::OpKind::kAllGather ? f.type(f.result(op)).byte_size()
                                                 : f.type(x).byte_size();
  }
  return out;
}

std::map<std::string, GroupTotals> step_collectives(const Step& step, const Mesh& mesh,
                                                    bool zero1) {
  ShardingOptions options;
  options.shard_optimizer_over_data = zero1;
  Expected<ShardingAnalysis> analysis =
      analyze_sharding(*step.function, default_rules(), mesh, options);
  EXPECT_TRUE(analysis.ok()) << analysis.error().message();
  Expected<PartitionedModule> partitioned = partition_spmd(*step.function, *analysis, mesh, {});
  EXPECT_TRUE(partitioned.ok()) << partitioned.error().message();
  return collectives_by_group(partitioned->module.function(0));
}

// ZeRO-1's collectives on fsdp 2 x data 2, by hand (f64, 8 bytes an element). The weights: per
// layer q [16,4,4] 256, k and v [16,2,4] 128 each, out [4,4,16] 256, wi_0 and wi_1 [16,32] and
// wo [32,16] 512 each: 2304; the logits [16,32] and the embedding [32,16] 512 each; 5 norm
// scales [16]. Every matmul weight and the embedding has a dimension data divides (the norms'
// `norm` rule names `tensor`): 16 weights, 5632 elements, take `data`. The batch is split over
// data and fsdp, so each weight gradient is a partial sum over both. Without ZeRO-1 it is
// reduce-scattered over fsdp onto its weight's layout and all-reduced over data (16 all-reduces
// of the fsdp halves, 5632 / 2 elements). With ZeRO-1 it is reduce-scattered onto its moments'
// layout: over (fsdp, data) at once where data follows fsdp on one dimension (q, k, v, wi_0,
// wi_1, wo, the logits: 13 ops of the whole weight, 2 x 2048 + 512 elements); `out`, whose data
// goes on its kv dimension, over fsdp on the whole [4,4,16] then over data on [2,4,16]
// (2 + 2 ops, 256 and 128 elements); the embedding's lookup gradient, moved onto its embed split
// by the all-to-all as without ZeRO-1, over data on its [32,8] half (256 elements). No gradient
// is all-reduced over data; the 5 norm-scale gradients are all-reduced as without ZeRO-1. The
// update runs on each device's quarter (a local slice of its fsdp half: no collective) and the
// new weights are all-gathered over data alone, each from a quarter to its fsdp half: 16
// all-gathers of 5632 / 2 elements. The forward's and backward's weight gathers are unchanged.
TEST(SpmdPartition, ZeroOneReduceScattersGradientsAndGathersWeightsOverData) {
  Step step = build_step(4, DType::kF64);
  Mesh mesh = make_mesh(2, 1, 2);
  std::map<std::string, GroupTotals> plain = step_collectives(step, mesh, false);
  std::map<std::string, GroupTotals> zero1 = step_collectives(step, mesh, true);
  const int64_t f64 = 8;
  EXPECT_EQ(plain["reduce_scatter fsdp"], (GroupTotals{15, f64 * (2 * 2304 + 512)}));
  EXPECT_EQ(plain["all_reduce data"], (GroupTotals{16, f64 * 5632 / 2}));
  EXPECT_EQ(zero1["reduce_scatter fsdp,data"], (GroupTotals{13, f64 * (2 * 2048 + 512)}));
  EXPECT_EQ(zero1["reduce_scatter fsdp"], (GroupTotals{2, f64 * 2 * 256}));
  EXPECT_EQ(zero1["reduce_scatter data"], (GroupTotals{3, f64 * (2 * 128 + 256)}));
  EXPECT_EQ(zero1.count("all_reduce data"), 0u);
  EXPECT_EQ(zero1["all_gather data"], (GroupTotals{16, f64 * 5632 / 2}));
  EXPECT_EQ(plain.count("all_gather data"), 0u);
  EXPECT_EQ(zero1["all_reduce data,fsdp"], plain["all_reduce data,fsdp"]);
  EXPECT_EQ(zero1["all_gather fsdp"], plain["all_gather fsdp"]);
  EXPECT_EQ(zero1["all_to_all fsdp"], plain["all_to_all fsdp"]);
  EXPECT_EQ(zero1["all_reduce scalar"], plain["all_reduce scalar"]);
}

}  // namespace
}  // namespace precast
