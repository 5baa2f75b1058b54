// Runs a shell command for the tests that drive the binaries (precast, precast-run, mpirun):
// its exit status and everything it printed (standard output and error, interleaved).
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace precast::testing {

struct CommandResult {
  int code = -1;  // the exit status; -1 when it did not exit normally (a signal) or did not start
  std::string output;
};

inline CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) r.output.append(buffer.data(), n);
  int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace precast::testing
