// The staging buffers a CPU step needs around its collectives. The runtime's communicator moves
// rank-major pieces (an all-gather concatenates the ranks' buffers, a reduce-scatter hands rank r
// the r-th contiguous piece), so a collective over a dimension that is not the outermost non-unit
// one goes through a buffer holding the pieces one after another: packed from the operand before
// the call, or unpacked into the result after it, by generated kernels. An operand computed
// inside its readers (a fused constant or iota) is packed into a send buffer the same way.
//
// Each staging buffer lives for the collective's own step only: buffer_options adds them to the
// plan as transient buffers (BufferOptions::transients) when BufferPlanSettings asks for them,
// so the arena the plan reports is the arena the generated code uses.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/Module.h"

namespace precast {

enum class StagingRole : uint8_t {
  kSend,     // the operand laid out as the group's pieces, before the communicator call
  kReceive,  // the pieces the communicator delivers, before they are unpacked into the result
};

struct CollectiveStaging {
  ir::OpIndex op = ir::kNoOp;
  StagingRole role = StagingRole::kSend;
  int64_t bytes = 0;
};

// True when an all-gather, reduce-scatter or all-to-all piece along `dimension` of `dims` is not
// one contiguous run of the buffer (some dimension before it is larger than one).
bool needs_packing(const std::vector<int64_t>& dims, int64_t dimension);

// The staging buffers of f's collectives (groups of more than one device), in op order, a send
// buffer before a receive buffer of the same op. Zero-byte collectives need none.
std::vector<CollectiveStaging> collective_staging(const ir::Function& f);

}  // namespace precast
