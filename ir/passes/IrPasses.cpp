#include "ir/passes/IrPasses.h"

#include "ir/passes/CommonSubexpressionElimination.h"
#include "ir/passes/DeadCodeElimination.h"
#include "ir/passes/DecomposeComposites.h"
#include "ir/passes/Simplify.h"

namespace precast::ir {

Status register_ir_passes(PassRegistry& registry) {
  PRECAST_RETURN_IF_ERROR(registry.add(
      {"dce", "erase ops whose results are never used", eliminate_dead_code}));
  PRECAST_RETURN_IF_ERROR(registry.add(
      {"cse", "merge ops equal to an earlier op", eliminate_common_subexpressions}));
  PRECAST_RETURN_IF_ERROR(registry.add(
      {"simplify", "algebraic identities (x*1, x+0, reshape/transpose chains, ...)", simplify}));
  PRECAST_RETURN_IF_ERROR(registry.add({"decompose-composites",
                                        "replace composite ops (attention) by primitives",
                                        decompose_composites}));
  return Status::success();
}

}  // namespace precast::ir
