// The pieces of the MPI communicator that need no MPI, on one process: the mesh's device order
// (one slice row-major; several slices MaxText's hybrid order, also as an artifact records it)
// and its groups, worked by hand;
// the ordered reduction per element type against hand-computed bits (rank order, bf16/f16 summed
// in f32 and rounded once, wrapping integers, pred as or, NaN-propagating max); the counters;
// mpirun's world size read from the environment and checked against an artifact.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ir/Interpreter.h"
#include "runtime/collectives/CollectiveCounters.h"
#include "runtime/collectives/DeviceMesh.h"
#include "runtime/collectives/MpiLaunch.h"
#include "runtime/collectives/OrderedReduction.h"

namespace precast::runtime {
namespace {

DeviceMesh mesh(std::vector<MeshAxisSplit> axes) {
  Expected<DeviceMesh> m = DeviceMesh::create(std::move(axes));
  EXPECT_TRUE(m.ok()) << m.error().message();
  return *m;
}

DeviceGroup group(const DeviceMesh& m, int64_t device, std::vector<std::string> axes) {
  Expected<DeviceGroup> g = m.group(device, axes);
  EXPECT_TRUE(g.ok()) << g.error().message();
  return g.ok() ? *g : DeviceGroup{};
}

TEST(DeviceMesh, OneSliceIsRowMajorOverTheAxes) {
  DeviceMesh m = mesh({{"data", 2, 1}, {"fsdp", 2, 1}});
  EXPECT_EQ(m.num_devices(), 4);
  EXPECT_EQ(m.num_slices(), 1);
  EXPECT_EQ(m.coordinates(1), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(m.coordinates(2), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(m.coordinates(3), (std::vector<int64_t>{1, 1}));
  std::vector<int64_t> c = {1, 0};
  EXPECT_EQ(m.device(c), 2);
  EXPECT_EQ(m.describe(), "data=2, fsdp=2");
}

TEST(DeviceMesh, GroupsHoldTheDevicesThatDifferOnlyAlongTheirAxes) {
  DeviceMesh m = mesh({{"data", 2, 1}, {"fsdp", 2, 1}});
  // {data}: devices 0 and 2 (fsdp 0), 1 and 3 (fsdp 1); color = the fsdp coordinate.
  DeviceGroup d3 = group(m, 3, {"data"});
  EXPECT_EQ(d3.members, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(d3.position, 1);
  EXPECT_EQ(d3.color, 1);
  EXPECT_EQ(group(m, 0, {"data"}).members, (std::vector<int64_t>{0, 2}));
  // {fsdp}: 0 and 1 (data 0), 2 and 3 (data 1).
  DeviceGroup f2 = group(m, 2, {"fsdp"});
  EXPECT_EQ(f2.members, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f2.position, 0);
  EXPECT_EQ(f2.color, 1);
  // Both axes: everyone, ordered by the axes as given (fsdp major in the second).
  DeviceGroup both = group(m, 1, {"data", "fsdp"});
  EXPECT_EQ(both.members, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(both.position, 1);
  DeviceGroup swapped = group(m, 1, {"fsdp", "data"});
  EXPECT_EQ(swapped.members, (std::vector<int64_t>{0, 2, 1, 3}));
  EXPECT_EQ(swapped.position, 2);  // fsdp 1, data 0: 1 * 2 + 0
  // No axis: the device alone.
  DeviceGroup alone = group(m, 2, {});
  EXPECT_EQ(alone.members, (std::vector<int64_t>{2}));
  EXPECT_FALSE(alone.spans_slices);
}

TEST(DeviceMesh, SeveralSlicesAreOutermost) {
  // fsdp across 2 slices, data inside each: device d is slice d / 2, data = d % 2, so fsdp
  // partners are 2 apart (row-major over (data, fsdp) would make them neighbours).
  DeviceMesh m = mesh({{"data", 2, 1}, {"fsdp", 1, 2}});
  EXPECT_EQ(m.num_slices(), 2);
  EXPECT_EQ(m.devices_per_slice(), 2);
  EXPECT_EQ(m.coordinates(1), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(m.coordinates(2), (std::vector<int64_t>{0, 1}));
  DeviceGroup f = group(m, 0, {"fsdp"});
  EXPECT_EQ(f.members, (std::vector<int64_t>{0, 2}));
  EXPECT_TRUE(f.spans_slices);
  DeviceGroup d = group(m, 0, {"data"});
  EXPECT_EQ(d.members, (std::vector<int64_t>{0, 1}));
  EXPECT_FALSE(d.spans_slices);
  EXPECT_EQ(m.describe(), "data=2, fsdp=2 (ici 1 x dcn 2)");

  // An axis split both ways: data = ici 2 x dcn 2, fsdp = ici 2; slices of 4 devices.
  // Device 5: slice 1, position 1 in it -> ici digits (0, 1), dcn digits (1, 0):
  // data = 1 * 2 + 0 = 2, fsdp = 0 * 2 + 1 = 1.
  DeviceMesh hybrid = mesh({{"data", 2, 2}, {"fsdp", 2, 1}});
  EXPECT_EQ(hybrid.coordinates(5), (std::vector<int64_t>{2, 1}));
  std::vector<int64_t> c = {3, 0};  // dcn digit 1, ici digits (1, 0): slice 1, position 2
  EXPECT_EQ(hybrid.device(c), 6);
  DeviceGroup data = group(hybrid, 5, {"data"});
  EXPECT_EQ(data.members, (std::vector<int64_t>{1, 3, 5, 7}));
  EXPECT_EQ(data.position, 2);
  EXPECT_TRUE(data.spans_slices);
  for (int64_t device = 0; device < 8; ++device) {
    EXPECT_EQ(hybrid.device(hybrid.coordinates(device)), device);
  }
}

// The lockstep interpreter (ir::InterpreterMesh, which SpmdPartition's shard_of also uses) and
// the MPI runtime (DeviceMesh) give every device the same coordinates, on one slice and on
// several, so a single-process lockstep test checks the device order the ranks run in.
TEST(DeviceMesh, TheLockstepInterpreterNumbersDevicesAsTheRanks) {
  struct Split {
    std::vector<int64_t> ici, dcn;
  };
  const std::vector<std::string> names = {"data", "fsdp", "tensor"};
  for (const Split& split : {Split{{2, 2, 1}, {1, 1, 1}}, Split{{2, 1, 1}, {1, 2, 1}},
                             Split{{1, 2, 1}, {2, 1, 1}}, Split{{2, 1, 2}, {1, 2, 1}},
                             Split{{1, 2, 2}, {2, 1, 2}}, Split{{3, 1, 2}, {1, 2, 2}}}) {
    std::vector<MeshAxisSplit> axes;
    ir::InterpreterMesh interpreter;
    for (size_t a = 0; a < names.size(); ++a) {
      axes.push_back({names[a], split.ici[a], split.dcn[a]});
      interpreter.axes.push_back(names[a]);
      interpreter.sizes.push_back(split.ici[a] * split.dcn[a]);
      interpreter.dcn.push_back(split.dcn[a]);
    }
    Expected<DeviceMesh> mesh = DeviceMesh::create(axes);
    ASSERT_TRUE(mesh.ok()) << mesh.error().message();
    ASSERT_EQ(interpreter.num_devices(), mesh->num_devices());
    for (int64_t device = 0; device < mesh->num_devices(); ++device) {
      EXPECT_EQ(interpreter.coordinates(device), mesh->coordinates(device))
          << mesh->describe() << ", device " << device;
    }
  }
}

// An artifact's mesh takes each axis's split from the recorded ici_parallelism and
// dcn_parallelism (one entry per axis; with one slice the DCN entries stay -1, unfilled).
TEST(DeviceMesh, AnArtifactsMeshFollowsItsRecordedIciAndDcnSizes) {
  constexpr artifact::ConfigPhase kCompile = artifact::ConfigPhase::kCompile;
  artifact::Artifact a;
  a.key.mesh = {{"data", 2}, {"fsdp", 2}};
  a.config = {{"ici_parallelism", "[2, 1]", kCompile}, {"dcn_parallelism", "[1, 2]", kCompile}};
  Expected<DeviceMesh> slices = DeviceMesh::of_artifact(a);
  ASSERT_TRUE(slices.ok()) << slices.error().message();
  EXPECT_EQ(slices->num_slices(), 2);
  EXPECT_EQ(slices->coordinates(1), (std::vector<int64_t>{1, 0}));  // row-major: {0, 1}
  EXPECT_EQ(slices->coordinates(2), (std::vector<int64_t>{0, 1}));

  a.config = {{"ici_parallelism", "[2, 2]", kCompile}, {"dcn_parallelism", "[-1, -1]", kCompile}};
  Expected<DeviceMesh> one = DeviceMesh::of_artifact(a);
  ASSERT_TRUE(one.ok()) << one.error().message();
  EXPECT_EQ(one->num_slices(), 1);
  EXPECT_EQ(one->coordinates(1), (std::vector<int64_t>{0, 1}));

  a.config = {{"ici_parallelism", "[2, 1]", kCompile}, {"dcn_parallelism", "[1, 1]", kCompile}};
  Expected<DeviceMesh> wrong = DeviceMesh::of_artifact(a);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.error().code(), ExitCode::kIncompatible);
  EXPECT_EQ(wrong.error().message(),
            "mesh axis 'fsdp' has 2 devices but ici_parallelism gives 1 and dcn_parallelism 1; "
            "recompile it with this build's precast compile");
  a.config.clear();
  ASSERT_FALSE(DeviceMesh::of_artifact(a).ok());
  EXPECT_NE(DeviceMesh::of_artifact(a).error().message().find("lacks ici_parallelism"),
            std::string::npos);
}

TEST(DeviceMesh, BadMeshesAndAxesAreRefusedNamingThem) {
  DeviceMesh m = mesh({{"data", 2, 1}, {"fsdp", 2, 1}});
  std::vector<std::string> unknown = {"tensor"};
  Expected<DeviceGroup> g = m.group(0, unknown);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.error().code(), ExitCode::kIncompatible);
  EXPECT_EQ(g.error().message(),
            "the group's axis 'tensor' is not an axis of the mesh (data=2, fsdp=2)");
  std::vector<std::string> twice = {"data", "data"};
  ASSERT_FALSE(m.group(0, twice).ok());
  EXPECT_NE(m.group(0, twice).error().message().find("'data' twice"), std::string::npos);
  Expected<DeviceMesh> zero = DeviceMesh::create({{"data", 0, 1}});
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.error().message().find("'data' has ICI size 0"), std::string::npos);
  EXPECT_FALSE(DeviceMesh::create({{"x", 1, 1}, {"x", 2, 1}}).ok());
  EXPECT_FALSE(DeviceMesh::create({}).ok());
  Expected<DeviceMesh> from = DeviceMesh::single_slice({{"data", 1}, {"fsdp", 4}});
  ASSERT_TRUE(from.ok());
  EXPECT_EQ(from->num_devices(), 4);
}

TEST(DeviceMesh, ReplicaGroupsAreTakenAsGiven) {
  DeviceMesh m = mesh({{"data", 4, 1}});
  Expected<DeviceGroup> g = m.replica_group(2, {{0, 3}, {1, 2}});
  ASSERT_TRUE(g.ok()) << g.error().message();
  EXPECT_EQ(g->color, 1);
  EXPECT_EQ(g->position, 1);
  EXPECT_EQ(g->members, (std::vector<int64_t>{1, 2}));
  Expected<DeviceGroup> repeated = m.replica_group(0, {{0, 1}, {1, 2}});
  ASSERT_FALSE(repeated.ok());
  EXPECT_EQ(repeated.error().message(), "device 1 is in more than one replica group");
  Expected<DeviceGroup> missing = m.replica_group(0, {{0, 1}, {3}});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message(), "device 2 of the mesh (data=4) is in no replica group");
  Expected<DeviceGroup> outside = m.replica_group(0, {{0, 1}, {2, 5}});
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.error().message().find("names device 5"), std::string::npos);
}

// Reduces `pieces` (n pieces of `count` elements of T) and returns the result.
template <typename T>
std::vector<T> reduce(const std::vector<T>& pieces, int64_t n, ElementType type, ReduceOp op) {
  int64_t count = static_cast<int64_t>(pieces.size()) / n;
  std::vector<T> out(static_cast<size_t>(count));
  reduce_in_order(pieces.data(), n, count, type, op, out.data());
  return out;
}

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

TEST(OrderedReduction, FloatSumsRunInRankOrder) {
  // ((1e8 + 1) - 1e8) + 1 = 1 in f32 (1e8 + 1 rounds to 1e8); a pairwise tree would give 0.
  std::vector<float> f = {1e8f, 1.0f, -1e8f, 1.0f};
  EXPECT_EQ(reduce(f, 4, ElementType::kF32, ReduceOp::kSum), std::vector<float>{1.0f});
  // (0.1 + 0.2) + 0.3 = 0.6000000000000001; 0.1 + (0.2 + 0.3) would be 0.6.
  std::vector<double> d = {0.1, 0.2, 0.3};
  EXPECT_EQ(reduce(d, 3, ElementType::kF64, ReduceOp::kSum),
            std::vector<double>{0.6000000000000001});
  // Two elements, three pieces: {1, 2} + {10, 20} + {100, 200}.
  std::vector<float> two = {1, 2, 10, 20, 100, 200};
  EXPECT_EQ(reduce(two, 3, ElementType::kF32, ReduceOp::kSum), (std::vector<float>{111, 222}));
}

TEST(OrderedReduction, HalfFloatsAreSummedInF32AndRoundedOnce) {
  // bf16: 1 + 3 * 2^-8. In f32 that is 1.01171875 = 1 + 1.5 ulp(bf16), a tie that rounds to the
  // even 1 + 2^-6 = 1.015625 (0x3F82). Summing in bf16 would stay at 1.0 (each 1 + 2^-8 is a
  // tie rounding back to 1).
  std::vector<uint16_t> b = {0x3F80, 0x3B80, 0x3B80, 0x3B80};
  EXPECT_EQ(reduce(b, 4, ElementType::kBF16, ReduceOp::kSum), std::vector<uint16_t>{0x3F82});
  // f16: 1 + 3 * 2^-11 -> 1 + 2^-9 (0x3C02) the same way.
  std::vector<uint16_t> h = {0x3C00, 0x1000, 0x1000, 0x1000};
  EXPECT_EQ(reduce(h, 4, ElementType::kF16, ReduceOp::kSum), std::vector<uint16_t>{0x3C02});
  // 1500 elements (past one block): piece p holds (p + 1) * (e % 5), exact in bf16 and f16.
  const int64_t n = 1500;
  std::vector<uint16_t> many(static_cast<size_t>(3 * n)), many16(many.size());
  for (int64_t p = 0; p < 3; ++p) {
    for (int64_t e = 0; e < n; ++e) {
      float v = static_cast<float>((p + 1) * (e % 5));
      many[static_cast<size_t>(p * n + e)] = static_cast<uint16_t>(bits(v) >> 16);
      _Float16 half = static_cast<_Float16>(v);
      std::memcpy(&many16[static_cast<size_t>(p * n + e)], &half, 2);
    }
  }
  std::vector<uint16_t> sum = reduce(many, 3, ElementType::kBF16, ReduceOp::kSum);
  std::vector<uint16_t> sum16 = reduce(many16, 3, ElementType::kF16, ReduceOp::kSum);
  for (int64_t e = 0; e < n; ++e) {
    float want = static_cast<float>(6 * (e % 5));  // (1 + 2 + 3) * (e % 5)
    ASSERT_EQ(bf16_to_f32(sum[static_cast<size_t>(e)]), want) << e;
    ASSERT_EQ(f16_to_f32(sum16[static_cast<size_t>(e)]), want) << e;
  }
  // Conversions: 1 + 2^-8 is a tie to 1.0 (even); 1 + 3 * 2^-8 ties up to 1 + 2^-6.
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3F82);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(f32_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(f16_to_f32(0x1000), 0.00048828125f);  // 2^-11
}

TEST(OrderedReduction, IntegersWrapAndPredIsOr) {
  // Element 0: max + 1 wraps to min, min - 7 wraps back to max - 6; element 1: -5 + 3 - 7.
  std::vector<int32_t> s = {std::numeric_limits<int32_t>::max(), -5, 1, 3, -7, -7};
  EXPECT_EQ(reduce(s, 3, ElementType::kS32, ReduceOp::kSum),
            (std::vector<int32_t>{std::numeric_limits<int32_t>::max() - 6, -9}));
  std::vector<int32_t> smax = {-5, 3, -7};
  EXPECT_EQ(reduce(smax, 3, ElementType::kS32, ReduceOp::kMax), std::vector<int32_t>{3});
  std::vector<uint32_t> u = {0xFFFFFFFFu, 2u};
  EXPECT_EQ(reduce(u, 2, ElementType::kU32, ReduceOp::kSum), std::vector<uint32_t>{1u});
  std::vector<uint32_t> umax = {7u, 0xFFFFFFF0u};  // unsigned order: not -16
  EXPECT_EQ(reduce(umax, 2, ElementType::kU32, ReduceOp::kMax), std::vector<uint32_t>{0xFFFFFFF0u});
  // pred: two elements over three pieces, {0, 0}, {2, 0}, {0, 0} -> {1, 0}.
  std::vector<uint8_t> p = {0, 0, 2, 0, 0, 0};
  EXPECT_EQ(reduce(p, 3, ElementType::kPred, ReduceOp::kSum), (std::vector<uint8_t>{1, 0}));
  EXPECT_EQ(reduce(p, 3, ElementType::kPred, ReduceOp::kMax), (std::vector<uint8_t>{1, 0}));
}

TEST(OrderedReduction, MaxPropagatesNanAndKeepsTheFirstOfEqualValues) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> with_nan = {1.0f, nan, 3.0f};
  EXPECT_TRUE(std::isnan(reduce(with_nan, 3, ElementType::kF32, ReduceOp::kMax)[0]));
  std::vector<float> zeros = {-0.0f, 0.0f};
  EXPECT_EQ(bits(reduce(zeros, 2, ElementType::kF32, ReduceOp::kMax)[0]), 0x80000000u);
  std::vector<float> plain = {-4.0f, 2.5f, 1.0f};
  EXPECT_EQ(reduce(plain, 3, ElementType::kF32, ReduceOp::kMax), std::vector<float>{2.5f});
  std::vector<uint16_t> b = {0x3F80 /*1*/, 0x7FC0 /*NaN*/};
  EXPECT_TRUE(std::isnan(bf16_to_f32(reduce(b, 2, ElementType::kBF16, ReduceOp::kMax)[0])));
  std::vector<uint16_t> h = {0xC000 /*-2*/, 0x3C00 /*1*/};
  EXPECT_EQ(reduce(h, 2, ElementType::kF16, ReduceOp::kMax), std::vector<uint16_t>{0x3C00});
}

TEST(CollectiveCounters, CountPerKindAndNetworkAsTheCompilerNamesThem) {
  CollectiveCounters c;
  EXPECT_NE(c.format().find("none"), std::string::npos);
  c.record(CollectiveOp::kAllGather, false, 8192, 6144, 0.5);
  c.record(CollectiveOp::kAllGather, false, 8192, 6144, 0.25);
  c.record(CollectiveOp::kAllReduce, true, 1024, 1792, 1.0);
  ASSERT_EQ(c.by_kind().size(), 2u);
  const CollectiveCounter& gather = c.by_kind().at("all-gather ICI");
  EXPECT_EQ(gather.calls, 2);
  EXPECT_EQ(gather.bytes, 16384);
  EXPECT_EQ(gather.sent_bytes, 12288);
  EXPECT_DOUBLE_EQ(gather.seconds, 0.75);
  EXPECT_EQ(c.by_kind().at("all-reduce DCN").calls, 1);
  EXPECT_EQ(c.total().calls, 3);
  EXPECT_EQ(c.total().bytes, 17408);
  std::string text = c.format();
  EXPECT_NE(text.find("all-reduce DCN"), std::string::npos) << text;
  EXPECT_NE(text.find("17408"), std::string::npos) << text;
  c.clear();
  EXPECT_TRUE(c.by_kind().empty());
}

TEST(MpiLaunch, TheWorldSizeComesFromMpirunsEnvironment) {
  const char* saved = std::getenv("OMPI_COMM_WORLD_SIZE");
  std::string restore = saved ? saved : "";
  unsetenv("OMPI_COMM_WORLD_SIZE");
  EXPECT_EQ(launched_world_size(), std::nullopt);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  EXPECT_EQ(launched_world_size(), std::optional<int64_t>(4));
  setenv("OMPI_COMM_WORLD_SIZE", "4x", 1);
  EXPECT_EQ(launched_world_size(), std::nullopt);
  setenv("OMPI_COMM_WORLD_SIZE", "0", 1);
  EXPECT_EQ(launched_world_size(), std::nullopt);
  if (saved) {
    setenv("OMPI_COMM_WORLD_SIZE", restore.c_str(), 1);
  } else {
    unsetenv("OMPI_COMM_WORLD_SIZE");
  }

  artifact::CompatibilityKey key;
  key.num_devices = 4;
  key.topology_name = "cpu-4";
  EXPECT_TRUE(check_world_size("step.pcx", key, 4).ok());
  Status two = check_world_size("step.pcx", key, 2);
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(two.error().code(), ExitCode::kIncompatible);
  EXPECT_EQ(two.error().message(),
            "step.pcx is compiled for 4 devices (topology cpu-4) but mpirun started 2 ranks "
            "(OMPI_COMM_WORLD_SIZE); one rank runs one device: start it with `mpirun -np 4 "
            "precast-run step.pcx`, or compile it for 2 devices");
}

}  // namespace
}  // namespace precast::runtime
