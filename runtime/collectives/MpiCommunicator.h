// Role: collectives across processes through MPI (Open MPI 4.1's C API): the MPI world of this
// process (initialised once, finalised on destruction), and one Communicator per group of mesh
// devices, split off the world once (MPI_Comm_split) and cached. Every call is counted
// (CollectiveCounters) and bounded by a timeout that aborts the whole job naming the rank, the
// step, the op and its mesh axes. mpi.h stays inside the .cpp: users of this header need no MPI
// include path.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "compiler/artifact/Artifact.h"
#include "ir/support/Error.h"
#include "runtime/collectives/CollectiveCounters.h"
#include "runtime/collectives/Communicator.h"
#include "runtime/collectives/DeviceMesh.h"
#include "runtime/collectives/MpiLaunch.h"

namespace precast::runtime {

struct MpiOptions {
  // A collective not complete on this rank this many seconds after it was called aborts the job
  // (the run-time key collective_timeout_seconds).
  double collective_timeout_seconds = 600;
  // Starts the abort message, as the tool's own errors start: "<program>: error: ...".
  std::string program_name = "precast-run";
};

class MpiWorld {
 public:
  // MPI_Init_thread with MPI_THREAD_FUNNELED: only the thread that made the world calls MPI
  // (the thread pool's workers never do). MPI allows one initialisation per process: a second
  // world, or one after the first was destroyed, is an internal error (exit 70). Works without
  // mpirun too (a world of one process). Errors returned by MPI calls come back as Errors
  // (MPI_ERRORS_RETURN), never as MPI's default abort.
  static Expected<std::unique_ptr<MpiWorld>> initialize(const MpiOptions& options = {});
  // Frees the group communicators, then MPI_Finalize.
  ~MpiWorld();
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;

  int rank() const;
  int size() const;

  // The training step named by timeout messages; -1 (the default) reads "before the first step".
  void set_step(int64_t step);
  void set_collective_timeout(double seconds);

  // Of every group communicator of this world (the world's own included).
  const CollectiveCounters& counters() const;
  void clear_counters();

  // All ranks, in world rank order; named "{world}" in messages.
  Communicator& world();

  // This rank's group along `axes` of `mesh` (rank r is device r; see DeviceMesh for the order,
  // and for the order of the members, which is the order of the communicator's ranks). The first
  // call for a mesh and axis list splits the world (MPI_Comm_split: color = the coordinates on
  // the other axes, key = the position in the group): it is collective, so every rank must make
  // the same first calls in the same order; later calls return the cached communicator, which
  // lives as long as the world. Errors (exit 4): a mesh of another device count than the world
  // (naming both), an axis the mesh lacks.
  Expected<Communicator*> group(const DeviceMesh& mesh, std::span<const std::string> axes);
  // The communicator a collective step runs on: its replica groups when it has them (color = the
  // group's index, key = the position in it), else its mesh axes. Same rules as group().
  Expected<Communicator*> group(const DeviceMesh& mesh, const artifact::Collective& collective);
  // Makes the communicator of every collective step of `program`, in program order: what
  // start-up calls on every rank so that no split happens mid-step.
  Status prepare(const DeviceMesh& mesh, const std::vector<artifact::Step>& program);

  // Prints "<program>: error: rank R of N: <message>" on stderr and ends every process of the
  // job (MPI_Abort on the world) with `exit_code`.
  [[noreturn]] void abort(int exit_code, const std::string& message);

  struct State;  // shared with the group communicators (MpiCommunicator.cpp)

 private:
  explicit MpiWorld(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace precast::runtime
