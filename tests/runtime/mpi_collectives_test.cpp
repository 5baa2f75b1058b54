// The MPI communicator, run by ctest under `mpirun --oversubscribe -np 4` and `-np 2` (every
// rank runs every test; a failure on any rank fails the job). Every op x every element type
// against hand-computed values (uneven splits, in place, every shift); group splitting on a 2x2
// mesh (data, fsdp) and on a mesh whose fsdp axis spans 2 slices, each group's members checked
// by gathering world ranks; a mesh of another size refused; sums in rank order; bf16/f16 sums
// against an f32 reference rounded once; the same bits on every rank and on a second run; the
// counters against a hand count and against the compiler's own per-device prediction
// (count_collectives on the per-device IR whose collectives the ranks run).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/analysis/MemoryReport.h"
#include "compiler/backend/cpu/CodeGen.h"
#include "compiler/driver/Compile.h"
#include "ir/FloatFormats.h"
#include "ir/Parser.h"
#include "runtime/collectives/CollectiveStep.h"
#include "runtime/collectives/MpiCommunicator.h"
#include "tests/support/Random.h"

namespace precast::runtime {
namespace {

MpiWorld* world = nullptr;  // made in main, before any test

const std::vector<ElementType> kTypes = {ElementType::kF32, ElementType::kF64, ElementType::kBF16,
                                         ElementType::kF16, ElementType::kS32, ElementType::kU32,
                                         ElementType::kPred};

using Bytes = std::vector<uint8_t>;

Bytes buffer(ElementType t, int64_t count) {
  return Bytes(static_cast<size_t>(count * element_bytes(t)), 0xA5);
}

// Writes v (exactly representable in t: small integers) as element i.
void put(Bytes& b, int64_t i, ElementType t, double v) {
  uint8_t* p = b.data() + i * element_bytes(t);
  switch (t) {
    case ElementType::kF32: {
      float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      return;
    }
    case ElementType::kF64:
      std::memcpy(p, &v, 8);
      return;
    case ElementType::kBF16: {
      float f = static_cast<float>(v);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      uint16_t high = static_cast<uint16_t>(bits >> 16);  // exact for the values used here
      std::memcpy(p, &high, 2);
      return;
    }
    case ElementType::kF16: {
      _Float16 h = static_cast<_Float16>(v);
      std::memcpy(p, &h, 2);
      return;
    }
    case ElementType::kS32: {
      int32_t s = static_cast<int32_t>(v);
      std::memcpy(p, &s, 4);
      return;
    }
    case ElementType::kU32: {
      uint32_t u = static_cast<uint32_t>(v);
      std::memcpy(p, &u, 4);
      return;
    }
    case ElementType::kPred:
      *p = v != 0 ? 1 : 0;
      return;
  }
}

double get(const Bytes& b, int64_t i, ElementType t) {
  const uint8_t* p = b.data() + i * element_bytes(t);
  switch (t) {
    case ElementType::kF32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case ElementType::kF64: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    case ElementType::kBF16: {
      uint16_t high;
      std::memcpy(&high, p, 2);
      uint32_t bits = static_cast<uint32_t>(high) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case ElementType::kF16: {
      _Float16 h;
      std::memcpy(&h, p, 2);
      return static_cast<double>(h);
    }
    case ElementType::kS32: {
      int32_t s;
      std::memcpy(&s, p, 4);
      return s;
    }
    case ElementType::kU32: {
      uint32_t u;
      std::memcpy(&u, p, 4);
      return u;
    }
    case ElementType::kPred:
      return *p;
  }
  return 0;
}

// Rank r's element i: pred is (r + i) % 3 == 0; u32 is (r + 1) * k; the others alternate sign,
// (-1)^i (r + 1) * k, with k = i % 7 + 1. Sums stay below 71: exact in every type.
double value(ElementType t, int64_t r, int64_t i) {
  if (t == ElementType::kPred) return (r + i) % 3 == 0 ? 1 : 0;
  double k = static_cast<double>(i % 7 + 1);
  double sign = (t != ElementType::kU32 && i % 2 == 1) ? -1 : 1;
  return sign * static_cast<double>(r + 1) * k;
}

Bytes values(ElementType t, int64_t r, int64_t count) {
  Bytes b = buffer(t, count);
  for (int64_t i = 0; i < count; ++i) put(b, i, t, value(t, r, i));
  return b;
}

// By hand over ranks 0..w-1 of value(): sum of (r + 1) is w(w + 1)/2; the max of (r + 1) k is
// w k, of -(r + 1) k it is -k; pred (sum = or = max): some r < w has (r + i) % 3 == 0, always
// for w >= 3, and for w = 2 unless i % 3 == 1.
double hand_sum(ElementType t, int64_t w, int64_t i) {
  if (t == ElementType::kPred) return (w >= 3 || i % 3 != 1) ? 1 : 0;
  return value(t, 0, i) * static_cast<double>(w * (w + 1) / 2);
}
double hand_max(ElementType t, int64_t w, int64_t i) {
  if (t == ElementType::kPred) return hand_sum(t, w, i);
  double first = value(t, 0, i);
  return first > 0 ? first * static_cast<double>(w) : first;
}

int W() {
  return world->size();
}
int R() {
  return world->rank();
}

void expect_ok(const Status& s) {
  EXPECT_TRUE(s.ok()) << s.error().message();
}

TEST(MpiCollectives, TheWorldIsMpirunsAndMadeOncePerProcess) {
  EXPECT_EQ(launched_world_size(), std::optional<int64_t>(W()));
  Expected<std::unique_ptr<MpiWorld>> second = MpiWorld::initialize();
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().code(), ExitCode::kInternal);
  EXPECT_NE(second.error().message().find("MPI was already initialised in this process"),
            std::string::npos);
}

TEST(MpiCollectives, AllReduceSumAndMaxForEveryType) {
  Communicator& comm = world->world();
  ASSERT_EQ(comm.size(), W());
  ASSERT_EQ(comm.rank(), R());
  for (ElementType t : kTypes) {
    // 1 and 3 leave some ranks an empty piece; 11 splits unevenly; 1000 is several blocks.
    for (int64_t count : {1, 3, 11, 1000}) {
      SCOPED_TRACE(::testing::Message() << runtime::element_type_name(t) << " count " << count);
      Bytes send = values(t, R(), count);
      Bytes sum = buffer(t, count), max = buffer(t, count);
      expect_ok(comm.all_reduce(send.data(), sum.data(), count, t, ReduceOp::kSum));
      expect_ok(comm.all_reduce(send.data(), max.data(), count, t, ReduceOp::kMax));
      for (int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(get(sum, i, t), hand_sum(t, W(), i)) << "sum element " << i;
        ASSERT_EQ(get(max, i, t), hand_max(t, W(), i)) << "max element " << i;
      }
    }
    // In place: send and recv the same buffer.
    Bytes inout = values(t, R(), 11);
    expect_ok(world->world().all_reduce(inout.data(), inout.data(), 11, t, ReduceOp::kSum));
    for (int64_t i = 0; i < 11; ++i) EXPECT_EQ(get(inout, i, t), hand_sum(t, W(), i)) << i;
  }
}

TEST(MpiCollectives, AllGatherForEveryType) {
  const int64_t count = 5;
  for (ElementType t : kTypes) {
    SCOPED_TRACE(runtime::element_type_name(t));
    Bytes send = values(t, R(), count), recv = buffer(t, W() * count);
    expect_ok(world->world().all_gather(send.data(), recv.data(), count, t));
    for (int64_t q = 0; q < W(); ++q) {
      for (int64_t i = 0; i < count; ++i) {
        EXPECT_EQ(get(recv, q * count + i, t), value(t, q, i)) << "rank " << q << " element " << i;
      }
    }
  }
}

TEST(MpiCollectives, ReduceScatterForEveryType) {
  const int64_t count = 5;  // per rank; the operand holds W * 5
  for (ElementType t : kTypes) {
    SCOPED_TRACE(runtime::element_type_name(t));
    Bytes send = values(t, R(), W() * count), sum = buffer(t, count), max = buffer(t, count);
    expect_ok(world->world().reduce_scatter(send.data(), sum.data(), count, t, ReduceOp::kSum));
    expect_ok(world->world().reduce_scatter(send.data(), max.data(), count, t, ReduceOp::kMax));
    for (int64_t i = 0; i < count; ++i) {
      int64_t global = R() * count + i;  // this rank keeps piece R()
      EXPECT_EQ(get(sum, i, t), hand_sum(t, W(), global)) << i;
      EXPECT_EQ(get(max, i, t), hand_max(t, W(), global)) << i;
    }
  }
}

TEST(MpiCollectives, AllToAllForEveryType) {
  const int64_t count = 5;  // per piece
  for (ElementType t : kTypes) {
    SCOPED_TRACE(runtime::element_type_name(t));
    Bytes send = values(t, R(), W() * count), recv = buffer(t, W() * count);
    expect_ok(world->world().all_to_all(send.data(), recv.data(), count, t));
    // Piece q of the result is rank q's piece R().
    for (int64_t q = 0; q < W(); ++q) {
      for (int64_t i = 0; i < count; ++i) {
        EXPECT_EQ(get(recv, q * count + i, t), value(t, q, R() * count + i)) << q << " " << i;
      }
    }
  }
}

TEST(MpiCollectives, CollectivePermuteShiftsWithinTheGroupForEveryType) {
  const int64_t count = 5;
  for (ElementType t : kTypes) {
    for (int64_t shift : {int64_t{1}, int64_t{-1}, int64_t{2}, int64_t{0}, int64_t{W() + 1}}) {
      SCOPED_TRACE(::testing::Message() << runtime::element_type_name(t) << " shift " << shift);
      Bytes send = values(t, R(), count), recv = buffer(t, count);
      expect_ok(world->world().collective_permute(send.data(), recv.data(), count, t, shift));
      int64_t from = ((R() - shift) % W() + W()) % W();
      for (int64_t i = 0; i < count; ++i) EXPECT_EQ(get(recv, i, t), value(t, from, i)) << i;
    }
  }
}

TEST(MpiCollectives, BroadcastAndBarrierForEveryType) {
  const int64_t count = 7;
  const int root = W() - 1;
  for (ElementType t : kTypes) {
    SCOPED_TRACE(runtime::element_type_name(t));
    Bytes b = values(t, R(), count);
    expect_ok(world->world().broadcast(b.data(), count, t, root));
    for (int64_t i = 0; i < count; ++i) EXPECT_EQ(get(b, i, t), value(t, root, i)) << i;
    expect_ok(world->world().barrier());
  }
  Bytes b = values(ElementType::kF32, R(), 1);
  Status bad_root = world->world().broadcast(b.data(), 1, ElementType::kF32, W());
  ASSERT_FALSE(bad_root.ok());
  EXPECT_NE(bad_root.error().message().find("root"), std::string::npos);
}

// The world ranks of this rank's group on `comm`, in group rank order.
std::vector<int32_t> members(Communicator& comm) {
  int32_t me = R();
  std::vector<int32_t> all(static_cast<size_t>(comm.size()));
  expect_ok(comm.all_gather(&me, all.data(), 1, ElementType::kS32));
  return all;
}

Communicator& group(const DeviceMesh& mesh, std::vector<std::string> axes) {
  Expected<Communicator*> comm = world->group(mesh, axes);
  EXPECT_TRUE(comm.ok()) << comm.error().message();
  return **comm;
}

TEST(MpiCollectives, GroupsOfA2x2MeshHoldTheRanksThatDifferOnlyAlongTheirAxes) {
  if (W() != 4) GTEST_SKIP() << "needs 4 ranks";
  Expected<DeviceMesh> mesh = DeviceMesh::create({{"data", 2, 1}, {"fsdp", 2, 1}});
  ASSERT_TRUE(mesh.ok());
  // Row-major over (data, fsdp): rank 0 = (0,0), 1 = (0,1), 2 = (1,0), 3 = (1,1).
  const std::vector<std::vector<int32_t>> data = {{0, 2}, {1, 3}, {0, 2}, {1, 3}};
  const std::vector<std::vector<int32_t>> fsdp = {{0, 1}, {0, 1}, {2, 3}, {2, 3}};
  const std::vector<std::vector<int32_t>> fsdp_data = {
      {0, 2, 1, 3}, {0, 2, 1, 3}, {0, 2, 1, 3}, {0, 2, 1, 3}};
  const size_t r = static_cast<size_t>(R());
  Communicator& by_data = group(*mesh, {"data"});
  EXPECT_EQ(members(by_data), data[r]);
  EXPECT_EQ(by_data.rank(), R() / 2);
  Communicator& by_fsdp = group(*mesh, {"fsdp"});
  EXPECT_EQ(members(by_fsdp), fsdp[r]);
  EXPECT_EQ(by_fsdp.rank(), R() % 2);
  EXPECT_EQ(members(group(*mesh, {"data", "fsdp"})), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(members(group(*mesh, {"fsdp", "data"})), fsdp_data[r]);
  EXPECT_EQ(members(group(*mesh, {})), std::vector<int32_t>{R()});
  // Cached: the same axes give the same communicator.
  EXPECT_EQ(&group(*mesh, {"fsdp"}), &by_fsdp);

  // A sum over each group by hand: rank r contributes r + 1.
  float mine = static_cast<float>(R() + 1), sum = 0;
  expect_ok(by_fsdp.all_reduce(&mine, &sum, 1, ElementType::kF32, ReduceOp::kSum));
  EXPECT_EQ(sum, R() < 2 ? 3.0f : 7.0f);  // 1 + 2, 3 + 4
  expect_ok(by_data.all_reduce(&mine, &sum, 1, ElementType::kF32, ReduceOp::kSum));
  EXPECT_EQ(sum, R() % 2 == 0 ? 4.0f : 6.0f);  // 1 + 3, 2 + 4

  // fsdp across 2 slices, data inside a slice: rank = slice * 2 + data, so the fsdp partners
  // are 2 apart, and their group spans slices.
  Expected<DeviceMesh> sliced = DeviceMesh::create({{"data", 2, 1}, {"fsdp", 1, 2}});
  ASSERT_TRUE(sliced.ok());
  EXPECT_EQ(members(group(*sliced, {"fsdp"})), data[r]);
  EXPECT_EQ(members(group(*sliced, {"data"})), fsdp[r]);
  // Explicit replica groups: {0, 3} and {1, 2}, in the order given.
  artifact::Collective c;
  c.mesh_axes = {"data", "fsdp"};
  c.replica_groups = {{3, 0}, {1, 2}};
  Expected<Communicator*> replicas = world->group(*mesh, c);
  ASSERT_TRUE(replicas.ok()) << replicas.error().message();
  const std::vector<std::vector<int32_t>> pairs = {{3, 0}, {1, 2}, {1, 2}, {3, 0}};
  EXPECT_EQ(members(**replicas), pairs[r]);
}

TEST(MpiCollectives, AMeshOfAnotherDeviceCountIsRefusedNamingBothCounts) {
  Expected<DeviceMesh> mesh = DeviceMesh::create({{"data", 2, 1}, {"fsdp", W(), 1}});
  ASSERT_TRUE(mesh.ok());
  std::vector<std::string> axes = {"fsdp"};
  Expected<Communicator*> comm = world->group(*mesh, axes);
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.error().code(), ExitCode::kIncompatible);
  EXPECT_EQ(comm.error().message(),
            fmt::format("the mesh (data=2, fsdp={}) has {} devices but this job runs {} MPI "
                        "ranks; start it with mpirun -np {}",
                        W(), 2 * W(), W(), 2 * W()));
}

TEST(MpiCollectives, SumsRunInRankOrderAndHalfFloatsRoundOnce) {
  if (W() != 4) GTEST_SKIP() << "needs 4 ranks";
  // ((1e8 + 1) - 1e8) + 1 = 1 in f32; a tree ((1e8 + 1) + (-1e8 + 1)) would give 0.
  const float f[] = {1e8f, 1.0f, -1e8f, 1.0f};
  float sum = -1;
  expect_ok(world->world().all_reduce(&f[R()], &sum, 1, ElementType::kF32, ReduceOp::kSum));
  EXPECT_EQ(sum, 1.0f);
  // bf16 1 + 3 * 2^-8: f32 sum 1.01171875, rounded once to 1.015625 (0x3F82); bf16 steps
  // would stay at 1.0. f16 1 + 3 * 2^-11 likewise gives 1 + 2^-9 (0x3C02).
  const uint16_t b[] = {0x3F80, 0x3B80, 0x3B80, 0x3B80};
  const uint16_t h[] = {0x3C00, 0x1000, 0x1000, 0x1000};
  uint16_t out = 0;
  expect_ok(world->world().all_reduce(&b[R()], &out, 1, ElementType::kBF16, ReduceOp::kSum));
  EXPECT_EQ(out, 0x3F82);
  expect_ok(world->world().all_reduce(&h[R()], &out, 1, ElementType::kF16, ReduceOp::kSum));
  EXPECT_EQ(out, 0x3C02);
}

// A value in [-4, 4) with a full 24-bit mantissa's worth of randomness.
float random_value(int64_t rank, int64_t i) {
  // One splitmix64 draw per (rank, element): every rank regenerates every other rank's data.
  uint64_t bits =
      precast::testing::Random{static_cast<uint64_t>(rank) * 1000003ull + static_cast<uint64_t>(i)}
          .next();
  return static_cast<float>(
      static_cast<double>(bits >> 40) / static_cast<double>(1ull << 24) * 8.0 - 4.0);
}

TEST(MpiCollectives, HalfFloatSumsEqualTheF32SumRoundedOnce) {
  const int64_t count = 4099;
  for (ElementType t : {ElementType::kBF16, ElementType::kF16}) {
    SCOPED_TRACE(runtime::element_type_name(t));
    auto to_half = [&](double v) {
      // Round with the IR's reference rounding (double arithmetic), then take the bits.
      double r = t == ElementType::kBF16 ? ir::round_to_bf16(v) : ir::round_to_f16(v);
      Bytes one = buffer(t, 1);
      if (t == ElementType::kBF16) {
        put(one, 0, t, r);  // r is exact in bf16
      } else {
        _Float16 x = static_cast<_Float16>(r);  // exact: r is an f16 value
        std::memcpy(one.data(), &x, 2);
      }
      return one;
    };
    auto input = [&](int64_t rank, int64_t i) { return get(to_half(random_value(rank, i)), 0, t); };
    Bytes send = buffer(t, count), recv = buffer(t, count);
    for (int64_t i = 0; i < count; ++i)
      std::memcpy(&send[static_cast<size_t>(2 * i)], to_half(input(R(), i)).data(), 2);
    expect_ok(world->world().all_reduce(send.data(), recv.data(), count, t, ReduceOp::kSum));
    int64_t mismatches = 0;
    for (int64_t i = 0; i < count; ++i) {
      float reference = 0;  // the f32 sum in rank order
      for (int64_t q = 0; q < W(); ++q) reference += static_cast<float>(input(q, i));
      Bytes want = to_half(reference);
      if (std::memcmp(want.data(), &recv[static_cast<size_t>(2 * i)], 2) != 0) ++mismatches;
    }
    EXPECT_EQ(mismatches, 0);
  }
}

// The bits of an all-reduce of pseudo-random f32 data whose sum depends on the order.
std::vector<uint32_t> random_sum_bits(int64_t count) {
  std::vector<float> send(static_cast<size_t>(count)), recv(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    send[static_cast<size_t>(i)] = random_value(R(), i) * (i % 3 == 0 ? 1e6f : 1.0f);
  expect_ok(world->world().all_reduce(send.data(), recv.data(), count, ElementType::kF32,
                                      ReduceOp::kSum));
  std::vector<uint32_t> bits(static_cast<size_t>(count));
  std::memcpy(bits.data(), recv.data(), bits.size() * 4);
  return bits;
}

TEST(MpiCollectives, EveryRankGetsTheSameBitsAndSoDoesASecondRun) {
  const int64_t count = 10007;
  std::vector<uint32_t> first = random_sum_bits(count);
  std::vector<uint32_t> again = random_sum_bits(count);
  EXPECT_EQ(first, again);
  std::vector<uint32_t> everyone(static_cast<size_t>(count * W()));
  expect_ok(world->world().all_gather(first.data(), everyone.data(), count, ElementType::kU32));
  for (int64_t q = 0; q < W(); ++q) {
    EXPECT_EQ(
        0, std::memcmp(everyone.data() + q * count, first.data(), static_cast<size_t>(count) * 4))
        << "rank " << q << "'s result differs from rank " << R() << "'s";
  }
}

TEST(MpiCollectives, CountersEqualTheHandCount) {
  world->clear_counters();
  Communicator& comm = world->world();
  const int64_t w = W();
  std::vector<uint8_t> send(4096), recv(4096);
  expect_ok(comm.all_reduce(send.data(), recv.data(), 12, ElementType::kF32, ReduceOp::kSum));
  expect_ok(comm.all_reduce(send.data(), recv.data(), 12, ElementType::kF32, ReduceOp::kMax));
  expect_ok(comm.all_gather(send.data(), recv.data(), 3, ElementType::kBF16));
  expect_ok(comm.reduce_scatter(send.data(), recv.data(), 4, ElementType::kF64, ReduceOp::kSum));
  expect_ok(comm.all_to_all(send.data(), recv.data(), 2, ElementType::kS32));
  expect_ok(comm.collective_permute(send.data(), recv.data(), 5, ElementType::kPred, 1));
  expect_ok(comm.broadcast(send.data(), 3, ElementType::kF32, 0));
  expect_ok(comm.barrier());
  const std::map<std::string, CollectiveCounter>& c = world->counters().by_kind();
  ASSERT_EQ(c.size(), 7u);
  // all-reduce of 12 f32 (48 bytes), twice. Each rank reduces a piece of 12 / w: it sends the
  // other 12 - 12/w elements and its reduced piece to w - 1 ranks.
  EXPECT_EQ(c.at("all-reduce ICI").calls, 2);
  EXPECT_EQ(c.at("all-reduce ICI").bytes, 2 * 48);
  EXPECT_EQ(c.at("all-reduce ICI").sent_bytes, 2 * (w == 4 ? (9 + 3 * 3) * 4 : (6 + 6) * 4));
  // all-gather of 3 bf16: the gathered w * 6 bytes; sends its 6 bytes to w - 1 ranks.
  EXPECT_EQ(c.at("all-gather ICI").bytes, w * 6);
  EXPECT_EQ(c.at("all-gather ICI").sent_bytes, (w - 1) * 6);
  // reduce-scatter to 4 f64: the operand is w * 32 bytes; w - 1 pieces leave.
  EXPECT_EQ(c.at("reduce-scatter ICI").bytes, w * 32);
  EXPECT_EQ(c.at("reduce-scatter ICI").sent_bytes, (w - 1) * 32);
  // all-to-all of pieces of 2 s32: operand w * 8 bytes.
  EXPECT_EQ(c.at("all-to-all ICI").bytes, w * 8);
  EXPECT_EQ(c.at("all-to-all ICI").sent_bytes, (w - 1) * 8);
  // collective-permute of 5 pred: 5 bytes, all sent.
  EXPECT_EQ(c.at("collective-permute ICI").bytes, 5);
  EXPECT_EQ(c.at("collective-permute ICI").sent_bytes, 5);
  // broadcast of 3 f32 from rank 0: 12 bytes; rank 0 sends them to w - 1 ranks.
  EXPECT_EQ(c.at("broadcast ICI").bytes, 12);
  EXPECT_EQ(c.at("broadcast ICI").sent_bytes, R() == 0 ? (w - 1) * 12 : 0);
  EXPECT_EQ(c.at("barrier ICI").calls, 1);
  EXPECT_EQ(c.at("barrier ICI").bytes, 0);
  for (const auto& [kind, counter] : c) EXPECT_GE(counter.seconds, 0.0) << kind;
  std::string table = world->counters().format();
  EXPECT_NE(table.find("reduce-scatter ICI"), std::string::npos) << table;
}

// The compiler's per-device program on a mesh of data across 2 slices x fsdp 2 inside each:
// collectives over {data} cross slices (dcn=true), the others do not.
constexpr const char* kDeviceProgram = R"(
func @device(%w_shard: f32[16,32], %partial: f32[8,32], %half: bf16[8,32], %ids: s32[6,4]) -> (f32[32,32], f32[8,32], f32[8,32], f32[4,32], f32[16,16], f32[8,32], bf16[8,32], bf16[4,32], s32[6,4], f32[8,32]) {
  %w = all_gather %w_shard {dimension=0, mesh_axes=[fsdp], group_size=2} : f32[32,32]
  %sum = all_reduce %partial {mesh_axes=[data], group_size=2, dcn=true} : f32[8,32]
  %top = all_reduce %partial {mesh_axes=[fsdp], group_size=2, max=true} : f32[8,32]
  %grad = reduce_scatter %partial {dimension=0, mesh_axes=[fsdp], group_size=2} : f32[4,32]
  %moved = all_to_all %partial {dimension=0, mesh_axes=[fsdp], group_size=2, split_dimension=1} : f32[16,16]
  %next = collective_permute %partial {mesh_axes=[data, fsdp], group_size=4, dcn=true, shift=1} : f32[8,32]
  %hsum = all_reduce %half {mesh_axes=[data, fsdp], group_size=4, dcn=true} : bf16[8,32]
  %hgrad = reduce_scatter %half {dimension=0, mesh_axes=[data], group_size=2, dcn=true} : bf16[4,32]
  %idsum = all_reduce %ids {mesh_axes=[fsdp], group_size=2} : s32[6,4]
  %again = all_reduce %partial {mesh_axes=[data], group_size=2, dcn=true} : f32[8,32]
  return %w, %sum, %top, %grad, %moved, %next, %hsum, %hgrad, %idsum, %again
}
)";

// The typed collective step the CPU backend emits for a collective op of the IR.
artifact::Collective step_of(const ir::Function& f, const ir::Op& op) {
  return collective_of(backend::collective_call(f, op, f.type(f.operands(op)[0]).byte_size()));
}

TEST(MpiCollectives, CountersEqualTheCompilersPerDevicePrediction) {
  if (W() != 4) GTEST_SKIP() << "needs 4 ranks";
  Expected<ir::Module> module = ir::parse_module(kDeviceProgram);
  ASSERT_TRUE(module.ok()) << module.error().message();
  const ir::Function& f = module->function(0);
  std::map<std::string, CollectiveTotals> predicted = count_collectives(f);
  Expected<DeviceMesh> mesh = DeviceMesh::create({{"data", 1, 2}, {"fsdp", 2, 1}});
  ASSERT_TRUE(mesh.ok());
  const std::vector<artifact::MeshAxis> axes = {{"data", 2}, {"fsdp", 2}};
  world->clear_counters();
  std::vector<uint8_t> operand(8192), result(8192);
  for (ir::OpIndex i = 0; i < f.num_ops(); ++i) {
    artifact::Collective c = step_of(f, f.op(i));
    SCOPED_TRACE(fmt::format("op {}: {}", i, artifact::collective_kind_name(c.kind)));
    Expected<Communicator*> comm = world->group(*mesh, c);
    ASSERT_TRUE(comm.ok()) << comm.error().message();
    Status runnable = check_collective(c, axes, **comm);
    ASSERT_TRUE(runnable.ok()) << runnable.error().message();
    expect_ok(run_collective(c, operand.data(), result.data(), **comm));
  }
  const std::map<std::string, CollectiveCounter>& counted = world->counters().by_kind();
  ASSERT_EQ(counted.size(), predicted.size());
  for (const auto& [kind, totals] : predicted) {
    SCOPED_TRACE(kind);
    ASSERT_EQ(counted.count(kind), 1u);
    EXPECT_EQ(counted.at(kind).calls, totals.count);
    EXPECT_EQ(counted.at(kind).bytes, totals.bytes);
    EXPECT_EQ(counted.at(kind).sent_bytes, totals.wire_bytes);  // every split here is even
  }
  // The hand count behind it: all-reduce DCN is %sum, %hsum and %again: 1024 + 512 + 1024.
  EXPECT_EQ(counted.at("all-reduce DCN").calls, 3);
  EXPECT_EQ(counted.at("all-reduce DCN").bytes, 2560);
  EXPECT_EQ(counted.at("all-gather ICI").bytes, 4096);  // the gathered f32[32,32]
}

}  // namespace
}  // namespace precast::runtime

// Every rank runs every test in the same order; MPI is initialised once around them. A 30 s
// collective timeout turns a rank that fails early and skips a call into an abort, not a hang.
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  precast::runtime::MpiOptions options;
  options.collective_timeout_seconds = 30;
  options.program_name = "mpi_collectives_test";
  auto made = precast::runtime::MpiWorld::initialize(options);
  if (!made.ok()) {
    std::cerr << "mpi_collectives_test: " << made.error().message() << "\n";
    return 1;
  }
  std::unique_ptr<precast::runtime::MpiWorld> owner = std::move(*made);
  precast::runtime::world = owner.get();
  int failed = RUN_ALL_TESTS();
  owner.reset();  // MPI_Finalize
  return failed;
}
