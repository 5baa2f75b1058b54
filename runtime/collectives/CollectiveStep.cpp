#include "runtime/collectives/CollectiveStep.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace precast::runtime {
namespace {

Error unrunnable(const artifact::Collective& c, const std::string& why) {
  return Error(ExitCode::kIncompatible,
               fmt::format("{} over {{{}}}: {}", artifact::collective_kind_name(c.kind),
                           fmt::join(c.mesh_axes, ", "), why));
}

ReduceOp reduce_op(artifact::Reduction reduction) {
  return reduction == artifact::Reduction::kMax ? ReduceOp::kMax : ReduceOp::kSum;
}

bool splits(artifact::CollectiveKind kind) {
  return kind == artifact::CollectiveKind::kReduceScatter ||
         kind == artifact::CollectiveKind::kAllToAll;
}

}  // namespace

Expected<int64_t> collective_group_size(const artifact::Collective& c,
                                        const std::vector<artifact::MeshAxis>& mesh) {
  if (!c.replica_groups.empty()) {
    size_t size = c.replica_groups[0].size();
    for (const std::vector<int64_t>& group : c.replica_groups) {
      if (group.size() != size) return unrunnable(c, "its replica groups differ in size");
    }
    return static_cast<int64_t>(size);
  }
  int64_t size = 1;
  for (const std::string& name : c.mesh_axes) {
    const artifact::MeshAxis* axis = nullptr;
    for (const artifact::MeshAxis& a : mesh) {
      if (a.name == name) axis = &a;
    }
    if (axis == nullptr) return unrunnable(c, fmt::format("the mesh has no axis '{}'", name));
    size *= axis->size;
  }
  return size;
}

Status check_collective(const artifact::Collective& c, const std::vector<artifact::MeshAxis>& mesh,
                        const Communicator& comm) {
  std::optional<ElementType> type = element_type(c.dtype);
  if (!type) return unrunnable(c, fmt::format("unknown dtype '{}'", c.dtype));
  int64_t bytes = element_bytes(*type);
  if (c.bytes < 0 || c.bytes % bytes != 0) {
    return unrunnable(c, fmt::format("{} bytes are not a whole number of {} elements", c.bytes,
                                     c.dtype));
  }
  PRECAST_ASSIGN_OR_RETURN(int64_t group, collective_group_size(c, mesh));
  if (group != comm.size()) {
    return unrunnable(c, fmt::format("a group of {} devices, but this runtime's communicator "
                                     "has {} process(es)",
                                     group, comm.size()));
  }
  if (splits(c.kind) && (c.bytes / bytes) % group != 0) {
    return unrunnable(c, fmt::format("{} elements do not split into {} pieces", c.bytes / bytes,
                                     group));
  }
  return Status::success();
}

Status run_collective(const artifact::Collective& c, const void* operand, void* result,
                      Communicator& comm) {
  ElementType type = *element_type(c.dtype);
  int64_t count = c.bytes / element_bytes(type);
  int64_t piece = count / comm.size();
  switch (c.kind) {
    case artifact::CollectiveKind::kAllReduce:
      return comm.all_reduce(operand, result, count, type, reduce_op(c.reduction));
    case artifact::CollectiveKind::kAllGather:
      return comm.all_gather(operand, result, count, type);
    case artifact::CollectiveKind::kReduceScatter:
      return comm.reduce_scatter(operand, result, piece, type, reduce_op(c.reduction));
    case artifact::CollectiveKind::kAllToAll:
      return comm.all_to_all(operand, result, piece, type);
    case artifact::CollectiveKind::kCollectivePermute:
      return comm.collective_permute(operand, result, count, type, c.shift);
  }
  return internal_error("run_collective: unknown collective kind");
}

}  // namespace precast::runtime
