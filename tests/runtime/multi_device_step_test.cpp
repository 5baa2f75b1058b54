// Generated per-device steps with collectives, run for real without MPI: every device of a
// two-device mesh is a thread of this process with its own arena, buffers and RuntimeContext
// (its mesh coordinates), and the collectives go through ThreadCommunicator, a Communicator over
// shared memory written for this test that implements the interface's semantics exactly.
//
// - Packing: one small function per layout the communicator cannot take as it is (all_gather
//   along dimension 1 and 2, reduce_scatter along 1, all_to_all splitting 1 or concatenating
//   along 1) and shard_slice, each device's result against buffers computed by hand.
// - A tiny llama2 train step compiled by the real pipeline for cpu-2 with fsdp 2, tensor 2,
//   data 2 and context 2 (ring and all_gather), and a tiny gemma2 with tensor 2 and fsdp 2:
//   both devices' results against the IR interpreter's lockstep run of the same per-device IR
//   (interpret_spmd) on the same arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "compiler/backend/cpu/CodeGen.h"
#include "compiler/driver/Compile.h"
#include "compiler/passes/AssignBuffers.h"
#include "compiler/passes/CollectiveStaging.h"
#include "ir/Interpreter.h"
#include "ir/Parser.h"
#include "runtime/collectives/Communicator.h"
#include "runtime/kernels/RuntimeContext.h"
#include "runtime/train/StepExecutable.h"
#include "runtime/train/TensorElements.h"

namespace precast {
namespace {

namespace fs = std::filesystem;
using ir::HostTensor;
using runtime::ElementType;
using runtime::ReduceOp;

const fs::path kSource = PRECAST_SOURCE_DIR;

// What the threads of one group share: each rank's buffer of the current call.
struct ThreadGroup {
  explicit ThreadGroup(int n) : size(n), sync(n), buffers(static_cast<size_t>(n)) {}
  int size;
  std::barrier<> sync;
  std::vector<const void*> buffers;
};

// Every call: publish this rank's send buffer, wait for all, build the result from the others'
// buffers into private memory, wait until nobody reads any more, write recv. Sums are in double
// in rank order, then rounded to the element type (the interpreter's convention).
class ThreadCommunicator final : public runtime::Communicator {
 public:
  ThreadCommunicator(ThreadGroup& group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_.size; }

  Status all_reduce(const void* send, void* recv, int64_t count, ElementType type,
                    ReduceOp op) override {
    return exchange(send, recv, count, type, [&](int64_t i) { return reduce(type, op, 0, i); });
  }
  Status all_gather(const void* send, void* recv, int64_t count, ElementType type) override {
    return exchange(send, recv, count * size(), type,
                    [&](int64_t i) { return element(i / count, type, i % count); });
  }
  Status reduce_scatter(const void* send, void* recv, int64_t count, ElementType type,
                        ReduceOp op) override {
    return exchange(send, recv, count, type,
                    [&](int64_t i) { return reduce(type, op, rank_ * count, i); });
  }
  Status all_to_all(const void* send, void* recv, int64_t count, ElementType type) override {
    return exchange(send, recv, count * size(), type,
                    [&](int64_t i) { return element(i / count, type, rank_ * count + i % count); });
  }
  Status collective_permute(const void* send, void* recv, int64_t count, ElementType type,
                            int64_t shift) override {
    int64_t from = ((rank_ - shift) % size() + size()) % size();
    return exchange(send, recv, count, type, [&](int64_t i) { return element(from, type, i); });
  }
  Status barrier() override {
    group_.sync.arrive_and_wait();
    return Status::success();
  }
  Status broadcast(void* buffer, int64_t count, ElementType type, int root) override {
    return exchange(buffer, buffer, count, type, [&](int64_t i) { return element(root, type, i); });
  }

 private:
  double element(int64_t rank, ElementType type, int64_t i) const {
    const auto* base = static_cast<const char*>(group_.buffers[static_cast<size_t>(rank)]);
    return runtime::load(base + i * runtime::element_bytes(type),
                         std::string(runtime::element_type_name(type)));
  }
  double reduce(ElementType type, ReduceOp op, int64_t offset, int64_t i) const {
    double acc = element(0, type, offset + i);
    for (int r = 1; r < group_.size; ++r) {
      double x = element(r, type, offset + i);
      acc = op == ReduceOp::kSum ? acc + x : (std::isnan(x) || x > acc ? x : acc);
    }
    return acc;
  }
  template <class At>
  Status exchange(const void* send, void* recv, int64_t count, ElementType type, const At& at) {
    group_.buffers[static_cast<size_t>(rank_)] = send;
    group_.sync.arrive_and_wait();
    std::vector<double> result(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) result[static_cast<size_t>(i)] = at(i);
    group_.sync.arrive_and_wait();
    for (int64_t i = 0; i < count; ++i) {
      runtime::store(recv, i, std::string(runtime::element_type_name(type)),
                     result[static_cast<size_t>(i)]);
    }
    return Status::success();
  }

  ThreadGroup& group_;
  int rank_;
};

// One device's results (as doubles, per output), or the error it met.
struct DeviceRun {
  std::vector<std::vector<double>> outputs;
  std::string error;
};

// Loads `a` once per device and runs one step on every device of its mesh at once, device d
// with arguments args[d] (one vector of doubles per input).
std::vector<DeviceRun> run_devices(const artifact::Artifact& a,
                                   const std::vector<std::vector<std::vector<double>>>& args) {
  int n = static_cast<int>(args.size());
  ThreadGroup group(n);
  std::vector<DeviceRun> runs(static_cast<size_t>(n));
  std::vector<int64_t> sizes;
  for (const artifact::MeshAxis& axis : a.key.mesh) sizes.push_back(axis.size);
  auto device = [&](int d) {
    DeviceRun& run = runs[static_cast<size_t>(d)];
    ThreadCommunicator comm(group, d);
    Expected<runtime::StepExecutable> step = runtime::StepExecutable::load(a, comm);
    if (!step.ok()) {
      run.error = step.error().message();
      return;  // (every device fails the same way: none waits on a collective)
    }
    Status allocated = step->allocate_buffers();
    if (!allocated.ok()) {
      run.error = allocated.error().message();
      return;
    }
    const std::vector<std::vector<double>>& in = args[static_cast<size_t>(d)];
    for (size_t i = 0; i < in.size(); ++i) {
      for (size_t e = 0; e < in[i].size(); ++e) {
        runtime::store(step->input(i), static_cast<int64_t>(e), a.signature.inputs[i].dtype,
                       in[i][e]);
      }
    }
    std::vector<int64_t> coordinates = mesh_coordinates(d, sizes);
    RuntimeContext context{GemmImpl::kOpenBlas, nullptr, coordinates};
    Status ran = step->run(context);
    if (!ran.ok()) {
      run.error = ran.error().message();
      return;
    }
    for (size_t k = 0; k < a.signature.outputs.size(); ++k) {
      const artifact::TensorSignature& t = a.signature.outputs[k];
      std::vector<double> values(static_cast<size_t>(runtime::elements(t)));
      int64_t bytes = runtime::dtype_bytes(t.dtype);
      for (size_t e = 0; e < values.size(); ++e) {
        values[e] = runtime::load(
            static_cast<const char*>(step->output(k)) + static_cast<int64_t>(e) * bytes, t.dtype);
      }
      run.outputs.push_back(std::move(values));
    }
  };
  std::vector<std::thread> threads;
  for (int d = 0; d < n; ++d) threads.emplace_back(device, d);
  for (std::thread& t : threads) t.join();
  return runs;
}

// ---- Packing: small functions, results by hand ------------------------------------------------

artifact::TensorSignature signature_of(const ir::Function& f, ir::Value v,
                                       const std::string& name) {
  artifact::TensorSignature t;
  t.name = name;
  t.shape = f.type(v).dims;
  t.dtype = std::string(ir::dtype_name(f.type(v).dtype));
  return t;
}

struct Generated {
  backend::CompiledStep step;
  artifact::Artifact artifact;
  MemoryPlan plan;
};

// Plans `text`'s function with collective staging, generates it and wraps it in an artifact for
// a mesh of one axis `axis` of two devices.
Expected<Generated> generate(const std::string& text, const std::string& axis) {
  PRECAST_ASSIGN_OR_RETURN(ir::Module module, ir::parse_module(text));
  const ir::Function& f = module.function(0);
  BufferPlanSettings settings;
  settings.collective_staging = true;
  Generated g;
  g.plan = plan_memory(f, buffer_options(f, settings));
  backend::CodeGenOptions options;
  options.mesh = {{axis, 2}};
  PRECAST_ASSIGN_OR_RETURN(g.step, backend::generate_step(f, g.plan, options));
  artifact::Artifact& a = g.artifact;
  a.key.mesh = {{axis, 2}};
  a.key.num_devices = 2;
  for (size_t i = 0; i < f.params().size(); ++i) {
    a.signature.inputs.push_back(signature_of(f, f.params()[i], "in" + std::to_string(i)));
  }
  for (size_t k = 0; k < f.results().size(); ++k) {
    a.signature.outputs.push_back(signature_of(f, f.results()[k], "out" + std::to_string(k)));
  }
  a.plan.arena_bytes = g.plan.temp_bytes;
  a.program = program_of(g.step);
  a.object_code.assign(g.step.object.begin(), g.step.object.end());
  return g;
}

// Device d's operand: 100 d + 10 i + j at row-major position (i, j) of a [rows, cols] view.
std::vector<double> numbered(int d, int64_t rows, int64_t cols) {
  std::vector<double> out;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j)
      out.push_back(100.0 * d + 10.0 * static_cast<double>(i) + static_cast<double>(j));
  }
  return out;
}

// Runs a one-result function on two devices (device d's argument numbered(d, rows, cols)) and
// returns both devices' result.
std::vector<std::vector<double>> run_pair(const Generated& g, int64_t rows, int64_t cols) {
  std::vector<std::vector<std::vector<double>>> args = {{numbered(0, rows, cols)},
                                                        {numbered(1, rows, cols)}};
  std::vector<DeviceRun> runs = run_devices(g.artifact, args);
  std::vector<std::vector<double>> out;
  for (const DeviceRun& run : runs) {
    EXPECT_EQ(run.error, "");
    out.push_back(run.outputs.empty() ? std::vector<double>{} : run.outputs[0]);
  }
  return out;
}

std::vector<artifact::StepKind> kinds(const artifact::Artifact& a) {
  std::vector<artifact::StepKind> out;
  for (const artifact::Step& s : a.program) out.push_back(s.kind);
  return out;
}

using K = artifact::StepKind;

TEST(CollectivePacking, AllGatherAlongDimensionOne) {
  Expected<Generated> g = generate(R"(
func @f(%x: f32[2,3]) -> (f32[2,6]) {
  %y = all_gather %x {dimension=1, mesh_axes=[tensor], group_size=2} : f32[2,6]
  return %y
}
)",
                                   "tensor");
  ASSERT_TRUE(g.ok()) << g.error().message();
  // The communicator's rank-major pieces land in a staging buffer; a kernel unpacks them.
  EXPECT_EQ(kinds(g->artifact), (std::vector<K>{K::kCollective, K::kKernelCall}));
  EXPECT_FALSE(g->step.has_entry);
  EXPECT_EQ(g->plan.temp_bytes, 64);  // the 48-byte staging buffer, 64-aligned
  const artifact::Step& c = g->artifact.program[0];
  EXPECT_EQ(c.collective.kind, artifact::CollectiveKind::kAllGather);
  EXPECT_EQ(c.collective.bytes, 24);
  EXPECT_EQ(c.collective.dimensions, std::vector<int64_t>{1});
  EXPECT_EQ(c.buffers[1].space, artifact::BufferSpace::kTemp);
  std::vector<double> want = {0, 1, 2, 100, 101, 102, 10, 11, 12, 110, 111, 112};
  std::vector<std::vector<double>> got = run_pair(*g, 2, 3);
  EXPECT_EQ(got[0], want);
  EXPECT_EQ(got[1], want);
}

TEST(CollectivePacking, AllGatherAlongDimensionTwo) {
  Expected<Generated> g = generate(R"(
func @f(%x: f32[1,2,2]) -> (f32[1,2,4]) {
  %y = all_gather %x {dimension=2, mesh_axes=[fsdp], group_size=2} : f32[1,2,4]
  return %y
}
)",
                                   "fsdp");
  ASSERT_TRUE(g.ok()) << g.error().message();
  EXPECT_EQ(kinds(g->artifact), (std::vector<K>{K::kCollective, K::kKernelCall}));
  std::vector<double> want = {0, 1, 100, 101, 10, 11, 110, 111};
  std::vector<std::vector<double>> got = run_pair(*g, 2, 2);
  EXPECT_EQ(got[0], want);
  EXPECT_EQ(got[1], want);
}

// Along a dimension whose predecessors are all 1 the pieces are contiguous: no staging.
TEST(CollectivePacking, AllGatherAfterUnitDimensionsNeedsNoStaging) {
  Expected<Generated> g = generate(R"(
func @f(%x: f32[1,2,3]) -> (f32[1,4,3]) {
  %y = all_gather %x {dimension=1, mesh_axes=[fsdp], group_size=2} : f32[1,4,3]
  return %y
}
)",
                                   "fsdp");
  ASSERT_TRUE(g.ok()) << g.error().message();
  EXPECT_EQ(kinds(g->artifact), (std::vector<K>{K::kCollective}));
  EXPECT_EQ(g->plan.temp_bytes, 0);
  std::vector<double> want = {0, 1, 2, 10, 11, 12, 100, 101, 102, 110, 111, 112};
  std::vector<std::vector<double>> got = run_pair(*g, 2, 3);
  EXPECT_EQ(got[0], want);
  EXPECT_EQ(got[1], want);
}

TEST(CollectivePacking, ReduceScatterAlongDimensionOne) {
  Expected<Generated> g = generate(R"(
func @f(%x: f32[2,4]) -> (f32[2,2]) {
  %y = reduce_scatter %x {dimension=1, mesh_axes=[tensor], group_size=2} : f32[2,2]
  return %y
}
)",
                                   "tensor");
  ASSERT_TRUE(g.ok()) << g.error().message();
  // A kernel packs the operand's column blocks one after another; the communicator scatters.
  EXPECT_EQ(kinds(g->artifact), (std::vector<K>{K::kKernelCall, K::kCollective}));
  EXPECT_EQ(g->artifact.program[1].collective.reduction, artifact::Reduction::kSum);
  // Sums of 100 d + 10 i + j over d = 0, 1: 100 + 20 i + 2 j; device r keeps columns 2r, 2r+1.
  std::vector<std::vector<double>> got = run_pair(*g, 2, 4);
  EXPECT_EQ(got[0], (std::vector<double>{100, 102, 120, 122}));
  EXPECT_EQ(got[1], (std::vector<double>{104, 106, 124, 126}));
}

TEST(CollectivePacking, AllToAllSplittingDimensionOne) {
  Expected<Generated> g = generate(R"(
func @f(%x: f32[2,4]) -> (f32[4,2]) {
  %y = all_to_all %x {dimension=0, mesh_axes=[context], group_size=2, split_dimension=1} : f32[4,2]
  return %y
}
)",
                                   "context");
  ASSERT_TRUE(g.ok()) << g.error().message();
  EXPECT_EQ(kinds(g->artifact), (std::vector<K>{K::kKernelCall, K::kCollective}));
  EXPECT_EQ(g->artifact.program[1].collective.dimensions, (std::vector<int64_t>{1, 0}));
  // Device r gets columns [2r, 2r+2) of every device's operand, stacked in device order.
  std::vector<std::vector<double>> got = run_pair(*g, 2, 4);
  EXPECT_EQ(got[0], (std::vector<double>{0, 1, 10, 11, 100, 101, 110, 111}));
  EXPECT_EQ(got[1], (std::vector<double>{2, 3, 12, 13, 102, 103, 112, 113}));
}

TEST(CollectivePacking, AllToAllConcatenatingAlongDimensionOne) {
  Expected<Generated> g = generate(R"(
func @f(%x: f32[4,2]) -> (f32[2,4]) {
  %y = all_to_all %x {dimension=1, mesh_axes=[context], group_size=2, split_dimension=0} : f32[2,4]
  return %y
}
)",
                                   "context");
  ASSERT_TRUE(g.ok()) << g.error().message();
  EXPECT_EQ(kinds(g->artifact), (std::vector<K>{K::kCollective, K::kKernelCall}));
  // Device r gets rows [2r, 2r+2) of every device's operand, side by side in device order.
  std::vector<std::vector<double>> got = run_pair(*g, 4, 2);
  EXPECT_EQ(got[0], (std::vector<double>{0, 1, 100, 101, 10, 11, 110, 111}));
  EXPECT_EQ(got[1], (std::vector<double>{20, 21, 120, 121, 30, 31, 130, 131}));
}

// shard_slice reads the device's coordinate from its RuntimeContext; all_reduce max and a
// collective_permute in the same program, and the staging of two collectives at once.
TEST(CollectivePacking, ShardSliceMaxAndPermute) {
  Expected<Generated> g = generate(R"(
func @f(%x: f32[2,4]) -> (f32[2,2], f32[2,4], f32[2,4], f32[4,4]) {
  %mine = shard_slice %x {dimension=1, mesh_axes=[data], group_size=2} : f32[2,2]
  %top = all_reduce %x {mesh_axes=[data], group_size=2, max=true} : f32[2,4]
  %next = collective_permute %x {mesh_axes=[data], group_size=2, shift=1} : f32[2,4]
  %t = transpose %x {permutation=[1,0]} : f32[4,2]
  %g = all_gather %t {dimension=1, mesh_axes=[data], group_size=2} : f32[4,4]
  return %mine, %top, %next, %g
}
)",
                                   "data");
  ASSERT_TRUE(g.ok()) << g.error().message();
  std::vector<std::vector<std::vector<double>>> args = {{numbered(0, 2, 4)}, {numbered(1, 2, 4)}};
  std::vector<DeviceRun> runs = run_devices(g->artifact, args);
  ASSERT_EQ(runs[0].error, "");
  ASSERT_EQ(runs[1].error, "");
  EXPECT_EQ(runs[0].outputs[0], (std::vector<double>{0, 1, 10, 11}));
  EXPECT_EQ(runs[1].outputs[0], (std::vector<double>{102, 103, 112, 113}));
  for (int d = 0; d < 2; ++d) {
    EXPECT_EQ(runs[static_cast<size_t>(d)].outputs[1], numbered(1, 2, 4));
    EXPECT_EQ(runs[static_cast<size_t>(d)].outputs[2], numbered(1 - d, 2, 4));
    // x^T of device 0 beside x^T of device 1.
    EXPECT_EQ(
        runs[static_cast<size_t>(d)].outputs[3],
        (std::vector<double>{0, 10, 100, 110, 1, 11, 101, 111, 2, 12, 102, 112, 3, 13, 103, 113}));
  }
}

// An operand computed inside its readers (an iota, a constant) has no buffer: a kernel
// generates it into a send staging buffer, here packed as reduce_scatter's column blocks; and
// bf16 elements go through packing and unpacking unchanged.
TEST(CollectivePacking, GeneratedOperandAndBfloat16) {
  Expected<Generated> g = generate(R"(
func @f(%x: bf16[2,3]) -> (s32[2,2], bf16[2,6]) {
  %i = iota {dimension=1} : s32[2,4]
  %y = reduce_scatter %i {dimension=1, mesh_axes=[tensor], group_size=2} : s32[2,2]
  %z = all_gather %x {dimension=1, mesh_axes=[tensor], group_size=2} : bf16[2,6]
  return %y, %z
}
)",
                                   "tensor");
  ASSERT_TRUE(g.ok()) << g.error().message();
  EXPECT_EQ(kinds(g->artifact),
            (std::vector<K>{K::kKernelCall, K::kCollective, K::kCollective, K::kKernelCall}));
  EXPECT_EQ(g->artifact.program[1].collective.dtype, "s32");
  EXPECT_EQ(g->artifact.program[2].collective.dtype, "bf16");
  // Sums of the column index over 2 devices: 2 j; device r keeps columns 2r, 2r+1.
  std::vector<std::vector<std::vector<double>>> args = {{numbered(0, 2, 3)}, {numbered(1, 2, 3)}};
  std::vector<DeviceRun> runs = run_devices(g->artifact, args);
  ASSERT_EQ(runs[0].error, "");
  ASSERT_EQ(runs[1].error, "");
  EXPECT_EQ(runs[0].outputs[0], (std::vector<double>{0, 2, 0, 2}));
  EXPECT_EQ(runs[1].outputs[0], (std::vector<double>{4, 6, 4, 6}));
  // Integers below 256 are exact in bf16 (8 significant bits): the values arrive unchanged.
  std::vector<double> want = {0, 1, 2, 100, 101, 102, 10, 11, 12, 110, 111, 112};
  EXPECT_EQ(runs[0].outputs[1], want);
  EXPECT_EQ(runs[1].outputs[1], want);
}

// The staging buffers are in the plan: the arena with them is the arena without them plus
// their room (here nothing else is live at the collective).
TEST(CollectivePacking, StagingBuffersArePlannedInTheArena) {
  const char* text = R"(
func @f(%x: f32[8,6]) -> (f32[8,3]) {
  %y = reduce_scatter %x {dimension=1, mesh_axes=[tensor], group_size=2} : f32[8,3]
  return %y
}
)";
  Expected<ir::Module> module = ir::parse_module(text);
  ASSERT_TRUE(module.ok());
  const ir::Function& f = module->function(0);
  std::vector<CollectiveStaging> staging = collective_staging(f);
  ASSERT_EQ(staging.size(), 1u);
  EXPECT_EQ(staging[0].role, StagingRole::kSend);
  EXPECT_EQ(staging[0].bytes, 8 * 6 * 4);
  EXPECT_EQ(plan_memory(f, buffer_options(f, {})).temp_bytes, 0);
  BufferPlanSettings settings;
  settings.collective_staging = true;
  EXPECT_EQ(plan_memory(f, buffer_options(f, settings)).temp_bytes, 192);
  // Generating from a plan without them is refused, naming the setting.
  Expected<backend::CompiledStep> unplanned =
      backend::generate_step(f, plan_memory(f, buffer_options(f, {})), {});
  ASSERT_FALSE(unplanned.ok());
  EXPECT_NE(unplanned.error().message().find("collective_staging"), std::string::npos)
      << unplanned.error().message();
}

// ---- A tiny llama2 step on two devices against the interpreter's lockstep run ----------------

std::vector<std::string> tiny_llama(const std::string& mesh_key) {
  return {"base_emb_dim=64",
          "base_num_decoder_layers=2",
          "base_num_query_heads=4",
          "base_num_kv_heads=4",
          "head_dim=16",
          "base_mlp_dim=128",
          "vocab_size=256",
          "per_device_batch_size=2",
          "max_target_length=16",
          "dtype=float32",
          "compile_topology=cpu-2",
          mesh_key + "=2"};
}

uint64_t next_random(uint64_t& state) {
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  return state >> 33;
}

// Device d's arguments: parameters small and device-dependent, first moments 0, second moments
// 1e-6 (as after earlier steps, so that Adam's update does not turn a gradient's rounding into
// a full step), tokens in range, positions and segments as a packed batch has them, and the
// run-time scalars.
std::vector<std::vector<double>> device_arguments(const artifact::Artifact& a, int d) {
  std::vector<std::vector<double>> out;
  uint64_t state = 12345 + static_cast<uint64_t>(d) * 7919;
  const double scalars[] = {1e-2, 0.9, 0.95, 1e-8, 0.0, 0.1, 1.0};
  size_t scalar = 0;
  for (const artifact::TensorSignature& t : a.signature.inputs) {
    std::vector<double> values(static_cast<size_t>(runtime::elements(t)), 0.0);
    int64_t length = t.shape.empty() ? 1 : t.shape.back();
    for (size_t e = 0; e < values.size(); ++e) {
      double u = static_cast<double>(next_random(state) % 20001) / 10000.0 - 1.0;  // [-1, 1]
      int64_t p = static_cast<int64_t>(e) % length;
      if (t.role == "parameter") {
        values[e] = t.init == "ones" ? 1.0 + 0.1 * u : 0.05 * u;
      } else if (t.role == "optimizer_state") {
        values[e] = t.name.starts_with("nu.") ? 1e-6 : 0.0;
      } else if (t.role == "batch") {
        if (t.name.find("position") != std::string::npos) {
          values[e] = static_cast<double>(p);
        } else if (t.name.find("segmentation") != std::string::npos) {
          values[e] = 1;
        } else {
          values[e] = static_cast<double>(next_random(state) % 256);
        }
      } else if (t.role == "scalar" && scalar < std::size(scalars)) {
        values[e] = scalars[scalar];
      }
    }
    if (t.role == "scalar") ++scalar;
    out.push_back(std::move(values));
  }
  return out;
}

// The number of ops of each kind of the compiled per-device IR, for the tests to inspect.
struct OpCounts {
  int attention_stats = 0, with_positions = 0, collective_permutes = 0;
};

void check_two_device_step(const std::string& label, const std::vector<std::string>& overrides,
                           OpCounts* counts = nullptr) {
  CompileRequest request;
  request.config.config_file = kSource / "configs" / "base.yml";
  request.config.overrides = overrides;
  Expected<CompileResult> compiled = compile_step(request, kSource / "configs" / "topologies.yml");
  ASSERT_TRUE(compiled.ok()) << compiled.error().message();
  const artifact::Artifact& a = compiled->artifact;
  ASSERT_EQ(a.key.num_devices, 2);
  int collectives = 0, packs = 0;
  for (const artifact::Step& s : a.program) {
    collectives += s.kind == K::kCollective;
    packs += s.symbol.ends_with("_pack") || s.symbol.ends_with("_unpack");
  }
  EXPECT_GT(collectives, 0);
  std::printf("%s: %zu program steps, %d collectives, %d packing steps, arena %lld bytes\n",
              label.c_str(), a.program.size(), collectives, packs,
              static_cast<long long>(a.plan.arena_bytes));

  std::vector<std::vector<std::vector<double>>> args = {device_arguments(a, 0),
                                                        device_arguments(a, 1)};
  std::vector<DeviceRun> runs = run_devices(a, args);
  for (const DeviceRun& run : runs) ASSERT_EQ(run.error, "");

  Expected<ir::Module> module = ir::parse_module(a.ir_text);
  ASSERT_TRUE(module.ok()) << module.error().message();
  const ir::Function& f = module->function(0);
  if (counts != nullptr) {
    for (const ir::Op& op : f.ops()) {
      counts->attention_stats += op.kind == ir::OpKind::kAttentionStats;
      counts->with_positions += f.attrs(op).flag(ir::AttrKey::kPositions);
      counts->collective_permutes += op.kind == ir::OpKind::kCollectivePermute;
    }
  }
  ir::InterpreterMesh mesh;
  for (const artifact::MeshAxis& axis : a.key.mesh) {
    mesh.axes.push_back(axis.name);
    mesh.sizes.push_back(axis.size);
  }
  std::vector<std::vector<HostTensor>> host(2);
  for (size_t d = 0; d < 2; ++d) {
    for (size_t i = 0; i < f.params().size(); ++i) {
      host[d].push_back(HostTensor::of(f.type(f.params()[i]), args[d][i]));
    }
  }
  Expected<std::vector<std::vector<HostTensor>>> want = ir::interpret_spmd(f, mesh, host);
  ASSERT_TRUE(want.ok()) << want.error().message();
  double worst = 0;
  for (size_t d = 0; d < 2; ++d) {
    ASSERT_EQ(runs[d].outputs.size(), (*want)[d].size());
    for (size_t k = 0; k < runs[d].outputs.size(); ++k) {
      const std::vector<double>& w = (*want)[d][k].values;
      const std::vector<double>& got = runs[d].outputs[k];
      ASSERT_EQ(got.size(), w.size());
      double scale = 0;
      for (double x : w) scale = std::max(scale, std::abs(x));
      // Relative to the tensor's largest element (f32 GEMMs sum in another order than the
      // interpreter's doubles); metrics, single elements, elementwise.
      for (size_t e = 0; e < w.size(); ++e) {
        double err = std::abs(got[e] - w[e]) / std::max(scale, 1e-30);
        worst = std::max(worst, err);
        ASSERT_LE(err, 1e-5) << "device " << d << " output " << a.signature.outputs[k].name
                             << " element " << e << ": " << got[e] << " vs " << w[e];
      }
    }
  }
  const auto& outputs = a.signature.outputs;
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (outputs[k].name == "loss") {
      std::printf("loss: device 0 %.9g, device 1 %.9g, interpreter %.9g\n", runs[0].outputs[k][0],
                  runs[1].outputs[k][0], (*want)[0][k].values[0]);
      EXPECT_EQ(runs[0].outputs[k][0], runs[1].outputs[k][0]);  // a global metric
    }
  }
  std::printf("worst relative difference to the interpreter: %.3g\n", worst);
}

TEST(MultiDeviceStep, TinyLlama2Fsdp2MatchesLockstepInterpreter) {
  check_two_device_step("fsdp 2", tiny_llama("ici_fsdp_parallelism"));
}
TEST(MultiDeviceStep, TinyLlama2Tensor2MatchesLockstepInterpreter) {
  check_two_device_step("tensor 2", tiny_llama("ici_tensor_parallelism"));
}
TEST(MultiDeviceStep, TinyLlama2Data2MatchesLockstepInterpreter) {
  check_two_device_step("data 2", tiny_llama("ici_data_parallelism"));
}

// precast compile makes a cpu-2 artifact (precast-run trains it on 2 MPI ranks), each input's
// signature carrying its global sharding; with compile_topology_num_slices=2 the artifact is
// for 4 devices (mpirun -np 4), its data axis split across the slices (DCN).
TEST(MultiDeviceStep, PrecastCompileAcceptsSeveralDevicesAndSlices) {
  CompileRequest request;
  request.config.config_file = kSource / "configs" / "base.yml";
  request.config.overrides = tiny_llama("ici_fsdp_parallelism");
  Expected<CompileResult> compiled = compile_step(request, kSource / "configs" / "topologies.yml");
  ASSERT_TRUE(compiled.ok()) << compiled.error().message();
  int fsdp_sharded = 0;
  for (const artifact::TensorSignature& t : compiled->artifact.signature.inputs) {
    fsdp_sharded += t.role == "parameter" && t.sharding.find("'fsdp'") != std::string::npos;
  }
  EXPECT_GT(fsdp_sharded, 0);

  request.config.overrides.push_back("dcn_data_parallelism=2");
  request.config.overrides.push_back("compile_topology_num_slices=2");
  Expected<CompileResult> slices = compile_step(request, kSource / "configs" / "topologies.yml");
  ASSERT_TRUE(slices.ok()) << slices.error().message();
  EXPECT_EQ(slices->artifact.key.num_devices, 4);
}

// gemma2: alternating local (sliding window) and global attention, attention and final logit
// soft caps, GQA; tensor parallel and fsdp.
std::vector<std::string> tiny_gemma2(const std::string& mesh_key) {
  return {"model_name=gemma2-2b",
          "override_model_config=true",
          "base_emb_dim=64",
          "base_num_decoder_layers=2",
          "base_num_query_heads=4",
          "base_num_kv_heads=2",
          "head_dim=16",
          "base_mlp_dim=128",
          "vocab_size=256",
          "per_device_batch_size=2",
          "max_target_length=16",
          "dtype=float32",
          "weight_dtype=float32",
          "sliding_window_size=4",
          "attn_logits_soft_cap=2.0",
          "final_logits_soft_cap=2.0",
          "compile_topology=cpu-2",
          mesh_key + "=2"};
}
TEST(MultiDeviceStep, TinyGemma2Tensor2MatchesLockstepInterpreter) {
  check_two_device_step("gemma2 tensor 2", tiny_gemma2("ici_tensor_parallelism"));
}
TEST(MultiDeviceStep, TinyGemma2Fsdp2MatchesLockstepInterpreter) {
  check_two_device_step("gemma2 fsdp 2", tiny_gemma2("ici_fsdp_parallelism"));
}

// Context parallelism: the sequence split over `context`; attention over the gathered keys
// (all_gather) or a ring of collective_permutes combining attention_stats blocks, with the
// query and key positions of each piece.
TEST(MultiDeviceStep, TinyLlama2ContextRingMatchesLockstepInterpreter) {
  OpCounts counts;
  std::vector<std::string> overrides = tiny_llama("ici_context_parallelism");
  overrides.push_back("context_parallel_strategy=ring");
  check_two_device_step("context 2 (ring)", overrides, &counts);
  EXPECT_GT(counts.attention_stats, 0);
  EXPECT_GT(counts.with_positions, 0);
  EXPECT_GT(counts.collective_permutes, 0);
}
TEST(MultiDeviceStep, TinyLlama2ContextAllGatherMatchesLockstepInterpreter) {
  OpCounts counts;
  std::vector<std::string> overrides = tiny_llama("ici_context_parallelism");
  overrides.push_back("context_parallel_strategy=all_gather");
  check_two_device_step("context 2 (all_gather)", overrides, &counts);
  EXPECT_GT(counts.with_positions, 0);
}

}  // namespace
}  // namespace precast
