// `precast inspect FILE.ir`: a summary of an IR file (any `precast dump` stage or hand-written
// module): per function, ops by kind, the weights it takes, and its FLOPs by MaxText's
// conventions, in total and by scope.
#pragma once

#include <string>

#include "compiler/analysis/IrCounts.h"
#include "ir/support/Error.h"

namespace precast {

struct InspectRequest {
  std::string path;             // "-" reads standard input
  std::string format = "text";  // text | json
  CountOptions counts;
  bool verify = true;
};

// The report, or the parse/verifier error (kUsage) naming file:line:col or the op and rule.
Expected<std::string> inspect_ir(const InspectRequest& request);

}  // namespace precast
