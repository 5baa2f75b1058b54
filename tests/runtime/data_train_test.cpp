// precast-run on token and text datasets (runtime/data), with a tiny llama2 (V 259, T 32, 4 rows):
// the loss of packed documents equals the loss of the same documents one per row; num_epoch
// ends the run; a run resumed from a checkpoint mid-epoch is bitwise equal to an uninterrupted
// one (metrics, state and data position); bad data is refused with exit 2 naming the file and
// offset before the first step; `precast tokenize` writes a token file and its entropy; a resume
// across synthetic and token data, or onto another synthetic seed, is refused with exit 4.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "runtime/data/Fingerprint.h"
#include "runtime/data/TokenFile.h"
#include "runtime/data/Tokenize.h"
#include "tests/support/Command.h"
#include "tests/support/MetricsLines.h"

namespace precast {
namespace {

namespace fs = std::filesystem;

using Result = testing::CommandResult;

using testing::file_bytes;
using testing::metrics_by_step;

double metric(const std::string& line, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(line, m, std::regex("\"" + name + "\": ([^,]+),"))) return NAN;
  return std::stod(m[1]);
}

// Documents of the given lengths: BOS 256, bytes drawn from a fixed LCG, EOS 257.
data::TokenDocuments documents_of(const std::vector<int>& lengths) {
  data::TokenDocuments docs;
  uint32_t state = 12345;
  for (int n : lengths) {
    std::vector<uint32_t> d{256};
    for (int i = 1; i + 1 < n; ++i) {
      state = state * 1103515245u + 12345u;
      d.push_back((state >> 16) % 256);
    }
    d.push_back(257);
    docs.add_document(d);
  }
  return docs;
}

class DataTrain : public ::testing::Test {
 protected:
  // The tiny llama2 (E 64, 2 layers, H 4, D 16, M 128, V 259, T 32, 4 rows, f32) is compiled at
  // build time (tests/runtime/CMakeLists.txt).
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        ("precast_data_train_test_" + std::to_string(getpid())));
    fs::create_directories(*dir_);
    ASSERT_TRUE(fs::exists(PRECAST_DATA_TRAIN_ARTIFACT));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static Result precast_run(const std::vector<std::string>& args) {
    std::string c = std::string(PRECAST_RUN_BINARY) + " " + PRECAST_DATA_TRAIN_ARTIFACT +
                    " num_threads=1 learning_rate=1e-2";
    for (const std::string& a : args) c += " " + a;
    return testing::run_command(c);
  }
  static std::string write(const std::string& name, const data::TokenDocuments& docs) {
    std::string path = (*dir_ / name).string();
    EXPECT_TRUE(data::write_token_file(path, docs).ok());
    return path;
  }

  static fs::path* dir_;
};

fs::path* DataTrain::dir_ = nullptr;

TEST_F(DataTrain, PackedDocumentsGiveTheLossOfTheSameDocumentsOnePerRow) {
  // Packed into 32-token rows: 10 + 14 in row 0, 20 + 9 in row 1, rows 2 and 3 padding.
  // Unpacked: one document per row. Either way 9 + 13 + 19 + 8 = 49 targets.
  std::string path = write("four.tokens", documents_of({10, 14, 20, 9}));
  std::map<bool, double> loss;
  for (bool packing : {true, false}) {
    std::string metrics = (*dir_ / (packing ? "packed.jsonl" : "unpacked.jsonl")).string();
    Result r = precast_run(
        {"steps=1", "dataset_type=tokens", "dataset_path=" + path, "enable_data_shuffling=false",
         std::string("packing=") + (packing ? "true" : "false"), "metrics_file=" + metrics});
    ASSERT_EQ(r.code, 0) << r.output;
    std::string line = metrics_by_step(metrics)[0];
    EXPECT_EQ(metric(line, "learning/total_weights"), 49.0) << line;
    loss[packing] = metric(line, "learning/loss");
  }
  EXPECT_GT(loss[true], 5.0);  // about ln 259 = 5.56 at initialisation
  EXPECT_NEAR(loss[true], loss[false], 2e-6 * loss[false]);
}

TEST_F(DataTrain, TheRunEndsWhenNumEpochPassesAreDone) {
  // Without shuffling each 4-row batch holds two passes (2 rows each): step 0 passes 1 and 2,
  // step 1 pass 3 and two rows of padding, then the data is used up.
  std::string path = write("epochs.tokens", documents_of({10, 14, 20, 9}));
  std::string metrics = (*dir_ / "epochs.jsonl").string();
  std::vector<std::string> args{"steps=10",
                                "dataset_type=tokens",
                                "dataset_path=" + path,
                                "enable_data_shuffling=false",
                                "num_epoch=3",
                                "metrics_file=" + metrics,
                                "enable_checkpointing=true",
                                "base_output_directory=" + (*dir_ / "out").string(),
                                "run_name=epochs"};
  Result r = precast_run(args);
  ASSERT_EQ(r.code, 0) << r.output;
  std::map<int, std::string> lines = metrics_by_step(metrics);
  ASSERT_EQ(lines.size(), 2u) << r.output;
  EXPECT_EQ(metric(lines[0], "learning/total_weights"), 98.0);
  EXPECT_EQ(metric(lines[1], "learning/total_weights"), 49.0);
  EXPECT_NE(r.output.find("The dataset's num_epoch=3 epochs are done after step 1: ending the run"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("Dataset: 1 file(s), 4 documents trained on (53 tokens), 0 held out"),
            std::string::npos)
      << r.output;
  // The last step's checkpoint is saved (its data position at the end: epoch 3); a restarted
  // run resumes there and ends at once.
  std::string meta = file_bytes(*dir_ / "out" / "epochs" / "checkpoints" / "1" / "metadata.json");
  EXPECT_NE(meta.find("\"epoch\": 3, \"document\": 0, \"offset\": 0, \"next_step\": 2"),
            std::string::npos)
      << meta;
  Result again = precast_run(args);
  ASSERT_EQ(again.code, 0) << again.output;
  EXPECT_NE(again.output.find("Restored the checkpoint of step 1 from"), std::string::npos);
  EXPECT_NE(again.output.find("epochs are done after step 1"), std::string::npos) << again.output;
  EXPECT_EQ(again.output.find("completed step"), std::string::npos) << again.output;
}

TEST_F(DataTrain, AResumeMidEpochIsBitwiseEqualToAnUninterruptedRun) {
  // Every fortunes file (about 14,500 training documents): 12 steps stay inside the first epoch.
  std::vector<std::string> inputs;
  for (const fs::directory_entry& e : fs::directory_iterator("/usr/share/games/fortunes")) {
    std::string ext = e.path().extension().string();
    if (e.is_regular_file() && ext != ".dat" && ext != ".u8") inputs.push_back(e.path().string());
  }
  std::string corpus = (*dir_ / "fortunes.tokens").string();
  ASSERT_TRUE(data::tokenize_files(inputs, corpus, "%").ok());
  auto args = [&](const std::string& run, int steps, const std::string& metrics) {
    return std::vector<std::string>{"steps=" + std::to_string(steps),
                                    "learning_rate_schedule_steps=12",
                                    "dataset_type=tokens",
                                    "dataset_path=" + corpus,
                                    "data_shuffle_seed=5",
                                    "enable_checkpointing=true",
                                    "checkpoint_period=4",
                                    "base_output_directory=" + (*dir_ / "out").string(),
                                    "run_name=" + run,
                                    "metrics_file=" + (*dir_ / metrics).string()};
  };
  Result whole = precast_run(args("whole", 12, "whole.jsonl"));
  ASSERT_EQ(whole.code, 0) << whole.output;
  Result first = precast_run(args("split", 6, "first.jsonl"));  // checkpoints 0, 4 and 5
  ASSERT_EQ(first.code, 0) << first.output;
  Result second = precast_run(args("split", 12, "second.jsonl"));
  ASSERT_EQ(second.code, 0) << second.output;
  EXPECT_NE(second.output.find("Restored the checkpoint of step 5 from"), std::string::npos)
      << second.output;

  std::map<int, std::string> reference = metrics_by_step(*dir_ / "whole.jsonl");
  std::map<int, std::string> resumed = metrics_by_step(*dir_ / "second.jsonl");
  ASSERT_EQ(reference.size(), 12u);
  ASSERT_EQ(resumed.size(), 6u);
  for (const auto& [step, line] : resumed) EXPECT_EQ(line, reference[step]) << step;
  for (const auto& [step, line] : metrics_by_step(*dir_ / "first.jsonl")) {
    EXPECT_EQ(line, reference[step]) << step;
  }
  // The checkpoint resumed from was mid-epoch: a later document of epoch 0.
  fs::path checkpoints = *dir_ / "out" / "split" / "checkpoints";
  std::smatch m;
  std::string meta5 = file_bytes(checkpoints / "5" / "metadata.json");
  ASSERT_TRUE(std::regex_search(
      meta5, m, std::regex(R"("epoch": 0, "document": (\d+), "offset": (\d+), "next_step": 6)")))
      << meta5;
  EXPECT_GT(std::stoi(m[1]), 0);
  // The final state and data position are the same bytes.
  fs::path whole_last = *dir_ / "out" / "whole" / "checkpoints" / "11";
  EXPECT_TRUE(file_bytes(whole_last / "state.safetensors") ==
              file_bytes(checkpoints / "11" / "state.safetensors"));
  EXPECT_EQ(file_bytes(whole_last / "metadata.json"),
            file_bytes(checkpoints / "11" / "metadata.json"));

  // Resuming on other data is refused (exit 4) rather than continued at a meaningless place.
  std::vector<std::string> other = args("split", 14, "third.jsonl");
  other.push_back("data_shuffle_seed=6");
  Result refused = precast_run(other);
  EXPECT_EQ(refused.code, 4) << refused.output;
  EXPECT_NE(refused.output.find("data_shuffle_seed 5 (this run: 6)"), std::string::npos)
      << refused.output;
}

TEST_F(DataTrain, BadDataIsRefusedWithExit2NamingTheFileAndOffsetBeforeTheFirstStep) {
  data::TokenDocuments docs = documents_of({10, 14, 20, 9});
  std::string good = write("good.tokens", docs);
  std::string bytes = file_bytes(good);
  auto refused = [&](const std::string& path, const std::string& expected) {
    Result r = precast_run({"steps=1", "dataset_type=tokens", "dataset_path=" + path});
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("precast-run: error: " + expected), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("completed step"), std::string::npos) << r.output;
  };
  std::string magic = (*dir_ / "magic.tokens").string();
  std::ofstream(magic, std::ios::binary) << "NOTATOKENFILE" << bytes.substr(13);
  refused(magic, magic + ": offset 0: the file starts with bytes 4e4f5441544f4b45");

  // 48 header bytes, 5 offsets of 8 bytes, 53 uint16 tokens = 194 bytes; cut 2.
  ASSERT_EQ(bytes.size(), 194u);
  std::string truncated = (*dir_ / "truncated.tokens").string();
  std::ofstream(truncated, std::ios::binary) << bytes.substr(0, 192);
  refused(truncated, truncated +
                         ": offset 192: truncated: the header (offset 16) records 53 "
                         "tokens of 2 bytes and 4 documents, which take 194 bytes");

  // Token 2 of document 1 is token 12 of the file: offset 48 + 40 + 12 * 2 = 112.
  data::TokenDocuments big = docs;
  big.tokens[12] = 300;
  std::string large = write("large.tokens", big);
  refused(large, large +
                     ": offset 112: token id 300 (document 1, token 2) is not below "
                     "vocab_size=259");

  std::string empty = write("empty.tokens", data::TokenDocuments{});
  refused(empty, "dataset_path=" + empty + ": the dataset is empty: 1 file(s) hold 0 document(s)");
  Result r = precast_run({"steps=1", "dataset_type=tokens", "dataset_path=" + empty});
  EXPECT_NE(r.output.find(empty + ": offset 24: 0 document(s) with tokens"), std::string::npos)
      << r.output;

  std::string glob = (*dir_ / "*.nothing").string();
  refused(glob, "dataset_path: the glob '" + glob + "' matches no file");
}

TEST_F(DataTrain, TokenizeWritesATokenFileAndTheTextDatasetTrains) {
  fs::path text_dir = *dir_ / "text";
  fs::create_directories(text_dir);
  std::ofstream(text_dir / "a.txt") << "ab\n%\nab\n";
  fs::path out = *dir_ / "ab.tokens";
  Result r = testing::run_command(std::string(PRECAST_BINARY) + " tokenize " +
                                  (text_dir / "a.txt").string() + " -o " + out.string() +
                                  " --separator=%");
  ASSERT_EQ(r.code, 0) << r.output;
  // Two documents "ab\n" (BOS a b \n EOS each); predicted: a, b, \n, EOS twice, 2 bits.
  EXPECT_NE(r.output.find("Wrote " + out.string() + ": 1 files, 2 documents, 10 tokens"),
            std::string::npos)
      << r.output;
  EXPECT_NE(
      r.output.find("Unigram entropy of the predicted tokens: 2.0000 bits = 1.3863 nats per token"),
      std::string::npos)
      << r.output;
  Expected<data::TokenDocuments> back = data::read_token_file(out.string());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->starts, (std::vector<uint64_t>{0, 5, 10}));

  // A missing input writes nothing.
  fs::path none = *dir_ / "none.tokens";
  Result missing =
      testing::run_command(std::string(PRECAST_BINARY) + " tokenize " +
                           (text_dir / "absent.txt").string() + " -o " + none.string());
  EXPECT_EQ(missing.code, 2) << missing.output;
  EXPECT_FALSE(fs::exists(none));

  // dataset_type=text reads a directory's files as documents of bytes.
  Result text = precast_run({"steps=2", "dataset_type=text", "dataset_path=" + text_dir.string()});
  ASSERT_EQ(text.code, 0) << text.output;
  EXPECT_NE(text.output.find("Dataset: 1 file(s), 1 documents trained on (10 tokens)"),
            std::string::npos)
      << text.output;
}

// A checkpoint of synthetic data resumed on token data, one of token data resumed on synthetic
// data, or one of synthetic data resumed with another data_shuffle_seed is refused (exit 4)
// naming the difference with both values, before any step and without touching the checkpoints;
// the same synthetic data resumes.
TEST_F(DataTrain, AResumeOnAnotherKindOfDataIsRefusedWithExit4NamingWhatDiffers) {
  std::string tokens = write("kinds.tokens", documents_of(std::vector<int>(40, 30)));
  const fs::path out = *dir_ / "kinds";
  auto run = [&](const std::string& name, int steps, std::vector<std::string> extra) {
    std::vector<std::string> args{"steps=" + std::to_string(steps), "enable_checkpointing=true",
                                  "checkpoint_period=10", "base_output_directory=" + out.string(),
                                  "run_name=" + name};
    args.insert(args.end(), extra.begin(), extra.end());
    return precast_run(args);
  };
  auto refused = [&](const Result& r, const std::string& difference) {
    EXPECT_EQ(r.code, 4) << r.output;
    EXPECT_NE(
        r.output.find("the checkpoint's data position belongs to another dataset: " + difference),
        std::string::npos)
        << r.output;
    EXPECT_EQ(r.output.find("completed step"), std::string::npos) << r.output;
  };
  const std::vector<std::string> token_data{"dataset_type=tokens", "dataset_path=" + tokens};

  Result synthetic = run("synthetic", 2, {"data_shuffle_seed=3"});  // saves steps 0 and 1
  ASSERT_EQ(synthetic.code, 0) << synthetic.output;
  const fs::path synthetic_checkpoints = out / "synthetic" / "checkpoints";
  EXPECT_NE(file_bytes(synthetic_checkpoints / "1" / "metadata.json")
                .find("\"data\": {\"dataset_type\": \"synthetic\", \"data_shuffle_seed\": 3, "
                      "\"next_step\": 2}"),
            std::string::npos);
  std::vector<std::string> on_tokens = token_data;
  on_tokens.push_back("data_shuffle_seed=3");
  refused(run("synthetic", 4, on_tokens), "dataset_type synthetic (this run: tokens)");
  refused(run("synthetic", 4, {"data_shuffle_seed=9"}), "data_shuffle_seed 3 (this run: 9)");
  std::vector<std::string> left;
  for (const fs::directory_entry& e : fs::directory_iterator(synthetic_checkpoints)) {
    left.push_back(e.path().filename().string());
  }
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"0", "1"}));
  Result resumed = run("synthetic", 3, {"data_shuffle_seed=3"});
  EXPECT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("Restored the checkpoint of step 1 from"), std::string::npos)
      << resumed.output;

  Result on_token_data = run("tokens", 2, token_data);
  ASSERT_EQ(on_token_data.code, 0) << on_token_data.output;
  refused(run("tokens", 4, {}), "dataset_type tokens (this run: synthetic)");
}

// A token file rewritten with the same document and token counts but other tokens: the resume
// is refused (exit 4) naming the file and both CRC-32C fingerprints (this run's is the CRC of the
// new file's bytes, the checkpoint's that of the old, each computed here by the table method),
// before any step; the checkpoint records the fingerprint in its "files" list.
TEST_F(DataTrain, AResumeOntoOtherContentWithTheSameCountsIsRefusedNamingBothFingerprints) {
  data::TokenDocuments docs = documents_of(std::vector<int>(40, 30));
  std::string tokens = write("content.tokens", docs);
  const uint32_t before = data::content_crc32c_portable(file_bytes(tokens).data(),
                                                        file_bytes(tokens).size());
  const fs::path out = *dir_ / "content";
  auto run = [&](int steps) {
    return precast_run({"steps=" + std::to_string(steps), "enable_checkpointing=true",
                        "checkpoint_period=10", "base_output_directory=" + out.string(),
                        "run_name=r", "dataset_type=tokens", "dataset_path=" + tokens});
  };
  Result first = run(2);
  ASSERT_EQ(first.code, 0) << first.output;
  const std::string size = std::to_string(fs::file_size(tokens));
  EXPECT_NE(file_bytes(out / "r" / "checkpoints" / "1" / "metadata.json")
                .find(fmt::format("\"files\": [{{\"path\": \"{}\", \"bytes\": {}, \"crc32c\": \"{:08x}\"}}]",
                                  tokens, size, before)),
            std::string::npos)
      << file_bytes(out / "r" / "checkpoints" / "1" / "metadata.json");

  for (uint32_t& t : docs.tokens) {
    if (t < 256) t = 255 - t;  // other bytes, the same BOS/EOS and counts
  }
  write("content.tokens", docs);
  ASSERT_EQ(std::to_string(fs::file_size(tokens)), size);
  const uint32_t after = data::content_crc32c_portable(file_bytes(tokens).data(),
                                                       file_bytes(tokens).size());
  ASSERT_NE(before, after);
  Result refused = run(4);
  EXPECT_EQ(refused.code, 4) << refused.output;
  EXPECT_NE(refused.output.find(fmt::format(
                "the checkpoint's data position belongs to another dataset: {} (file 1 of "
                "dataset_path) has content fingerprint crc32c {:08x} of {} bytes, but the "
                "checkpoint recorded crc32c {:08x} of {} bytes for {}",
                tokens, after, size, before, size, tokens)),
            std::string::npos)
      << refused.output;
  EXPECT_EQ(refused.output.find("completed step"), std::string::npos) << refused.output;
}

}  // namespace
}  // namespace precast
