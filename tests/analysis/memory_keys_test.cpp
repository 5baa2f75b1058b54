// The MaxText keys that change per-device memory, against hand counts: shard_optimizer_over_data
// (ZeRO-1) splits Adam's moments over `data` (MaxText's add_data_to_sharding) and the argument
// bytes drop by exactly the moments' 3/4 on a data=4 mesh; optimizer_memory_host_offload moves
// the moments out of the device (HBM) bytes into host bytes; MaxText's checks on these keys
// refuse with MaxText's messages.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "compiler/analysis/BufferAssignment.h"
#include "compiler/analysis/Sharding.h"
#include "compiler/driver/Analyze.h"
#include "tests/support/ConfigTestUtil.h"

namespace precast {
namespace {

// The small llama2 of MaxText's zero1 test: E=256, M=256, 2 layers; base.yml's H=K=16, D=128,
// V=32000, untied logits. Weights by hand:
//   embedding V*E = 8,192,000; logits_dense E*V = 8,192,000; final norm E = 256;
//   per layer q, k, v, out 4 * E*H*D = 2,097,152, wi_0, wi_1, wo 3 * E*M = 196,608, 2 norms 512.
constexpr int64_t kWeights = 8'192'000 * 2 + 256 + 2 * (2'097'152 + 196'608 + 512);
static_assert(kWeights == 20'972'800);
constexpr int64_t kMomentBytes = 2 * 4 * kWeights;  // mu and nu, f32
// The norm scales (2 per layer and the final one, E each): their `norm` axis's rule names
// `tensor`, so MaxText's add_data_to_sharding leaves them whole.
constexpr int64_t kNormMomentBytes = 2 * 4 * (2 * 2 + 1) * 256;
constexpr int64_t kCountBytes = 4;  // Adam's step count, s32

const std::vector<std::string> kSmall = {"base_emb_dim=256", "base_mlp_dim=256",
                                         "base_num_decoder_layers=2", "per_device_batch_size=1",
                                         "max_target_length=256"};

Expected<AnalysisReport> analyze_with(std::vector<std::string> overrides) {
  ConfigRequest request;
  request.config_file = testing::base_yml();
  request.overrides = kSmall;
  request.overrides.insert(request.overrides.end(), overrides.begin(), overrides.end());
  request.read_environment = false;
  return analyze(request, testing::source_dir() / "configs" / "topologies.yml");
}

int64_t optimizer_argument_bytes(const AnalysisReport& r) {
  return r.memory.plan.argument_by_category[static_cast<size_t>(MemoryCategory::kOptimizerState)];
}

TEST(ZeroOne, MomentsSplitOverDataShrinkTheArgumentBytes) {
  // An 8 x H100 host: the plan counts plain bytes (no TPU tiling) and 8 divides every weight.
  std::vector<std::string> mesh = {"compile_topology=h100-8", "compile_topology_num_slices=1",
                                   "ici_data_parallelism=8", "ici_fsdp_parallelism=1"};
  Expected<AnalysisReport> plain = analyze_with(mesh);
  ASSERT_TRUE(plain.ok()) << plain.error().message();
  mesh.push_back("shard_optimizer_over_data=true");
  mesh.push_back("shard_mode=explicit");  // as MaxText's zero1_optimizer_sharding test
  Expected<AnalysisReport> zero1 = analyze_with(mesh);
  ASSERT_TRUE(zero1.ok()) << zero1.error().message();

  // data=8 alone: every weight replicated, every moment whole on each device...
  EXPECT_EQ(optimizer_argument_bytes(*plain), kMomentBytes + kCountBytes);
  // ...with ZeRO-1 an eighth of each but the norms' (every other weight has a dimension 8
  // divides; the count is a scalar and stays whole).
  constexpr int64_t kSplit = kMomentBytes - kNormMomentBytes;
  EXPECT_EQ(optimizer_argument_bytes(*zero1), kSplit / 8 + kNormMomentBytes + kCountBytes);
  EXPECT_EQ(plain->memory.plan.argument_bytes - zero1->memory.plan.argument_bytes, kSplit * 7 / 8);
  // The weights stay replicated (MaxText keeps the params' shardings on input and output), and
  // the updated weights are all-gathered over data; without ZeRO-1 nothing is gathered.
  EXPECT_EQ(plain->memory.plan.output_bytes - zero1->memory.plan.output_bytes, kSplit * 7 / 8);
  EXPECT_EQ(plain->memory.collectives.count("all-gather ICI"), 0u);
  ASSERT_EQ(zero1->memory.collectives.count("all-gather ICI"), 1u);
  // One gather per data-split weight's update: 2 layers x 7 (q, k, v, out, wi_0, wi_1, wo),
  // the embedding and the logits, each from an eighth to the whole f32 weight.
  constexpr int64_t kSplitWeights = kWeights - (2 * 2 + 1) * 256;  // all but the norm scales
  EXPECT_EQ(zero1->memory.collectives.at("all-gather ICI").count, 2 * 7 + 2);
  EXPECT_EQ(zero1->memory.collectives.at("all-gather ICI").bytes, 4 * kSplitWeights);
  // The same 16 weights' gradients (bf16 partial sums of the whole weight, from the matmuls and
  // the embedding lookup's scatter_add) are reduce-scattered over data onto their moments'
  // eighths instead of all-reduced: without ZeRO-1 nothing is reduce-scattered (data alone
  // shards no weight).
  EXPECT_EQ(plain->memory.collectives.count("reduce-scatter ICI"), 0u);
  ASSERT_EQ(zero1->memory.collectives.count("reduce-scatter ICI"), 1u);
  EXPECT_EQ(zero1->memory.collectives.at("reduce-scatter ICI").count, 2 * 7 + 2);
  EXPECT_EQ(zero1->memory.collectives.at("reduce-scatter ICI").bytes, 2 * kSplitWeights);
  // Those 16 all-reduces go; the three sums of squares over each of the 16 weights' pieces (the
  // raw gradient's for clipping, the clipped gradient's for grad_norm, the new weight's for
  // param_norm) are now taken on each device's eighth and all-reduced as f32 scalars.
  const CollectiveTotals& plain_reduce = plain->memory.collectives.at("all-reduce ICI");
  const CollectiveTotals& zero1_reduce = zero1->memory.collectives.at("all-reduce ICI");
  EXPECT_EQ(zero1_reduce.count - plain_reduce.count, 3 * 16 - 16);
  EXPECT_EQ(plain_reduce.bytes - zero1_reduce.bytes, 2 * kSplitWeights - 3 * 16 * 4);
}

TEST(ZeroOne, AddDataToShardingFollowsMaxText) {
  Mesh mesh;
  mesh.axes = {"data", "fsdp", "tensor"};
  mesh.ici = mesh.shape = {2, 2, 2};
  mesh.dcn = {1, 1, 1};
  mesh.num_devices = 8;
  ShardingSpec fsdp_tensor{{{"fsdp"}, {"tensor"}}};
  // The first dimension whose per-device size data divides: 8/2 = 4 on dim 0.
  EXPECT_EQ(add_data_to_sharding(fsdp_tensor, {8, 8}, mesh).to_string(),
            "P(('data', 'fsdp'), 'tensor')");
  // A dimension split over tensor is skipped; one data does not divide (3) too.
  ShardingSpec tensor_first{{{"tensor"}, {}, {}}};
  EXPECT_EQ(add_data_to_sharding(tensor_first, {4, 3, 6}, mesh).to_string(),
            "P('tensor', None, 'data')");
  // No dimension fits: unchanged; a spec that uses data already: unchanged.
  EXPECT_EQ(add_data_to_sharding(ShardingSpec{{{}, {}}}, {3, 5}, mesh).to_string(),
            "P(None, None)");
  ShardingSpec has_data{{{}, {"data"}}};
  EXPECT_EQ(add_data_to_sharding(has_data, {8, 8}, mesh).to_string(), "P(None, 'data')");
}

// param_scan_axis=0 stacks a scanned weight's layers in front of its dimensions instead of after
// the first: Precast's weights and checkpoint tensors are per layer, and a stacked TPU array's
// bytes do not depend on where the layers axis sits (the tiling takes the two dimensions that pad
// least), so the plan on a TPU, which stacks them, is byte for byte the default's. Any other
// axis is refused naming the key, the value and the two that work.
TEST(ParamScanAxis, ZeroPlansAsOne) {
  std::vector<std::string> tpu = {"compile_topology=v5p-8", "compile_topology_num_slices=1"};
  Expected<AnalysisReport> one = analyze_with(tpu);
  ASSERT_TRUE(one.ok()) << one.error().message();
  tpu.push_back("param_scan_axis=0");
  Expected<AnalysisReport> zero = analyze_with(tpu);
  ASSERT_TRUE(zero.ok()) << zero.error().message();
  EXPECT_EQ(zero->memory.plan.argument_bytes, one->memory.plan.argument_bytes);
  EXPECT_EQ(zero->memory.plan.output_bytes, one->memory.plan.output_bytes);
  EXPECT_EQ(zero->memory.plan.alias_bytes, one->memory.plan.alias_bytes);
  EXPECT_EQ(zero->memory.plan.temp_bytes, one->memory.plan.temp_bytes);
  tpu.back() = "param_scan_axis=2";
  Expected<AnalysisReport> two = analyze_with(tpu);
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(two.error().code(), ExitCode::kUsage);
  EXPECT_NE(two.error().message().find("param_scan_axis=2"), std::string::npos)
      << two.error().message();
  EXPECT_NE(two.error().message().find("must be 0 or 1"), std::string::npos)
      << two.error().message();
}

TEST(ZeroOne, RefusedWithMaxTextsMessages) {
  Expected<AnalysisReport> sgd =
      analyze_with({"compile_topology=v5p-8", "ici_data_parallelism=4", "ici_fsdp_parallelism=1",
                    "opt_type=sgd", "shard_optimizer_over_data=true"});
  ASSERT_FALSE(sgd.ok());
  EXPECT_NE(sgd.error().message().find(
                "Optimizer type sgd is not supported for optimizer sharding. Please use an "
                "optimizer from this list: ('adamw', 'adam_pax')."),
            std::string::npos)
      << sgd.error().message();
  Expected<AnalysisReport> gemma =
      analyze_with({"compile_topology=v5p-8", "model_name=gemma-2b", "override_model_config=true",
                    "shard_mode=explicit"});
  ASSERT_FALSE(gemma.ok());
  EXPECT_NE(gemma.error().message().find(
                "Decoder 'gemma' is not supported with 'explicit' sharding. Supported options "
                "are: ['simple', 'simple_mlp', 'llama2', 'deepseek']."),
            std::string::npos)
      << gemma.error().message();
}

TEST(HostOffload, OptimizerStateCountedAsHostMemory) {
  // One H100 of an 8-GPU host (plain bytes, no TPU tiling): fsdp=8 would split the state.
  std::vector<std::string> one = {"compile_topology=h100-8", "compile_topology_num_slices=1",
                                  "ici_fsdp_parallelism=1", "ici_data_parallelism=8"};
  Expected<AnalysisReport> device = analyze_with(one);
  ASSERT_TRUE(device.ok()) << device.error().message();
  one.push_back("optimizer_memory_host_offload=true");
  Expected<AnalysisReport> host = analyze_with(one);
  ASSERT_TRUE(host.ok()) << host.error().message();

  // One device: the moments and the count whole, as arguments and as donated outputs.
  constexpr int64_t kState = kMomentBytes + kCountBytes;
  EXPECT_EQ(host->memory.host.argument_bytes, kState);
  EXPECT_EQ(host->memory.host.output_bytes, kState);
  EXPECT_EQ(host->memory.host.alias_bytes, kState);
  EXPECT_EQ(optimizer_argument_bytes(*host), 0);
  EXPECT_EQ(device->memory.plan.argument_bytes - host->memory.plan.argument_bytes, kState);
  EXPECT_EQ(device->memory.plan.output_bytes - host->memory.plan.output_bytes, kState);
  // The update streams the largest weight's moments (the V x E embedding's, f32) in and out.
  constexpr int64_t kStreaming = 2 * 2 * 4 * 8'192'000;
  EXPECT_EQ(host->memory.host.streaming_temp_bytes, kStreaming);
  EXPECT_EQ(host->memory.plan.temp_bytes - device->memory.plan.temp_bytes, kStreaming);
  // The device total (what the verdict compares with HBM) loses the state and gains the stream.
  EXPECT_EQ(device->memory.plan.total_bytes() - host->memory.plan.total_bytes(),
            kState - kStreaming);
  EXPECT_FALSE(device->memory.host.any());
}

}  // namespace
}  // namespace precast
