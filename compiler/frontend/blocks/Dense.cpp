#include "compiler/frontend/blocks/Blocks.h"

namespace precast::frontend {

using ir::Builder;
using ir::DotDims;
using ir::Value;

Value dense(Context& c, Value x, const WeightInfo& kernel_info, int64_t contract,
            const WeightInfo& bias_info) {
  Builder& b = c.b();
  std::string base =
      kernel_info.name.substr(0, kernel_info.name.size() - std::string(".kernel").size());
  Builder::ScopeGuard scope(b, "");
  b.set_scope(Context::scope_of(base));
  Value kernel = c.weight(kernel_info);
  if (!x.valid() || !kernel.valid()) return Value{};
  int64_t rank = b.type(x).rank();
  DotDims dims;
  for (int64_t i = 0; i < contract; ++i) {
    dims.lhs_contract.push_back(rank - contract + i);
    dims.rhs_contract.push_back(i);
  }
  Value y = b.dot_general(x, kernel, dims);
  if (!bias_info.name.empty()) {
    Value bias = c.weight(bias_info);
    std::vector<int64_t> result = b.type(y).dims;
    y = b.add(y, b.broadcast_to(bias, result));
  }
  return y;
}

}  // namespace precast::frontend
