// Whole MPI jobs judged from outside: mpi_collectives_worker started with mpirun (4 ranks over
// shared memory twice and over TCP once: identical results, the same all-reduce bits on every
// rank), and a job where one rank skips a collective: it must end with a non-zero exit within
// the timeout, the message naming the rank, the step, the op and its mesh axes; and a job where
// one rank is killed (SIGKILL): mpirun ends it, non-zero, before the timeout.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Job {
  int exit_code = -1;
  std::string output;  // stdout and stderr
  double seconds = 0;
};

Job run(const std::string& mpirun_args, const std::string& worker_args) {
  std::string command = std::string(PRECAST_MPIEXEC) + " --oversubscribe " + mpirun_args + " " +
                        PRECAST_MPI_WORKER + " " + worker_args + " 2>&1";
  Job job;
  auto start = std::chrono::steady_clock::now();
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return job;
  char chunk[4096];
  size_t got;
  while ((got = fread(chunk, 1, sizeof chunk, pipe)) > 0) job.output.append(chunk, got);
  int status = pclose(pipe);
  job.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  job.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return job;
}

// The "rank R ..." lines of a digest job, sorted (ranks print in any order).
std::vector<std::string> rank_lines(const std::string& output, const std::string& what) {
  std::vector<std::string> lines;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("rank ", 0) == 0 && line.find(what) != std::string::npos) lines.push_back(line);
  }
  std::sort(lines.begin(), lines.end());
  return lines;
}

TEST(MpiJob, SharedMemoryTcpAndASecondRunGiveTheSameBits) {
  Job shared = run("-np 4 --mca pml ob1 --mca btl self,vader", "digest");
  ASSERT_EQ(shared.exit_code, 0) << shared.output;
  Job again = run("-np 4 --mca pml ob1 --mca btl self,vader", "digest");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  Job tcp = run("-np 4 --mca pml ob1 --mca btl tcp,self", "digest");
  ASSERT_EQ(tcp.exit_code, 0) << tcp.output;
  std::printf("4-rank digest jobs: shared memory %.2f s, again %.2f s, tcp %.2f s\n",
              shared.seconds, again.seconds, tcp.seconds);

  std::vector<std::string> digests = rank_lines(shared.output, " digest ");
  ASSERT_EQ(digests.size(), 4u) << shared.output;
  EXPECT_EQ(rank_lines(again.output, " digest "), digests) << again.output;
  EXPECT_EQ(rank_lines(tcp.output, " digest "), digests) << tcp.output;
  // The world's all-reduce: one value on every rank.
  std::set<std::string> sums;
  for (const std::string& line : rank_lines(shared.output, " all-reduce ")) {
    sums.insert(line.substr(line.rfind(' ') + 1));
  }
  EXPECT_EQ(sums.size(), 1u) << shared.output;
  EXPECT_EQ(rank_lines(tcp.output, " all-reduce "), rank_lines(shared.output, " all-reduce "));
}

TEST(MpiJob, ARankThatSkipsACollectiveEndsTheJobWithinTheTimeout) {
  const double timeout = 2;
  Job job = run("-np 2", "skip 2");
  std::printf("the skipped collective's job ended after %.2f s (timeout %.0f s)\n", job.seconds,
              timeout);
  EXPECT_NE(job.exit_code, 0) << job.output;
  EXPECT_EQ(job.exit_code, 1) << job.output;  // MPI_Abort's code: run-time failure
  EXPECT_GE(job.seconds, timeout) << job.output;
  EXPECT_LT(job.seconds, timeout + 10) << job.output;  // not the skipping rank's 120 s sleep
  EXPECT_NE(job.output.find("mpi_collectives_worker: error: rank 0 of 2: all-reduce over {data} "
                            "at step 7 did not complete within 2 seconds "
                            "(collective_timeout_seconds); its group is world ranks 0, 1"),
            std::string::npos)
      << job.output;
  EXPECT_EQ(job.output.find("completed although"), std::string::npos) << job.output;
}

TEST(MpiJob, ARankKilledMidJobEndsTheJob) {
  const double timeout = 20;
  Job job = run("-np 2", "die 20");
  std::printf("the job with a killed rank ended after %.2f s (timeout %.0f s)\n", job.seconds,
              timeout);
  EXPECT_NE(job.exit_code, 0) << job.output;
  EXPECT_LT(job.seconds, timeout) << job.output;
  EXPECT_EQ(job.output.find("completed although"), std::string::npos) << job.output;
  // mpirun names the lost rank and its signal.
  EXPECT_NE(job.output.find("process rank 1 with PID"), std::string::npos) << job.output;
  EXPECT_NE(job.output.find("exited on signal 9 (Killed)"), std::string::npos) << job.output;
}

}  // namespace
