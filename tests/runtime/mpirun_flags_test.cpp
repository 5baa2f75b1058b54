// precast train's mpirun flags as a pure function of the host (euid, the environment pair that
// allows root, cores), the ranks and the user's --mpirun-args; and where they go in the command.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tools/precast/MpiTrainLaunch.h"

namespace precast {
namespace {

using Flags = std::vector<std::string>;

MpirunHost host(bool root, bool allowed, int64_t cores) {
  MpirunHost h;
  h.root = root;
  h.root_allowed_by_env = allowed;
  h.cores = cores;
  return h;
}

TEST(MpirunFlags, RootWithoutTheEnvironmentPairGetsAllowRunAsRoot) {
  EXPECT_EQ(mpirun_host_flags(host(true, false, 2), 2, {}), Flags{"--allow-run-as-root"});
  EXPECT_EQ(mpirun_host_flags(host(true, true, 2), 2, {}), Flags{});
  EXPECT_EQ(mpirun_host_flags(host(false, false, 2), 2, {}), Flags{});
  EXPECT_EQ(mpirun_host_flags(host(false, true, 2), 2, {}), Flags{});
}

TEST(MpirunFlags, MoreRanksThanCoresGetOversubscribe) {
  EXPECT_EQ(mpirun_host_flags(host(false, false, 2), 1, {}), Flags{});
  EXPECT_EQ(mpirun_host_flags(host(false, false, 2), 2, {}), Flags{});
  EXPECT_EQ(mpirun_host_flags(host(false, false, 2), 3, {}), Flags{"--oversubscribe"});
  EXPECT_EQ(mpirun_host_flags(host(false, false, 16), 16, {}), Flags{});
  EXPECT_EQ(mpirun_host_flags(host(false, false, 1), 4, {}), Flags{"--oversubscribe"});
  EXPECT_EQ(mpirun_host_flags(host(true, false, 2), 4, {}),
            (Flags{"--allow-run-as-root", "--oversubscribe"}));
}

TEST(MpirunFlags, FlagsTheUserGaveAreNotRepeated) {
  EXPECT_EQ(mpirun_host_flags(host(true, false, 2), 4, {"--oversubscribe", "--mca", "pml", "ob1"}),
            Flags{"--allow-run-as-root"});
  EXPECT_EQ(mpirun_host_flags(host(true, false, 2), 4, {"--allow-run-as-root"}),
            Flags{"--oversubscribe"});
}

TEST(MpirunFlags, TheCommandHasTheHostFlagsBeforeTheUsersArguments) {
  MpiTrainLaunch launch;
  launch.host = host(true, false, 2);
  launch.mpirun = "mpirun";
  launch.mpirun_args = "--mca btl 'tcp,self'";
  launch.ranks = 4;
  launch.precast_run = "/bin/precast-run";
  launch.config_file = "configs/base.yml";
  launch.overrides = {"steps=5", "run_name=a b"};
  launch.artifact = "/cache/step.pcx";
  EXPECT_EQ(
      mpirun_command(launch),
      (Flags{"mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "btl", "tcp,self", "-np",
             "4", "/bin/precast-run", "configs/base.yml", "compiled_trainstep_file=/cache/step.pcx",
             "steps=5", "run_name=a b", "--gemm=auto"}));
}

}  // namespace
}  // namespace precast
