// runtime/checkpoint: the safetensors bytes worked by hand, decoded by plain Python (struct +
// json) to values written here as literals, a save/load round trip bitwise, every kind of damage
// (flipped byte, truncation, missing file, no commit marker, a foreign header) refused naming
// the file, damaged checkpoints skipped at resume, another run's checkpoint refused (exit 4)
// naming what differs, and max_num_checkpoints_to_keep; a state of several 4 MiB chunks hashed as
// written and as read to the digest `sha256sum` computes.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/CheckpointWriter.h"
#include "runtime/checkpoint/DurableFile.h"
#include "runtime/checkpoint/JsonValue.h"
#include "runtime/checkpoint/Safetensors.h"

namespace precast::checkpoint {
namespace {

namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("precast_checkpoint_test_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
};

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

// One tensor of every dtype, each holding values whose little-endian bytes are known by hand.
struct Sample {
  std::vector<float> f32{1.0f, -2.5f, 0.25f, 3.0f, -0.0f, 100.0f};  // [2, 3]
  std::vector<double> f64{0.5, -1.0};                              // [2]
  std::vector<uint16_t> bf16{0x3F80, 0xC040};                      // 1.0, -3.0
  std::vector<uint16_t> f16{0x3C00, 0xC000, 0x3800};               // 1.0, -2.0, 0.5
  std::vector<int32_t> s32{-2, 7};
  std::vector<uint32_t> u32{4000000000u};
  std::vector<uint8_t> pred{1, 0, 1};

  std::vector<TensorView> views() const {
    return {{"decoder.layers_0.mlp.wi_0.kernel", "f32", {2, 3}, f32.data()},
            {"f64_values", "f64", {2}, f64.data()},
            {"bf16_values", "bf16", {1, 2}, bf16.data()},
            {"f16_values", "f16", {3}, f16.data()},
            {"count", "s32", {2}, s32.data()},
            {"u32_values", "u32", {}, u32.data()},
            {"mask", "pred", {3}, pred.data()}};
  }
};

const CheckpointIdentity kIdentity{"abc123", 1};

// restore_latest_checkpoint of the run's checkpoints in `dir` straight into `target`'s buffers.
Expected<std::optional<int64_t>> restore_into(const fs::path& dir, Sample& target,
                                              std::ostream* log) {
  std::vector<TensorView> views = target.views();
  std::vector<void*> destinations;
  for (TensorView& v : views) destinations.push_back(const_cast<void*>(v.data));
  return restore_latest_checkpoint(dir.string(), kIdentity, views, destinations, log);
}

std::string encode_file(const std::vector<TensorView>& views) {
  std::string header;
  EXPECT_TRUE(encode_safetensors(views, header).ok());
  std::string bytes = header;
  for (const TensorView& v : views) {
    bytes.append(static_cast<const char*>(v.data), static_cast<size_t>(tensor_view_bytes(v)));
  }
  return bytes;
}

TEST(Safetensors, OneTensorFileIsTheBytesWorkedByHand) {
  const float values[2] = {1.0f, -2.0f};
  std::string bytes = encode_file({{"w", "f32", {2}, values}});
  // The header JSON, padded with spaces so that the data starts at byte 4096 (8 + 4088), then
  // 1.0f and -2.0f little-endian.
  std::string json =
      "{\"__metadata__\":{\"format\":\"pt\",\"producer\":\"precast\"},"
      "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
  ASSERT_EQ(json.size(), 106u);
  json += std::string(4088 - 106, ' ');
  // 4088 = 0x0FF8, little-endian.
  std::string expected = std::string("\xf8\x0f\0\0\0\0\0\0", 8) + json +
                         std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8);
  EXPECT_EQ(bytes, expected);
}

TEST_F(CheckpointTest, PlainPythonDecodesEveryDtypeToTheValuesWritten) {
  Sample sample;
  fs::path file = dir_ / "sample.safetensors";
  write_bytes(file, encode_file(sample.views()));
  fs::path script = dir_ / "decode.py";
  write_bytes(script, R"PY(import json, struct, sys
raw = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
fmt = {'F32': ('f', 4), 'F64': ('d', 8), 'F16': ('e', 2), 'I32': ('i', 4), 'U32': ('I', 4),
       'BOOL': ('?', 1), 'BF16': (None, 2)}
for name in sorted(k for k in header if k != '__metadata__'):
    e = header[name]
    b, end = e['data_offsets']
    code, size = fmt[e['dtype']]
    chunk = data[b:end]
    if code is None:
        vals = [struct.unpack('<f', b'\x00\x00' + chunk[i:i + 2])[0] for i in range(0, len(chunk), 2)]
    else:
        vals = list(struct.unpack('<%d%s' % (len(chunk) // size, code), chunk))
    print(name, e['dtype'], e['shape'], ' '.join(repr(v) for v in vals))
)PY");
  std::string command = "/usr/bin/python3 " + script.string() + " " + file.string() + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) out.append(buffer.data(), n);
  ASSERT_EQ(pclose(pipe), 0) << out;
  EXPECT_EQ(out,
            "bf16_values BF16 [1, 2] 1.0 -3.0\n"
            "count I32 [2] -2 7\n"
            "decoder.layers_0.mlp.wi_0.kernel F32 [2, 3] 1.0 -2.5 0.25 3.0 -0.0 100.0\n"
            "f16_values F16 [3] 1.0 -2.0 0.5\n"
            "f64_values F64 [2] 0.5 -1.0\n"
            "mask BOOL [3] True False True\n"
            "u32_values U32 [] 4000000000\n");
}

TEST(Safetensors, DecodeGivesBackEveryTensorBitwise) {
  Sample sample;
  std::vector<TensorView> views = sample.views();
  Expected<std::vector<Tensor>> tensors = decode_safetensors(encode_file(views), "x.safetensors");
  ASSERT_TRUE(tensors.ok()) << tensors.error().message();
  ASSERT_EQ(tensors->size(), views.size());
  for (size_t i = 0; i < views.size(); ++i) {  // data offsets follow the written order
    const Tensor& t = (*tensors)[i];
    EXPECT_EQ(t.name, views[i].name);
    EXPECT_EQ(t.dtype, views[i].dtype);
    EXPECT_EQ(t.shape, views[i].shape);
    ASSERT_EQ(t.bytes.size(), static_cast<size_t>(tensor_view_bytes(views[i])));
    EXPECT_EQ(std::memcmp(t.bytes.data(), views[i].data, t.bytes.size()), 0) << t.name;
  }
}

TEST(Safetensors, DamagedOrForeignFilesAreRefusedNamingTheFieldAndValue) {
  const float values[2] = {1.0f, -2.0f};
  const std::string good = encode_file({{"w", "f32", {2}, values}});
  auto error_of = [](const std::string& bytes) {
    Expected<std::vector<Tensor>> r = decode_safetensors(bytes, "state.safetensors");
    EXPECT_FALSE(r.ok());
    if (r.ok()) return std::string();
    EXPECT_EQ(r.error().code(), ExitCode::kIncompatible);
    return r.error().message();
  };
  EXPECT_NE(error_of(good.substr(0, 5)).find("state.safetensors: 5 bytes, fewer than the 8-byte"),
            std::string::npos);
  EXPECT_NE(error_of(good.substr(0, 60)).find("header length at byte 0 is 4088, but the file has 60"),
            std::string::npos);
  EXPECT_NE(error_of(good.substr(0, good.size() - 1))
                .find("tensor w ends at data byte 8 (file byte 4104), but the file has 4103 bytes"),
            std::string::npos);
  std::string extra = good + "xxxx";
  EXPECT_NE(error_of(extra).find("the tensors cover 8 data bytes, but 12 follow the header"),
            std::string::npos);
  std::string wrong_span = good;
  wrong_span.replace(wrong_span.find("[0,8]"), 5, "[0,4]");
  EXPECT_NE(error_of(wrong_span).find("tensor w (F32 2) needs 8 bytes but data_offsets [0, 4]"),
            std::string::npos);
  std::string foreign = good;
  foreign.replace(foreign.find("\"F32\""), 5, "\"I64\"");
  EXPECT_NE(error_of(foreign).find("tensor w has dtype I64, which Precast does not train with"),
            std::string::npos);
  std::string broken = good;
  broken[8] = '[';
  EXPECT_NE(error_of(broken).find("invalid JSON at byte"), std::string::npos);
}

TEST(JsonValue, ParsesWhatTheCheckpointWritesAndNamesTheOffsetOfAnError) {
  Expected<JsonValue> v = parse_json(R"({"a": [1, -2, 3.5e2], "b": "x\"\u00e9", "c": {"d": true, "e": null}})");
  ASSERT_TRUE(v.ok()) << v.error().message();
  int64_t one = 0;
  EXPECT_TRUE(v->find("a")->items[0].as_int(one));
  EXPECT_EQ(one, 1);
  EXPECT_FALSE(v->find("a")->items[2].as_int(one));
  EXPECT_EQ(v->find("b")->text, "x\"\xc3\xa9");
  EXPECT_TRUE(v->find("c")->find("d")->boolean);
  Expected<JsonValue> bad = parse_json("{\"a\": 1,}");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message(), "invalid JSON at byte 8: expected a member name");
  EXPECT_FALSE(parse_json("{\"a\": 1, \"a\": 2}").ok());
}


TEST_F(CheckpointTest, SaveThenReadGivesTheStateBitwiseWithMetadataAndMarker) {
  Sample sample;
  ASSERT_TRUE(save_checkpoint(dir_.string(), 6, kIdentity, sample.views(), 0).ok());
  fs::path step = dir_ / "6";
  EXPECT_TRUE(fs::exists(step / kStateFile));
  EXPECT_TRUE(fs::exists(step / kMetadataFile));
  EXPECT_TRUE(fs::exists(step / kCommitMarker));
  EXPECT_FALSE(fs::exists(dir_ / "6.tmp"));
  // The state file is exactly the safetensors encoding of the views.
  EXPECT_EQ(file_bytes(step / kStateFile), encode_file(sample.views()));
  Expected<LoadedCheckpoint> loaded = read_checkpoint(step.string());
  ASSERT_TRUE(loaded.ok()) << loaded.error().message();
  EXPECT_EQ(loaded->step, 6);
  EXPECT_EQ(loaded->identity.config_hash, "abc123");
  EXPECT_EQ(loaded->identity.world_size, 1);
  EXPECT_TRUE(check_checkpoint_matches(*loaded, kIdentity, sample.views()).ok());

  // Restored into fresh buffers: the same bits.
  Sample target;
  std::fill(target.f32.begin(), target.f32.end(), 9.0f);
  std::fill(target.s32.begin(), target.s32.end(), 0);
  std::ostringstream log;
  Expected<std::optional<int64_t>> restored = restore_into(dir_, target, &log);
  ASSERT_TRUE(restored.ok()) << restored.error().message();
  ASSERT_TRUE(restored->has_value());
  EXPECT_EQ(**restored, 6);
  EXPECT_EQ(std::memcmp(target.f32.data(), sample.f32.data(), sample.f32.size() * 4), 0);
  EXPECT_EQ(target.s32, sample.s32);
  EXPECT_EQ(log.str(), "");

  // metadata.json read by plain Python: step and the state file's SHA-256 (hashlib).
  std::string command = "/usr/bin/python3 -c \"import json,hashlib,sys; d=sys.argv[1]; "
                        "m=json.load(open(d+'/metadata.json')); "
                        "h=hashlib.sha256(open(d+'/state.safetensors','rb').read()).hexdigest(); "
                        "print(m['step'], m['world_size'], m['config_hash'], "
                        "m['files']['state.safetensors']['sha256']==h, "
                        "open(d+'/commit_success.txt').read().strip()=="
                        "hashlib.sha256(open(d+'/metadata.json','rb').read()).hexdigest())\" " +
                        step.string();
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::array<char, 256> buffer{};
  std::string out(buffer.data(), fread(buffer.data(), 1, buffer.size(), pipe));
  pclose(pipe);
  EXPECT_EQ(out, "6 1 abc123 True True\n");
}

TEST_F(CheckpointTest, EveryKindOfDamageIsRefusedNamingTheFile) {
  Sample sample;
  ASSERT_TRUE(save_checkpoint(dir_.string(), 2, kIdentity, sample.views(), 0).ok());
  const fs::path original = dir_ / "2";
  struct Case {
    std::string name;
    std::function<void(const fs::path&)> damage;
    std::string file;
    std::string says;
  };
  std::vector<Case> cases = {
      {"flipped", [](const fs::path& d) {
         std::string b = file_bytes(d / kStateFile);
         b[b.size() - 3] ^= 0x10;
         write_bytes(d / kStateFile, b);
       }, kStateFile, "differs from"},
      {"truncated", [](const fs::path& d) {
         std::string b = file_bytes(d / kStateFile);
         write_bytes(d / kStateFile, b.substr(0, b.size() - 4));
       }, kStateFile, "truncated"},
      {"missing", [](const fs::path& d) { fs::remove(d / kStateFile); }, kStateFile,
       "cannot open it"},
      {"uncommitted", [](const fs::path& d) { fs::remove(d / kCommitMarker); }, kCommitMarker,
       "never committed"},
      {"metadata", [](const fs::path& d) {
         std::string b = file_bytes(d / kMetadataFile);
         b[b.find("\"step\": 2")+8] = '3';
         write_bytes(d / kMetadataFile, b);
       }, kMetadataFile, "differs from"},
  };
  for (const Case& c : cases) {
    fs::path copy = dir_ / c.name;
    fs::copy(original, copy);
    c.damage(copy);
    Expected<LoadedCheckpoint> loaded = read_checkpoint(copy.string());
    ASSERT_FALSE(loaded.ok()) << c.name;
    EXPECT_EQ(loaded.error().code(), ExitCode::kIncompatible) << c.name;
    EXPECT_EQ(loaded.error().message().rfind((copy / c.file).string() + ":", 0), 0u)
        << c.name << ": " << loaded.error().message();
    EXPECT_NE(loaded.error().message().find(c.says), std::string::npos)
        << c.name << ": " << loaded.error().message();
  }
}

TEST_F(CheckpointTest, ResumeSkipsUncommittedAndDamagedCheckpointsWithAWarningNamingThem) {
  Sample sample;
  for (int64_t step : {2, 4, 6}) {
    sample.s32[0] = static_cast<int32_t>(step);
    ASSERT_TRUE(save_checkpoint(dir_.string(), step, kIdentity, sample.views(), 0).ok());
  }
  // 8 was never committed, 6 has a flipped byte, a stray temporary directory is ignored.
  fs::copy(dir_ / "4", dir_ / "8");
  fs::remove(dir_ / "8" / kCommitMarker);
  std::string b = file_bytes(dir_ / "6" / kStateFile);
  b[200] ^= 0x01;
  write_bytes(dir_ / "6" / kStateFile, b);
  fs::create_directories(dir_ / "10.tmp");
  EXPECT_EQ(committed_steps(dir_.string()), (std::vector<int64_t>{2, 4, 6}));

  std::ostringstream warnings;
  std::optional<LoadedCheckpoint> latest = latest_checkpoint(dir_.string(), &warnings);
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->step, 4);
  std::string w = warnings.str();
  EXPECT_NE(w.find("Warning: skipping checkpoint " + (dir_ / "8").string() + ": " +
                   (dir_ / "8" / kCommitMarker).string() + ": missing"),
            std::string::npos)
      << w;
  EXPECT_NE(w.find("Warning: skipping checkpoint " + (dir_ / "6").string() + ": " +
                   (dir_ / "6" / kStateFile).string() + ": SHA-256"),
            std::string::npos)
      << w;
  EXPECT_EQ(std::count(w.begin(), w.end(), '\n'), 2);
  // Nothing at all: no checkpoint, no warning.
  std::ostringstream none;
  EXPECT_FALSE(latest_checkpoint((dir_ / "absent").string(), &none).has_value());
  EXPECT_EQ(none.str(), "");

  // A new save of step 6 replaces the damaged directory.
  ASSERT_TRUE(save_checkpoint(dir_.string(), 6, kIdentity, sample.views(), 0).ok());
  EXPECT_TRUE(read_checkpoint((dir_ / "6").string()).ok());
  EXPECT_FALSE(fs::exists(dir_ / "6.replaced"));
}

TEST_F(CheckpointTest, AnotherRunsCheckpointIsRefusedNamingEachDifference) {
  Sample sample;
  ASSERT_TRUE(save_checkpoint(dir_.string(), 3, kIdentity, sample.views(), 0).ok());
  std::vector<TensorView> expected = sample.views();
  expected[0].shape = {3, 2};
  expected[1].dtype = "f32";
  expected.pop_back();  // "mask" is not in this run's state
  expected.push_back({"extra", "f32", {1}, sample.f32.data()});
  std::vector<void*> destinations(expected.size(), nullptr);
  Expected<std::optional<int64_t>> restored = restore_latest_checkpoint(
      dir_.string(), CheckpointIdentity{"def456", 2}, expected, destinations, nullptr);
  ASSERT_FALSE(restored.ok());
  EXPECT_EQ(restored.error().code(), ExitCode::kIncompatible);
  EXPECT_EQ(restored.error().message(),
            "checkpoint " + (dir_ / "3").string() +
                " does not belong to this run: config_hash abc123 (this artifact: def456); "
                "world_size 1 (this run: 2); tensor decoder.layers_0.mlp.wi_0.kernel is f32 "
                "[2, 3] (this artifact: f32 [3, 2]); tensor f64_values is f64 [2] (this "
                "artifact: f32 [2]); tensor extra is missing; tensor mask is not part of this "
                "artifact's state; resume it with the artifact it was saved with, or point "
                "checkpoint_dir (run_name, base_output_directory) elsewhere to start afresh");
}

TEST_F(CheckpointTest, OlderCheckpointsBeyondMaxToKeepAreDeletedAfterANewerCommit) {
  Sample sample;
  for (int64_t step = 0; step < 5; ++step) {
    ASSERT_TRUE(save_checkpoint(dir_.string(), step, kIdentity, sample.views(), 2).ok());
    std::vector<int64_t> expected;
    for (int64_t s = std::max<int64_t>(0, step - 1); s <= step; ++s) expected.push_back(s);
    EXPECT_EQ(committed_steps(dir_.string()), expected) << step;
  }
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++entries;
  EXPECT_EQ(entries, 2);  // nothing left over: no .tmp, .deleting or .replaced
  // 0 keeps all.
  ASSERT_TRUE(save_checkpoint(dir_.string(), 5, kIdentity, sample.views(), 0).ok());
  EXPECT_EQ(committed_steps(dir_.string()), (std::vector<int64_t>{3, 4, 5}));
}

TEST_F(CheckpointTest, InspectListsEveryTensorAndNamesADamagedFile) {
  Sample sample;
  ASSERT_TRUE(save_checkpoint(dir_.string(), 8, kIdentity, sample.views(), 0).ok());
  ASSERT_TRUE(save_checkpoint(dir_.string(), 9, kIdentity, sample.views(), 0).ok());
  Expected<std::string> report = inspect_checkpoint((dir_ / "8").string());
  ASSERT_TRUE(report.ok()) << report.error().message();
  EXPECT_NE(report->find("step 8 (a resume starts at step 9), world size 1, config hash abc123"),
            std::string::npos)
      << *report;
  EXPECT_NE(report->find("7 tensors, 65 bytes"), std::string::npos) << *report;  // 24+16+4+6+8+4+3
  EXPECT_NE(report->find("decoder.layers_0.mlp.wi_0.kernel  F32    [2, 3]            24\n"),
            std::string::npos)
      << *report;
  EXPECT_NE(report->find("u32_values                        U32    []                4\n"),
            std::string::npos)
      << *report;
  std::string b = file_bytes(dir_ / "9" / kStateFile);
  write_bytes(dir_ / "9" / kStateFile, b.substr(0, 100));
  Expected<std::string> damaged = inspect_checkpoint((dir_ / "9").string());
  ASSERT_FALSE(damaged.ok());
  EXPECT_EQ(damaged.error().code(), ExitCode::kIncompatible);
  EXPECT_EQ(damaged.error().message().rfind((dir_ / "9" / kStateFile).string() + ": 100 bytes", 0),
            0u)
      << damaged.error().message();
  Expected<std::string> all = inspect_checkpoint(dir_.string());
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->rfind((dir_ / "8").string() + ": verified, step 8\n" + (dir_ / "9").string() +
                           ": damaged: " + (dir_ / "9" / kStateFile).string() + ": 100 bytes",
                       0),
            0u)
      << *all;
  EXPECT_EQ(inspect_checkpoint((dir_ / "none").string()).error().code(), ExitCode::kUsage);
}

TEST_F(CheckpointTest, AnUnwritableDirectoryIsAnIoErrorNamingIt) {
  Sample sample;
  write_bytes(dir_ / "file", "x");
  Status s = save_checkpoint((dir_ / "file" / "sub").string(), 1, kIdentity, sample.views(), 0);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ExitCode::kFailure);
  EXPECT_NE(s.error().message().find("checkpoint_dir=" + (dir_ / "file" / "sub").string()),
            std::string::npos)
      << s.error().message();
}

// async_checkpointing: save() returns once the state is copied, so the loop may overwrite its
// buffers at once; the checkpoint holds the values at the call, bitwise as a synchronous save's.
TEST_F(CheckpointTest, AnAsynchronousSaveHoldsTheStateAsItWasWhenCalled) {
  Sample sample;
  ASSERT_TRUE(save_checkpoint((dir_ / "sync").string(), 4, kIdentity, sample.views(), 0).ok());
  CheckpointWriter writer(/*asynchronous=*/true);
  ASSERT_TRUE(writer.save((dir_ / "async").string(), 4, kIdentity, sample.views(), 0).ok());
  std::fill(sample.f32.begin(), sample.f32.end(), 9.0f);  // the next step's update
  ASSERT_TRUE(writer.wait().ok());
  EXPECT_EQ(file_bytes(dir_ / "async" / "4" / kStateFile), file_bytes(dir_ / "sync" / "4" / kStateFile));
  EXPECT_EQ(file_bytes(dir_ / "async" / "4" / kMetadataFile),
            file_bytes(dir_ / "sync" / "4" / kMetadataFile));
  std::vector<CompletedSave> done = writer.take_completed();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].step, 4);
  EXPECT_EQ(done[0].bytes, 24 + 16 + 4 + 6 + 8 + 4 + 3);  // the Sample's tensors, by hand
  EXPECT_TRUE(writer.take_completed().empty());
}

// copy_on_writer: save() returns before the copy, the writer copies, and release_state() returns
// once the copy is done; the loop may then overwrite its buffers, and the checkpoint holds the
// values at the save, bitwise as a synchronous save's. PRECAST_CHECKPOINT_COPY=caller keeps the
// copy in save().
TEST_F(CheckpointTest, AWriterThatCopiesReleasesTheStateAfterItsCopy) {
  Sample sample;
  ASSERT_TRUE(save_checkpoint((dir_ / "sync").string(), 4, kIdentity, sample.views(), 0).ok());
  CheckpointWriter writer(/*asynchronous=*/true);
  ASSERT_TRUE(writer.copy_on_writer(true));
  EXPECT_EQ(writer.release_state(), 0.0);  // no save in flight: nothing to wait for
  ASSERT_TRUE(writer.save((dir_ / "async").string(), 4, kIdentity, sample.views(), 0).ok());
  writer.release_state();
  std::fill(sample.f32.begin(), sample.f32.end(), 9.0f);  // the next step's update
  ASSERT_TRUE(writer.wait().ok());
  EXPECT_EQ(file_bytes(dir_ / "async" / "4" / kStateFile), file_bytes(dir_ / "sync" / "4" / kStateFile));
  EXPECT_EQ(file_bytes(dir_ / "async" / "4" / kMetadataFile),
            file_bytes(dir_ / "sync" / "4" / kMetadataFile));
  std::vector<CompletedSave> done = writer.take_completed();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].bytes, 24 + 16 + 4 + 6 + 8 + 4 + 3);  // the Sample's tensors, by hand

  CheckpointWriter synchronous(/*asynchronous=*/false);
  EXPECT_FALSE(synchronous.copy_on_writer(true));  // no snapshot to copy into
  ::setenv("PRECAST_CHECKPOINT_COPY", "caller", 1);
  CheckpointWriter caller(/*asynchronous=*/true);
  const bool moved = caller.copy_on_writer(true);
  ::unsetenv("PRECAST_CHECKPOINT_COPY");
  EXPECT_FALSE(moved);
}

// The benchmark knob PRECAST_CHECKPOINT_WRITER_SCHED=idle (the writer under SCHED_IDLE, put
// back to the normal policy when a save waits for it): the same files as a synchronous save.
TEST_F(CheckpointTest, AWriterUnderSchedIdleCommitsTheSameFiles) {
  Sample sample;
  ASSERT_TRUE(save_checkpoint((dir_ / "sync").string(), 4, kIdentity, sample.views(), 0).ok());
  ::setenv("PRECAST_CHECKPOINT_WRITER_SCHED", "idle", 1);
  CheckpointWriter writer(/*asynchronous=*/true);
  Status started = writer.save((dir_ / "idle").string(), 4, kIdentity, sample.views(), 0);
  Status waited = writer.wait();
  ::unsetenv("PRECAST_CHECKPOINT_WRITER_SCHED");
  ASSERT_TRUE(started.ok() && waited.ok());
  EXPECT_EQ(file_bytes(dir_ / "idle" / "4" / kStateFile), file_bytes(dir_ / "sync" / "4" / kStateFile));
  EXPECT_EQ(file_bytes(dir_ / "idle" / "4" / kMetadataFile),
            file_bytes(dir_ / "sync" / "4" / kMetadataFile));
}

// At most one save in flight: a second save waits for the first; retention then sees both.
TEST_F(CheckpointTest, AsynchronousSavesCommitInOrderOneAtATime) {
  Sample sample;
  CheckpointWriter writer(/*asynchronous=*/true);
  for (int64_t step : {2, 4, 6}) {
    sample.f64[0] = static_cast<double>(step);
    ASSERT_TRUE(writer.save(dir_.string(), step, kIdentity, sample.views(), 2).ok());
  }
  ASSERT_TRUE(writer.wait().ok());
  EXPECT_EQ(committed_steps(dir_.string()), (std::vector<int64_t>{4, 6}));
  std::vector<CompletedSave> done = writer.take_completed();
  ASSERT_EQ(done.size(), 3u);
  EXPECT_EQ(done[0].step, 2);
  EXPECT_EQ(done[2].step, 6);
  Expected<LoadedCheckpoint> six = read_checkpoint((dir_ / "6").string());
  ASSERT_TRUE(six.ok()) << six.error().message();
  double saved = 0;
  std::memcpy(&saved, six->state[1].bytes.data(), sizeof(double));
  EXPECT_EQ(saved, 6.0);
}

// A restore reads the state file once, straight into the step's buffers, hashed as read: a
// newer checkpoint with a byte flipped inside a tensor's data is skipped (one warning naming the
// file) after its bytes reached the buffers, and the older one then overwrites every buffer; a
// truncated file is refused before any byte is read; when no checkpoint verifies after a damaged
// one was read in, the run cannot start afresh: exit 4 naming the damaged directory.
TEST_F(CheckpointTest, RestoreReadsStraightIntoTheBuffersAndFallsBackPastDamage) {
  Sample sample;
  sample.s32 = {4, 4};
  ASSERT_TRUE(save_checkpoint(dir_.string(), 4, kIdentity, sample.views(), 0).ok());
  Sample newer;
  newer.s32 = {6, 6};
  std::fill(newer.f32.begin(), newer.f32.end(), 7.0f);
  ASSERT_TRUE(save_checkpoint(dir_.string(), 6, kIdentity, newer.views(), 0).ok());
  // The last data byte belongs to "mask" (the last tensor by data offset): value 1 becomes 0x11.
  std::string b = file_bytes(dir_ / "6" / kStateFile);
  b[b.size() - 1] ^= 0x10;
  write_bytes(dir_ / "6" / kStateFile, b);

  Sample target;
  std::fill(target.f32.begin(), target.f32.end(), 9.0f);
  std::ostringstream log;
  Expected<std::optional<int64_t>> restored = restore_into(dir_, target, &log);
  ASSERT_TRUE(restored.ok()) << restored.error().message();
  ASSERT_TRUE(restored->has_value());
  EXPECT_EQ(**restored, 4);
  EXPECT_EQ(target.s32, (std::vector<int32_t>{4, 4}));
  EXPECT_EQ(std::memcmp(target.f32.data(), sample.f32.data(), sample.f32.size() * 4), 0);
  EXPECT_EQ(target.pred, (std::vector<uint8_t>{1, 0, 1}));
  const std::string warned = log.str();
  EXPECT_EQ(warned.rfind("Warning: skipping checkpoint " + (dir_ / "6").string() + ": " +
                             (dir_ / "6" / kStateFile).string() + ": SHA-256 ",
                         0),
            0u)
      << warned;
  EXPECT_EQ(std::count(warned.begin(), warned.end(), '\n'), 1);

  // Step 4 truncated by 4 bytes: refused from its size, the buffers untouched.
  std::string four = file_bytes(dir_ / "4" / kStateFile);
  write_bytes(dir_ / "4" / kStateFile, four.substr(0, four.size() - 4));
  fs::remove_all(dir_ / "6");
  Sample untouched;
  std::fill(untouched.f32.begin(), untouched.f32.end(), 9.0f);
  std::ostringstream truncated_log;
  restored = restore_into(dir_, untouched, &truncated_log);
  ASSERT_TRUE(restored.ok()) << restored.error().message();
  EXPECT_FALSE(restored->has_value());
  EXPECT_EQ(untouched.f32, std::vector<float>(6, 9.0f));
  EXPECT_NE(truncated_log.str().find((dir_ / "4" / kStateFile).string() + ": " +
                                     std::to_string(four.size() - 4) + " bytes, but"),
            std::string::npos)
      << truncated_log.str();

  // Only a damaged checkpoint, read into the buffers: exit 4 naming it.
  write_bytes(dir_ / "4" / kStateFile, four);
  std::string flipped = four;
  flipped[flipped.size() - 1] ^= 0x10;
  write_bytes(dir_ / "4" / kStateFile, flipped);
  restored = restore_into(dir_, untouched, nullptr);
  ASSERT_FALSE(restored.ok());
  EXPECT_EQ(restored.error().code(), ExitCode::kIncompatible);
  EXPECT_NE(restored.error().message().find("the damaged " + (dir_ / "4").string() +
                                            " was read into the state"),
            std::string::npos)
      << restored.error().message();
}

// A background save's failure is not lost: the next save() or wait() returns it (exit 1).
TEST_F(CheckpointTest, ABackgroundSaveFailureIsReportedByTheNextCall) {
  Sample sample;
  write_bytes(dir_ / "file", "x");
  const std::string root = (dir_ / "file" / "sub").string();
  for (bool asynchronous : {true, false}) {
    CheckpointWriter writer(asynchronous);
    Status started = writer.save(root, 1, kIdentity, sample.views(), 0);
    Status s = asynchronous ? (started.ok() ? writer.wait() : started) : started;
    ASSERT_FALSE(s.ok()) << "asynchronous " << asynchronous;
    EXPECT_EQ(s.error().code(), ExitCode::kFailure);
    EXPECT_NE(s.error().message().find("checkpoint_dir=" + root), std::string::npos)
        << s.error().message();
    EXPECT_TRUE(writer.wait().ok());  // reported once
  }
}

// `sha256sum FILE`'s digest (coreutils): computed outside Precast.
std::string sha256sum(const fs::path& file) {
  std::string command = "sha256sum '" + file.string() + "'";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return "popen failed";
  std::array<char, 65> digest{};
  size_t n = fread(digest.data(), 1, 64, pipe);
  pclose(pipe);
  return std::string(digest.data(), n);
}

// The recorded "sha256" of a state file in metadata.json.
std::string recorded_sha256(const fs::path& step_dir) {
  Expected<JsonValue> metadata = parse_json(file_bytes(step_dir / kMetadataFile));
  if (!metadata.ok()) return metadata.error().message();
  const JsonValue* files = metadata->find("files");
  const JsonValue* entry = files == nullptr ? nullptr : files->find(kStateFile);
  const JsonValue* sha = entry == nullptr ? nullptr : entry->find("sha256");
  return sha == nullptr ? "no sha256 recorded" : sha->text;
}

// A state of about 9 MB, written in 4 MiB chunks whose boundaries fall inside tensors: the digest
// recorded (hashed while written, synchronously and by the background writer) is the one
// sha256sum computes over the file, the readers' (hashed while read, or streamed) too, and a
// byte flipped in the third chunk is caught at read.
TEST_F(CheckpointTest, AStateOfSeveralChunksIsHashedAsWrittenToTheDigestSha256sumComputes) {
  std::vector<float> weights(1'500'001);  // 6,000,004 bytes: ends inside the second chunk
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<float>(i % 977) * 0.5f;
  std::vector<uint8_t> mask(3'000'001);
  for (size_t i = 0; i < mask.size(); ++i) mask[i] = static_cast<uint8_t>((i * 7) % 2);
  std::vector<int32_t> count(777, -3);
  const std::vector<TensorView> state = {{"weights", "f32", {1'500'001}, weights.data()},
                                         {"mask", "pred", {3'000'001}, mask.data()},
                                         {"count", "s32", {777}, count.data()}};
  ASSERT_TRUE(save_checkpoint((dir_ / "sync").string(), 3, kIdentity, state, 0).ok());
  CheckpointWriter writer(/*asynchronous=*/true);
  ASSERT_TRUE(writer.save((dir_ / "async").string(), 3, kIdentity, state, 0).ok());
  ASSERT_TRUE(writer.wait().ok());
  // The background writer's snapshot is one aligned buffer and the data starts at file byte 4096:
  // its whole blocks (2198 × 4096 of 9,003,113 bytes) go with O_DIRECT, the 105-byte tail
  // buffered. Forced buffered (as where a file system refuses O_DIRECT): none, the same bytes.
  std::vector<CompletedSave> direct = writer.take_completed();
  ASSERT_EQ(direct.size(), 1u);
  EXPECT_EQ(direct[0].direct_bytes, 9'003'008);
  ::setenv("PRECAST_CHECKPOINT_DIRECT_IO", "0", 1);
  ASSERT_TRUE(writer.save((dir_ / "buffered").string(), 3, kIdentity, state, 0).ok());
  ASSERT_TRUE(writer.wait().ok());
  ::unsetenv("PRECAST_CHECKPOINT_DIRECT_IO");
  std::vector<CompletedSave> buffered = writer.take_completed();
  ASSERT_EQ(buffered.size(), 1u);
  EXPECT_EQ(buffered[0].direct_bytes, 0);
  EXPECT_TRUE(file_bytes(dir_ / "buffered" / "3" / kStateFile) ==
              file_bytes(dir_ / "async" / "3" / kStateFile));

  for (const char* way : {"sync", "async", "buffered"}) {
    const fs::path step = dir_ / way / "3";
    const fs::path file = step / kStateFile;
    const std::string expected = sha256sum(file);
    ASSERT_EQ(expected.size(), 64u) << expected;
    EXPECT_EQ(recorded_sha256(step), expected) << way;
    // The data after the header: every tensor's bytes, 6,000,004 + 3,000,001 + 3,108 in all,
    // after a header of whole 4096-byte blocks (one: the JSON is about 300 bytes).
    EXPECT_EQ(fs::file_size(file), 4096u + 9'003'113u) << way;

    artifact::Sha256 hasher;
    Expected<std::string> read = read_whole_file(file.string(), &hasher);
    ASSERT_TRUE(read.ok()) << read.error().message();
    EXPECT_EQ(read->size(), fs::file_size(file));
    EXPECT_EQ(artifact::to_hex(hasher.finish()), expected) << way;
    Expected<FileDigest> streamed = hash_file(file.string());
    ASSERT_TRUE(streamed.ok()) << streamed.error().message();
    EXPECT_EQ(streamed->bytes, static_cast<int64_t>(fs::file_size(file)));
    EXPECT_EQ(artifact::to_hex(streamed->sha256), expected) << way;

    Expected<LoadedCheckpoint> loaded = read_checkpoint(step.string());
    ASSERT_TRUE(loaded.ok()) << loaded.error().message();
    ASSERT_EQ(loaded->state.size(), 3u);
    EXPECT_EQ(std::memcmp(loaded->state[0].bytes.data(), weights.data(), weights.size() * 4), 0);
    EXPECT_EQ(std::memcmp(loaded->state[1].bytes.data(), mask.data(), mask.size()), 0);
  }

  const fs::path damaged_file = dir_ / "sync" / "3" / kStateFile;
  std::string bytes = file_bytes(damaged_file);
  bytes[9'000'000] ^= 0x10;
  write_bytes(damaged_file, bytes);
  Expected<LoadedCheckpoint> damaged = read_checkpoint((dir_ / "sync" / "3").string());
  ASSERT_FALSE(damaged.ok());
  EXPECT_EQ(damaged.error().code(), ExitCode::kIncompatible);
  EXPECT_NE(damaged.error().message().find(damaged_file.string() + ": SHA-256 " +
                                           sha256sum(damaged_file) + " differs from " +
                                           recorded_sha256(dir_ / "sync" / "3")),
            std::string::npos)
      << damaged.error().message();
}

// write_file_durably with O_DIRECT where aligned: an unaligned 4096-byte header piece goes
// buffered; then three pieces that follow each other in one 4096-aligned buffer (9,000,001
// bytes, split inside blocks as tensors are) are joined into one range whose 2197 whole blocks
// (8,998,912 bytes) go with O_DIRECT, the 1,089-byte tail buffered. The file is the pieces'
// bytes, the hash fed while writing is sha256sum's, and DirectIo::kNever (the fallback a file
// system refusing O_DIRECT gets) writes the same bytes, all buffered.
TEST_F(CheckpointTest, AlignedBlocksAreWrittenDirectTheRestBufferedToTheSameBytes) {
  const size_t data_bytes = 9'000'001;
  std::unique_ptr<char, decltype(&std::free)> data(
      static_cast<char*>(std::aligned_alloc(4096, 9'003'008)), &std::free);
  ASSERT_NE(data, nullptr);
  for (size_t i = 0; i < data_bytes; ++i) data.get()[i] = static_cast<char>((i * 131) % 251);
  std::string header = "header" + std::string(4090, ' ');  // a std::string: not 4096-aligned
  const std::vector<ByteRange> pieces = {{header.data(), header.size()},
                                         {data.get(), 1'000'003},
                                         {data.get() + 1'000'003, 5'000'000},
                                         {data.get() + 6'000'003, 2'999'998}};
  std::string expected = header + std::string(data.get(), data_bytes);

  const fs::path direct_file = dir_ / "direct.bin";
  artifact::Sha256 hasher;
  WriteReport report;
  ASSERT_TRUE(write_file_durably(direct_file.string(), pieces, &hasher, DirectIo::kWhereAligned,
                                 &report)
                  .ok());
  EXPECT_FALSE(report.direct_refused);  // ext4 and tmpfs accept O_DIRECT
  EXPECT_EQ(report.direct_bytes, 8'998'912);
  EXPECT_EQ(report.buffered_bytes, 4096 + 1'089);
  EXPECT_TRUE(file_bytes(direct_file) == expected);
  EXPECT_EQ(artifact::to_hex(hasher.finish()), sha256sum(direct_file));

  const fs::path buffered_file = dir_ / "buffered.bin";
  artifact::Sha256 buffered_hasher;
  WriteReport buffered;
  ASSERT_TRUE(write_file_durably(buffered_file.string(), pieces, &buffered_hasher,
                                 DirectIo::kNever, &buffered)
                  .ok());
  EXPECT_EQ(buffered.direct_bytes, 0);
  EXPECT_EQ(buffered.buffered_bytes, static_cast<int64_t>(4096 + data_bytes));
  EXPECT_TRUE(file_bytes(buffered_file) == expected);
  EXPECT_EQ(artifact::to_hex(buffered_hasher.finish()), sha256sum(direct_file));
}

}  // namespace
}  // namespace precast::checkpoint
