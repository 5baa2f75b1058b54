#include "runtime/collectives/Communicator.h"

#include <fmt/format.h>

#include <cstring>

namespace precast::runtime {
namespace {

// The one rank's data is the whole result: a copy (nothing when send and recv are the same).
Status copy(const void* send, void* recv, int64_t count, ElementType type, const char* what) {
  if (count < 0) {
    return internal_error(fmt::format("{}: negative element count {}", what, count));
  }
  if (count > 0 && send != recv) {
    std::memmove(recv, send, static_cast<size_t>(count * element_bytes(type)));
  }
  return Status::success();
}

}  // namespace

std::optional<ElementType> element_type(std::string_view dtype) {
  if (dtype == "f32") return ElementType::kF32;
  if (dtype == "f64") return ElementType::kF64;
  if (dtype == "bf16") return ElementType::kBF16;
  if (dtype == "f16") return ElementType::kF16;
  if (dtype == "s32") return ElementType::kS32;
  if (dtype == "u32") return ElementType::kU32;
  if (dtype == "pred") return ElementType::kPred;
  return std::nullopt;
}

std::string_view element_type_name(ElementType type) {
  switch (type) {
    case ElementType::kF32:
      return "f32";
    case ElementType::kF64:
      return "f64";
    case ElementType::kBF16:
      return "bf16";
    case ElementType::kF16:
      return "f16";
    case ElementType::kS32:
      return "s32";
    case ElementType::kU32:
      return "u32";
    case ElementType::kPred:
      return "pred";
  }
  return "";
}

int64_t element_bytes(ElementType type) {
  switch (type) {
    case ElementType::kF64:
      return 8;
    case ElementType::kF32:
    case ElementType::kS32:
    case ElementType::kU32:
      return 4;
    case ElementType::kBF16:
    case ElementType::kF16:
      return 2;
    case ElementType::kPred:
      return 1;
  }
  return 0;
}

Expected<std::unique_ptr<SingleProcessCommunicator>> SingleProcessCommunicator::create(
    int64_t group_size) {
  if (group_size != 1) {
    return usage_error(fmt::format(
        "a group of {} processes needs a multi-process communicator (MPI); this runtime runs "
        "one process: run an artifact compiled for one device (compile_topology=cpu-1)",
        group_size));
  }
  return std::unique_ptr<SingleProcessCommunicator>(new SingleProcessCommunicator());
}

Status SingleProcessCommunicator::all_reduce(const void* send, void* recv, int64_t count,
                                             ElementType type, ReduceOp /*op*/) {
  return copy(send, recv, count, type, "all_reduce");
}
Status SingleProcessCommunicator::all_gather(const void* send, void* recv, int64_t count,
                                             ElementType type) {
  return copy(send, recv, count, type, "all_gather");
}
Status SingleProcessCommunicator::reduce_scatter(const void* send, void* recv, int64_t count,
                                                 ElementType type, ReduceOp /*op*/) {
  return copy(send, recv, count, type, "reduce_scatter");
}
Status SingleProcessCommunicator::all_to_all(const void* send, void* recv, int64_t count,
                                             ElementType type) {
  return copy(send, recv, count, type, "all_to_all");
}
Status SingleProcessCommunicator::collective_permute(const void* send, void* recv, int64_t count,
                                                     ElementType type, int64_t /*shift*/) {
  return copy(send, recv, count, type, "collective_permute");  // (r + shift) mod 1 = r
}
Status SingleProcessCommunicator::barrier() { return Status::success(); }
Status SingleProcessCommunicator::broadcast(void* /*buffer*/, int64_t count, ElementType /*type*/,
                                            int root) {
  if (root != 0 || count < 0) {
    return internal_error(fmt::format("broadcast from root {} of {} elements in a group of one",
                                      root, count));
  }
  return Status::success();
}

}  // namespace precast::runtime
