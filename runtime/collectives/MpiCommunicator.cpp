#include "runtime/collectives/MpiCommunicator.h"

// The C API only: Open MPI's deprecated C++ bindings would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <mpi.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <thread>

#include "runtime/collectives/OrderedReduction.h"

namespace precast::runtime {

class GroupCommunicator;

struct MpiWorld::State {
  MpiOptions options;
  int rank = 0;
  int size = 1;
  int64_t step = -1;
  CollectiveCounters counters;
  std::unique_ptr<GroupCommunicator> world;
  std::map<std::string, std::unique_ptr<GroupCommunicator>> groups;  // by mesh and axes

  [[noreturn]] void abort(int exit_code, const std::string& message) const {
    std::cerr << fmt::format("{}: error: rank {} of {}: {}\n", options.program_name, rank, size,
                             message)
              << std::flush;
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);  // MPI_Abort does not return; this is for a broken MPI
  }
};

namespace {

using Clock = std::chrono::steady_clock;

// MPI allows one MPI_Init per process; this remembers that it happened.
std::atomic<bool> mpi_was_initialised{false};

MPI_Datatype mpi_type(ElementType type) {
  switch (type) {
    case ElementType::kF32:
      return MPI_FLOAT;
    case ElementType::kF64:
      return MPI_DOUBLE;
    case ElementType::kBF16:
    case ElementType::kF16:
      return MPI_UINT16_T;  // moved as bits; reductions happen in reduce_in_order
    case ElementType::kS32:
      return MPI_INT32_T;
    case ElementType::kU32:
      return MPI_UINT32_T;
    case ElementType::kPred:
      return MPI_UINT8_T;
  }
  return MPI_BYTE;
}

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return fmt::format("MPI error {}", code);
  return std::string(text, static_cast<size_t>(length));
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

// One group of ranks (a communicator split off the world, or the world itself). Every operation
// posts non-blocking MPI calls and polls them (wait): the poll loop is where the timeout is
// enforced, on the thread that called, with no second thread inside MPI (MPI_THREAD_FUNNELED
// suffices) and nothing to cancel. Reductions never use MPI's reduction operators: the pieces
// are exchanged (all-to-all), reduced in rank order by reduce_in_order on the rank that owns
// the piece, and all-gathered, so every rank gets the same bits whatever the transport.
class GroupCommunicator final : public Communicator {
 public:
  GroupCommunicator(MpiWorld::State& world, MPI_Comm comm, bool owned, std::string axes,
                    std::vector<int64_t> members, bool spans_slices)
      : world_(world),
        comm_(comm),
        owned_(owned),
        axes_(std::move(axes)),
        members_(std::move(members)),
        spans_slices_(spans_slices) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~GroupCommunicator() override {
    if (owned_) MPI_Comm_free(&comm_);
  }
  GroupCommunicator(const GroupCommunicator&) = delete;
  GroupCommunicator& operator=(const GroupCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status all_reduce(const void* send, void* recv, int64_t count, ElementType type,
                    ReduceOp op) override;
  Status all_gather(const void* send, void* recv, int64_t count, ElementType type) override;
  Status reduce_scatter(const void* send, void* recv, int64_t count, ElementType type,
                        ReduceOp op) override;
  Status all_to_all(const void* send, void* recv, int64_t count, ElementType type) override;
  Status collective_permute(const void* send, void* recv, int64_t count, ElementType type,
                            int64_t shift) override;
  Status barrier() override;
  Status broadcast(void* buffer, int64_t count, ElementType type, int root) override;

 private:
  struct Call {
    CollectiveOp op;
    Clock::time_point start;
  };

  Call begin(CollectiveOp op) const { return Call{op, Clock::now()}; }
  void finish(const Call& call, int64_t bytes, int64_t sent_bytes) {
    world_.counters.record(call.op, spans_slices_, bytes, sent_bytes, seconds_since(call.start));
  }
  std::string what(const Call& call) const {
    return fmt::format("{} over {}", collective_op_name(call.op), axes_);
  }
  Error failure(const Call& call, const char* function, int code) const {
    return Error(ExitCode::kFailure, fmt::format("rank {}: {} failed in {}: {}", world_.rank,
                                                 function, what(call), mpi_error_text(code)));
  }
  // MPI counts and displacements are ints: `elements` is the largest buffer of the call.
  Status check_count(const Call& call, int64_t elements) const {
    if (elements < 0) {
      return internal_error(fmt::format("{}: negative element count {}", what(call), elements));
    }
    if (elements > INT_MAX) {
      return Error(ExitCode::kFailure,
                   fmt::format("{}: a buffer of {} elements is more than MPI's int counts "
                               "address ({}); shard the tensor over more devices",
                               what(call), elements, INT_MAX));
    }
    return Status::success();
  }
  void* scratch(int64_t bytes) {
    if (bytes > scratch_bytes_) {
      scratch_.reset(new std::byte[static_cast<size_t>(bytes)]);
      scratch_bytes_ = bytes;
    }
    return scratch_.get();
  }
  Status wait(const Call& call, MPI_Request* requests, int count);
  // Posts one non-blocking call (`post` returns MPI's code) and waits for it.
  template <typename Post>
  Status run_one(const Call& call, const char* function, Post post) {
    MPI_Request request;
    int code = post(&request);
    if (code != MPI_SUCCESS) return failure(call, function, code);
    return wait(call, &request, 1);
  }
  // Piece j of `send` (count elements each) goes to rank j; `recv` gets every rank's piece for
  // this rank, in rank order.
  Status exchange(const Call& call, const void* send, void* recv, int64_t count, ElementType type) {
    int c = static_cast<int>(count);
    MPI_Datatype t = mpi_type(type);
    return run_one(call, "MPI_Ialltoall", [&](MPI_Request* request) {
      return MPI_Ialltoall(send, c, t, recv, c, t, comm_, request);
    });
  }
  [[noreturn]] void time_out(const Call& call) const;

  MpiWorld::State& world_;
  MPI_Comm comm_;
  bool owned_;
  std::string axes_;              // "{fsdp}", "{data, fsdp}", "{world}"
  std::vector<int64_t> members_;  // world ranks in group rank order
  bool spans_slices_;
  int rank_ = 0;
  int size_ = 1;
  std::unique_ptr<std::byte[]> scratch_;  // received pieces before their reduction
  int64_t scratch_bytes_ = 0;
};

// Polls until every request completes. A short spin catches fast exchanges; then the rank
// yields its core (ranks may outnumber cores) and past a millisecond sleeps briefly between
// polls, so a rank waiting for a slow peer does not take the peer's CPU.
Status GroupCommunicator::wait(const Call& call, MPI_Request* requests, int count) {
  double timeout = world_.options.collective_timeout_seconds;
  for (int64_t polls = 0;; ++polls) {
    int done = 0;
    int code = MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE);
    if (code != MPI_SUCCESS) return failure(call, "MPI_Testall", code);
    if (done) return Status::success();
    double waited = seconds_since(call.start);
    if (waited > timeout) time_out(call);
    if (waited > 1e-3) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    } else if (polls > 100) {
      sched_yield();
    }
  }
}

void GroupCommunicator::time_out(const Call& call) const {
  std::string step = world_.step < 0 ? std::string("before the first step")
                                     : fmt::format("at step {}", world_.step);
  world_.abort(
      static_cast<int>(ExitCode::kFailure),
      fmt::format("{} {} did not complete within {} seconds (collective_timeout_seconds); its "
                  "group is world ranks {} (this rank is its member {}). A rank of the group is "
                  "stuck, has died or did not make the same call. Aborting the job; if a step "
                  "legitimately takes longer, raise collective_timeout_seconds.",
                  what(call), step, world_.options.collective_timeout_seconds,
                  fmt::join(members_, ", "), rank_));
}

Status GroupCommunicator::all_reduce(const void* send, void* recv, int64_t count, ElementType type,
                                     ReduceOp op) {
  Call call = begin(CollectiveOp::kAllReduce);
  PRECAST_RETURN_IF_ERROR(check_count(call, count));
  const int64_t width = element_bytes(type);
  if (size_ == 1 || count == 0) {
    if (count > 0 && send != recv) std::memmove(recv, send, static_cast<size_t>(count * width));
    finish(call, count * width, 0);
    return Status::success();
  }
  // Piece j (rank j reduces it) is count / size elements, one more for the first count % size.
  std::vector<int> counts(static_cast<size_t>(size_)), offsets(static_cast<size_t>(size_));
  for (int j = 0, offset = 0; j < size_; ++j) {
    counts[static_cast<size_t>(j)] = static_cast<int>(count / size_ + (j < count % size_ ? 1 : 0));
    offsets[static_cast<size_t>(j)] = offset;
    offset += counts[static_cast<size_t>(j)];
  }
  const int mine = counts[static_cast<size_t>(rank_)];
  std::vector<int> from_each(static_cast<size_t>(size_), mine), at(static_cast<size_t>(size_));
  for (int j = 0; j < size_; ++j) at[static_cast<size_t>(j)] = j * mine;
  void* pieces = scratch(static_cast<int64_t>(mine) * size_ * width);
  MPI_Datatype t = mpi_type(type);
  PRECAST_RETURN_IF_ERROR(run_one(call, "MPI_Ialltoallv", [&](MPI_Request* request) {
    return MPI_Ialltoallv(send, counts.data(), offsets.data(), t, pieces, from_each.data(),
                          at.data(), t, comm_, request);
  }));
  char* my_piece =
      static_cast<char*>(recv) + static_cast<int64_t>(offsets[static_cast<size_t>(rank_)]) * width;
  reduce_in_order(pieces, size_, mine, type, op, my_piece);
  PRECAST_RETURN_IF_ERROR(run_one(call, "MPI_Iallgatherv", [&](MPI_Request* request) {
    return MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, counts.data(), offsets.data(),
                           t, comm_, request);
  }));
  finish(call, count * width, ((count - mine) + static_cast<int64_t>(mine) * (size_ - 1)) * width);
  return Status::success();
}

Status GroupCommunicator::all_gather(const void* send, void* recv, int64_t count,
                                     ElementType type) {
  Call call = begin(CollectiveOp::kAllGather);
  PRECAST_RETURN_IF_ERROR(check_count(call, count * size_));
  const int64_t width = element_bytes(type);
  if (count > 0) {
    MPI_Datatype t = mpi_type(type);
    int c = static_cast<int>(count);
    PRECAST_RETURN_IF_ERROR(run_one(call, "MPI_Iallgather", [&](MPI_Request* request) {
      return MPI_Iallgather(send, c, t, recv, c, t, comm_, request);
    }));
  }
  finish(call, count * size_ * width, count * (size_ - 1) * width);
  return Status::success();
}

Status GroupCommunicator::reduce_scatter(const void* send, void* recv, int64_t count,
                                         ElementType type, ReduceOp op) {
  Call call = begin(CollectiveOp::kReduceScatter);
  PRECAST_RETURN_IF_ERROR(check_count(call, count * size_));
  const int64_t width = element_bytes(type);
  if (count > 0) {
    void* pieces = scratch(count * size_ * width);
    PRECAST_RETURN_IF_ERROR(exchange(call, send, pieces, count, type));
    reduce_in_order(pieces, size_, count, type, op, recv);
  }
  finish(call, count * size_ * width, count * (size_ - 1) * width);
  return Status::success();
}

Status GroupCommunicator::all_to_all(const void* send, void* recv, int64_t count,
                                     ElementType type) {
  Call call = begin(CollectiveOp::kAllToAll);
  PRECAST_RETURN_IF_ERROR(check_count(call, count * size_));
  const int64_t width = element_bytes(type);
  if (count > 0) PRECAST_RETURN_IF_ERROR(exchange(call, send, recv, count, type));
  finish(call, count * size_ * width, count * (size_ - 1) * width);
  return Status::success();
}

Status GroupCommunicator::collective_permute(const void* send, void* recv, int64_t count,
                                             ElementType type, int64_t shift) {
  Call call = begin(CollectiveOp::kCollectivePermute);
  PRECAST_RETURN_IF_ERROR(check_count(call, count));
  const int64_t width = element_bytes(type);
  const int step = static_cast<int>(((shift % size_) + size_) % size_);
  if (step == 0 || count == 0) {
    if (count > 0 && send != recv) std::memmove(recv, send, static_cast<size_t>(count * width));
    finish(call, count * width, 0);
    return Status::success();
  }
  MPI_Datatype t = mpi_type(type);
  int c = static_cast<int>(count);
  MPI_Request requests[2];
  constexpr int kTag = 1601;
  int code = MPI_Irecv(recv, c, t, (rank_ - step + size_) % size_, kTag, comm_, &requests[0]);
  if (code != MPI_SUCCESS) return failure(call, "MPI_Irecv", code);
  code = MPI_Isend(send, c, t, (rank_ + step) % size_, kTag, comm_, &requests[1]);
  if (code != MPI_SUCCESS) return failure(call, "MPI_Isend", code);
  PRECAST_RETURN_IF_ERROR(wait(call, requests, 2));
  finish(call, count * width, count * width);
  return Status::success();
}

Status GroupCommunicator::barrier() {
  Call call = begin(CollectiveOp::kBarrier);
  PRECAST_RETURN_IF_ERROR(run_one(
      call, "MPI_Ibarrier", [&](MPI_Request* request) { return MPI_Ibarrier(comm_, request); }));
  finish(call, 0, 0);
  return Status::success();
}

Status GroupCommunicator::broadcast(void* buffer, int64_t count, ElementType type, int root) {
  Call call = begin(CollectiveOp::kBroadcast);
  PRECAST_RETURN_IF_ERROR(check_count(call, count));
  if (root < 0 || root >= size_) {
    return internal_error(
        fmt::format("{}: root {} is not a rank of the group of {}", what(call), root, size_));
  }
  const int64_t width = element_bytes(type);
  if (count > 0 && size_ > 1) {
    PRECAST_RETURN_IF_ERROR(run_one(call, "MPI_Ibcast", [&](MPI_Request* request) {
      return MPI_Ibcast(buffer, static_cast<int>(count), mpi_type(type), root, comm_, request);
    }));
  }
  finish(call, count * width, rank_ == root ? count * (size_ - 1) * width : 0);
  return Status::success();
}

MpiWorld::MpiWorld(std::unique_ptr<State> state) : state_(std::move(state)) {}

Expected<std::unique_ptr<MpiWorld>> MpiWorld::initialize(const MpiOptions& options) {
  if (mpi_was_initialised.exchange(true)) {
    return internal_error(
        "MPI was already initialised in this process: make one MpiWorld per "
        "process, at start-up, and keep it until the end");
  }
  int provided = 0;
  int code = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  if (code != MPI_SUCCESS) {
    return Error(ExitCode::kFailure,
                 fmt::format("MPI_Init_thread failed: {}; check the job was started with Open "
                             "MPI's mpirun",
                             mpi_error_text(code)));
  }
  if (provided < MPI_THREAD_FUNNELED) {
    MPI_Finalize();
    return Error(ExitCode::kFailure,
                 "this MPI library cannot be called from a threaded process "
                 "(MPI_THREAD_FUNNELED); use Open MPI 4.1 (tools/setup.sh)");
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  auto state = std::make_unique<State>();
  state->options = options;
  MPI_Comm_rank(MPI_COMM_WORLD, &state->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &state->size);
  std::vector<int64_t> everyone;
  for (int r = 0; r < state->size; ++r) everyone.push_back(r);
  state->world = std::make_unique<GroupCommunicator>(*state, MPI_COMM_WORLD, false, "{world}",
                                                     std::move(everyone), false);
  return std::unique_ptr<MpiWorld>(new MpiWorld(std::move(state)));
}

MpiWorld::~MpiWorld() {
  state_->groups.clear();
  state_->world.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

int MpiWorld::rank() const {
  return state_->rank;
}
int MpiWorld::size() const {
  return state_->size;
}
void MpiWorld::set_step(int64_t step) {
  state_->step = step;
}
void MpiWorld::set_collective_timeout(double seconds) {
  state_->options.collective_timeout_seconds = seconds;
}
const CollectiveCounters& MpiWorld::counters() const {
  return state_->counters;
}
void MpiWorld::clear_counters() {
  state_->counters.clear();
}
Communicator& MpiWorld::world() {
  return *state_->world;
}

void MpiWorld::abort(int exit_code, const std::string& message) {
  state_->abort(exit_code, message);
}

namespace {

// Splits `group` off the world: color = its color, key = this rank's position in it.
Expected<std::unique_ptr<GroupCommunicator>> split(MpiWorld::State& state, const DeviceGroup& group,
                                                   std::string axes) {
  MPI_Comm comm;
  int code = MPI_Comm_split(MPI_COMM_WORLD, static_cast<int>(group.color),
                            static_cast<int>(group.position), &comm);
  if (code != MPI_SUCCESS) {
    return Error(ExitCode::kFailure, fmt::format("rank {}: MPI_Comm_split for the group over {} "
                                                 "failed: {}",
                                                 state.rank, axes, mpi_error_text(code)));
  }
  auto made = std::make_unique<GroupCommunicator>(state, comm, true, std::move(axes), group.members,
                                                  group.spans_slices);
  if (made->size() != static_cast<int>(group.members.size()) ||
      made->rank() != static_cast<int>(group.position)) {
    return internal_error(
        fmt::format("rank {}: MPI_Comm_split made a group of {} with this rank "
                    "at {}; the mesh says {} at {}",
                    state.rank, made->size(), made->rank(), group.members.size(), group.position));
  }
  return made;
}

Status check_world_size(const MpiWorld::State& state, const DeviceMesh& mesh) {
  if (mesh.num_devices() == state.size) return Status::success();
  return Error(ExitCode::kIncompatible,
               fmt::format("the mesh ({}) has {} devices but this job runs {} MPI ranks; start it "
                           "with mpirun -np {}",
                           mesh.describe(), mesh.num_devices(), state.size, mesh.num_devices()));
}

}  // namespace

Expected<Communicator*> MpiWorld::group(const DeviceMesh& mesh, std::span<const std::string> axes) {
  PRECAST_RETURN_IF_ERROR(check_world_size(*state_, mesh));
  std::string label = fmt::format("{{{}}}", fmt::join(axes, ", "));
  std::string key = mesh.describe() + " / axes " + label;
  auto cached = state_->groups.find(key);
  if (cached != state_->groups.end()) return cached->second.get();
  PRECAST_ASSIGN_OR_RETURN(DeviceGroup g, mesh.group(state_->rank, axes));
  PRECAST_ASSIGN_OR_RETURN(std::unique_ptr<GroupCommunicator> made, split(*state_, g, label));
  Communicator* out = made.get();
  state_->groups.emplace(key, std::move(made));
  return out;
}

Expected<Communicator*> MpiWorld::group(const DeviceMesh& mesh,
                                        const artifact::Collective& collective) {
  if (collective.replica_groups.empty()) return group(mesh, collective.mesh_axes);
  PRECAST_RETURN_IF_ERROR(check_world_size(*state_, mesh));
  std::vector<std::string> groups;
  for (const std::vector<int64_t>& g : collective.replica_groups) {
    groups.push_back(fmt::format("[{}]", fmt::join(g, ", ")));
  }
  std::string label = fmt::format("{{{}}} in replica groups {}",
                                  fmt::join(collective.mesh_axes, ", "), fmt::join(groups, ""));
  std::string key = mesh.describe() + " / " + label;
  auto cached = state_->groups.find(key);
  if (cached != state_->groups.end()) return cached->second.get();
  PRECAST_ASSIGN_OR_RETURN(DeviceGroup g,
                           mesh.replica_group(state_->rank, collective.replica_groups));
  PRECAST_ASSIGN_OR_RETURN(std::unique_ptr<GroupCommunicator> made, split(*state_, g, label));
  Communicator* out = made.get();
  state_->groups.emplace(key, std::move(made));
  return out;
}

Status MpiWorld::prepare(const DeviceMesh& mesh, const std::vector<artifact::Step>& program) {
  for (size_t i = 0; i < program.size(); ++i) {
    if (program[i].kind != artifact::StepKind::kCollective) continue;
    Expected<Communicator*> made = group(mesh, program[i].collective);
    if (!made.ok()) {
      return made.error().with_context(fmt::format("step {} of the artifact's program", i));
    }
  }
  return Status::success();
}

}  // namespace precast::runtime
