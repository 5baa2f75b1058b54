#include "compiler/analysis/MemoryReport.h"

#include <fmt/format.h>

namespace precast {

std::map<std::string, CollectiveTotals> count_collectives(const ir::Function& f) {
  std::map<std::string, CollectiveTotals> out;
  for (ir::OpIndex i = 0; i < f.num_ops(); ++i) {
    const ir::Op& op = f.op(i);
    const char* name = nullptr;
    switch (op.kind) {
      case ir::OpKind::kAllGather:
        name = "all-gather";
        break;
      case ir::OpKind::kAllReduce:
        name = "all-reduce";
        break;
      case ir::OpKind::kReduceScatter:
        name = "reduce-scatter";
        break;
      case ir::OpKind::kAllToAll:
        name = "all-to-all";
        break;
      case ir::OpKind::kCollectivePermute:
        name = "collective-permute";
        break;
      case ir::OpKind::kRaggedAllToAll:
        name = "ragged-all-to-all";
        break;
      default:
        continue;
    }
    const ir::AttrSet& attrs = f.attrs(op);
    int64_t group = attrs.integer(ir::AttrKey::kGroupSize);
    // A ragged all-to-all moves this device's rows: each row to one position (dispatch) and
    // each back (combine), so its bytes are the rows' (the dispatch's operand, the combine's
    // result), not its worst-case buffer; the wire counts the share other positions hold under
    // balanced routing, (G - 1) / G, as for all_to_all (the routing decides the real share).
    bool ragged_combine = op.kind == ir::OpKind::kRaggedAllToAll &&
                          f.attrs(op).flag(ir::AttrKey::kCombine);
    int64_t bytes = op.kind == ir::OpKind::kAllGather || ragged_combine
                        ? f.type(f.result(op)).byte_size()
                        : f.type(f.operands(op)[0]).byte_size();
    int64_t wire = 0;
    if (group > 1) {
      int64_t one_way = bytes / group * (group - 1);
      wire = op.kind == ir::OpKind::kAllReduce           ? 2 * one_way
             : op.kind == ir::OpKind::kCollectivePermute ? bytes
                                                         : one_way;
    }
    CollectiveTotals& t =
        out[fmt::format("{} {}", name, attrs.flag(ir::AttrKey::kDcn) ? "DCN" : "ICI")];
    t.count += 1;
    t.bytes += bytes;
    t.wire_bytes += wire;
  }
  return out;
}

std::string format_collectives(const MemoryReport& report) {
  std::string out = "Collectives per device per step:";
  if (report.collectives.empty()) return out + " none (nothing is sharded)\n";
  out += "\n";
  for (const auto& [kind, totals] : report.collectives) {
    out += fmt::format("  {:<26} {:>6} ops  {:>10.3f} GB on the wire\n", kind, totals.count,
                       static_cast<double>(totals.wire_bytes) / 1e9);
  }
  return out;
}

}  // namespace precast
