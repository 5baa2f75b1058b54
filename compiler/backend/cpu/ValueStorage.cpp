#include "compiler/backend/cpu/ValueStorage.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

#include "ir/Printer.h"

namespace precast::backend {
namespace {

using ir::OpKind;
using ir::Value;

std::string describe(const ir::Function& f, Value v) {
  const ir::Op& op = f.op(f.defining_op(v));
  return fmt::format("value {} ({} : {})", v.id, ir::op_name(op.kind), ir::to_string(f.type(v)));
}

}  // namespace

Expected<StepStorage> resolve_storage(const ir::Function& f, const MemoryPlan& plan) {
  if (plan.num_ops != f.num_ops()) {
    return internal_error(fmt::format("code generation: the memory plan covers {} ops but @{} has {}",
                                      plan.num_ops, f.name(), f.num_ops()));
  }
  if (plan.host_temp_bytes != 0) {
    return usage_error(fmt::format(
        "code generation: @{} offloads {} bytes to host memory, which the CPU backend does not "
        "support; plan without host_values",
        f.name(), plan.host_temp_bytes));
  }
  std::unordered_map<uint32_t, int64_t> arena_offset;
  std::unordered_map<uint32_t, bool> output_buffer;
  for (const Buffer& b : plan.buffers) {
    if (!b.value.valid()) continue;  // a collective's transient: not ours to use
    if (b.value.id >= f.num_values()) {
      return internal_error("code generation: the memory plan names a value the function lacks");
    }
    if (b.output) {
      output_buffer[b.value.id] = true;
      continue;
    }
    if (b.offset < 0 || b.offset + b.bytes > plan.temp_bytes || b.bytes != f.type(b.value).byte_size()) {
      return internal_error(fmt::format(
          "code generation: temp buffer of {} at offset {} ({} bytes) does not fit the plan's "
          "arena of {} bytes or the value's size; was the plan made with a bytes override?",
          describe(f, b.value), b.offset, b.bytes, plan.temp_bytes));
    }
    arena_offset[b.value.id] = b.offset;
  }

  StepStorage out;
  out.values.assign(f.num_values(), ValueStorage{});
  std::span<const Value> params = f.params();
  for (size_t i = 0; i < params.size(); ++i) {
    out.values[params[i].id] = {StorageKind::kArgument, static_cast<int64_t>(i)};
  }
  std::vector<bool> is_result(f.num_values(), false);
  std::unordered_map<uint32_t, int64_t> first_output, in_place;
  std::span<const Value> results = f.results();
  for (size_t k = 0; k < results.size(); ++k) {
    Value r = results[k];
    is_result[r.id] = true;
    if (output_buffer.count(r.id) && !first_output.count(r.id)) {
      first_output[r.id] = static_cast<int64_t>(k);
    }
  }
  for (size_t k = 0; k < results.size(); ++k) {
    Value r = results[k];
    int32_t alias = f.result_alias(k);
    if (alias < 0 || f.is_param(r) || arena_offset.count(r.id) || first_output.count(r.id)) continue;
    in_place.emplace(r.id, alias);
  }

  for (const ir::Op& op : f.ops()) {
    for (uint32_t i = 0; i < op.num_results; ++i) {
      Value v = f.result(op, i);
      ValueStorage& s = out.values[v.id];
      if (auto it = arena_offset.find(v.id); it != arena_offset.end()) {
        s = {StorageKind::kArena, it->second};
      } else if (auto o = first_output.find(v.id); o != first_output.end()) {
        s = {StorageKind::kOutput, o->second};
      } else if (auto p = in_place.find(v.id); p != in_place.end()) {
        s = {StorageKind::kArgument, p->second};
      } else if (op.kind == OpKind::kReshape && !is_result[v.id] &&
                 out.values[f.operands(op)[0].id].materialised()) {
        s = out.values[f.operands(op)[0].id];  // shares its operand's buffer
      } else if (f.type(v).byte_size() == 0) {
        s = {StorageKind::kEmpty, 0};
      } else if (loop_fusible(f, op) && !is_result[v.id] && op.num_results == 1) {
        s = {StorageKind::kFused, 0};
      } else {
        return internal_error(fmt::format(
            "code generation: {} of @{} has no buffer in the memory plan; was the plan made for "
            "another function?",
            describe(f, v), f.name()));
      }
    }
  }

  for (size_t k = 0; k < results.size(); ++k) {
    ValueStorage from = out.values[results[k].id];
    int64_t bytes = f.type(results[k]).byte_size();
    if (from == ValueStorage{StorageKind::kOutput, static_cast<int64_t>(k)} || bytes == 0) continue;
    out.copies.push_back({k, from, bytes});
  }
  // Parameters first: an aliased result copied in from the arena overwrites its parameter,
  // which another result may return unchanged.
  std::stable_sort(out.copies.begin(), out.copies.end(), [](const ResultCopy& a, const ResultCopy& b) {
    return (a.from.kind == StorageKind::kArgument) > (b.from.kind == StorageKind::kArgument);
  });
  return out;
}

}  // namespace precast::backend
