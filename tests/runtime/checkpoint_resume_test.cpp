// precast-run with enable_checkpointing on the tiny llama2 of precast_run_test: a run killed with
// SIGKILL ten times (after a checkpoint, at random moments, inside asynchronous checkpoint writes)
// and restarted each time finishes with every
// step's metrics and the final state bitwise equal to an uninterrupted run; the resume says so in
// one line; a damaged latest checkpoint is skipped with a warning naming the file; another
// artifact's checkpoint is refused with exit 4 naming what differs.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "compiler/driver/Compile.h"
#include "tests/support/Command.h"
#include "tests/support/MetricsLines.h"

namespace precast {
namespace {

namespace fs = std::filesystem;

const fs::path kSource = PRECAST_SOURCE_DIR;

using Result = testing::CommandResult;
Result run(const std::string& command) { return testing::run_command(command); }

using testing::file_bytes;
using testing::metrics_by_step;

// precast-run started with its stdout on a pipe, so the test can kill it at a chosen moment.
class Child {
 public:
  // `environment`: NAME=VALUE pairs set in the child only.
  explicit Child(const std::vector<std::string>& args,
                 const std::vector<std::pair<std::string, std::string>>& environment = {}) {
    int fds[2];
    if (pipe(fds) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      for (const auto& [name, value] : environment) setenv(name.c_str(), value.c_str(), 1);
      dup2(fds[1], 1);
      dup2(fds[1], 2);
      close(fds[0]);
      close(fds[1]);
      std::vector<char*> argv;
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(fds[1]);
    fd_ = fds[0];
  }
  ~Child() {
    if (fd_ >= 0) close(fd_);
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  // Reads output until a line containing `text` has been read; false at end of output.
  bool read_until(const std::string& text) {
    for (;;) {
      size_t nl;
      while ((nl = output_.find('\n', scanned_)) != std::string::npos) {
        bool hit = output_.substr(scanned_, nl - scanned_).find(text) != std::string::npos;
        scanned_ = nl + 1;
        if (hit) return true;
      }
      char buffer[4096];
      ssize_t n = read(fd_, buffer, sizeof(buffer));
      if (n <= 0) return false;
      output_.append(buffer, static_cast<size_t>(n));
    }
  }
  // SIGKILL; true when the process died of it (rather than having finished already).
  bool kill_now() {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    reaped_ = true;
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  }
  const std::string& output() const { return output_; }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  bool reaped_ = false;
  std::string output_;
  size_t scanned_ = 0;
};

class CheckpointResume : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        ("precast_checkpoint_resume_test_" + std::to_string(getpid())));
    fs::create_directories(*dir_);
    ASSERT_TRUE(compile_tiny("tiny.pcx", {}).ok());
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  // A 2-layer llama2 (E 64, H 4, D 16, M 128, V 256, T 32, batch 4) in f32, as precast_run_test.
  static Status compile_tiny(const std::string& name, const std::vector<std::string>& extra) {
    CompileRequest request;
    request.config.config_file = kSource / "configs" / "base.yml";
    request.config.overrides = {"base_emb_dim=64",     "base_num_decoder_layers=2",
                                "base_num_query_heads=4", "base_num_kv_heads=4",
                                "head_dim=16",         "base_mlp_dim=128",
                                "vocab_size=256",      "per_device_batch_size=4",
                                "max_target_length=32", "dtype=float32",
                                "compile_topology=cpu-1"};
    request.config.overrides.insert(request.config.overrides.end(), extra.begin(), extra.end());
    request.output = (*dir_ / name).string();
    Expected<CompileResult> r = compile_step(request, kSource / "configs" / "topologies.yml");
    if (!r.ok()) return r.error();
    return Status::success();
  }
  static std::vector<std::string> args(const std::string& run_name, int steps,
                                       const std::string& metrics, const std::string& pcx = "tiny.pcx") {
    return {PRECAST_RUN_BINARY,
            (*dir_ / pcx).string(),
            "steps=" + std::to_string(steps),
            "num_threads=1",
            "learning_rate=1e-2",
            "enable_checkpointing=true",
            "checkpoint_period=2",
            "max_num_checkpoints_to_keep=3",
            "base_output_directory=" + (*dir_ / "out").string(),
            "run_name=" + run_name,
            "metrics_file=" + (*dir_ / metrics).string()};
  }
  static std::string command(const std::vector<std::string>& a) {
    std::string c;
    for (const std::string& s : a) c += (c.empty() ? "" : " ") + s;
    return c;
  }
  static fs::path checkpoints(const std::string& run_name) {
    return *dir_ / "out" / run_name / "checkpoints";
  }

  static fs::path* dir_;
};

fs::path* CheckpointResume::dir_ = nullptr;

TEST_F(CheckpointResume, KilledAndRestartedRunEqualsAnUninterruptedOneBitwise) {
  constexpr int kSteps = 60;
  Result whole = run(command(args("whole", kSteps, "whole.jsonl")));
  ASSERT_EQ(whole.code, 0) << whole.output;
  std::map<int, std::string> reference = metrics_by_step(*dir_ / "whole.jsonl");
  ASSERT_EQ(reference.size(), static_cast<size_t>(kSteps));

  // Ten kills, asynchronous saves on (the default): right after a checkpoint was committed, then
  // alternately at a random moment of a resumed run and inside a checkpoint write (a test-only
  // pause between the state file and the commit marker holds the save open for 300 ms; the kill
  // lands in it and leaves an uncommitted `<step>.tmp/`), then left to finish. Every complete
  // metrics line any of them wrote equals the uninterrupted run's.
  std::mt19937 random(17);
  int restored_from = -1;
  int kills_inside_writes = 0;
  for (int attempt = 0; attempt < 10; ++attempt) {
    std::string metrics = "killed" + std::to_string(attempt) + ".jsonl";
    const bool inside_write = attempt % 2 == 1;
    std::vector<std::pair<std::string, std::string>> environment;
    if (inside_write) environment.push_back({"PRECAST_TEST_CHECKPOINT_WRITE_DELAY_MS", "300"});
    const fs::file_time_type started = fs::file_time_type::clock::now();
    Child child(args("killed", kSteps, metrics), environment);
    if (attempt == 0) {
      ASSERT_TRUE(child.read_until("saved checkpoint at step 10 in")) << child.output();
    } else {
      ASSERT_TRUE(child.read_until("Restored the checkpoint of step")) << child.output();
      if (inside_write) {
        ASSERT_TRUE(child.read_until("Started saving the checkpoint of step")) << child.output();
        std::this_thread::sleep_for(std::chrono::milliseconds(30 + random() % 200));
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(random() % 40000));
      }
    }
    ASSERT_TRUE(child.kill_now()) << "finished before the kill: " << child.output();
    if (inside_write) {
      bool uncommitted = false;
      for (const auto& e : fs::directory_iterator(checkpoints("killed"))) {
        // This run's: a `.tmp/` written since it started (a resumed run may redo a step).
        uncommitted |= e.path().extension() == ".tmp" && fs::last_write_time(e.path()) >= started;
      }
      EXPECT_TRUE(uncommitted) << "attempt " << attempt << ": no write was cut short";
      kills_inside_writes += uncommitted ? 1 : 0;
    }
    for (const auto& [step, line] : metrics_by_step(*dir_ / metrics)) {
      EXPECT_EQ(line, reference[step]) << "attempt " << attempt << ", step " << step;
    }
  }
  EXPECT_EQ(kills_inside_writes, 5);
  Result last = run(command(args("killed", kSteps, "last.jsonl")));
  ASSERT_EQ(last.code, 0) << last.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(last.output, m,
                                std::regex(R"(Restored the checkpoint of step (\d+) from (\S+); resuming at step (\d+)\n)")))
      << last.output;
  restored_from = std::stoi(m[1]);
  EXPECT_EQ(std::stoi(m[3]), restored_from + 1);
  EXPECT_EQ(m[2].str(), (checkpoints("killed") / std::to_string(restored_from)).string());
  std::map<int, std::string> resumed = metrics_by_step(*dir_ / "last.jsonl");
  ASSERT_FALSE(resumed.empty());
  EXPECT_EQ(resumed.begin()->first, restored_from + 1);
  EXPECT_EQ(resumed.rbegin()->first, kSteps - 1);
  for (const auto& [step, line] : resumed) EXPECT_EQ(line, reference[step]) << step;

  // The final state (parameters, moments, count), saved on completion, is the same bytes.
  const std::string last_step = std::to_string(kSteps - 1);
  std::string a = file_bytes(checkpoints("whole") / last_step / "state.safetensors");
  std::string b = file_bytes(checkpoints("killed") / last_step / "state.safetensors");
  ASSERT_GT(a.size(), 1000000u);
  EXPECT_TRUE(a == b) << "the final states differ";
  EXPECT_EQ(file_bytes(checkpoints("whole") / last_step / "metadata.json"),
            file_bytes(checkpoints("killed") / last_step / "metadata.json"));
  // max_num_checkpoints_to_keep=3: the three newest are kept, nothing half-written remains.
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(checkpoints("whole"))) {
    left.push_back(e.path().filename().string());
  }
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"56", "58", "59"}));

  // A finished run restarted resumes at its end and runs no step.
  Result again = run(command(args("whole", kSteps, "again.jsonl")));
  ASSERT_EQ(again.code, 0) << again.output;
  EXPECT_NE(again.output.find("Restored the checkpoint of step 59 from"), std::string::npos);
  EXPECT_EQ(again.output.find("completed step:"), std::string::npos) << again.output;
}

TEST_F(CheckpointResume, ADamagedLatestCheckpointIsSkippedWithAWarningNamingTheFile) {
  ASSERT_EQ(run(command(args("damaged", 5, "d1.jsonl"))).code, 0);  // saves 0, 2, 4
  fs::path state = checkpoints("damaged") / "4" / "state.safetensors";
  std::string bytes = file_bytes(state);
  bytes[bytes.size() / 2] ^= 0x04;
  std::ofstream(state, std::ios::binary | std::ios::trunc) << bytes;
  Result r = run(command(args("damaged", 5, "d2.jsonl")));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("Warning: skipping checkpoint " +
                          (checkpoints("damaged") / "4").string() + ": " + state.string() +
                          ": SHA-256"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("Restored the checkpoint of step 2 from"), std::string::npos)
      << r.output;
  std::map<int, std::string> first = metrics_by_step(*dir_ / "d1.jsonl");
  std::map<int, std::string> second = metrics_by_step(*dir_ / "d2.jsonl");
  ASSERT_EQ(second.size(), 2u);
  EXPECT_EQ(second[3], first[3]);
  EXPECT_EQ(second[4], first[4]);
  // The re-saved step 4 replaced the damaged one.
  EXPECT_EQ(file_bytes(state).size(), bytes.size());
  EXPECT_NE(file_bytes(state), bytes);
}

TEST_F(CheckpointResume, AnotherArtifactsCheckpointIsRefusedWithExit4NamingWhatDiffers) {
  ASSERT_EQ(run(command(args("other", 1, "o1.jsonl"))).code, 0);
  ASSERT_TRUE(compile_tiny("wider.pcx", {"base_mlp_dim=96"}).ok());
  Result r = run(command(args("other", 2, "o2.jsonl", "wider.pcx")));
  EXPECT_EQ(r.code, 4) << r.output;
  EXPECT_NE(r.output.find("precast-run: error: checkpoint " +
                          (checkpoints("other") / "0").string() +
                          " does not belong to this run: config_hash "),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("tensor decoder.layers_0.mlp.wi_0.kernel is f32 [64, 128] (this "
                          "artifact: f32 [64, 96])"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("completed step:"), std::string::npos);
}

TEST_F(CheckpointResume, AnExplicitCheckpointDirIsWhereCheckpointsGo) {
  std::vector<std::string> a = args("custom", 1, "c1.jsonl");
  a.push_back("checkpoint_dir=" + (*dir_ / "elsewhere").string());
  Result r = run(command(a));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::exists(*dir_ / "elsewhere" / "0" / "commit_success.txt"));
  EXPECT_FALSE(fs::exists(checkpoints("custom")));
}

}  // namespace
}  // namespace precast
