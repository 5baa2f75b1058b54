// Evaluation and greedy sampling on MPI ranks against the single-device run. The tiny llama2
// (V 259, T 16, global batch 4 rows) is compiled at build time with eval_step and sample_step for
// cpu-1 and for cpu-2 (data 2, fsdp 2). Every run trains 4 steps on the same token documents with
// eval_interval=2 over the whole held-out set (every 20th document), then samples 8 tokens:
// cpu-1 computes all on one device, so its eval figures are the single-device ones the ranks must
// give (loss to 1e-5 relative, total_weights exactly), its sample the tokens they must pick.
// Only rank 0 prints: each line appears once on the job's stdout.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "runtime/data/TokenFile.h"
#include "tests/support/Command.h"

namespace precast {
namespace {

namespace fs = std::filesystem;

const std::string kEnv = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ";
const fs::path kArtifacts = PRECAST_MPI_EVAL_ARTIFACT_DIR;

// "eval/<key>": its value in each line of a metrics file that has it.
std::vector<double> eval_values(const fs::path& file, const std::string& key) {
  std::ifstream in(file);
  std::vector<double> values;
  std::string line, field = "\"eval/" + key + "\": ";
  while (std::getline(in, line)) {
    size_t at = line.find(field);
    if (at != std::string::npos)
      values.push_back(std::strtod(line.c_str() + at + field.size(), nullptr));
  }
  return values;
}

// The lines of `text` that start with `prefix`.
std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
    std::string line = text.substr(start, end - start);
    if (line.rfind(prefix, 0) == 0) out.push_back(line);
  }
  return out;
}

class MpiEval : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("mpi_eval_test_" + std::to_string(getpid())));
    fs::create_directories(*dir_);
    // 60 documents of 3 to 37 tokens (BOS, bytes from an LCG, EOS): documents 19, 39 and 59 are
    // held out for evaluation.
    data::TokenDocuments docs;
    uint32_t state = 4242;
    for (int d = 0; d < 60; ++d) {
      std::vector<uint32_t> doc{256};
      for (int i = 0; i < 1 + (d * 11) % 35; ++i) {
        state = state * 1103515245u + 12345u;
        doc.push_back((state >> 16) % 256);
      }
      doc.push_back(257);
      docs.add_document(doc);
    }
    ASSERT_TRUE(data::write_token_file((*dir_ / "docs.tokens").string(), docs).ok());
    single_ = new testing::CommandResult(testing::run_command(run_args("cpu1", "")));
    ASSERT_EQ(single_->code, 0) << single_->output;
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete single_;
  }
  static std::string run_args(const std::string& name, const std::string& launcher) {
    return launcher + PRECAST_RUN_BINARY + " " +
           (kArtifacts / ("mpi_eval_" + name + ".pcx")).string() +
           " steps=4 num_threads=1 learning_rate=1e-2 dataset_type=tokens dataset_path=" +
           (*dir_ / "docs.tokens").string() +
           " eval_interval=2 eval_steps=-1 sample_tokens=8 sample_prompt=ab metrics_file=" +
           (*dir_ / (name + ".jsonl")).string() + " base_output_directory=" + dir_->string() +
           " run_name=" + name + " 2>&1";
  }
  static void check(const std::string& name) {
    testing::CommandResult two =
        testing::run_command(run_args(name, kEnv + PRECAST_MPIEXEC + " --oversubscribe -np 2 "));
    ASSERT_EQ(two.code, 0) << two.output;

    // Evaluations after steps 0 and 2 (MaxText's schedule), the single device's figures.
    std::vector<double> weights = eval_values(*dir_ / "cpu1.jsonl", "total_weights");
    std::vector<double> losses = eval_values(*dir_ / "cpu1.jsonl", "avg_loss");
    ASSERT_EQ(weights.size(), 2u);
    ASSERT_EQ(losses.size(), 2u);
    EXPECT_GT(weights[0], 0);
    EXPECT_EQ(eval_values(*dir_ / (name + ".jsonl"), "total_weights"), weights);
    std::vector<double> ranks = eval_values(*dir_ / (name + ".jsonl"), "avg_loss");
    ASSERT_EQ(ranks.size(), 2u);
    for (size_t e = 0; e < 2; ++e) {
      EXPECT_LE(std::abs(ranks[e] - losses[e]), 1e-5 * std::abs(losses[e]))
          << name << " evaluation " << e << ": " << ranks[e] << " vs " << losses[e];
    }

    // Rank 0 alone prints: each evaluation's lines and the sample once.
    const std::vector<std::string> starts = lines_starting(two.output, "Starting eval after");
    EXPECT_EQ(starts, (std::vector<std::string>{"Starting eval after train step 0",
                                                "Starting eval after train step 2"}));
    EXPECT_EQ(lines_starting(two.output, "Completed eval after train step").size(), 2u);
    EXPECT_EQ(lines_starting(two.output, "Completed eval step: ").size(),
              lines_starting(single_->output, "Completed eval step: ").size());

    // The sample: the single device's tokens, one line.
    std::vector<std::string> sample = lines_starting(single_->output, "Sample (");
    ASSERT_EQ(sample.size(), 1u) << single_->output;
    EXPECT_EQ(sample[0].rfind("Sample (8 tokens", 0), 0u) << sample[0];
    EXPECT_EQ(lines_starting(two.output, "Sample ("), sample);
  }

  static fs::path* dir_;
  static testing::CommandResult* single_;
};

fs::path* MpiEval::dir_ = nullptr;
testing::CommandResult* MpiEval::single_ = nullptr;

TEST_F(MpiEval, Data2EvaluatesAndSamplesAsOneDevice) {
  check("data2");
}
TEST_F(MpiEval, Fsdp2EvaluatesAndSamplesAsOneDevice) {
  check("fsdp2");
}

}  // namespace
}  // namespace precast
