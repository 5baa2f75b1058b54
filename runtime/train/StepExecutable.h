// Role: the compiled step as this process runs it: the artifact's object code linked in with
// the runtime's entry points bound, exactly the plan's buffers (the temp arena, one buffer per
// input, outputs written in place of donated inputs), and the step program run in order: each
// step a function of the object code, or a typed collective run through the Communicator.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "compiler/artifact/Artifact.h"
#include "ir/support/Error.h"
#include "runtime/collectives/Communicator.h"
#include "runtime/kernels/RuntimeContext.h"
#include "runtime/loader/ObjectLoader.h"
#include "runtime/profile/StepObserver.h"

namespace precast::runtime {

// 64-byte aligned memory released by its deleter (an anonymous mapping when large, so zero
// pages cost nothing until touched).
struct ReleaseMemory {
  size_t mapped_bytes = 0;  // the mapping's length; 0 for aligned_alloc memory
  void operator()(void* p) const;
};
using Memory = std::unique_ptr<void, ReleaseMemory>;

// The communicator a collective step runs on (the group of its mesh axes or replica groups),
// owned elsewhere and outliving the executable. Called once per collective step at load, in
// program order (on every rank, so MPI's collective communicator splits line up).
using CommunicatorResolver = std::function<Expected<Communicator*>(const artifact::Collective&)>;

class StepExecutable {
 public:
  // Links the object code (when a step needs it) and binds every step of the program: to its
  // function, or for a collective step to `comm` (every collective's group; it must outlive the
  // executable). Errors
  // (exit 4): an empty program, a non-collective step without a function, a collective `comm`
  // cannot run, a buffer outside its region, a damaged object or an unbound symbol.
  static Expected<StepExecutable> load(const artifact::Artifact& artifact, Communicator& comm);
  // The same, each collective step bound to the communicator `resolve` gives it (an error from
  // `resolve` is returned as it is).
  static Expected<StepExecutable> load(const artifact::Artifact& artifact,
                                       const CommunicatorResolver& resolve);

  // Allocates the arena and one buffer per input (zeros) and per output (outputs donated to an
  // input, or the same value as an earlier output, share that buffer). Out of memory: exit 1.
  // Input i with a non-null bound_inputs[i] uses that buffer instead, owned by the caller and
  // at least the input's size (eval_step's parameters are the train step's buffers); it is not
  // counted in argument_bytes.
  Status allocate_buffers(const std::vector<void*>& bound_inputs = {});

  // Runs the step program once over the bound buffers, each step function given `context` (its
  // GEMM and thread pool). Errors come from collectives only. With an `observer`, its
  // entry_begin/entry_end surround each program entry (the profiler).
  Status run(const RuntimeContext& context, StepObserver* observer = nullptr);

  // Calls `hook` in each run() just before the first program step that writes a buffer of the
  // training state (an input with role "parameter" or "optimizer_state", in place or through the
  // output aliased to it; Step::buffers lists the writes after the int_params[1] reads). Until
  // then the step only reads the state the previous step left, so an asynchronous checkpoint save
  // may still be copying it (CheckpointWriter::release_state). An empty hook: no call.
  void set_before_state_write(std::function<void()> hook) { before_state_write_ = std::move(hook); }
  // The program step that hook runs before: the program's size when no step writes the state.
  size_t first_state_write() const { return first_state_write_; }

  void* input(size_t i) const { return args_[i]; }
  void* output(size_t k) const { return results_[k]; }

  int64_t arena_bytes() const { return arena_bytes_; }
  int64_t argument_bytes() const { return argument_bytes_; }
  int64_t output_bytes() const { return output_bytes_; }  // donated outputs included
  int64_t alias_bytes() const { return alias_bytes_; }

 private:
  // void(args, outputs, arena, const RuntimeContext*): compiler/backend/cpu/CodeGen.h.
  using Entry = void(void* const*, void* const*, char*, const void*);
  struct ProgramStep {
    Entry* function = nullptr;                // null: a collective
    const artifact::Step* step = nullptr;
    Communicator* comm = nullptr;             // a collective's group
  };
  explicit StepExecutable(const artifact::Artifact& artifact) : artifact_(&artifact) {}
  void* address(const artifact::BufferRef& ref) const;
  Status run_entry(const ProgramStep& p, const RuntimeContext& context);

  const artifact::Artifact* artifact_;
  std::optional<LoadedObject> object_;  // absent when no step has a function
  std::vector<ProgramStep> program_;    // in program order
  size_t first_state_write_ = 0;        // set_before_state_write's step
  std::function<void()> before_state_write_;
  Memory arena_;
  std::vector<Memory> owned_;
  std::vector<void*> args_, results_;
  int64_t arena_bytes_ = 0, argument_bytes_ = 0, output_bytes_ = 0, alias_bytes_ = 0;
};

}  // namespace precast::runtime
