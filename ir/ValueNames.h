// How values are spelled in the text: a value with a name prints as %name, the others as %N
// with N counting unnamed values in definition order (parameters first). Printer and verifier
// share this so error messages use the names a reader sees in the dump.
#pragma once

#include <string>
#include <vector>

#include "ir/Module.h"

namespace precast::ir {

class ValueNames {
 public:
  explicit ValueNames(const Function& function);
  // "%7" or "%tokens".
  std::string operator()(Value v) const;
  // Appends the spelling to out (no allocation for numbered values beyond the buffer).
  void append(std::string& out, Value v) const;

 private:
  const Function& function_;
  std::vector<uint32_t> numbers_;  // kNamed for values with a name
  static constexpr uint32_t kNamed = UINT32_MAX;
};

}  // namespace precast::ir
