// precast-run on MPI ranks with a token dataset: every rank reads the same files and document
// order and writes its piece of the global batch, so a cpu-2 artifact (data 2, fsdp 2, context 2)
// under `mpirun -np 2` gives the single-device run's total_weights exactly and its losses to 1e-5
// relative, on shuffled, packed documents of many lengths.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "compiler/driver/Compile.h"
#include "runtime/data/TokenFile.h"
#include "tests/support/Command.h"
#include "tests/support/CompileArtifact.h"
#include "tests/support/MetricsLines.h"

namespace precast {
namespace {

namespace fs = std::filesystem;

const fs::path kSource = PRECAST_SOURCE_DIR;
const std::string kEnv = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ";

// A 2-layer llama2 (E 64, H 4, D 16, M 128, V 259, T 16) in f32, global batch 4 rows.
std::vector<std::string> tiny_llama(const std::string& topology, int64_t per_device_batch) {
  return {"base_emb_dim=64",
          "base_num_decoder_layers=2",
          "base_num_query_heads=4",
          "base_num_kv_heads=4",
          "head_dim=16",
          "base_mlp_dim=128",
          "vocab_size=259",
          "per_device_batch_size=" + std::to_string(per_device_batch),
          "max_target_length=16",
          "dtype=float32",
          "compile_topology=" + topology};
}

using testing::metric_values;

class MpiData : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("mpi_data_test_" + std::to_string(getpid())));
    fs::create_directories(*dir_);
    // 40 documents of 3 to 37 tokens (BOS, bytes from an LCG, EOS).
    data::TokenDocuments docs;
    uint32_t state = 777;
    for (int d = 0; d < 40; ++d) {
      std::vector<uint32_t> doc{256};
      for (int i = 0; i < 1 + (d * 7) % 35; ++i) {
        state = state * 1103515245u + 12345u;
        doc.push_back((state >> 16) % 256);
      }
      doc.push_back(257);
      docs.add_document(doc);
    }
    ASSERT_TRUE(data::write_token_file((*dir_ / "docs.tokens").string(), docs).ok());
    compile("cpu1.pcx", tiny_llama("cpu-1", 4));
    testing::CommandResult one = testing::run_command(train_args("cpu1.pcx", "cpu1.jsonl"));
    ASSERT_EQ(one.code, 0) << one.output;
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static void compile(const std::string& name, const std::vector<std::string>& overrides) {
    Status compiled = testing::compile_artifact(kSource, overrides, *dir_ / name);
    ASSERT_TRUE(compiled.ok()) << compiled.error().message();
  }
  static std::string train_args(const std::string& name, const std::string& metrics) {
    return std::string(PRECAST_RUN_BINARY) + " " + (*dir_ / name).string() +
           " steps=4 num_threads=1 learning_rate=1e-2 dataset_type=tokens dataset_path=" +
           (*dir_ / "docs.tokens").string() +
           " data_shuffle_seed=3 metrics_file=" + (*dir_ / metrics).string() +
           " base_output_directory=" + dir_->string() +
           " run_name=" + metrics.substr(0, metrics.find('.'));
  }
  static void check(const std::string& parallelism) {
    std::vector<std::string> overrides = tiny_llama("cpu-2", 2);
    overrides.push_back(parallelism);
    const std::string name = parallelism.substr(4, parallelism.find('_', 4) - 4);
    compile(name + ".pcx", overrides);
    testing::CommandResult two =
        testing::run_command(kEnv + PRECAST_MPIEXEC + " --oversubscribe -np 2 " +
                             train_args(name + ".pcx", name + ".jsonl"));
    ASSERT_EQ(two.code, 0) << two.output;
    std::vector<double> weights = metric_values(*dir_ / "cpu1.jsonl", "total_weights");
    ASSERT_EQ(weights.size(), 4u);
    EXPECT_EQ(metric_values(*dir_ / (name + ".jsonl"), "total_weights"), weights);
    std::vector<double> single = metric_values(*dir_ / "cpu1.jsonl", "loss");
    std::vector<double> ranks = metric_values(*dir_ / (name + ".jsonl"), "loss");
    ASSERT_EQ(ranks.size(), single.size());
    for (size_t s = 0; s < single.size(); ++s) {
      EXPECT_LE(std::abs(ranks[s] - single[s]), 1e-5 * std::abs(single[s]))
          << parallelism << " step " << s << ": " << ranks[s] << " vs " << single[s];
    }
  }

  static fs::path* dir_;
};

fs::path* MpiData::dir_ = nullptr;

TEST_F(MpiData, Data2GivesTheSingleDeviceLosses) {
  check("ici_data_parallelism=2");
}
TEST_F(MpiData, Fsdp2GivesTheSingleDeviceLosses) {
  check("ici_fsdp_parallelism=2");
}
TEST_F(MpiData, Context2GivesTheSingleDeviceLosses) {
  check("ici_context_parallelism=2");
}

}  // namespace
}  // namespace precast
