// load_parameters_path / load_full_state_path (runtime/train/LoadState.h): what a device copies
// from a source of global tensors — its piece under a mesh, converted when the precision differs —
// and every refusal, each naming the source and the tensor.
#include "runtime/train/LoadState.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/DurableFile.h"
#include "runtime/checkpoint/Safetensors.h"
#include "runtime/train/TensorElements.h"
#include "tests/support/ConfigTestUtil.h"

namespace precast::runtime {
namespace {

using testing::TempDir;

artifact::TensorSignature signature(std::string name, std::vector<int64_t> shape,
                                    std::string dtype, std::string sharding = "",
                                    std::string role = "parameter") {
  artifact::TensorSignature t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.dtype = std::move(dtype);
  t.sharding = std::move(sharding);
  t.role = std::move(role);
  return t;
}

// w = [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]] (f32, global [4, 3]) and b = [0.5, 1.5, 2.5]
// in a safetensors file.
struct Source {
  std::vector<float> w{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  std::vector<float> b{0.5f, 1.5f, 2.5f};
  std::vector<checkpoint::TensorView> views() const {
    return {{"w", "f32", {4, 3}, w.data()}, {"b", "f32", {3}, b.data()}};
  }
  std::string write(const TempDir& dir) const {
    std::string header;
    std::vector<checkpoint::TensorView> v = views();
    EXPECT_TRUE(checkpoint::encode_safetensors(v, header).ok());
    std::string bytes = header;
    bytes.append(reinterpret_cast<const char*>(w.data()), w.size() * sizeof(float));
    bytes.append(reinterpret_cast<const char*>(b.data()), b.size() * sizeof(float));
    std::string path = (dir.path() / "source.safetensors").string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
};

std::string message(const Status& s) { return s.ok() ? "<ok>" : s.error().message(); }

TEST(LoadParameters, EachDeviceCopiesItsRowsOfTheGlobalTensor) {
  TempDir dir;
  std::string path = Source().write(dir);
  // w split over fsdp (2 devices) along rows: device 1 holds global rows 2 and 3.
  artifact::TensorSignature w = signature("w", {2, 3}, "f32", "P('fsdp', None)");
  artifact::TensorSignature b = signature("b", {3}, "f32");
  std::vector<float> w_piece(6, -1), b_piece(3, -1);
  std::vector<StateDestination> to{{&w, w_piece.data()}, {&b, b_piece.data()}};
  std::vector<artifact::MeshAxis> mesh{{"fsdp", 2}};
  std::vector<int64_t> coordinates{1};
  std::ostringstream log;
  ASSERT_TRUE(load_parameters(path, to, mesh, coordinates, &log).ok());
  EXPECT_EQ(w_piece, (std::vector<float>{6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(b_piece, (std::vector<float>{0.5f, 1.5f, 2.5f}));
  EXPECT_EQ(log.str(),
            "load_parameters_path: loaded 2 tensors from safetensors file " + path + "\n");
}

TEST(LoadParameters, ASourceOfAnotherPrecisionIsConverted) {
  TempDir dir;
  std::string path = Source().write(dir);
  artifact::TensorSignature w = signature("w", {4, 3}, "bf16");
  artifact::TensorSignature b = signature("b", {3}, "f64");
  std::vector<uint16_t> w_bf16(12);
  std::vector<double> b_f64(3);
  std::vector<StateDestination> to{{&w, w_bf16.data()}, {&b, b_f64.data()}};
  std::ostringstream log;
  ASSERT_TRUE(load_parameters(path, to, {}, {}, &log).ok());
  // Small integers are exact in bf16: 0x4130 is 11.0 (sign 0, exponent 130, mantissa 0x30).
  EXPECT_EQ(w_bf16[11], 0x4130);
  EXPECT_EQ(from_bf16(w_bf16[5]), 5.0f);
  EXPECT_EQ(b_f64, (std::vector<double>{0.5, 1.5, 2.5}));
  EXPECT_NE(log.str().find("converted 1 tensors from f32 to bf16; converted 1 tensors from f32 "
                           "to f64"),
            std::string::npos)
      << log.str();
}

TEST(LoadParameters, MissingAndMisshapenTensorsAreNamedTogether) {
  TempDir dir;
  std::string path = Source().write(dir);
  artifact::TensorSignature w = signature("w", {4, 4}, "f32");
  artifact::TensorSignature c = signature("decoder.c", {3}, "f32");
  std::vector<float> a(16), d(3);
  std::vector<StateDestination> to{{&w, a.data()}, {&c, d.data()}};
  Status s = load_parameters(path, to, {}, {}, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().exit_code(), 4);
  EXPECT_NE(message(s).find("load_parameters_path: safetensors file " + path +
                            " does not fit this artifact: w is [4, 3] there, this artifact's is "
                            "[4, 4]; decoder.c is missing."),
            std::string::npos)
      << message(s);
  EXPECT_NE(message(s).find("the source has e.g. w, b"), std::string::npos) << message(s);
}

TEST(LoadParameters, IntegerSourcesAreNotConverted) {
  TempDir dir;
  std::string path = Source().write(dir);
  artifact::TensorSignature b = signature("b", {3}, "s32");
  std::vector<int32_t> out(3);
  std::vector<StateDestination> to{{&b, out.data()}};
  Status s = load_parameters(path, to, {}, {}, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(message(s).find("b is f32 there, this artifact's is s32"), std::string::npos)
      << message(s);
}

TEST(LoadParameters, AMissingOrDamagedSourceIsRefusedByName) {
  TempDir dir;
  artifact::TensorSignature b = signature("b", {3}, "f32");
  std::vector<float> out(3);
  std::vector<StateDestination> to{{&b, out.data()}};
  std::string nowhere = (dir.path() / "nowhere").string();
  Status s = load_parameters(nowhere, to, {}, {}, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().exit_code(), 4);
  EXPECT_EQ(message(s), "load_parameters_path: " + nowhere +
                            " does not exist; give a checkpoint step directory "
                            "(.../checkpoints/<step>), a checkpoint_dir, or a .safetensors file");
  // A directory with no committed step in it.
  std::string empty = (dir.path() / "models").string();
  s = load_parameters(empty, to, {}, {}, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(message(s).find(empty + " holds no committed checkpoint"), std::string::npos)
      << message(s);
  // A truncated safetensors file: the decoder's message names it.
  std::string path = Source().write(dir);
  std::filesystem::resize_file(path, 20);
  s = load_parameters(path, to, {}, {}, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().exit_code(), 4);
  EXPECT_NE(message(s).find(path), std::string::npos) << message(s);
}

TEST(LoadFullState, TakesAStepDirectoryOrTheLatestOfACheckpointDir) {
  TempDir dir;
  Source src;
  std::string root = (dir.path() / "checkpoints").string();
  ASSERT_TRUE(checkpoint::save_checkpoint(root, 4, {"hash", 1}, src.views(), 0).ok());
  src.b[0] = 7.0f;
  ASSERT_TRUE(checkpoint::save_checkpoint(root, 9, {"hash", 1}, src.views(), 0).ok());
  artifact::TensorSignature w = signature("w", {4, 3}, "f32");
  artifact::TensorSignature b = signature("b", {3}, "f32", "", "optimizer_state");
  std::vector<float> w_out(12), b_out(3);
  std::vector<StateDestination> to{{&w, w_out.data()}, {&b, b_out.data()}};
  Expected<int64_t> latest = load_full_state(root, to, {}, {}, nullptr);
  ASSERT_TRUE(latest.ok()) << latest.error().message();
  EXPECT_EQ(*latest, 9);
  EXPECT_EQ(b_out[0], 7.0f);
  Expected<int64_t> four = load_full_state(root + "/4", to, {}, {}, nullptr);
  ASSERT_TRUE(four.ok()) << four.error().message();
  EXPECT_EQ(*four, 4);
  EXPECT_EQ(b_out[0], 0.5f);
  EXPECT_EQ(w_out[11], 11.0f);
}

TEST(LoadFullState, RefusesPlainFilesAndOtherPrecisions) {
  TempDir dir;
  Source src;
  std::string file = src.write(dir);
  artifact::TensorSignature w = signature("w", {4, 3}, "bf16");
  std::vector<uint16_t> out(12);
  std::vector<StateDestination> to{{&w, out.data()}};
  Expected<int64_t> plain = load_full_state(file, to, {}, {}, nullptr);
  ASSERT_FALSE(plain.ok());
  EXPECT_EQ(plain.error().exit_code(), 4);
  EXPECT_EQ(plain.error().message(),
            "load_full_state_path: " + file +
                " is a plain safetensors file, which records no step; give a Precast checkpoint "
                "directory, or load its parameters with load_parameters_path");
  std::string root = (dir.path() / "checkpoints").string();
  ASSERT_TRUE(checkpoint::save_checkpoint(root, 2, {"hash", 1}, src.views(), 0).ok());
  Expected<int64_t> converted = load_full_state(root, to, {}, {}, nullptr);
  ASSERT_FALSE(converted.ok());
  EXPECT_NE(converted.error().message().find("w is f32 there, this artifact's is bf16"),
            std::string::npos)
      << converted.error().message();
}

TEST(LoadFullState, ADamagedStepDirectoryIsRefusedNamingTheFile) {
  TempDir dir;
  Source src;
  std::string root = (dir.path() / "checkpoints").string();
  ASSERT_TRUE(checkpoint::save_checkpoint(root, 3, {"hash", 1}, src.views(), 0).ok());
  std::string state = root + "/3/" + checkpoint::kStateFile;
  {
    std::fstream f(state, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x7f');
  }
  artifact::TensorSignature w = signature("w", {4, 3}, "f32");
  std::vector<float> out(12);
  std::vector<StateDestination> to{{&w, out.data()}};
  Expected<int64_t> loaded = load_full_state(root + "/3", to, {}, {}, nullptr);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.error().exit_code(), 4);
  EXPECT_NE(loaded.error().message().find(state), std::string::npos)
      << loaded.error().message();
  EXPECT_NE(loaded.error().message().find("SHA-256"), std::string::npos)
      << loaded.error().message();
}

}  // namespace
}  // namespace precast::runtime
