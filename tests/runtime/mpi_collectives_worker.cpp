// A job mpi_job_test starts under mpirun and judges from outside (exit status, output, time):
//   mpi_collectives_worker digest
//     every collective over the world and over the groups of a data 2 x fsdp 2 mesh (4 ranks)
//     on pseudo-random data whose sums depend on their order; each rank prints
//     "rank R digest H" (H hashes every result it got) and "rank R all-reduce H" (the world's
//     f32 all-reduce alone, which must be the same on every rank).
//   mpi_collectives_worker skip <timeout seconds>
//     at step 7 every rank but rank 1 calls an all-reduce over {data}; rank 1 skips it and
//     sleeps. The waiting ranks must abort the job after the timeout.
//   mpi_collectives_worker die <timeout seconds>
//     rank 1 kills itself (SIGKILL) where it should call that all-reduce; mpirun must end the
//     job, the other ranks not left waiting.
#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/collectives/MpiCommunicator.h"
#include "tests/support/Random.h"

namespace precast::runtime {
namespace {

// FNV-1a over bytes.
struct Digest {
  uint64_t h = 0xcbf29ce484222325ull;
  void add(const void* data, size_t bytes) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  }
};

// count elements of `type` with random bits (bf16/f16 and floats kept finite; pred 0 or 1).
std::vector<uint8_t> random_buffer(ElementType type, int64_t count, uint64_t seed) {
  std::vector<uint8_t> b(static_cast<size_t>(count * element_bytes(type)));
  for (int64_t i = 0; i < count; ++i) {
    uint64_t r = precast::testing::Random{seed * 7919u + static_cast<uint64_t>(i)}.next();
    uint8_t* p = b.data() + i * element_bytes(type);
    double v = static_cast<double>(r >> 11) / static_cast<double>(1ull << 53) * 200.0 - 100.0;
    if (type == ElementType::kF32) {
      float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
    } else if (type == ElementType::kF64) {
      std::memcpy(p, &v, 8);
    } else if (type == ElementType::kBF16) {
      float f = static_cast<float>(v);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      uint16_t high = static_cast<uint16_t>(bits >> 16);
      std::memcpy(p, &high, 2);
    } else if (type == ElementType::kF16) {
      _Float16 h = static_cast<_Float16>(v);
      std::memcpy(p, &h, 2);
    } else if (type == ElementType::kPred) {
      *p = static_cast<uint8_t>(r & 1);
    } else {
      uint32_t u = static_cast<uint32_t>(r);
      std::memcpy(p, &u, 4);
    }
  }
  return b;
}

int fail(const Status& s) {
  std::cerr << "mpi_collectives_worker: " << s.error().message() << "\n";
  return 1;
}

int digest(MpiWorld& world) {
  const int64_t n = 3001;  // elements per call: splits unevenly over 2 and 4
  const int64_t w = world.size(), r = world.rank();
  Expected<DeviceMesh> mesh = DeviceMesh::create({{"data", 2, 1}, {"fsdp", w / 2, 1}});
  if (!mesh.ok()) return fail(mesh.error());
  Digest all, world_sum;
  const ElementType types[] = {ElementType::kF32, ElementType::kF64, ElementType::kBF16,
                               ElementType::kF16, ElementType::kS32, ElementType::kU32,
                               ElementType::kPred};
  std::vector<std::vector<std::string>> group_axes = {{"data"}, {"fsdp"}, {"fsdp", "data"}};
  std::vector<Communicator*> comms = {&world.world()};
  for (const std::vector<std::string>& axes : group_axes) {
    Expected<Communicator*> g = world.group(*mesh, axes);
    if (!g.ok()) return fail(g.error());
    comms.push_back(*g);
  }
  uint64_t seed = 1;
  for (Communicator* comm : comms) {
    const int64_t g = comm->size();
    for (ElementType t : types) {
      const int64_t width = element_bytes(t);
      std::vector<uint8_t> send = random_buffer(t, n * g, static_cast<uint64_t>(r) * 1000 + seed++);
      std::vector<uint8_t> recv(static_cast<size_t>(n * g * width));
      auto take = [&](const Status& s, int64_t elements) {
        if (!s.ok()) return false;
        all.add(recv.data(), static_cast<size_t>(elements * width));
        return true;
      };
      Status s = comm->all_reduce(send.data(), recv.data(), n, t, ReduceOp::kSum);
      if (!take(s, n)) return fail(s);
      if (comm == comms[0] && t == ElementType::kF32)
        world_sum.add(recv.data(), static_cast<size_t>(n * width));
      s = comm->all_reduce(send.data(), recv.data(), n, t, ReduceOp::kMax);
      if (!take(s, n)) return fail(s);
      s = comm->reduce_scatter(send.data(), recv.data(), n, t, ReduceOp::kSum);
      if (!take(s, n)) return fail(s);
      s = comm->all_gather(send.data(), recv.data(), n, t);
      if (!take(s, n * g)) return fail(s);
      s = comm->all_to_all(send.data(), recv.data(), n, t);
      if (!take(s, n * g)) return fail(s);
      s = comm->collective_permute(send.data(), recv.data(), n, t, 1);
      if (!take(s, n)) return fail(s);
      std::memcpy(recv.data(), send.data(), static_cast<size_t>(n * width));
      s = comm->broadcast(recv.data(), n, t, static_cast<int>(g - 1));
      if (!take(s, n)) return fail(s);
    }
  }
  std::cout << fmt::format("rank {} digest {:016x}\nrank {} all-reduce {:016x}\n", r, all.h, r,
                           world_sum.h)
            << std::flush;
  return 0;
}

int skip(MpiWorld& world, double timeout, bool die) {
  world.set_collective_timeout(timeout);
  Expected<DeviceMesh> mesh = DeviceMesh::create({{"data", world.size(), 1}});
  if (!mesh.ok()) return fail(mesh.error());
  std::vector<std::string> axes = {"data"};
  Expected<Communicator*> comm = world.group(*mesh, axes);
  if (!comm.ok()) return fail(comm.error());
  world.set_step(7);
  float x = 1, y = 0;
  if (world.rank() == 1 && die) raise(SIGKILL);
  if (world.rank() == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(120));  // never reaches the all-reduce
    return 0;
  }
  Status s = (*comm)->all_reduce(&x, &y, 1, ElementType::kF32, ReduceOp::kSum);
  if (!s.ok()) return fail(s);
  std::cout << "the all-reduce completed although rank 1 skipped it\n";
  return 0;
}

}  // namespace
}  // namespace precast::runtime

int main(int argc, char** argv) {
  using namespace precast::runtime;
  std::string scenario = argc > 1 ? argv[1] : "";
  if (scenario != "digest" && scenario != "skip" && scenario != "die") {
    std::cerr << "usage: mpi_collectives_worker digest | skip <timeout seconds> | die <timeout "
                 "seconds>\n";
    return 2;
  }
  MpiOptions options;
  options.collective_timeout_seconds = 60;
  options.program_name = "mpi_collectives_worker";
  auto made = MpiWorld::initialize(options);
  if (!made.ok()) {
    std::cerr << "mpi_collectives_worker: " << made.error().message() << "\n";
    return 1;
  }
  std::unique_ptr<MpiWorld> world = std::move(*made);
  double timeout = argc > 2 ? std::atof(argv[2]) : 2.0;
  int code = scenario == "digest" ? digest(*world) : skip(*world, timeout, scenario == "die");
  world.reset();
  return code;
}
