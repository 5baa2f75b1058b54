// Role: `precast train` on a topology of several devices: after compiling (or finding) the step,
// it launches `mpirun -np <devices> precast-run CONFIG.yml compiled_trainstep_file=<artifact>
// key=value ...`, one rank per device, and returns mpirun's exit status. The ranks resolve the
// same config and check it against the artifact, so a config file's run-time keys reach them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/support/Error.h"

namespace precast {

// What decides mpirun's own flags on this host.
struct MpirunHost {
  bool root = false;  // geteuid() == 0
  // OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 (Open MPI then allows root)
  bool root_allowed_by_env = false;
  int64_t cores = 1;  // std::thread::hardware_concurrency(), at least 1
};

// This process's euid, environment and core count.
MpirunHost this_mpirun_host();

// The flags mpirun needs on `host` for `ranks` ranks (devices per slice x slices), those the
// user's --mpirun-args already hold left out: --allow-run-as-root when running as root without
// the environment pair that allows it, --oversubscribe when there are more ranks than cores
// (Open MPI's slots on one host). A pure function, so each decision is tested alone.
std::vector<std::string> mpirun_host_flags(const MpirunHost& host, int64_t ranks,
                                           const std::vector<std::string>& user_args);

struct MpiTrainLaunch {
  MpirunHost host = this_mpirun_host();
  std::string mpirun = "mpirun";       // $PRECAST_MPIRUN, else found on PATH
  std::string mpirun_args;             // --mpirun-args="...", split on spaces, before -np
  int64_t ranks = 1;                   // the artifact's devices (devices per slice x slices)
  std::string precast_run;             // the precast-run binary
  std::string config_file;             // the config precast train resolved
  std::vector<std::string> overrides;  // its key=value arguments, in order
  std::string artifact;                // the compiled step
  std::string gemm = "auto";
};

// The precast-run binary: $PRECAST_RUN, else `precast-run` beside this executable, else the one
// this build made (`fallback`).
std::string find_precast_run(const std::string& fallback);

// The command line, one argument per entry (no shell: values with spaces stay whole):
// mpirun, mpirun_host_flags, --mpirun-args, -np N, precast-run and its arguments.
std::vector<std::string> mpirun_command(const MpiTrainLaunch& launch);

// Runs the command line, printing it first on `log`; returns mpirun's exit status (128 + signal
// when it was killed). Errors (exit 2): --mpirun-args with an unbalanced quote; mpirun not
// found (exit 2, naming PRECAST_MPIRUN and Debian's openmpi-bin).
Expected<int> run_mpirun(const MpiTrainLaunch& launch, std::ostream& log);

}  // namespace precast
