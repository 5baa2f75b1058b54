// The single-process communicator (a group of one: every collective is a copy, a larger group is
// refused) and the runtime's execution of an artifact's typed collective steps through it, in
// program order, on a hand-built program (the CPU code generator emits no collectives yet).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "runtime/collectives/CollectiveStep.h"
#include "runtime/collectives/Communicator.h"
#include "runtime/kernels/RuntimeContext.h"
#include "runtime/train/StepExecutable.h"

namespace precast::runtime {
namespace {

std::unique_ptr<SingleProcessCommunicator> single() {
  Expected<std::unique_ptr<SingleProcessCommunicator>> comm = SingleProcessCommunicator::create(1);
  EXPECT_TRUE(comm.ok());
  return std::move(*comm);
}

TEST(SingleProcessCommunicator, IsAGroupOfOneAndRefusesMore) {
  auto comm = single();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  Expected<std::unique_ptr<SingleProcessCommunicator>> four = SingleProcessCommunicator::create(4);
  ASSERT_FALSE(four.ok());
  EXPECT_EQ(four.error().code(), ExitCode::kUsage);
  EXPECT_NE(four.error().message().find("a group of 4 processes"), std::string::npos)
      << four.error().message();
}

TEST(SingleProcessCommunicator, EveryCollectiveCopiesTheOneRanksData) {
  auto comm = single();
  const std::vector<float> send = {1.5f, -2.0f, 3.25f, 0.0f};
  const int64_t n = static_cast<int64_t>(send.size());
  auto check = [&](const Status& status, const std::vector<float>& got, const char* what) {
    ASSERT_TRUE(status.ok()) << what << ": " << status.error().message();
    EXPECT_EQ(got, send) << what;
  };
  std::vector<float> recv(send.size(), 9.0f);
  check(comm->all_reduce(send.data(), recv.data(), n, ElementType::kF32, ReduceOp::kSum), recv,
        "all_reduce sum");
  recv.assign(send.size(), 9.0f);
  check(comm->all_reduce(send.data(), recv.data(), n, ElementType::kF32, ReduceOp::kMax), recv,
        "all_reduce max");
  recv.assign(send.size(), 9.0f);
  check(comm->all_gather(send.data(), recv.data(), n, ElementType::kF32), recv, "all_gather");
  recv.assign(send.size(), 9.0f);
  check(comm->reduce_scatter(send.data(), recv.data(), n, ElementType::kF32, ReduceOp::kSum), recv,
        "reduce_scatter");
  recv.assign(send.size(), 9.0f);
  check(comm->all_to_all(send.data(), recv.data(), n, ElementType::kF32), recv, "all_to_all");
  recv.assign(send.size(), 9.0f);
  check(comm->collective_permute(send.data(), recv.data(), n, ElementType::kF32, 3), recv,
        "collective_permute");
  // In place, and other element widths.
  std::vector<float> inout = send;
  check(comm->all_reduce(inout.data(), inout.data(), n, ElementType::kF32, ReduceOp::kSum), inout,
        "all_reduce in place");
  std::vector<uint16_t> half = {1, 2, 3}, half_out(3);
  ASSERT_TRUE(comm->all_gather(half.data(), half_out.data(), 3, ElementType::kBF16).ok());
  EXPECT_EQ(half_out, half);
  EXPECT_TRUE(comm->barrier().ok());
  std::vector<float> shared = send;
  EXPECT_TRUE(comm->broadcast(shared.data(), n, ElementType::kF32, 0).ok());
  EXPECT_EQ(shared, send);
  EXPECT_FALSE(comm->broadcast(shared.data(), n, ElementType::kF32, 1).ok());
}

TEST(SingleProcessCommunicator, ElementTypesFollowIrNames) {
  EXPECT_EQ(element_type("f32"), ElementType::kF32);
  EXPECT_EQ(element_type("bf16"), ElementType::kBF16);
  EXPECT_EQ(element_type("s32"), ElementType::kS32);
  EXPECT_FALSE(element_type("f8").has_value());
  EXPECT_EQ(element_bytes(ElementType::kF64), 8);
  EXPECT_EQ(element_bytes(ElementType::kPred), 1);
}

artifact::Collective collective(artifact::CollectiveKind kind, artifact::Reduction reduction,
                                std::vector<int64_t> dimensions, int64_t bytes) {
  artifact::Collective c;
  c.kind = kind;
  c.reduction = reduction;
  c.mesh_axes = {"data"};
  c.dimensions = std::move(dimensions);
  c.dtype = "f32";
  c.bytes = bytes;
  return c;
}

// A program of collectives only: input 0 → all_reduce → temp → all_gather → temp →
// reduce_scatter → temp → all_to_all → temp → permute → output 0, on a mesh of one device.
artifact::Artifact collective_program(int64_t devices) {
  artifact::Artifact a;
  a.key.mesh = {{"data", devices}};
  a.key.num_devices = devices;
  artifact::TensorSignature x;
  x.name = "x";
  x.shape = {8};
  x.dtype = "f32";
  a.signature.inputs = {x};
  a.signature.outputs = {x};
  a.plan.arena_bytes = 4 * 32;
  using K = artifact::CollectiveKind;
  using R = artifact::Reduction;
  auto step = [](artifact::Collective c, artifact::BufferRef in, artifact::BufferRef out) {
    artifact::Step s;
    s.kind = artifact::StepKind::kCollective;
    s.buffers = {in, out};
    s.int_params = {-1, 1};
    s.collective = std::move(c);
    return s;
  };
  using S = artifact::BufferSpace;
  a.program = {
      step(collective(K::kAllReduce, R::kSum, {}, 32), {S::kArgument, 0, 32}, {S::kTemp, 0, 32}),
      step(collective(K::kAllGather, R::kNone, {0}, 32), {S::kTemp, 0, 32}, {S::kTemp, 32, 32}),
      step(collective(K::kReduceScatter, R::kMax, {0}, 32), {S::kTemp, 32, 32},
           {S::kTemp, 64, 32}),
      step(collective(K::kAllToAll, R::kNone, {0, 0}, 32), {S::kTemp, 64, 32},
           {S::kTemp, 96, 32}),
      step(collective(K::kCollectivePermute, R::kNone, {}, 32), {S::kTemp, 96, 32},
           {S::kOutput, 0, 32}),
  };
  a.program[4].collective.shift = 1;
  return a;
}

TEST(CollectiveSteps, RunThroughTheCommunicatorInProgramOrder) {
  artifact::Artifact a = collective_program(1);
  ASSERT_FALSE(artifact::find_schema_violation(a).has_value())
      << *artifact::find_schema_violation(a);
  auto comm = single();
  Expected<StepExecutable> step = StepExecutable::load(a, *comm);
  ASSERT_TRUE(step.ok()) << step.error().message();
  ASSERT_TRUE(step->allocate_buffers().ok());
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8};
  std::memcpy(step->input(0), x.data(), 32);
  RuntimeContext context;
  Status ran = step->run(context);
  ASSERT_TRUE(ran.ok()) << ran.error().message();
  std::vector<float> out(8);
  std::memcpy(out.data(), step->output(0), 32);
  EXPECT_EQ(out, x);
}

TEST(CollectiveSteps, AGroupLargerThanTheCommunicatorIsRefusedNamingIt) {
  artifact::Artifact a = collective_program(4);
  auto comm = single();
  Expected<StepExecutable> step = StepExecutable::load(a, *comm);
  ASSERT_FALSE(step.ok());
  EXPECT_EQ(step.error().code(), ExitCode::kIncompatible);
  EXPECT_NE(step.error().message().find("step 0 of the artifact's program (collective): "
                                        "all_reduce over {data}: a group of 4 devices, but this "
                                        "runtime's communicator has 1 process(es)"),
            std::string::npos)
      << step.error().message();
  Expected<int64_t> groups = collective_group_size(a.program[0].collective, a.key.mesh);
  ASSERT_TRUE(groups.ok());
  EXPECT_EQ(*groups, 4);
  a.program[0].collective.replica_groups = {{0, 1}, {2, 3}};
  EXPECT_EQ(*collective_group_size(a.program[0].collective, a.key.mesh), 2);
  a.program[0].collective.replica_groups = {};
  a.program[0].collective.mesh_axes = {"fsdp"};
  EXPECT_FALSE(collective_group_size(a.program[0].collective, a.key.mesh).ok());
}

TEST(CollectiveSteps, ABufferOutsideItsRegionIsRefused) {
  artifact::Artifact a = collective_program(1);
  a.program[1].buffers[1].index_or_offset = 120;  // temp@120 + 32 > the 128-byte arena
  auto comm = single();
  Expected<StepExecutable> step = StepExecutable::load(a, *comm);
  ASSERT_FALSE(step.ok());
  EXPECT_NE(step.error().message().find("step 1"), std::string::npos) << step.error().message();
  EXPECT_NE(step.error().message().find("does not fit"), std::string::npos)
      << step.error().message();
}

}  // namespace
}  // namespace precast::runtime
