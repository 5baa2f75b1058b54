// The IR text parser: the inverse of Printer. Checks syntax, names (definition before use, no
// redefinition) and each op's table row (operand/result counts, attribute names and kinds);
// shape rules are the verifier's job. Errors read "file:line:col: expected X, found Y" and carry
// ExitCode::kUsage.
#pragma once

#include <string>
#include <string_view>

#include "ir/Module.h"

namespace precast::ir {

struct ParseOptions {
  std::string source_name = "<input>";
  int first_line = 1;  // line number of the text's first line (for split input files)
};

Expected<Module> parse_module(std::string_view text, const ParseOptions& options = {});

// Reads and parses a file; "-" reads standard input.
Expected<Module> parse_module_file(const std::string& path);

}  // namespace precast::ir
