// runtime/metrics without a run: CRC-32C against the published check values, TFRecord framing
// bytes, the step clock's breakdown, MaxText's Memstats line as Python prints it, the output
// layout and its errors.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/kernels/ThreadPool.h"
#include "runtime/metrics/Crc32c.h"
#include "runtime/metrics/EventFileWriter.h"
#include "runtime/metrics/PeakProbe.h"
#include "runtime/metrics/RunOutputs.h"
#include "runtime/metrics/StartupLines.h"
#include "runtime/metrics/StepClock.h"

namespace precast::runtime {
namespace {

namespace fs = std::filesystem;

TEST(Crc32c, PublishedCheckValues) {
  // The CRC catalogue's check value for CRC-32C, and RFC 3720 (iSCSI) appendix B.4's vectors.
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  std::vector<unsigned char> zeros(32, 0x00), ones(32, 0xFF), up(32), down(32);
  for (int i = 0; i < 32; ++i) {
    up[i] = static_cast<unsigned char>(i);
    down[i] = static_cast<unsigned char>(31 - i);
  }
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(crc32c(up.data(), up.size()), 0x46DD794Eu);
  EXPECT_EQ(crc32c(down.data(), down.size()), 0x113FDB5Cu);
  // Masked: ((0xE3069283 >> 15) | (0xE3069283 << 17)) + 0xa282ead8 (mod 2^32), by hand.
  EXPECT_EQ(masked_crc32c("123456789", 9), 0xC78AB0E5u);
}

TEST(EventFileWriter, FramesARecordAsTfRecord) {
  std::string record = EventFileWriter::frame_record("123456789");
  ASSERT_EQ(record.size(), 8u + 4u + 9u + 4u);
  EXPECT_EQ(std::string(record.data(), 8), std::string("\x09\0\0\0\0\0\0\0", 8));
  uint32_t length_crc = 0, data_crc = 0;
  std::memcpy(&length_crc, record.data() + 8, 4);
  std::memcpy(&data_crc, record.data() + 21, 4);
  EXPECT_EQ(length_crc, masked_crc32c(record.data(), 8));
  EXPECT_EQ(record.substr(12, 9), "123456789");
  EXPECT_EQ(data_crc, 0xC78AB0E5u);
}

TEST(EventFileWriter, NamesTheFileAfterTimeAndHostAndRefusesAnUnwritableDirectory) {
  fs::path dir = fs::temp_directory_path() / ("precast_metrics_test_" + std::to_string(getpid()));
  fs::remove_all(dir);
  {
    auto writer = EventFileWriter::create((dir / "tb").string());
    ASSERT_TRUE(writer.ok()) << writer.error().message();
    std::string name = fs::path((*writer)->path()).filename().string();
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
    EXPECT_NE(name.find(std::string(".") + host), std::string::npos) << name;
    ASSERT_TRUE((*writer)->write_scalars(3, 1.5, {{"learning/loss", 2.0}}).ok());
    // A second writer in the same folder (the same second, as a rerun in-process) gets its own
    // file.
    auto second = EventFileWriter::create((dir / "tb2").string());
    auto third = EventFileWriter::create((dir / "tb2").string());
    ASSERT_TRUE(second.ok() && third.ok());
    EXPECT_NE((*second)->path(), (*third)->path());
  }
  // The first record's payload is an Event: wall_time (field 1, fixed64), then step 0 is not
  // written (proto3 default), then file_version (field 3) = "brain.Event:2".
  std::ifstream in(fs::directory_iterator(dir / "tb")->path(), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 12u);
  uint64_t length = 0;
  std::memcpy(&length, bytes.data(), 8);
  std::string first = bytes.substr(12, length);
  EXPECT_EQ(length, 9u + 2u + 13u);
  EXPECT_EQ(static_cast<unsigned char>(first[0]), 0x09u);  // field 1, wire type 1 (64-bit)
  EXPECT_EQ(first.substr(9), std::string("\x1a\x0d") + "brain.Event:2");

  fs::create_directories(dir / "file");
  std::ofstream(dir / "file" / "tb") << "not a directory";
  auto refused = EventFileWriter::create((dir / "file" / "tb").string());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().exit_code(), 1);
  EXPECT_NE(refused.error().message().find("tensorboard_dir=" + (dir / "file" / "tb").string()),
            std::string::npos)
      << refused.error().message();
  EXPECT_NE(refused.error().message().find("enable_tensorboard=false"), std::string::npos);
  fs::remove_all(dir);
}

TEST(StepClock, ThePartsAddUpToTheIntervalAndTheNextIntervalStartsAtTheLoss) {
  StepClock clock;
  clock.start();
  {
    PhaseTimer compute(clock, StepPhase::kCompute);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(10));  // "other"
  StepTimes first = clock.finish_step();
  EXPECT_GE(first.compute_seconds, 0.020);
  EXPECT_GE(first.other_seconds, 0.010);
  EXPECT_EQ(first.checkpoint_seconds, 0);
  EXPECT_NEAR(
      first.compute_seconds + first.checkpoint_seconds + first.eval_seconds + first.other_seconds,
      first.seconds, 1e-12);
  {
    PhaseTimer saving(clock, StepPhase::kCheckpoint);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  clock.add(StepPhase::kEval, 0.0);
  StepTimes second = clock.finish_step();
  EXPECT_GE(second.checkpoint_seconds, 0.030);
  EXPECT_EQ(second.compute_seconds, 0);  // the first interval's compute is not carried over
  EXPECT_GE(second.seconds, second.checkpoint_seconds);
  EXPECT_NEAR(second.compute_seconds + second.checkpoint_seconds + second.eval_seconds +
                  second.other_seconds,
              second.seconds, 1e-12);
}

TEST(StartupLines, MemstatsAsMaxTextPrintsItWithPython) {
  // Python: round(1.5, 2) -> 1.5, round(16.0, 2) -> 16.0, f"{1.5/16:%}" -> 9.375000%.
  const int64_t gib = int64_t{1} << 30;
  EXPECT_EQ(
      memstats_lines(gib + gib / 2, 16 * gib, 3),
      "\nMemstats: After params initialized:\n\tUsing (GB) 1.5 / 16.0 (9.375000%) on cpu:3\n");
  // round(0.0123 GiB, 2) -> 0.01; round(95.74, 2) -> 95.74; 0.0 stays "0.0".
  EXPECT_EQ(python_round2(0.0123), "0.01");
  EXPECT_EQ(python_round2(95.7412), "95.74");
  EXPECT_EQ(python_round2(0.0), "0.0");
  EXPECT_EQ(python_string_list({"steps", "run_name"}), "['steps', 'run_name']");
  EXPECT_EQ(python_string_list({}), "[]");
}

TEST(RunOutputs, MaxTextsLayoutUnderTheBaseDirectory) {
  auto o = run_outputs({}, "/base/", "r1");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->run_directory, "/base/r1/");
  EXPECT_EQ(o->metrics_dir, "/base/r1/metrics/");
  EXPECT_EQ(o->tensorboard_dir, "/base/r1/tensorboard/");
  EXPECT_EQ(o->logs_dir, "/base/r1/logs/");
  EXPECT_EQ(o->config_file, "/base/r1/config.yml");
  EXPECT_EQ(default_metrics_file(*o), "/base/r1/metrics/metrics.jsonl");
  EXPECT_TRUE(o->enable_tensorboard);  // MaxText's default
  EXPECT_FALSE(o->save_config);
  auto defaults = run_outputs({}, "", "r2");
  EXPECT_EQ(defaults->run_directory, "./maxtext_output/r2/");
  auto given = run_outputs({{"enable_tensorboard", "False"},
                            {"save_config_to_gcs", "true"},
                            {"cpu_peak_tflops", "1.25"}},
                           "/b", "r", {{"tensorboard_dir", "/tb"}});
  ASSERT_TRUE(given.ok());
  EXPECT_FALSE(given->enable_tensorboard);
  EXPECT_TRUE(given->save_config);
  EXPECT_EQ(given->cpu_peak_tflops, 1.25);
  EXPECT_EQ(given->tensorboard_dir, "/tb/");
  auto bad = run_outputs({{"cpu_peak_tflops", "-2"}}, "/b", "r");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().exit_code(), 2);
  EXPECT_EQ(bad.error().message(),
            "cpu_peak_tflops=-2: expected a number of TFLOP/s >= 0 (0 = measure at start-up)");
  auto bad_flag = run_outputs({{"enable_tensorboard", "maybe"}}, "/b", "r");
  ASSERT_FALSE(bad_flag.ok());
  EXPECT_EQ(bad_flag.error().message(), "enable_tensorboard=maybe: expected true or false");
}

TEST(RunOutputs, ConfigYmlIsWrittenWholeWithQuotedTextAndNoSecret) {
  fs::path dir = fs::temp_directory_path() / ("precast_metrics_cfg_" + std::to_string(getpid()));
  fs::remove_all(dir);
  auto o = run_outputs({}, dir.string(), "r");
  ASSERT_TRUE(create_run_directories(*o).ok());
  ASSERT_TRUE(write_resolved_config(*o, {{"steps", "5"},
                                         {"hf_access_token", "secret"},
                                         {"run_name", "r"},
                                         {"mlp_activations", "['silu', 'linear']"},
                                         {"note", "a: b # c"}})
                  .ok());
  std::ifstream in(dir / "r" / "config.yml");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(),
            "# The resolved config of this run (precast-run, save_config_to_gcs=true).\n"
            "mlp_activations: ['silu', 'linear']\n"
            "note: 'a: b # c'\n"
            "run_name: r\n"
            "steps: 5\n");
  EXPECT_FALSE(fs::exists(dir / "r" / "config.yml.tmp"));
  for (const char* sub : {"metrics", "logs", "tensorboard"})
    EXPECT_TRUE(fs::is_directory(dir / "r" / sub)) << sub;
  fs::remove_all(dir);
}

TEST(PeakProbe, MeasuresAPositiveRateInAFewMilliseconds) {
  ThreadPool pool(1);
  auto start = std::chrono::steady_clock::now();
  double peak = measure_peak_tflops(pool);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // One core does at least one scalar FMA per ns and at most 2 x 16 lanes x 2 FLOPs x 6 GHz.
  EXPECT_GT(peak, 0.001);
  EXPECT_LT(peak, 0.4);
  EXPECT_LT(seconds, 0.5);
}

}  // namespace
}  // namespace precast::runtime
