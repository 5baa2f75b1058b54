// runtime/checkpoint's sharded layout (a large state as state-<i>-of-<n>.safetensors): the shard
// plan worked by hand, the files' names, sizes and metadata (version 2, "state_shards"), each
// shard's SHA-256 equal to Python hashlib's (and each shard a safetensors file plain Python
// reads), a synchronous and an asynchronous save byte-equal with the background writer's shards
// sent with O_DIRECT, the state read back and restored bitwise, damage to a shard and a missing
// shard refused naming the shard, and `inspect_checkpoint`'s listing. States are small: the
// threshold is lowered with PRECAST_CHECKPOINT_SHARD_BYTES.
#include <gtest/gtest.h>

#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/CheckpointWriter.h"
#include "runtime/checkpoint/JsonValue.h"
#include "runtime/checkpoint/Safetensors.h"

namespace precast::checkpoint {
namespace {

namespace fs = std::filesystem;

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

std::string run_python(const std::string& script, const std::string& argument) {
  std::string command = "/usr/bin/python3 -c \"" + script + "\" " + argument;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return "popen failed";
  std::string out;
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) out.append(buffer.data(), n);
  pclose(pipe);
  return out;
}

// 18 f32 tensors, tensor i of (i + 1) * 1000 elements (4000 (i + 1) bytes), values from i.
struct ShardedState {
  std::vector<std::vector<float>> values;
  ShardedState() {
    for (int i = 0; i < 18; ++i) {
      std::vector<float> v(static_cast<size_t>((i + 1) * 1000));
      for (size_t j = 0; j < v.size(); ++j)
        v[j] = static_cast<float>(i) + 0.001f * static_cast<float>(j);
      values.push_back(std::move(v));
    }
  }
  std::vector<TensorView> views() const {
    std::vector<TensorView> out;
    for (size_t i = 0; i < values.size(); ++i) {
      out.push_back({"t" + std::to_string(i),
                     "f32",
                     {static_cast<int64_t>(values[i].size())},
                     values[i].data()});
    }
    return out;
  }
};

const CheckpointIdentity kIdentity{"shards1", 1};

class CheckpointShardsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("precast_checkpoint_shards_test_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ::setenv("PRECAST_CHECKPOINT_SHARD_BYTES", "1", 1);
  }
  void TearDown() override {
    ::unsetenv("PRECAST_CHECKPOINT_SHARD_BYTES");
    fs::remove_all(dir_);
  }
  fs::path dir_;
};

TEST_F(CheckpointShardsTest, PlanDealsTheLargestTensorsFirstToTheLightestShard) {
  ShardedState state;
  // By hand: t17..t2 (largest first) go one each to the empty shards 0..15; t1 (8000 bytes) then
  // joins the lightest, shard 15 (t2: 12000); t0 (4000) the lightest then, shard 14 (t3: 16000,
  // against shard 15's 20000). Each shard lists its tensors in ascending order.
  std::vector<std::vector<size_t>> expected;
  for (size_t k = 0; k < 14; ++k) expected.push_back({17 - k});
  expected.push_back({0, 3});
  expected.push_back({1, 2});
  EXPECT_EQ(plan_state_shards(state.views()), expected);
  EXPECT_EQ(state_shard_name(0, 16), "state-00001-of-00016.safetensors");
  EXPECT_EQ(state_shard_name(15, 16), "state-00016-of-00016.safetensors");

  // Snapshot offsets: shard by shard from 4096-aligned starts: shard 0 holds t17 (72000 bytes)
  // at 0, shard 1 t16 at 73728 (72000 rounded up to 18 blocks).
  size_t total = 0;
  std::vector<size_t> offsets = snapshot_offsets(state.views(), &total);
  EXPECT_EQ(offsets[17], 0u);
  EXPECT_EQ(offsets[16], 73728u);
  // Shard 14: t0 then t3 (4000 bytes after it); shard 15: t1 then t2, ending the buffer.
  EXPECT_EQ(offsets[3], offsets[0] + 4000);
  EXPECT_EQ(offsets[2], offsets[1] + 8000);
  EXPECT_EQ(total, offsets[2] + 12000);
  EXPECT_EQ(offsets[1] % 4096, 0u);

  // Below the threshold: one shard of every tensor, and the snapshot packed as before.
  ::setenv("PRECAST_CHECKPOINT_SHARD_BYTES", "684001", 1);  // 4000 * (1 + ... + 18) = 684000
  std::vector<std::vector<size_t>> one = plan_state_shards(state.views());
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].size(), 18u);
  snapshot_offsets(state.views(), &total);
  EXPECT_EQ(total, 684000u);
}

TEST_F(CheckpointShardsTest, SavedAsShardsReadBackBitwiseAsyncEqualsSync) {
  ShardedState state;
  ASSERT_TRUE(save_checkpoint((dir_ / "sync").string(), 3, kIdentity, state.views(), 0).ok());
  const fs::path step = dir_ / "sync" / "3";
  EXPECT_FALSE(fs::exists(step / kStateFile));
  for (int k = 0; k < 16; ++k) EXPECT_TRUE(fs::exists(step / state_shard_name(k, 16))) << k;

  // metadata.json by plain Python: version 2, 16 shards, every listed file's SHA-256 hashlib's,
  // and every shard a safetensors file whose tensors together are t0..t17 with 4000 (i+1) bytes.
  const std::string script =
      "import json,hashlib,struct,sys; d=sys.argv[1]; m=json.load(open(d+'/metadata.json')); "
      "ok=all(hashlib.sha256(open(d+'/'+n,'rb').read()).hexdigest()==e['sha256'] and "
      "len(open(d+'/'+n,'rb').read())==e['bytes'] for n,e in m['files'].items()); "
      "t={}; "
      "[t.update({k:v['data_offsets'][1]-v['data_offsets'][0] for k,v in "
      "json.loads(b[8:8+struct.unpack('<Q',b[:8])[0]]).items() if not k.startswith('__')}) for b "
      "in "
      "[open(d+'/'+n,'rb').read() for n in m['files']]]; "
      "print(m['version'], m['state_shards'], len(m['files']), ok, "
      "all(t['t%d'%i]==4000*(i+1) for i in range(18)), len(t))";
  EXPECT_EQ(run_python(script, step.string()), "2 16 16 True True 18\n");

  // Shard 15 (state-00015-of-00016) holds t0 and t3: a safetensors file of exactly those.
  Expected<std::vector<Tensor>> shard15 =
      decode_safetensors(file_bytes(step / state_shard_name(14, 16)), "shard 15");
  ASSERT_TRUE(shard15.ok()) << shard15.error().message();
  ASSERT_EQ(shard15->size(), 2u);
  EXPECT_EQ((*shard15)[0].name, "t0");
  EXPECT_EQ((*shard15)[1].name, "t3");
  EXPECT_EQ(file_bytes(step / state_shard_name(14, 16)).size(), 4096u + 4000 + 16000);

  // read_checkpoint: all 18 tensors, bitwise.
  Expected<LoadedCheckpoint> read = read_checkpoint(step.string());
  ASSERT_TRUE(read.ok()) << read.error().message();
  ASSERT_EQ(read->state.size(), 18u);
  for (const Tensor& t : read->state) {
    const auto& v = state.values[static_cast<size_t>(std::stoi(t.name.substr(1)))];
    ASSERT_EQ(t.bytes.size(), v.size() * 4) << t.name;
    EXPECT_EQ(std::memcmp(t.bytes.data(), v.data(), t.bytes.size()), 0) << t.name;
  }

  // The background writer: the same files, byte for byte; each shard's whole data blocks went
  // with O_DIRECT from its aligned snapshot range (each shard's tensors joined).
  CheckpointWriter writer(true);
  writer.prepare(state.views());
  ASSERT_TRUE(writer.save((dir_ / "async").string(), 3, kIdentity, state.views(), 0).ok());
  ASSERT_TRUE(writer.wait().ok());
  std::vector<CompletedSave> done = writer.take_completed();
  ASSERT_EQ(done.size(), 1u);
  int64_t expected_direct = 0;
  for (const std::vector<size_t>& shard : plan_state_shards(state.views())) {
    int64_t data = 0;
    for (size_t i : shard) data += 4000 * static_cast<int64_t>(i + 1);
    expected_direct += data / 4096 * 4096;
  }
  // By hand: t4..t17 alone, floor(4000 (i + 1) / 4096) = 4, 5, ..., 17 blocks (147); shards 15
  // and 16, 20000 bytes each: 4 blocks each; 155 blocks of 4096.
  EXPECT_EQ(expected_direct, 634880);
  EXPECT_EQ(done[0].direct_bytes, expected_direct);
  for (const fs::directory_entry& e : fs::directory_iterator(step)) {
    EXPECT_TRUE(file_bytes(e.path()) == file_bytes(dir_ / "async" / "3" / e.path().filename()))
        << e.path().filename();
  }

  // Restored into fresh buffers: the same bits.
  ShardedState target;
  for (auto& v : target.values) std::fill(v.begin(), v.end(), -1.0f);
  std::vector<void*> destinations;
  for (auto& v : target.values) destinations.push_back(v.data());
  std::ostringstream log;
  Expected<std::optional<int64_t>> restored = restore_latest_checkpoint(
      (dir_ / "async").string(), kIdentity, state.views(), destinations, &log);
  ASSERT_TRUE(restored.ok()) << restored.error().message();
  ASSERT_TRUE(restored->has_value());
  EXPECT_EQ(**restored, 3);
  EXPECT_EQ(log.str(), "");
  for (size_t i = 0; i < 18; ++i) EXPECT_EQ(target.values[i], state.values[i]) << i;

  // inspect: the shards and the tensors.
  Expected<std::string> listing = inspect_checkpoint(step.string());
  ASSERT_TRUE(listing.ok()) << listing.error().message();
  EXPECT_NE(listing->find("16 shards (state-00001-of-00016.safetensors to "
                          "state-00016-of-00016.safetensors)"),
            std::string::npos)
      << *listing;
  EXPECT_NE(listing->find("18 tensors, 684000 bytes"), std::string::npos) << *listing;
}

// A restore reads the sixteen shards in rounds of up to 4 MiB a file, hashed sixteen at a time:
// tensors longer than a round (t0: 10,000,000 bytes, three rounds of 4194304, 4194304 and
// 1611392; t1: 4 MiB and 4 bytes, two rounds), beside shards of small tensors that finish in the
// first round, restore bitwise and verify against metadata.json's digests, which Python's
// hashlib computes alike; a flipped byte in t0's third round is refused naming its shard.
TEST_F(CheckpointShardsTest, ShardsLongerThanAReadRoundRestoreBitwise) {
  ShardedState state;
  state.values[0].assign(2'500'000, 0.0f);
  for (size_t j = 0; j < state.values[0].size(); ++j) state.values[0][j] = 0.5f * static_cast<float>(j % 4099);
  state.values[1].assign(1'048'577, 0.0f);
  for (size_t j = 0; j < state.values[1].size(); ++j) state.values[1][j] = -0.25f * static_cast<float>(j % 977);
  ASSERT_TRUE(save_checkpoint(dir_.string(), 7, kIdentity, state.views(), 0).ok());
  const fs::path step = dir_ / "7";
  const std::string script =
      "import json,hashlib,sys; d=sys.argv[1]; m=json.load(open(d+'/metadata.json')); "
      "print(sum(hashlib.sha256(open(d+'/'+n,'rb').read()).hexdigest()==e['sha256'] for n,e in "
      "m['files'].items()))";
  EXPECT_EQ(run_python(script, step.string()), "16\n");

  ShardedState target;
  target.values[0].assign(state.values[0].size(), -1.0f);
  target.values[1].assign(state.values[1].size(), -1.0f);
  std::vector<void*> destinations;
  for (auto& v : target.values) destinations.push_back(v.data());
  std::ostringstream log;
  Expected<std::optional<int64_t>> restored =
      restore_latest_checkpoint(dir_.string(), kIdentity, state.views(), destinations, &log);
  ASSERT_TRUE(restored.ok()) << restored.error().message();
  ASSERT_TRUE(restored->has_value());
  EXPECT_EQ(**restored, 7);
  EXPECT_EQ(log.str(), "");
  for (size_t i = 0; i < 18; ++i) EXPECT_EQ(target.values[i], state.values[i]) << i;

  // The shard holding t0 (the largest tensor, dealt first: shard 1) with a byte of its third
  // round flipped (data offset 9,000,000): the resume finds no intact checkpoint.
  const fs::path shard = step / state_shard_name(0, 16);
  std::string bytes = file_bytes(shard);
  ASSERT_GE(bytes.size(), 4096u + 10'000'000u);
  bytes[4096 + 9'000'000] ^= 0x10;
  write_bytes(shard, bytes);
  std::ostringstream warned;
  Expected<std::optional<int64_t>> refused =
      restore_latest_checkpoint(dir_.string(), kIdentity, state.views(), destinations, &warned);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code(), ExitCode::kIncompatible);
  EXPECT_NE(warned.str().find(shard.string() + ": SHA-256"), std::string::npos) << warned.str();
}

TEST_F(CheckpointShardsTest, DamagedOrMissingShardIsRefusedNamingIt) {
  ShardedState state;
  for (int64_t s : {2, 5}) {
    ASSERT_TRUE(save_checkpoint(dir_.string(), s, kIdentity, state.views(), 0).ok());
  }
  // A flipped data byte in shard 16 (t1, t2) of step 5: refused naming it and SHA-256.
  const fs::path shard = dir_ / "5" / state_shard_name(15, 16);
  std::string bytes = file_bytes(shard);
  bytes[4096 + 10] ^= 0x01;
  write_bytes(shard, bytes);
  Expected<LoadedCheckpoint> read = read_checkpoint((dir_ / "5").string());
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().code(), ExitCode::kIncompatible);
  EXPECT_EQ(read.error().message().rfind(shard.string() + ": SHA-256", 0), 0u)
      << read.error().message();

  // A resume skips step 5 with a warning naming the shard and restores step 2, bitwise.
  ShardedState target;
  std::vector<void*> destinations;
  for (auto& v : target.values) destinations.push_back(v.data());
  std::ostringstream log;
  Expected<std::optional<int64_t>> restored =
      restore_latest_checkpoint(dir_.string(), kIdentity, state.views(), destinations, &log);
  ASSERT_TRUE(restored.ok()) << restored.error().message();
  ASSERT_TRUE(restored->has_value());
  EXPECT_EQ(**restored, 2);
  EXPECT_NE(log.str().find("skipping checkpoint " + (dir_ / "5").string() + ": " + shard.string() +
                           ": SHA-256"),
            std::string::npos)
      << log.str();
  for (size_t i = 0; i < 18; ++i) EXPECT_EQ(target.values[i], state.values[i]) << i;

  // A missing shard of step 2: refused naming it.
  const fs::path gone = dir_ / "2" / state_shard_name(6, 16);
  fs::remove(gone);
  Expected<LoadedCheckpoint> missing = read_checkpoint((dir_ / "2").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message().find(gone.string()), std::string::npos)
      << missing.error().message();
}

}  // namespace
}  // namespace precast::checkpoint
