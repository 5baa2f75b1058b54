// Algebraic simplification: x*1, 1*x, x/1, x+0, 0+x, x-0 -> x; convert, reshape, transpose and
// broadcast_in_dim that change nothing -> their operand; reshape(reshape(x)) -> reshape(x);
// transpose(transpose(x)) -> one transpose (or x); broadcast_in_dim of a splat constant -> a
// splat constant of the result type.
#pragma once

#include "ir/Module.h"

namespace precast::ir {

// Precondition: a verified module. An op is replaced by a value only when that value has the
// same type and the op carries no checkpoint name and no axis names the value lacks, so no
// annotation is lost. Replaced ops are erased; ops left unused by a rewrite (the inner reshape
// of a pair) stay for `dce`. x+0 -> x does not preserve the sign of -0.0 + 0.0 (as XLA).
Expected<bool> simplify(Module& module);

}  // namespace precast::ir
