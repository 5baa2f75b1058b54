// Role: `precast tokenize IN... -o OUT.tokens [--separator=STRING]` (runtime/data/Tokenize.h).
#pragma once

#include <string>
#include <vector>

namespace precast {

// Runs the command on its arguments (after "tokenize"); returns the exit code.
int run_tokenize_command(const std::vector<std::string>& args);

}  // namespace precast
