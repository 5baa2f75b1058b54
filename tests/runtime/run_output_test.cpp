// precast-run's outputs on the tiny llama2 of precast_run_test: the run directory's layout
// (metrics/, tensorboard/, checkpoints/, logs/, config.yml), MaxText's start-up lines, the metrics
// file's keys (perf/ figures against a hand count), TensorBoard events decoded by an independent
// Python reader, and honest step timing with a slow checkpoint save.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/driver/Compile.h"
#include "tests/support/Command.h"

namespace precast {
namespace {

namespace fs = std::filesystem;

const fs::path kSource = PRECAST_SOURCE_DIR;
constexpr int kSteps = 8;
constexpr double kDelaySeconds = 0.3;  // PRECAST_TEST_CHECKPOINT_WRITE_DELAY_MS=300

std::string file_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The numeric fields of each metrics line, by step (a line is flat JSON: "key": number, ...).
std::vector<std::map<std::string, double>> metrics_lines(const fs::path& file) {
  std::vector<std::map<std::string, double>> out;
  std::istringstream text(file_text(file));
  const std::regex field(R"re("([a-z_/]+)": (-?[0-9.eE+-]+))re");
  for (std::string line; std::getline(text, line);) {
    std::map<std::string, double> values;
    for (std::sregex_iterator it(line.begin(), line.end(), field), end; it != end; ++it) {
      values[(*it)[1]] = std::stod((*it)[2]);
    }
    out.push_back(values);
  }
  return out;
}

class RunOutput : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        ("precast_run_output_test_" + std::to_string(getpid())));
    fs::create_directories(*dir_);
    // A 2-layer llama2 (E 64, H 4, D 16, M 128, V 256, T 32, batch 4) in f32.
    CompileRequest request;
    request.config.config_file = kSource / "configs" / "base.yml";
    request.config.overrides = {"base_emb_dim=64",
                                "base_num_decoder_layers=2",
                                "base_num_query_heads=4",
                                "base_num_kv_heads=4",
                                "head_dim=16",
                                "base_mlp_dim=128",
                                "vocab_size=256",
                                "per_device_batch_size=4",
                                "max_target_length=32",
                                "dtype=float32",
                                "compile_topology=cpu-1"};
    request.output = (*dir_ / "tiny.pcx").string();
    Expected<CompileResult> r = compile_step(request, kSource / "configs" / "topologies.yml");
    ASSERT_TRUE(r.ok()) << r.error().message();
    // Checkpoints after steps 0, 4 and 7 (the last), each save slowed by 300 ms; synchronous,
    // so that a save's whole time is the next step's checkpoint seconds (an asynchronous save's
    // writing runs beside the steps: checkpoint_resume_test).
    run_ = new testing::CommandResult(testing::run_command(
        "PRECAST_TEST_CHECKPOINT_WRITE_DELAY_MS=300 " + std::string(PRECAST_RUN_BINARY) + " " +
        (*dir_ / "tiny.pcx").string() + " steps=" + std::to_string(kSteps) +
        " num_threads=1 learning_rate=1e-2 enable_checkpointing=true checkpoint_period=4"
        " async_checkpointing=false save_config_to_gcs=true base_output_directory=" +
        (*dir_ / "out").string() + " run_name=layout"));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete run_;
  }
  static fs::path run_dir() { return *dir_ / "out" / "layout"; }
  static fs::path events_file() {
    for (const auto& e : fs::directory_iterator(run_dir() / "tensorboard")) return e.path();
    return {};
  }

  static fs::path* dir_;
  static testing::CommandResult* run_;
};

fs::path* RunOutput::dir_ = nullptr;
testing::CommandResult* RunOutput::run_ = nullptr;

TEST_F(RunOutput, TheRunDirectoryHoldsEveryOutput) {
  ASSERT_EQ(run_->code, 0) << run_->output;
  EXPECT_TRUE(fs::is_regular_file(run_dir() / "metrics" / "metrics.jsonl"));
  EXPECT_TRUE(fs::is_regular_file(run_dir() / "config.yml"));
  EXPECT_TRUE(fs::is_directory(run_dir() / "logs"));
  for (const char* step : {"0", "4", "7"}) {
    EXPECT_TRUE(fs::is_regular_file(run_dir() / "checkpoints" / step / "commit_success.txt"))
        << step;
  }
  std::vector<std::string> events;
  for (const auto& e : fs::directory_iterator(run_dir() / "tensorboard")) {
    events.push_back(e.path().filename().string());
  }
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(std::regex_match(events[0], std::regex(R"(events\.out\.tfevents\.[0-9]{10}\..+)")))
      << events[0];
  // config.yml: the resolved config with this run's values and paths, nothing half-written.
  std::string config = file_text(run_dir() / "config.yml");
  EXPECT_NE(config.find("\nsteps: 8\n"), std::string::npos);
  EXPECT_NE(config.find("\nrun_name: layout\n"), std::string::npos);
  EXPECT_NE(config.find("\nmetrics_dir: " + (run_dir() / "metrics").string() + "/\n"),
            std::string::npos);
  EXPECT_NE(config.find("\ncheckpoint_dir: " + (run_dir() / "checkpoints").string() + "/\n"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(run_dir() / "config.yml.tmp"));
}

TEST_F(RunOutput, StartUpLinesFollowMaxTextsFormatsInItsOrder) {
  ASSERT_EQ(run_->code, 0) << run_->output;
  const std::string& out = run_->output;
  const std::string base = (run_dir()).string();
  std::vector<std::string> in_order = {
      "Updating keys from env and command line: ['steps', 'num_threads', 'learning_rate', "
      "'enable_checkpointing', 'checkpoint_period', 'async_checkpointing', "
      "'save_config_to_gcs', "
      "'base_output_directory', 'run_name']\n",
      "Running Model: default\n",
      "Config param checkpoint_dir: " + base + "/checkpoints/\n",
      "Config param metrics_dir: " + base + "/metrics/\n",
      "Config param run_name: layout\n",
      "Config param tensorboard_dir: " + base + "/tensorboard/\n",
      "Precast 0.1.0 (JITLink from LLVM ",
      "\nCPU: ",
      ", 1 threads for this device\n",
      "Num_devices: 1, shape (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)\n",
      "Total estimated memory size: ",
      "\nMemstats: After params initialized:\n\tUsing (GB) ",
      "\nPeak float32 rate: ",
      "completed step: 0, seconds: ",
  };
  size_t at = 0;
  for (const std::string& line : in_order) {
    size_t found = out.find(line, at);
    ASSERT_NE(found, std::string::npos) << "missing or out of order: " << line << "\n" << out;
    at = found + line.size();
  }
  EXPECT_EQ(out.find("Updating keys from model:"), std::string::npos);  // model_name=default
  // MaxText's per-device line: round(GiB, 2) / round(limit GiB, 2) (fraction:%) on the device;
  // the limit is this host's memory (MemTotal).
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      out, m,
      std::regex(
          R"(\tUsing \(GB\) ([0-9]+\.[0-9]+) / ([0-9]+\.[0-9]+) \(([0-9]+\.[0-9]{6})%\) on cpu:0\n)")))
      << out;
  std::istringstream meminfo(file_text("/proc/meminfo"));
  std::string label;
  double total_kib = 0;
  meminfo >> label >> total_kib;
  ASSERT_EQ(label, "MemTotal:");
  EXPECT_NEAR(std::stod(m[2]), total_kib / (1024.0 * 1024.0), 0.0051);
  // The tiny step's buffers are ~3.6 MB: (used / limit) x 100 with used < 4 MiB.
  EXPECT_GT(std::stod(m[3]), 0);
  EXPECT_LT(std::stod(m[3]), 100.0 * 4.0 / 1024.0 / (total_kib / (1024.0 * 1024.0)));
}

TEST_F(RunOutput, MetricsCarryMaxTextsKeysAndTheHandCountedPerfFigures) {
  ASSERT_EQ(run_->code, 0) << run_->output;
  auto lines = metrics_lines(run_dir() / "metrics" / "metrics.jsonl");
  ASSERT_EQ(lines.size(), static_cast<size_t>(kSteps));
  for (const char* key :
       {"learning/loss", "learning/lm_loss", "learning/total_weights", "learning/grad_norm",
        "learning/raw_grad_norm", "learning/param_norm", "learning/current_learning_rate",
        "perf/step_time_seconds", "perf/per_device_tflops", "perf/per_device_tflops_per_sec",
        "perf/per_device_tokens", "perf/per_device_tokens_per_sec", "perf/mfu",
        "perf/compute_seconds", "perf/checkpoint_seconds", "perf/eval_seconds",
        "perf/other_seconds", "step"}) {
    EXPECT_EQ(lines[0].count(key), 1u) << key;
  }
  // MaxText's formula by hand (B 4, T 32, E 64, H = K = 4, D 16, M 128, V 256, L 2):
  // per layer FFN 2BT·E·M·3 = 6291456, qkv 2BT·E(H+2K)D = 3145728, out 2BT·E·H·D = 1048576;
  // unembedding 2BT·E·V = 4194304; causal attention 4·B·T²·H·D/2 = 524288 a layer.
  // (2·10485760 + 4194304)·3 + 2·524288·3 = 78643200 FLOPs; tokens T·batch = 128.
  for (const auto& line : lines) {
    EXPECT_EQ(line.at("perf/per_device_tflops"), 7.86432e-05);
    EXPECT_EQ(line.at("perf/per_device_tokens"), 128);
    EXPECT_DOUBLE_EQ(line.at("perf/per_device_tflops_per_sec"),
                     7.86432e-05 / line.at("perf/step_time_seconds"));
    EXPECT_DOUBLE_EQ(line.at("perf/per_device_tokens_per_sec"),
                     128 / line.at("perf/step_time_seconds"));
    EXPECT_EQ(line.at("learning/total_weights"), 128);  // every target counts
    EXPECT_GT(line.at("perf/mfu"), 0);
    EXPECT_LT(line.at("perf/mfu"), 1);
  }
}

TEST_F(RunOutput, TensorBoardEventsHoldTheMetricsFilesScalarsStepForStep) {
  ASSERT_EQ(run_->code, 0) << run_->output;
  testing::CommandResult check = testing::run_command(
      std::string("/usr/bin/python3 ") + PRECAST_CHECK_EVENTS_SCRIPT + " " +
      events_file().string() + " " + (run_dir() / "metrics" / "metrics.jsonl").string() + " " +
      PRECAST_PB2_DIR);
  EXPECT_EQ(check.code, 0) << check.output;
  EXPECT_NE(check.output.find("steps agree: 8; scalars per step: 19"), std::string::npos)
      << check.output;
}

TEST_F(RunOutput, ASlowCheckpointIsChargedToTheStepDuringWhichItRan) {
  ASSERT_EQ(run_->code, 0) << run_->output;
  auto lines = metrics_lines(run_dir() / "metrics" / "metrics.jsonl");
  ASSERT_EQ(lines.size(), static_cast<size_t>(kSteps));
  // The saves after steps 0 and 4 run after those steps' losses are known (and their metrics
  // are written first), so they are charged to steps 1 and 5.
  for (int s = 0; s < kSteps; ++s) {
    const auto& line = lines[s];
    double parts = line.at("perf/compute_seconds") + line.at("perf/checkpoint_seconds") +
                   line.at("perf/eval_seconds") + line.at("perf/other_seconds");
    EXPECT_NEAR(parts, line.at("perf/step_time_seconds"), 1e-9) << "step " << s;
    EXPECT_EQ(line.at("perf/eval_seconds"), 0) << "step " << s;
    if (s == 1 || s == 5) {
      EXPECT_GE(line.at("perf/checkpoint_seconds"), kDelaySeconds) << "step " << s;
      EXPECT_GE(line.at("perf/step_time_seconds"), kDelaySeconds) << "step " << s;
    } else {
      EXPECT_EQ(line.at("perf/checkpoint_seconds"), 0) << "step " << s;
      EXPECT_LT(line.at("perf/step_time_seconds"), kDelaySeconds) << "step " << s;
    }
  }
  // Step 0 runs from the loop's start and includes its real compute: no artificially short step.
  std::vector<double> compute;
  for (const auto& line : lines) compute.push_back(line.at("perf/compute_seconds"));
  std::sort(compute.begin(), compute.end());
  double median = (compute[kSteps / 2 - 1] + compute[kSteps / 2]) / 2;
  EXPECT_GE(lines[0].at("perf/step_time_seconds"), 0.5 * median);
  EXPECT_GE(lines[0].at("perf/step_time_seconds"), lines[0].at("perf/compute_seconds"));
  // The log: step 4's line comes before its save starts; the save's own line says how long.
  const std::string& out = run_->output;
  size_t step4 = out.find("completed step: 4, seconds: ");
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(out, m, std::regex(R"(saved checkpoint at step 4 in ([0-9.]+) s[ \n])")))
      << out;
  EXPECT_LT(step4, static_cast<size_t>(m.position(0)));
  EXPECT_GE(std::stod(m[1]), kDelaySeconds);
  std::smatch step5;
  ASSERT_TRUE(
      std::regex_search(out, step5, std::regex(R"(completed step: 5, seconds: ([0-9.]+),)")));
  EXPECT_GE(std::stod(step5[1]), kDelaySeconds);
}

// An asynchronous save (the default): only the state's copy is charged to the next step; the
// writing, slowed to 300 ms, runs beside the steps and is reported on its own line, inside no
// step's seconds. One save (after step 0; period 100, none on completion).
TEST_F(RunOutput, AnAsynchronousSavesWritingIsReportedOnItsOwnLineNotInAnyStep) {
  testing::CommandResult r = testing::run_command(
      "PRECAST_TEST_CHECKPOINT_WRITE_DELAY_MS=300 " + std::string(PRECAST_RUN_BINARY) + " " +
      (*dir_ / "tiny.pcx").string() +
      " steps=8 num_threads=1 enable_checkpointing=true checkpoint_period=100"
      " save_checkpoint_on_completion=false base_output_directory=" +
      (*dir_ / "out").string() + " run_name=background");
  ASSERT_EQ(r.code, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.output, m, std::regex(R"(saved checkpoint at step 0 in ([0-9.]+) s \([0-9.]+ MB/s\)\n)")))
      << r.output;
  EXPECT_GE(std::stod(m[1]), kDelaySeconds);
  EXPECT_NE(r.output.find("Started saving the checkpoint of step 0 in the background.\n"),
            std::string::npos)
      << r.output;
  auto lines = metrics_lines(*dir_ / "out" / "background" / "metrics" / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 8u);
  for (size_t s = 0; s < lines.size(); ++s) {
    EXPECT_LT(lines[s].at("perf/checkpoint_seconds"), kDelaySeconds) << "step " << s;
    EXPECT_LT(lines[s].at("perf/step_time_seconds"), kDelaySeconds) << "step " << s;
  }
  EXPECT_GT(lines[1].at("perf/checkpoint_seconds"), 0);  // the copy
  EXPECT_TRUE(fs::exists(*dir_ / "out" / "background" / "checkpoints" / "0" / "commit_success.txt"));
}

// The end of a run waits for the last asynchronous save (saved on completion after step 1,
// slowed by 300 ms): the wait is its own log line, after the last step's and before the save's,
// at least the 300 ms the writer still had to sleep less the microseconds since save() returned,
// and in no step's seconds; the snapshot buffer is allocated at start-up, before step 0.
TEST_F(RunOutput, TheEndOfRunWaitForTheLastSaveIsItsOwnLine) {
  testing::CommandResult r = testing::run_command(
      "PRECAST_TEST_CHECKPOINT_WRITE_DELAY_MS=300 " + std::string(PRECAST_RUN_BINARY) + " " +
      (*dir_ / "tiny.pcx").string() +
      " steps=2 num_threads=1 enable_checkpointing=true checkpoint_period=100"
      " base_output_directory=" + (*dir_ / "out").string() + " run_name=final_wait");
  ASSERT_EQ(r.code, 0) << r.output;
  size_t allocated = r.output.find("Allocated the checkpoint snapshot buffer in ");
  size_t step0 = r.output.find("completed step: 0, seconds: ");
  size_t step1 = r.output.find("completed step: 1, seconds: ");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.output, m,
      std::regex(R"(waited ([0-9.]+) s at the end of the run for the asynchronous save of step 1 to finish\n)")))
      << r.output;
  size_t saved = r.output.find("saved checkpoint at step 1 in ");
  EXPECT_LT(allocated, step0) << r.output;
  EXPECT_LT(step1, static_cast<size_t>(m.position(0))) << r.output;
  EXPECT_LT(static_cast<size_t>(m.position(0)), saved) << r.output;
  EXPECT_GE(std::stod(m[1]), 0.25);
  auto lines = metrics_lines(*dir_ / "out" / "final_wait" / "metrics" / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 2u);
  for (size_t s = 0; s < lines.size(); ++s) {
    EXPECT_LT(lines[s].at("perf/step_time_seconds"), kDelaySeconds) << "step " << s;
  }
}

TEST_F(RunOutput, AGivenPeakSetsMfuAndTensorBoardCanBeTurnedOff) {
  testing::CommandResult r = testing::run_command(
      std::string(PRECAST_RUN_BINARY) + " " + (*dir_ / "tiny.pcx").string() +
      " steps=2 num_threads=1 cpu_peak_tflops=2 enable_tensorboard=false base_output_directory=" +
      (*dir_ / "out").string() + " run_name=quiet");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("Peak float32 rate: 2.000 TFLOP/s per device (cpu_peak_tflops)\n"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(*dir_ / "out" / "quiet" / "tensorboard"));
  EXPECT_FALSE(fs::exists(*dir_ / "out" / "quiet" / "config.yml"));  // save_config_to_gcs=false
  auto lines = metrics_lines(*dir_ / "out" / "quiet" / "metrics" / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 2u);
  for (const auto& line : lines) {
    EXPECT_DOUBLE_EQ(line.at("perf/mfu"), line.at("perf/per_device_tflops_per_sec") / 2);
  }
  testing::CommandResult bad = testing::run_command(
      std::string(PRECAST_RUN_BINARY) + " " + (*dir_ / "tiny.pcx").string() +
      " steps=1 cpu_peak_tflops=fast base_output_directory=" + (*dir_ / "out").string() +
      " run_name=bad");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("cpu_peak_tflops=fast: expected a number of TFLOP/s >= 0"),
            std::string::npos)
      << bad.output;
}

TEST_F(RunOutput, AModelConfigsKeysAreListedAsMaxTextListsThem) {
  // llama2-7b's file shrunk to the tiny sizes from the command line (override_model_config).
  CompileRequest request;
  request.config.config_file = kSource / "configs" / "base.yml";
  request.config.overrides = {"model_name=llama2-7b",   "override_model_config=true",
                              "base_emb_dim=64",        "base_num_decoder_layers=2",
                              "base_num_query_heads=4", "base_num_kv_heads=4",
                              "head_dim=16",            "base_mlp_dim=128",
                              "vocab_size=256",         "per_device_batch_size=4",
                              "max_target_length=32",   "dtype=float32",
                              "compile_topology=cpu-1"};
  request.output = (*dir_ / "llama.pcx").string();
  Expected<CompileResult> compiled = compile_step(request, kSource / "configs" / "topologies.yml");
  ASSERT_TRUE(compiled.ok()) << compiled.error().message();
  testing::CommandResult r = testing::run_command(
      std::string(PRECAST_RUN_BINARY) + " " + (*dir_ / "llama.pcx").string() +
      " steps=1 num_threads=1 log_config=false base_output_directory=" +
      (*dir_ / "out").string() + " run_name=llama");
  ASSERT_EQ(r.code, 0) << r.output;
  // configs/models/llama2-7b.yml's keys, in its order.
  EXPECT_NE(r.output.find("Updating keys from env and command line: ['steps', 'num_threads', "
                          "'log_config', 'base_output_directory', 'run_name']\n"
                          "Running Model: llama2-7b\n"
                          "Updating keys from model: ['base_emb_dim', 'base_num_query_heads', "
                          "'base_num_kv_heads', 'base_mlp_dim', 'base_num_decoder_layers', "
                          "'head_dim', 'mlp_activations', 'vocab_size', 'enable_dropout', "
                          "'logits_via_embedding', 'normalization_layer_epsilon', "
                          "'decoder_block', 'logical_axis_rules']\n"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("Config param "), std::string::npos);  // log_config=false
}

}  // namespace
}  // namespace precast
