// `precast compare A B` end to end: two MaxText logs written here from maxtext-facts §h's line
// formats (every expected figure worked by hand below), two real Precast runs of a tiny llama2
// that differ in learning_rate (expected figures read back from their own metrics files and
// logs by this test's own parsing), every bad input exiting 2 with the file and line, and the
// --html page rendered by headless Chromium: not blank, both runs' colours drawn, no console
// message, the DOM holding the table and both charts.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/Command.h"

namespace precast {
namespace {

namespace fs = std::filesystem;

const std::string kPrecast = PRECAST_BINARY;
const std::string kPrecastRun = PRECAST_RUN_BINARY;
const fs::path kSource = PRECAST_SOURCE_DIR;

testing::CommandResult run(const std::string& command) {
  return testing::run_command(command);
}

std::string quoted(const fs::path& p) {
  return "'" + p.string() + "'";
}

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The table's lines with runs of two or more spaces turned into " | ", so a row reads
// "final loss | 9.2500 | 9.0000 | -0.2500 (-2.70%) | improvement" whatever the widths.
std::vector<std::string> rows(const std::string& output) {
  std::vector<std::string> out;
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    out.push_back(std::regex_replace(line, std::regex(" {2,}"), " | "));
  }
  return out;
}

bool has_row(const std::string& output, const std::string& row) {
  for (const std::string& r : rows(output)) {
    if (r == row) return true;
  }
  return false;
}

class Compare : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("precast_compare_test_{}_{}", getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Two short MaxText logs (maxtext-facts §h): A with absl prefixes on some lines, B without.
  void write_maxtext_logs() {
    write(
        dir_ / "a.log",
        "I1124 10:00:01.000000 139 max_utils.py:812] System Information: Jax Version: 0.4.38\n"
        "I1124 10:00:01.000000 139 max_utils.py:813] System Information: Jaxlib Version: 0.4.38\n"
        "I1124 10:00:01.000000 139 max_utils.py:814] System Information: Jax Backend: PJRT C API\n"
        "Config param learning_rate: 3e-05\n"
        "Config param per_device_batch_size: 4.0\n"
        "Config param remat_policy: full\n"
        "Num_devices: 64, shape (1, 1, 1, 64, 1, 1, 1, 1, 1, 1, 1, 1)\n"
        "number parameters: 1.104 billion\n"
        "Per train step:\n"
        " Total TFLOPs: 13.59 \n"
        " split as 93.93% learnable weight flops and 6.07% attention flops\n"
        "Total estimated memory size: 20.3 GB, estimated output size: 12.1 GB, estimated temp "
        "size: 8.2 GB, estimated argument size: 12.1 GB, Estimated host temp size: 0.0 GB.\n"
        "Memstats: After params initialized:\n"
        "\tUsing (GB) 12.5 / 95.74 (13.056413%) on TPU_0(process=0,(0,0,0,0))\n"
        "\tUsing (GB) 12.6 / 95.74 (13.160643%) on TPU_1(process=0,(1,0,0,0))\n"
        "completed step: 0, seconds: 60.000, TFLOP/s/device: 0.227, Tokens/s/device: 68.267, "
        "total_weights: 262144, loss: 10.875, lm_loss: 10.875, perplexity: 52875.000\n"
        "completed step: 1, seconds: 1.000, TFLOP/s/device: 13.590, Tokens/s/device: 4096.000, "
        "total_weights: 262144, loss: 10.500, lm_loss: 10.500, perplexity: 36315.503\n"
        "completed step: 2, seconds: 0.900, TFLOP/s/device: 15.100, Tokens/s/device: 4551.111, "
        "total_weights: 262144, loss: 9.750, lm_loss: 9.750, perplexity: 17154.229\n"
        "To see full metrics 'tensorboard --logdir=gs://bucket/run_a/tensorboard/'\n"
        "completed step: 3, seconds: 1.100, TFLOP/s/device: 12.355, Tokens/s/device: 3723.636, "
        "total_weights: 262144, loss: 9.250, lm_loss: 9.250, perplexity: 10404.565\n");
    write(dir_ / "b.log",
          "System Information: Jax Version: 0.5.0\n"
          "System Information: Jaxlib Version: 0.5.0\n"
          "Config param learning_rate: 0.0001\n"
          "Config param per_device_batch_size: 4.0\n"
          "Config param remat_policy: minimal\n"
          "Num_devices: 64, shape (1, 1, 1, 64, 1, 1, 1, 1, 1, 1, 1, 1)\n"
          "number parameters: 1.104 billion\n"
          " Total TFLOPs: 13.59 \n"
          "Total estimated memory size: 24.8 GB, estimated output size: 12.1 GB, estimated temp "
          "size: 12.7 GB, estimated argument size: 12.1 GB, Estimated host temp size: 0.0 GB.\n"
          "\tUsing (GB) 16.2 / 95.74 (16.920827%) on TPU_0(process=0,(0,0,0,0))\n"
          "completed step: 0, seconds: 50.000, TFLOP/s/device: 0.272, Tokens/s/device: 81.920, "
          "total_weights: 262144, loss: 10.875, lm_loss: 10.875, perplexity: 52875.000\n"
          "completed step: 1, seconds: 0.800, TFLOP/s/device: 16.988, Tokens/s/device: 5120.000, "
          "total_weights: 262144, loss: 10.250, lm_loss: 10.250, perplexity: 28282.542\n"
          "completed step: 2, seconds: 0.800, TFLOP/s/device: 16.988, Tokens/s/device: 5120.000, "
          "total_weights: 262144, loss: 9.500, lm_loss: 9.500, perplexity: 13359.727\n"
          "completed step: 3, seconds: 0.800, TFLOP/s/device: 16.988, Tokens/s/device: 5120.000, "
          "total_weights: 262144, loss: 9.000, lm_loss: 9.000, perplexity: 8103.084\n");
  }

  fs::path dir_;
};

TEST_F(Compare, TwoMaxTextLogsGiveTheHandWorkedRowsAndConfigDifferences) {
  write_maxtext_logs();
  testing::CommandResult r =
      run(kPrecast + " compare " + quoted(dir_ / "a.log") + " " + quoted(dir_ / "b.log"));
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string& out = r.output;
  EXPECT_EQ(out.find('\033'), std::string::npos) << "no colour when not on a terminal";
  EXPECT_TRUE(has_row(out, " | A | B | B - A")) << out;
  EXPECT_TRUE(has_row(out, "steps | 0..3 (4) | 0..3 (4)")) << out;
  EXPECT_TRUE(has_row(out, "parameters (billion) | 1.104 | 1.104 | 0 | same")) << out;
  EXPECT_TRUE(has_row(out, "TFLOPs per step per device | 13.59 | 13.59 | 0 | same")) << out;
  EXPECT_TRUE(has_row(out, "devices | 64 | 64 | 0 | same")) << out;
  // Final loss: step 3's, 9.250 and 9.000; -0.25 / 9.25 = -2.70%.
  EXPECT_TRUE(has_row(out, "final loss | 9.2500 | 9.0000 | -0.2500 (-2.70%) | improvement")) << out;
  // Steps 1..3 (step 0 left out): A (13.590 + 15.100 + 12.355) / 3 = 13.681667, B 16.988;
  // +3.306333 = +24.17% of A.
  EXPECT_TRUE(
      has_row(out, "mean TFLOP/s/device | 13.682 | 16.988 | +3.306 (+24.17%) | improvement"))
      << out;
  // A (4096 + 4551.111 + 3723.636) / 3 = 4123.582, B 5120; +996.418 = +24.16%.
  EXPECT_TRUE(
      has_row(out, "mean tokens/s/device | 4123.6 | 5120.0 | +996.4 (+24.16%) | improvement"))
      << out;
  // A (1.0 + 0.9 + 1.1) / 3 = 1.0, B 0.8: -0.2 = -20%.
  EXPECT_TRUE(has_row(out, "average s/step | 1.0000 | 0.8000 | -0.2000 (-20.00%) | improvement"))
      << out;
  // A's larger device figure 13.160643%, B 16.920827%: +3.760184 = +28.57% of A.
  EXPECT_TRUE(has_row(out, "memory used (%) | 13.16 | 16.92 | +3.76 (+28.57%) | regression"))
      << out;
  // 20.3 GB -> 24.8 GB: +4.5 = +22.17%.
  EXPECT_TRUE(has_row(out, "estimated memory (GB) | 20.3 | 24.8 | +4.5 (+22.17%) | regression"))
      << out;
  EXPECT_TRUE(has_row(out, "version: Jax | 0.4.38 | 0.5.0 | changed")) << out;
  EXPECT_TRUE(has_row(out, "version: Jaxlib | 0.4.38 | 0.5.0 | changed")) << out;
  EXPECT_TRUE(has_row(out, "version: Jax backend | PJRT C API | n/a")) << out;
  // per_device_batch_size is equal in both and not listed.
  EXPECT_NE(out.find("Config keys that differ (2):\n  learning_rate: 3e-05 -> 0.0001\n"
                     "  remat_policy: full -> minimal\n"),
            std::string::npos)
      << out;

  // --steps=1:2: final loss is step 2's (9.750, 9.500: -0.25 / 9.75 = -2.56%); the means
  // over steps 1 and 2: A (1.0 + 0.9) / 2 = 0.95 s, (13.590 + 15.100) / 2 = 14.345 TFLOP/s.
  r = run(kPrecast + " compare " + quoted(dir_ / "a.log") + " " + quoted(dir_ / "b.log") +
          " --steps=1:2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has_row(r.output, "steps | 1..2 (2) | 1..2 (2)")) << r.output;
  EXPECT_TRUE(has_row(r.output, "final loss | 9.7500 | 9.5000 | -0.2500 (-2.56%) | improvement"))
      << r.output;
  EXPECT_TRUE(
      has_row(r.output, "average s/step | 0.9500 | 0.8000 | -0.1500 (-15.79%) | improvement"))
      << r.output;
  EXPECT_TRUE(
      has_row(r.output, "mean TFLOP/s/device | 14.345 | 16.988 | +2.643 (+18.42%) | improvement"))
      << r.output;
  // On a terminal (a pseudo-terminal from util-linux's `script`) the verdicts are coloured.
  r = run("script -qec \"" + kPrecast + " compare " + quoted(dir_ / "a.log") + " " +
          quoted(dir_ / "b.log") + "\" /dev/null");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("(-2.70%)  \033[32mimprovement\033[0m"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(+28.57%)  \033[31mregression\033[0m"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  \033[33mchanged\033[0m"), std::string::npos) << r.output;
  // B against A: the verdicts turn round.
  r = run(kPrecast + " compare " + quoted(dir_ / "b.log") + " " + quoted(dir_ / "a.log"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has_row(r.output, "final loss | 9.0000 | 9.2500 | +0.2500 (+2.78%) | regression"))
      << r.output;
}

TEST_F(Compare, HelpDocumentsTheCommand) {
  testing::CommandResult r = run(kPrecast + " --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.output.find("  compare     two runs"), std::string::npos) << r.output;
  r = run(kPrecast + " compare --help");
  EXPECT_EQ(r.code, 0);
  for (const char* text : {"precast compare A B [--steps=FROM:TO] [--html report.html]",
                           "--steps arg", "--html arg", "Exit codes: 0 compared, 2 usage"}) {
    EXPECT_NE(r.output.find(text), std::string::npos) << text << "\n" << r.output;
  }
}

TEST_F(Compare, BadInputsExitTwoNamingTheFileAndLine) {
  write_maxtext_logs();
  std::string a = quoted(dir_ / "a.log");
  struct Case {
    std::string name, command, message;
  };
  write(dir_ / "notes.txt", "shopping list\nbread\n");
  write(dir_ / "broken.log",
        "number parameters: 1.104 billion\n"
        "completed step: 0, seconds: 1.000, loss: 7.0\n"
        "completed step: 1, seconds: fast, loss: 6.5\n");
  write(dir_ / "bad.jsonl",
        "{\"learning/loss\": 7.0, \"step\": 0.0}\n"
        "{\"learning/loss\": 6.5 \"step\": 1.0}\n");
  write(dir_ / "nostep.jsonl", "{\"learning/loss\": 7.0}\n");
  fs::create_directories(dir_ / "emptyrun");
  std::vector<Case> cases = {
      {"missing", a + " " + quoted(dir_ / "nope.log"),
       (dir_ / "nope.log").string() + ": no such file or directory"},
      {"not a log", a + " " + quoted(dir_ / "notes.txt"),
       (dir_ / "notes.txt").string() + ":1: not a MaxText log or a metrics file"},
      {"bad step line", a + " " + quoted(dir_ / "broken.log"),
       (dir_ / "broken.log").string() + ":3: no number after 'seconds:'"},
      {"bad json", a + " " + quoted(dir_ / "bad.jsonl"),
       (dir_ / "bad.jsonl").string() + ":2:23: not a metrics line: expected ',' or '}'"},
      {"no step", a + " " + quoted(dir_ / "nostep.jsonl"),
       (dir_ / "nostep.jsonl").string() + ":1: no numeric \"step\""},
      {"empty run dir", a + " " + quoted(dir_ / "emptyrun"),
       "no metrics file and no log in this run directory"},
      {"one run", a, "expected two runs A B, got 1 argument(s)"},
      {"unknown flag", a + " " + a + " --colour", "unrecognised option '--colour'"},
      {"bad window", a + " " + a + " --steps=9", "--steps=9: no ':'"},
      {"reversed window", a + " " + a + " --steps=5:2", "--steps=5:2: FROM is after TO"},
      {"window outside", a + " " + a + " --steps=10:",
       "no step inside the --steps window; its "
       "steps are 0..3"},
  };
  for (const Case& c : cases) {
    testing::CommandResult r = run(kPrecast + " compare " + c.command);
    EXPECT_EQ(r.code, 2) << c.name << ": " << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.name << ": " << r.output;
    EXPECT_EQ(r.output.find("internal error"), std::string::npos) << c.name << ": " << r.output;
  }
  // A page that cannot be written: exit 1 naming it, nothing left behind.
  fs::path page = dir_ / "no_such_dir" / "page.html";
  testing::CommandResult r = run(kPrecast + " compare " + a + " " + a + " --html " + quoted(page));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("cannot write '" + page.string() + "'"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "no_such_dir"));
}

// Metrics files in both key sets: the new one (perf/per_device_tflops_per_sec and
// perf/per_device_tokens_per_sec, as MaxText writes) in a run directory split into MaxText's
// metrics_step_* pieces, and per-step totals (perf/per_device_tflops, perf/per_device_tokens)
// divided by perf/step_time_seconds in a plain file; a resumed run's repeated step counts once.
TEST_F(Compare, MetricsFilesInBothKeySetsAndMaxTextPieces) {
  fs::path run_a = dir_ / "run_a";
  write(run_a / "metrics" / "metrics_step_000000_to_step_000001.txt",
        "{\"learning/loss\": 8.0, \"perf/step_time_seconds\": 30.0, "
        "\"perf/per_device_tflops_per_sec\": 0.5, \"perf/per_device_tokens_per_sec\": 100.0, "
        "\"step\": 0.0, \"run_name\": \"run_a\"}\n"
        "{\"learning/loss\": 7.0, \"perf/step_time_seconds\": 2.0, "
        "\"perf/per_device_tflops_per_sec\": 10.0, \"perf/per_device_tokens_per_sec\": 2000.0, "
        "\"step\": 1.0, \"run_name\": \"run_a\"}\n");
  write(run_a / "metrics" / "metrics_step_000002_to_step_000002.txt",
        "{\"learning/loss\": 6.0, \"perf/step_time_seconds\": 4.0, "
        "\"perf/per_device_tflops_per_sec\": 5.0, \"perf/per_device_tokens_per_sec\": 1000.0, "
        "\"step\": 2.0, \"run_name\": \"r\\u00e9\"}\n");
  write(run_a / "config.yml",
        "learning_rate: 0.001\nlogical_axis_rules: [[batch, [data, fsdp]]]\n");
  // B: per-step totals; step 1 written twice (a resumed run), the second one counts.
  write(
      dir_ / "b.jsonl",
      "{\"learning/loss\": 8.0, \"perf/step_time_seconds\": 20.0, \"perf/per_device_tflops\": 8.0, "
      "\"perf/per_device_tokens\": 1600.0, \"step\": 0.0}\n"
      "{\"learning/loss\": 9.9, \"perf/step_time_seconds\": 9.0, \"perf/per_device_tflops\": 8.0, "
      "\"perf/per_device_tokens\": 1600.0, \"step\": 1.0}\n"
      "\n"
      "{\"learning/loss\": 6.5, \"perf/step_time_seconds\": 1.0, \"perf/per_device_tflops\": 8.0, "
      "\"perf/per_device_tokens\": 1600.0, \"step\": 1.0}\n"
      "{\"learning/loss\": 5.5, \"perf/step_time_seconds\": 4.0, \"perf/per_device_tflops\": 8.0, "
      "\"perf/per_device_tokens\": 1600.0, \"step\": 2.0}\n");
  testing::CommandResult r =
      run(kPrecast + " compare " + quoted(run_a / "") + " " + quoted(dir_ / "b.jsonl"));
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string& out = r.output;
  EXPECT_NE(out.find("(run directory: metrics metrics/metrics_step_000000_to_step_000001.txt, "
                     "metrics metrics/metrics_step_000002_to_step_000002.txt, config.yml)"),
            std::string::npos)
      << out;
  EXPECT_TRUE(has_row(out, "steps | 0..2 (3) | 0..2 (3)")) << out;
  // 6.0 -> 5.5: -0.5 = -8.33%.
  EXPECT_TRUE(has_row(out, "final loss | 6.0000 | 5.5000 | -0.5000 (-8.33%) | improvement")) << out;
  // Steps 1 and 2. A: (10 + 5) / 2 = 7.5 TFLOP/s, (2000 + 1000) / 2 = 1500 tokens/s,
  // (2 + 4) / 2 = 3 s. B: 8 / 1 and 8 / 4 -> (8 + 2) / 2 = 5 TFLOP/s (-33.33%), 1600 / 1 and
  // 1600 / 4 -> (1600 + 400) / 2 = 1000 tokens/s (-33.33%), (1 + 4) / 2 = 2.5 s (-16.67%).
  EXPECT_TRUE(has_row(out, "mean TFLOP/s/device | 7.500 | 5.000 | -2.500 (-33.33%) | regression"))
      << out;
  EXPECT_TRUE(
      has_row(out, "mean tokens/s/device | 1500.0 | 1000.0 | -500.0 (-33.33%) | regression"))
      << out;
  EXPECT_TRUE(has_row(out, "average s/step | 3.0000 | 2.5000 | -0.5000 (-16.67%) | improvement"))
      << out;
  EXPECT_TRUE(has_row(out, "parameters (billion) | n/a | n/a")) << out;
  EXPECT_TRUE(has_row(out, "versions | n/a | n/a")) << out;
  EXPECT_NE(out.find("Config: only A has a config"), std::string::npos) << out;
  // Config values that are YAML sequences compare as their flow text.
  write(dir_ / "run_b" / "metrics.jsonl", read(dir_ / "b.jsonl"));
  write(dir_ / "run_b" / "config.yml",
        "learning_rate: 0.001\nlogical_axis_rules: [[batch, data]]\n");
  r = run(kPrecast + " compare " + quoted(run_a) + " " + quoted(dir_ / "run_b"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("run_b (run directory: metrics metrics.jsonl, config.yml)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(
      r.output.find("Config keys that differ (1):\n  logical_axis_rules: [[batch, [data, fsdp]]] "
                    "-> [[batch, data]]\n"),
      std::string::npos)
      << r.output;
}

// One number after `"key": ` in a metrics line.
double metric(const std::string& line, const std::string& key) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(line, m, std::regex("\"" + key + "\": ([-0-9.e+]+)"))) << line;
  return std::stod(m[1]);
}

struct RunFigures {
  double final_loss = 0, mean_seconds = 0, mean_tflops = 0, mean_tokens = 0, memory_percent = 0;
};

// The figures of one run read back by this test: loss, seconds and the per-device rates from the
// metrics file's lines (MaxText's perf/per_device_*_per_sec keys), means over steps 1.., and the
// Memstats percentage from the log.
RunFigures figures(const fs::path& run_dir) {
  RunFigures f;
  std::istringstream metrics(read(run_dir / "metrics" / "metrics.txt"));
  std::string line;
  int steps = 0;
  while (std::getline(metrics, line)) {
    double step = metric(line, "step");
    f.final_loss = metric(line, "learning/loss");
    if (step >= 1) {
      f.mean_seconds += metric(line, "perf/step_time_seconds");
      f.mean_tflops += metric(line, "perf/per_device_tflops_per_sec");
      f.mean_tokens += metric(line, "perf/per_device_tokens_per_sec");
    }
    ++steps;
  }
  EXPECT_EQ(steps, 6);
  f.mean_seconds /= steps - 1;
  f.mean_tflops /= steps - 1;
  f.mean_tokens /= steps - 1;
  std::string log = read(run_dir / "train.log");
  std::smatch m;
  EXPECT_TRUE(std::regex_search(log, m, std::regex(R"(Using \(GB\) [0-9.]+ / [0-9.]+ \(([0-9.]+)%\))")))
      << log;
  if (!m.empty()) f.memory_percent = std::stod(m[1]);
  return f;
}

std::string signed_difference(double a, double b, int digits) {
  std::string pa = fmt::format("{:.{}f}", a, digits), pb = fmt::format("{:.{}f}", b, digits);
  if (pa == pb) return "0";
  double d = b - a;
  return fmt::format("{}{:.{}f} ({:+.2f}%)", d < 0 ? "-" : "+", std::fabs(d), digits,
                     100.0 * d / std::fabs(a));
}

TEST_F(Compare, TwoPrecastRunsThatDifferInLearningRate) {
  // A 2-layer llama2 (E 64, V 256, batch 4 x 32) compiled once; learning_rate is a run-time
  // key, so both runs use the same artifact.
  fs::path artifact = dir_ / "tiny.pcx";
  testing::CommandResult compiled = run(
      kPrecast + " compile " + quoted(kSource / "configs" / "base.yml") +
      " base_emb_dim=64 base_num_decoder_layers=2 base_num_query_heads=4 base_num_kv_heads=4 "
      "head_dim=16 base_mlp_dim=128 vocab_size=256 per_device_batch_size=4 max_target_length=32 "
      "dtype=float32 compile_topology=cpu-1 compiled_trainstep_file=" +
      quoted(artifact));
  ASSERT_EQ(compiled.code, 0) << compiled.output;
  for (const auto& [name, rate] : {std::pair("run_a", "0.001"), std::pair("run_b", "0.003")}) {
    fs::path run_dir = dir_ / name;
    fs::create_directories(run_dir / "metrics");
    // The run directory precast-run's output layout gives: metrics/, config.yml, the log.
    testing::CommandResult trained =
        run(kPrecastRun + " " + quoted(artifact) + " steps=6 num_threads=1 learning_rate=" + rate +
            " run_name=" + name + " base_output_directory=" + quoted(dir_) + " metrics_file=" +
            quoted(run_dir / "metrics" / "metrics.txt") + " > " + quoted(run_dir / "train.log"));
    ASSERT_EQ(trained.code, 0) << trained.output << read(run_dir / "train.log");
    write(run_dir / "config.yml", fmt::format("learning_rate: {}\nmodel_name: default\n"
                                              "run_name: {}\nsteps: 6\n",
                                              rate, name));
  }
  testing::CommandResult r = run(kPrecast + " compare " + quoted(dir_ / "run_a") + " " +
                                 quoted(dir_ / "run_b") + " --html " + quoted(dir_ / "page.html"));
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string& out = r.output;
  RunFigures a = figures(dir_ / "run_a"), b = figures(dir_ / "run_b");
  EXPECT_NE(out.find("A: " + (dir_ / "run_a").string() +
                     " (run directory: log train.log, metrics metrics/metrics.txt, config.yml)"),
            std::string::npos)
      << out;
  EXPECT_TRUE(has_row(out, "steps | 0..5 (6) | 0..5 (6)")) << out;
  // precast-run's own lines: the tiny model's 0.000 billion parameters, one device, the
  // Precast and LLVM versions of both runs equal.
  EXPECT_TRUE(has_row(out, "parameters (billion) | 0.000 | 0.000 | 0 | same")) << out;
  EXPECT_TRUE(has_row(out, "devices | 1 | 1 | 0 | same")) << out;
  EXPECT_TRUE(has_row(out, "version: Precast | 0.1.0 | 0.1.0 | same")) << out;
  EXPECT_TRUE(
      std::regex_search(out, std::regex("\nversion: LLVM +19\\.[0-9.]+ +19\\.[0-9.]+ +same")))
      << out;
  // The Memstats line's percentage of the host's memory.
  std::string memory_difference = signed_difference(a.memory_percent, b.memory_percent, 2);
  std::string memory_verdict = memory_difference == "0"                 ? "same"
                               : b.memory_percent < a.memory_percent ? "improvement"
                                                                     : "regression";
  EXPECT_TRUE(has_row(out, fmt::format("memory used (%) | {:.2f} | {:.2f} | {} | {}",
                                       a.memory_percent, b.memory_percent, memory_difference,
                                       memory_verdict)))
      << out;
  ASSERT_NE(fmt::format("{:.4f}", a.final_loss), fmt::format("{:.4f}", b.final_loss));
  std::string loss_verdict = b.final_loss < a.final_loss ? "improvement" : "regression";
  EXPECT_TRUE(
      has_row(out, fmt::format("final loss | {:.4f} | {:.4f} | {} | {}", a.final_loss, b.final_loss,
                               signed_difference(a.final_loss, b.final_loss, 4), loss_verdict)))
      << out;
  // Seconds: lower is better; the rates: higher is better.
  auto numeric_row = [](const std::string& name, double a, double b, int digits,
                        bool lower_better) {
    std::string difference = signed_difference(a, b, digits);
    std::string verdict = difference == "0"         ? "same"
                          : (b < a) == lower_better ? "improvement"
                                                    : "regression";
    return fmt::format("{} | {:.{}f} | {:.{}f} | {} | {}", name, a, digits, b, digits, difference,
                       verdict);
  };
  for (const std::string& row :
       {numeric_row("average s/step", a.mean_seconds, b.mean_seconds, 4, true),
        numeric_row("mean tokens/s/device", a.mean_tokens, b.mean_tokens, 1, false),
        numeric_row("mean TFLOP/s/device", a.mean_tflops, b.mean_tflops, 3, false)}) {
    EXPECT_TRUE(has_row(out, row)) << row << "\n" << out;
  }
  EXPECT_NE(out.find("Config keys that differ (2):\n  learning_rate: 0.001 -> 0.003\n"
                     "  run_name: run_a -> run_b\n"),
            std::string::npos)
      << out;
  EXPECT_TRUE(fs::exists(dir_ / "page.html"));

  // A metrics file alone: loss and seconds, nothing from a log, no config.
  r = run(kPrecast + " compare " + quoted(dir_ / "run_a" / "metrics" / "metrics.txt") + " " +
          quoted(dir_ / "run_b"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has_row(
      r.output, fmt::format("final loss | {:.4f} | {:.4f} | {} | {}", a.final_loss, b.final_loss,
                            signed_difference(a.final_loss, b.final_loss, 4), loss_verdict)))
      << r.output;
  EXPECT_TRUE(has_row(r.output, "parameters (billion) | n/a | 0.000")) << r.output;
  EXPECT_NE(r.output.find("Config: only B has a config"), std::string::npos) << r.output;
}

// Decodes a PNG with plain zlib (filters undone per row) and prints: width height, the count
// of non-white pixels, and the counts of run A's and run B's colours.
constexpr const char* kPngProbe = R"PY(
import struct, sys, zlib
data = open(sys.argv[1], 'rb').read()
assert data[:8] == b'\x89PNG\r\n\x1a\n', 'not a PNG'
pos, idat = 8, b''
while pos < len(data):
    length, kind = struct.unpack('>I4s', data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + length]
    if kind == b'IHDR':
        width, height, depth, colour, _, _, interlace = struct.unpack('>IIBBBBB', body)
    elif kind == b'IDAT':
        idat += body
    pos += 12 + length
assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
channels = 3 if colour == 2 else 4
stride = width * channels
raw = zlib.decompress(idat)
previous = bytearray(stride)
pixels = []
for y in range(height):
    start = y * (stride + 1)
    kind, row = raw[start], bytearray(raw[start + 1:start + 1 + stride])
    for i in range(stride):
        left = row[i - channels] if i >= channels else 0
        up = previous[i]
        corner = previous[i - channels] if i >= channels else 0
        if kind == 1: row[i] = (row[i] + left) & 255
        elif kind == 2: row[i] = (row[i] + up) & 255
        elif kind == 3: row[i] = (row[i] + (left + up) // 2) & 255
        elif kind == 4:
            p = left + up - corner
            pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
            predictor = left if pa <= pb and pa <= pc else (up if pb <= pc else corner)
            row[i] = (row[i] + predictor) & 255
    pixels.extend(tuple(row[i:i + 3]) for i in range(0, stride, channels))
    previous = row
non_white = sum(1 for p in pixels if p != (255, 255, 255))
print(width, height, non_white, pixels.count((0x1f, 0x5f, 0xbf)), pixels.count((0xe8, 0x59, 0x0c)))
)PY";

TEST_F(Compare, HtmlPageRendersInHeadlessChromiumWithoutConsoleMessages) {
  if (run("command -v chromium").code != 0) {
    GTEST_SKIP() << "chromium is not installed (Debian package chromium, see tools/setup.sh): "
                    "the page is not rendered";
  }
  write_maxtext_logs();
  fs::path page = dir_ / "report.html";
  testing::CommandResult r = run(kPrecast + " compare " + quoted(dir_ / "a.log") + " " +
                                 quoted(dir_ / "b.log") + " --html " + quoted(page));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("wrote " + page.string()), std::string::npos) << r.output;
  // Written through a temporary name: nothing else is left in the directory.
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << entry.path();
  }
  std::string html = read(page);
  // Self-contained: nothing fetched from anywhere (no URL, script, link, import or url()).
  for (const char* remote : {"http:", "https:", "<script", "<link", "@import", "url(", "src="}) {
    EXPECT_EQ(html.find(remote), std::string::npos) << remote;
  }
  std::string chromium = fmt::format(
      "timeout 60 chromium --headless --disable-gpu --no-sandbox --user-data-dir={} "
      "--enable-logging=stderr --v=0 ",
      quoted(dir_ / "profile"));
  // The screenshot: both runs' colours drawn (the legend swatches alone are 2 charts x 220
  // pixels each; the curves and dots add more) and a good share of the page not white.
  fs::path png = dir_ / "page.png";
  r = run(chromium + "--window-size=900,1500 --screenshot=" + quoted(png) + " " +
          quoted(fs::path("file://" + page.string())));
  ASSERT_EQ(r.code, 0) << r.output;
  // Console messages (errors included) are logged as `...:CONSOLE(line)] "message"`.
  EXPECT_EQ(r.output.find(":CONSOLE"), std::string::npos) << r.output;
  fs::path probe = dir_ / "png_probe.py";
  write(probe, kPngProbe);
  r = run("/usr/bin/python3 " + quoted(probe) + " " + quoted(png));
  ASSERT_EQ(r.code, 0) << r.output;
  int width = 0, height = 0;
  long non_white = 0, colour_a = 0, colour_b = 0;
  std::istringstream(r.output) >> width >> height >> non_white >> colour_a >> colour_b;
  EXPECT_EQ(width, 900);
  EXPECT_EQ(height, 1500);
  EXPECT_GT(non_white, width * height / 50) << r.output;
  EXPECT_GT(colour_a, 600) << r.output;
  EXPECT_GT(colour_b, 600) << r.output;
  // The DOM Chromium built: the table's rows and both charts with two curves each.
  r = run(chromium + "--dump-dom " + quoted(fs::path("file://" + page.string())) + " 2>/dev/null");
  ASSERT_EQ(r.code, 0) << r.output;
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = r.output.find(what); at != std::string::npos; at = r.output.find(what, at + 1))
      ++n;
    return n;
  };
  EXPECT_EQ(count("<svg"), 2u) << r.output;
  EXPECT_EQ(count("<polyline"), 4u) << r.output;
  EXPECT_NE(r.output.find("<td>9.2500</td><td>9.0000</td><td>-0.2500 (-2.70%)</td>"),
            std::string::npos)
      << r.output;
  // The console check sees errors: a page with a failing script logs one.
  write(dir_ / "control.html",
        "<!DOCTYPE html><html><body><p>x</p><script>no_such_function();"
        "</script></body></html>");
  r = run(chromium + "--dump-dom " +
          quoted(fs::path("file://" + (dir_ / "control.html").string())));
  EXPECT_NE(r.output.find(":CONSOLE"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("no_such_function is not defined"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace precast
