#include "runtime/train/StepExecutable.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "runtime/collectives/CollectiveStep.h"
#include "runtime/kernels/Attention.h"
#include "runtime/kernels/Gemm.h"
#include "runtime/train/TensorElements.h"

namespace precast::runtime {
namespace {

// A buffer of kMappedBytes or more is an anonymous mapping: the kernel hands its pages out
// zero-filled on first touch, so zero inputs (the optimizer's moments, zeros-initialised
// weights) cost nothing until the step reads them, and no page is written twice. Smaller ones
// come from aligned_alloc and are zeroed when `zero`. The arena and the step's own outputs are
// written before they are read, so they need no zeroing either way.
constexpr size_t kMappedBytes = size_t{1} << 16;

Expected<Memory> allocate(int64_t bytes, const std::string& what, bool zero) {
  size_t size = static_cast<size_t>(std::max<int64_t>(bytes, 1) + 63) / 64 * 64;
  auto out_of_memory = [&](const std::string& reason) {
    return Error(ExitCode::kFailure, fmt::format("cannot allocate {} bytes for {}: {}", bytes,
                                                 what, reason));
  };
  if (size >= kMappedBytes) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return out_of_memory(std::strerror(errno));
    return Memory(p, ReleaseMemory{size});
  }
  void* p = std::aligned_alloc(64, size);
  if (p == nullptr) return out_of_memory("out of host memory");
  if (zero) std::memset(p, 0, size);
  return Memory(p, ReleaseMemory{});
}

// A collective reads buffers[0] and writes buffers[1], each inside its region: the operand's
// bytes, and the result's (an all-gather's is the group's pieces, a reduce-scatter's one piece).
template <class Refuse>
Status check_collective_buffers(const artifact::Artifact& a, const artifact::Step& step,
                                const Refuse& refuse) {
  if (step.buffers.size() != 2) {
    return refuse(
        fmt::format("it has {} buffers, not its operand and result", step.buffers.size()));
  }
  const artifact::Collective& c = step.collective;
  PRECAST_ASSIGN_OR_RETURN(int64_t group, collective_group_size(c, a.key.mesh));
  int64_t result_bytes = c.kind == artifact::CollectiveKind::kAllGather       ? c.bytes * group
                         : c.kind == artifact::CollectiveKind::kReduceScatter ? c.bytes / group
                                                                              : c.bytes;
  for (size_t k = 0; k < 2; ++k) {
    const artifact::BufferRef& ref = step.buffers[k];
    int64_t expected = k == 0 ? c.bytes : result_bytes;
    int64_t limit = 0;
    switch (ref.space) {
      case artifact::BufferSpace::kArgument:
      case artifact::BufferSpace::kOutput: {
        const auto& tensors = ref.space == artifact::BufferSpace::kArgument
                                  ? a.signature.inputs
                                  : a.signature.outputs;
        if (ref.index_or_offset < 0 ||
            ref.index_or_offset >= static_cast<int64_t>(tensors.size())) {
          return refuse(fmt::format("it refers to {}[{}], but there are {}",
                                    artifact::buffer_space_name(ref.space), ref.index_or_offset,
                                    tensors.size()));
        }
        limit = tensor_bytes(tensors[static_cast<size_t>(ref.index_or_offset)]);
        break;
      }
      case artifact::BufferSpace::kTemp:
        limit = ref.index_or_offset >= 0 ? a.plan.arena_bytes - ref.index_or_offset : -1;
        break;
      case artifact::BufferSpace::kConstant:
        return refuse("it reads the constant pool, which this runtime does not hold");
    }
    if (ref.bytes > limit || ref.bytes != expected) {
      return refuse(
          fmt::format("its {} {} buffer of {} bytes does not fit its region ({} bytes "
                      "there) or is not the {} bytes a {}-byte operand needs",
                      k == 0 ? "operand" : "result", artifact::buffer_space_name(ref.space),
                      ref.bytes, limit, expected, c.bytes));
    }
  }
  return Status::success();
}

// The first step of `a`'s program that writes a buffer of the training state (an input with role
// "parameter" or "optimizer_state", or an output aliased to one): a step's buffers are those it
// reads, then those it writes, int_params[1] counting the reads (compiler/driver/Compile.cpp); a
// collective writes its second. A step without that count has every buffer taken as written.
size_t first_state_writing_step(const artifact::Artifact& a) {
  const std::vector<artifact::TensorSignature>& inputs = a.signature.inputs;
  const std::vector<artifact::TensorSignature>& outputs = a.signature.outputs;
  auto state_input = [&](int64_t i) {
    return i >= 0 && static_cast<size_t>(i) < inputs.size() &&
           (inputs[static_cast<size_t>(i)].role == "parameter" ||
            inputs[static_cast<size_t>(i)].role == "optimizer_state");
  };
  for (size_t i = 0; i < a.program.size(); ++i) {
    const artifact::Step& step = a.program[i];
    size_t first_write = 0;
    if (step.kind == artifact::StepKind::kCollective) {
      first_write = 1;
    } else if (step.int_params.size() >= 2 && step.int_params[1] >= 0 &&
               static_cast<size_t>(step.int_params[1]) <= step.buffers.size()) {
      first_write = static_cast<size_t>(step.int_params[1]);
    }
    for (size_t b = first_write; b < step.buffers.size(); ++b) {
      const artifact::BufferRef& ref = step.buffers[b];
      if (ref.space == artifact::BufferSpace::kArgument && state_input(ref.index_or_offset)) {
        return i;
      }
      if (ref.space == artifact::BufferSpace::kOutput && ref.index_or_offset >= 0 &&
          static_cast<size_t>(ref.index_or_offset) < outputs.size() &&
          state_input(outputs[static_cast<size_t>(ref.index_or_offset)].aliased_input)) {
        return i;
      }
    }
  }
  return a.program.size();
}

}  // namespace

void ReleaseMemory::operator()(void* p) const {
  if (mapped_bytes > 0) {
    munmap(p, mapped_bytes);
  } else {
    std::free(p);
  }
}

Expected<StepExecutable> StepExecutable::load(const artifact::Artifact& a, Communicator& comm) {
  return load(a, [&comm](const artifact::Collective&) -> Expected<Communicator*> { return &comm; });
}

Expected<StepExecutable> StepExecutable::load(const artifact::Artifact& a,
                                              const CommunicatorResolver& resolve) {
  if (a.program.empty()) {
    return Error(ExitCode::kIncompatible,
                 "the artifact's step program is empty; recompile with this build's precast "
                 "compile");
  }
  bool needs_object = false;
  std::vector<Communicator*> groups(a.program.size(), nullptr);
  for (size_t i = 0; i < a.program.size(); ++i) {
    const artifact::Step& step = a.program[i];
    auto refuse = [&](const std::string& why) {
      return Error(ExitCode::kIncompatible,
                   fmt::format("step {} of the artifact's program ({}): {}; recompile with this "
                               "build's precast compile",
                               i, artifact::step_kind_name(step.kind), why));
    };
    if (step.kind == artifact::StepKind::kCollective) {
      PRECAST_ASSIGN_OR_RETURN(groups[i], resolve(step.collective));
      Status runnable = check_collective(step.collective, a.key.mesh, *groups[i]);
      if (!runnable.ok()) return refuse(runnable.error().message());
      PRECAST_RETURN_IF_ERROR(check_collective_buffers(a, step, refuse));
    } else if (step.symbol.empty()) {
      return refuse("it has no function in the object code");
    } else {
      needs_object = true;
    }
  }
  StepExecutable executable(a);
  if (needs_object) {
    // The runtime's entry points, bound explicitly (nothing else of the process is visible).
    SymbolTable symbols = {
        {"precast_gemm_f32", reinterpret_cast<const void*>(&precast_gemm_f32)},
        {"precast_gemm_f64", reinterpret_cast<const void*>(&precast_gemm_f64)},
        {"precast_parallel_for", reinterpret_cast<const void*>(&precast_parallel_for)},
        {"precast_mesh_coordinate", reinterpret_cast<const void*>(&precast_mesh_coordinate)},
        {"precast_attention_grad_f32", reinterpret_cast<const void*>(&precast_attention_grad_f32)},
    };
    std::vector<char> object(a.object_code.begin(), a.object_code.end());
    LoadOptions options;
    options.object_name = "the artifact's object code";
    PRECAST_ASSIGN_OR_RETURN(LoadedObject loaded, load_object(object, symbols, options));
    executable.object_.emplace(std::move(loaded));
  }
  for (size_t i = 0; i < a.program.size(); ++i) {
    const artifact::Step& step = a.program[i];
    ProgramStep bound{nullptr, &step, groups[i]};
    if (step.kind != artifact::StepKind::kCollective) {
      PRECAST_ASSIGN_OR_RETURN(bound.function, executable.object_->function<Entry>(step.symbol));
    }
    executable.program_.push_back(bound);
  }
  executable.first_state_write_ = first_state_writing_step(a);
  return executable;
}

Status StepExecutable::allocate_buffers(const std::vector<void*>& bound_inputs) {
  const std::vector<artifact::TensorSignature>& inputs = artifact_->signature.inputs;
  const std::vector<artifact::TensorSignature>& outputs = artifact_->signature.outputs;
  PRECAST_ASSIGN_OR_RETURN(arena_, allocate(artifact_->plan.arena_bytes, "the temp arena", false));
  arena_bytes_ = artifact_->plan.arena_bytes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const artifact::TensorSignature& in = inputs[i];
    int64_t bytes = tensor_bytes(in);
    if (i < bound_inputs.size() && bound_inputs[i] != nullptr) {
      args_.push_back(bound_inputs[i]);  // another executable's buffer (eval_step's weights)
      continue;
    }
    PRECAST_ASSIGN_OR_RETURN(Memory m, allocate(bytes, "input '" + in.name + "'", true));
    args_.push_back(m.get());
    owned_.push_back(std::move(m));
    argument_bytes_ += bytes;
  }
  for (const artifact::TensorSignature& o : outputs) {
    int64_t bytes = tensor_bytes(o);
    if (o.same_as_output >= 0 && static_cast<size_t>(o.same_as_output) < results_.size()) {
      results_.push_back(results_[static_cast<size_t>(o.same_as_output)]);  // counted once
      continue;
    }
    output_bytes_ += bytes;
    if (o.aliased_input >= 0) {
      results_.push_back(args_[static_cast<size_t>(o.aliased_input)]);
      alias_bytes_ += bytes;
      continue;
    }
    PRECAST_ASSIGN_OR_RETURN(Memory m, allocate(bytes, "output '" + o.name + "'", false));
    results_.push_back(m.get());
    owned_.push_back(std::move(m));
  }
  return Status::success();
}

void* StepExecutable::address(const artifact::BufferRef& ref) const {
  auto index = static_cast<size_t>(ref.index_or_offset);
  switch (ref.space) {
    case artifact::BufferSpace::kArgument:
      return args_[index];
    case artifact::BufferSpace::kOutput:
      return results_[index];
    default:
      return static_cast<char*>(arena_.get()) + ref.index_or_offset;
  }
}

Status StepExecutable::run_entry(const ProgramStep& p, const RuntimeContext& context) {
  if (p.function != nullptr) {
    p.function(args_.data(), results_.data(), static_cast<char*>(arena_.get()), &context);
    return Status::success();
  }
  return run_collective(p.step->collective, address(p.step->buffers[0]),
                        address(p.step->buffers[1]), *p.comm);
}

Status StepExecutable::run(const RuntimeContext& context, StepObserver* observer) {
  for (size_t i = 0; i < program_.size(); ++i) {
    if (i == first_state_write_ && before_state_write_) before_state_write_();
    if (observer != nullptr) observer->entry_begin(i);
    Status status = run_entry(program_[i], context);
    if (observer != nullptr) observer->entry_end(i);
    PRECAST_RETURN_IF_ERROR(status);
  }
  return Status::success();
}

}  // namespace precast::runtime
