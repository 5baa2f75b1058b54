#include "runtime/collectives/CollectiveCounters.h"

#include <fmt/format.h>

namespace precast::runtime {

std::string_view collective_op_name(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllReduce:
      return "all-reduce";
    case CollectiveOp::kAllGather:
      return "all-gather";
    case CollectiveOp::kReduceScatter:
      return "reduce-scatter";
    case CollectiveOp::kAllToAll:
      return "all-to-all";
    case CollectiveOp::kCollectivePermute:
      return "collective-permute";
    case CollectiveOp::kBarrier:
      return "barrier";
    case CollectiveOp::kBroadcast:
      return "broadcast";
  }
  return "unknown collective";
}

void CollectiveCounters::record(CollectiveOp op, bool spans_slices, int64_t bytes,
                                int64_t sent_bytes, double seconds) {
  CollectiveCounter& c =
      counters_[fmt::format("{} {}", collective_op_name(op), spans_slices ? "DCN" : "ICI")];
  c.calls += 1;
  c.bytes += bytes;
  c.sent_bytes += sent_bytes;
  c.seconds += seconds;
}

CollectiveCounter CollectiveCounters::total() const {
  CollectiveCounter sum;
  for (const auto& [kind, c] : counters_) {
    sum.calls += c.calls;
    sum.bytes += c.bytes;
    sum.sent_bytes += c.sent_bytes;
    sum.seconds += c.seconds;
  }
  return sum;
}

std::string CollectiveCounters::format() const {
  std::string out = "Collectives run by this rank:";
  if (counters_.empty()) return out + " none\n";
  out += fmt::format("\n  {:<26} {:>8} {:>16} {:>16} {:>10}\n", "kind", "calls", "bytes",
                     "bytes sent", "seconds");
  auto line = [](const std::string& kind, const CollectiveCounter& c) {
    return fmt::format("  {:<26} {:>8} {:>16} {:>16} {:>10.4f}\n", kind, c.calls, c.bytes,
                       c.sent_bytes, c.seconds);
  };
  for (const auto& [kind, c] : counters_) out += line(kind, c);
  return out + line("total", total());
}

}  // namespace precast::runtime
