#include "compiler/passes/CollectiveStaging.h"

#include "compiler/analysis/BufferAssignment.h"

namespace precast {

bool needs_packing(const std::vector<int64_t>& dims, int64_t dimension) {
  for (int64_t d = 0; d < dimension && d < static_cast<int64_t>(dims.size()); ++d) {
    if (dims[static_cast<size_t>(d)] > 1) return true;
  }
  return false;
}

std::vector<CollectiveStaging> collective_staging(const ir::Function& f) {
  std::vector<CollectiveStaging> out;
  std::vector<bool> materialized;
  for (ir::OpIndex i = 0; i < f.num_ops(); ++i) {
    const ir::Op& op = f.op(i);
    if (!ir::is_collective(op.kind)) continue;
    const ir::AttrSet& attrs = f.attrs(op);
    if (attrs.integer(ir::AttrKey::kGroupSize) <= 1) continue;  // a copy, no communicator
    ir::Value x = f.operands(op)[0], v = f.result(op);
    const ir::TensorType& in = f.type(x);
    const ir::TensorType& result = f.type(v);
    if (in.byte_size() == 0) continue;
    if (materialized.empty()) materialized = materialized_values(f);
    int64_t dimension = attrs.integer(ir::AttrKey::kDimension);
    bool pack = !materialized[x.id];
    bool unpack = false;
    switch (op.kind) {
      case ir::OpKind::kReduceScatter:
        pack = pack || needs_packing(in.dims, dimension);
        break;
      case ir::OpKind::kAllGather:
        unpack = needs_packing(in.dims, dimension);
        break;
      case ir::OpKind::kAllToAll:
        pack = pack || needs_packing(in.dims, attrs.integer(ir::AttrKey::kSplitDimension));
        unpack = needs_packing(result.dims, dimension);
        break;
      default:
        break;
    }
    if (pack) out.push_back({i, StagingRole::kSend, in.byte_size()});
    if (unpack) out.push_back({i, StagingRole::kReceive, result.byte_size()});
  }
  return out;
}

}  // namespace precast
