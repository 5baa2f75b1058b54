// precast-run on MPI ranks, end to end: a tiny llama2 (f32, AdamW, clipping on) compiled for
// cpu-1 and for cpu-2 on several meshes, the same seed and global batch; `mpirun -np 2
// precast-run` trains 5 steps and its losses (read from rank 0's metrics file) equal the
// single-device run's to 1e-5 relative; a second run on the same mesh repeats them bit for bit;
// rank 0 alone writes the metrics file, rank 1 logs to logs/rank-1.log.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/driver/Compile.h"
#include "tests/support/Command.h"

namespace precast {
namespace {

namespace fs = std::filesystem;

const fs::path kSource = PRECAST_SOURCE_DIR;
const std::string kEnv = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ";

using Result = testing::CommandResult;
Result run(const std::string& command) { return testing::run_command(command); }

// A 2-layer llama2 (E 64, H 4, D 16, M 128, V 256, T 16) in f32; global batch 4 rows on every
// topology (per_device_batch_size × devices).
std::vector<std::string> tiny_llama(const std::string& topology, int64_t per_device_batch) {
  return {"base_emb_dim=64",
          "base_num_decoder_layers=2",
          "base_num_query_heads=4",
          "base_num_kv_heads=4",
          "head_dim=16",
          "base_mlp_dim=128",
          "vocab_size=256",
          "per_device_batch_size=" + std::to_string(per_device_batch),
          "max_target_length=16",
          "dtype=float32",
          "compile_topology=" + topology};
}

// "learning/<key>": the value of each JSON line of a metrics file, as printed (shortest
// round-trip), parsed back to the same double.
std::vector<double> metric_values(const fs::path& file, const std::string& key) {
  std::ifstream in(file);
  std::vector<double> values;
  std::string line, field = "\"learning/" + key + "\": ";
  while (std::getline(in, line)) {
    size_t at = line.find(field);
    if (at == std::string::npos) continue;
    values.push_back(std::strtod(line.c_str() + at + field.size(), nullptr));
  }
  return values;
}

class MpiTrain : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("mpi_train_test_" + std::to_string(getpid())));
    fs::create_directories(*dir_);
    compile("cpu1.pcx", tiny_llama("cpu-1", 4));
    Result r = run(std::string(PRECAST_RUN_BINARY) + " " + (*dir_ / "cpu1.pcx").string() +
                   " steps=5 num_threads=1 metrics_file=" + (*dir_ / "cpu1.jsonl").string());
    ASSERT_EQ(r.code, 0) << r.output;
    single_ = new std::vector<double>(metric_values(*dir_ / "cpu1.jsonl", "loss"));
    single_weights_ = new std::vector<double>(metric_values(*dir_ / "cpu1.jsonl", "total_weights"));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete single_;
    delete single_weights_;
  }

  static void compile(const std::string& name, const std::vector<std::string>& overrides) {
    CompileRequest request;
    request.config.config_file = kSource / "configs" / "base.yml";
    request.config.overrides = overrides;
    request.output = (*dir_ / name).string();
    Expected<CompileResult> result = compile_step(request, kSource / "configs" / "topologies.yml");
    ASSERT_TRUE(result.ok()) << result.error().message();
  }

  // `mpirun -np ranks precast-run name` for 5 steps; rank 0's losses. `run_name` names the
  // metrics file and the other ranks' log folder.
  static std::vector<double> train(const std::string& name, int ranks,
                                   const std::string& run_name) {
    fs::path metrics = *dir_ / (run_name + ".jsonl");
    Result r = run(kEnv + PRECAST_MPIEXEC + " --oversubscribe -np " + std::to_string(ranks) + " " +
                   PRECAST_RUN_BINARY + " " + (*dir_ / name).string() +
                   " steps=5 num_threads=1 metrics_file=" + metrics.string() +
                   " base_output_directory=" + dir_->string() + " run_name=" + run_name);
    EXPECT_EQ(r.code, 0) << r.output;
    // Rank 0 prints the log lines; each other rank writes them to its own file.
    EXPECT_NE(r.output.find("completed step: 4"), std::string::npos) << r.output;
    for (int rank = 1; rank < ranks; ++rank) {
      std::ifstream log(*dir_ / run_name / "logs" / ("rank-" + std::to_string(rank) + ".log"));
      std::stringstream text;
      text << log.rdbuf();
      EXPECT_NE(text.str().find("completed step: 4"), std::string::npos)
          << "rank " << rank << " of " << run_name << ": " << text.str();
      // Each rank's Memstats line names its own device (MaxText's per-device line).
      EXPECT_NE(text.str().find(") on cpu:" + std::to_string(rank) + "\n"), std::string::npos)
          << "rank " << rank << " of " << run_name << ": " << text.str();
    }
    EXPECT_NE(r.output.find(") on cpu:0\n"), std::string::npos) << r.output;
    EXPECT_EQ(metric_values(metrics, "total_weights"), *single_weights_) << run_name;
    return metric_values(metrics, "loss");
  }

  // The losses of `name` on `ranks` ranks against the single-device run: to 1e-5 relative, and
  // a second run repeats them bit for bit. Returns the worst relative difference.
  static double check_mesh(const std::string& name, const std::vector<std::string>& overrides,
                           int ranks) {
    compile(name + ".pcx", overrides);
    std::vector<double> first = train(name + ".pcx", ranks, name + "-a");
    std::vector<double> second = train(name + ".pcx", ranks, name + "-b");
    EXPECT_EQ(first.size(), 5u) << name;
    EXPECT_EQ(first.size(), single_->size()) << name;
    double worst = 0;
    for (size_t s = 0; s < std::min(first.size(), single_->size()); ++s) {
      double relative = std::abs(first[s] - (*single_)[s]) / std::abs((*single_)[s]);
      worst = std::max(worst, relative);
      EXPECT_LE(relative, 1e-5) << name << " step " << s << ": " << first[s] << " vs one device "
                                << (*single_)[s];
    }
    EXPECT_EQ(first, second) << name << ": two runs on the same mesh differ";
    std::printf("%s on %d ranks: losses", name.c_str(), ranks);
    for (double loss : first) std::printf(" %.9g", loss);
    std::printf("; worst relative difference to one device %.3g\n", worst);
    return worst;
  }

  static fs::path* dir_;
  static std::vector<double>* single_;
  static std::vector<double>* single_weights_;
};

fs::path* MpiTrain::dir_ = nullptr;
std::vector<double>* MpiTrain::single_ = nullptr;
std::vector<double>* MpiTrain::single_weights_ = nullptr;

TEST_F(MpiTrain, Data2GivesTheSingleDeviceLosses) {
  std::vector<std::string> overrides = tiny_llama("cpu-2", 2);
  overrides.push_back("ici_data_parallelism=2");
  check_mesh("data2", overrides, 2);
}

TEST_F(MpiTrain, Fsdp2GivesTheSingleDeviceLosses) {
  std::vector<std::string> overrides = tiny_llama("cpu-2", 2);
  overrides.push_back("ici_fsdp_parallelism=2");
  check_mesh("fsdp2", overrides, 2);
}

TEST_F(MpiTrain, Tensor2GivesTheSingleDeviceLosses) {
  std::vector<std::string> overrides = tiny_llama("cpu-2", 2);
  overrides.push_back("ici_tensor_parallelism=2");
  check_mesh("tensor2", overrides, 2);
}

TEST_F(MpiTrain, Fsdp2Tensor2On4RanksGivesTheSingleDeviceLosses) {
  std::vector<std::string> overrides = tiny_llama("cpu-4", 1);
  overrides.push_back("ici_fsdp_parallelism=2");
  overrides.push_back("ici_tensor_parallelism=2");
  check_mesh("fsdp2_tensor2", overrides, 4);
}

// Checkpoints are one process's for now: with several ranks each would write its own piece into
// the one directory, so enable_checkpointing=true is refused (exit 2) before MPI starts.
TEST_F(MpiTrain, CheckpointsWithSeveralRanksAreRefused) {
  std::vector<std::string> overrides = tiny_llama("cpu-2", 2);
  overrides.push_back("ici_data_parallelism=2");
  compile("ckpt.pcx", overrides);
  Result r = run(kEnv + PRECAST_MPIEXEC + " --oversubscribe -np 2 " + PRECAST_RUN_BINARY + " " +
                 (*dir_ / "ckpt.pcx").string() + " steps=2 num_threads=1 enable_checkpointing=true" +
                 " base_output_directory=" + dir_->string() + " run_name=ckpt");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("enable_checkpointing=true is not supported yet with several ranks (2 "
                          "devices)"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(*dir_ / "ckpt" / "checkpoints"));
}

}  // namespace
}  // namespace precast
