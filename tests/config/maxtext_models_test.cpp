// MaxText's own model files, as MaxText ships them (tests/config/data/maxtext_models: verbatim
// copies of src/maxtext/configs/models/*.yml @ e591f30, vision and audio keys included), load
// without an unknown key; those of a supported family resolve to the same config as the text-only
// copies in configs/models but for keys that change nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>

#include "tests/support/ConfigTestUtil.h"

namespace precast {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::load;
using testing::TempDir;

fs::path maxtext_models_dir() {
  return testing::source_dir() / "tests" / "config" / "data" / "maxtext_models";
}

// A config tree whose models/ folder holds MaxText's files only (configs/base.yml copied next to
// it, so that configs/models is not searched).
struct MaxTextTree {
  TempDir dir;
  fs::path base;
  MaxTextTree() {
    base = dir.path() / "base.yml";
    fs::copy_file(testing::base_yml(), base);
    for (const auto& entry : fs::directory_iterator(maxtext_models_dir())) {
      fs::copy_file(entry.path(), dir.path() / "models" / entry.path().filename());
    }
  }
};

std::set<std::string> stems(const fs::path& folder) {
  std::set<std::string> out;
  for (const auto& entry : fs::directory_iterator(folder)) {
    if (entry.path().extension() == ".yml") out.insert(entry.path().stem().string());
  }
  return out;
}

TEST(MaxTextModelFiles, NoneHasAnUnknownKey) {
  MaxTextTree tree;
  std::set<std::string> names = stems(maxtext_models_dir());
  EXPECT_EQ(names.size(), 78u);  // MaxText's configs/models at e591f30
  for (const std::string& name : names) {
    Expected<Config> config = load(tree.base, {"model_name=" + name});
    if (config.ok()) continue;
    EXPECT_EQ(error_of(config).find("unknown config key"), std::string::npos)
        << name << ": " << error_of(config);
  }
}

TEST(MaxTextModelFiles, TheVisionKeysOfLlama4AndGemma3AreAcceptedWithNoEffect) {
  MaxTextTree tree;
  for (const char* name :
       {"llama4-17b-16e", "llama4-17b-128e", "gemma3-4b", "gemma3-12b", "gemma3-27b"}) {
    Expected<Config> config = load(tree.base, {std::string("model_name=") + name});
    ASSERT_TRUE(config.ok()) << name << ": " << error_of(config);
    const ConfigEntry& block = config->entry("vision_encoder_block");
    EXPECT_EQ(block.source, ValueSource::kModel) << name;
    // The model files name their own family's encoder (llama4-17b-16e.yml: "llama4").
    std::string family = std::string(name).substr(0, 6);
    EXPECT_EQ(block.value.as_string(), family == "llama4" ? "llama4" : "gemma3") << name;
    EXPECT_EQ(find_key("vision_encoder_block")->status, KeyStatus::kNoEffect);
    EXPECT_FALSE(config->get_bool("use_multimodal")) << name;
  }
}

// Every supported model: MaxText's file and the shipped text-only copy agree on every key that
// changes anything (the copies leave out the vision keys, llama4's tokenizer and comments).
TEST(MaxTextModelFiles, SupportedModelsResolveLikeTheShippedCopiesButForNoEffectKeys) {
  MaxTextTree tree;
  std::set<std::string> shipped = stems(testing::source_dir() / "configs" / "models");
  shipped.erase("unsupported");
  EXPECT_EQ(shipped.size(), 56u);
  std::set<std::string> differing;
  for (const std::string& name : shipped) {
    ASSERT_TRUE(fs::exists(maxtext_models_dir() / (name + ".yml"))) << name;
    Expected<Config> theirs = load(tree.base, {"model_name=" + name});
    Expected<Config> ours = load(testing::base_yml(), {"model_name=" + name});
    ASSERT_TRUE(theirs.ok()) << name << ": " << error_of(theirs);
    ASSERT_TRUE(ours.ok()) << name << ": " << error_of(ours);
    for (const auto& [key, entry] : theirs->entries()) {
      if (entry.value == ours->get(key)) continue;
      differing.insert(key);
      const KeySpec* spec = find_key(key);
      ASSERT_NE(spec, nullptr) << key;
      EXPECT_EQ(spec->status, KeyStatus::kNoEffect)
          << name << ": " << key << " differs from configs/models/" << name << ".yml";
    }
  }
  // The keys whose values MaxText's files set off base.yml's (read by hand from the files):
  // gemma3's encoder sizes and image placeholder, llama4's image size and its huggingface
  // tokenizer, and both families' vision_encoder_block.
  std::set<std::string> expected = {"hidden_size_for_vit",       "image_placeholder",
                                    "image_size_for_vit",        "intermediate_size_for_vit",
                                    "num_hidden_layers_for_vit", "tokenizer_type",
                                    "vision_encoder_block"};
  for (const std::string& key : expected) EXPECT_EQ(differing.count(key), 1u) << key;
  for (const std::string& key : differing) EXPECT_EQ(expected.count(key), 1u) << key;
}

TEST(MaxTextModelFiles, Deepseek4sBiasNormLoggingIsRefusedOffItsDefault) {
  const KeySpec* spec = find_key("log_moe_bias_norms");
  ASSERT_NE(spec, nullptr);
  EXPECT_EQ(spec->status, KeyStatus::kNotSupported);
  Expected<Config> refused = load(testing::base_yml(), {"log_moe_bias_norms=true"});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(error_of(refused).find("log_moe_bias_norms is not supported yet"), std::string::npos)
      << error_of(refused);
  EXPECT_TRUE(load(testing::base_yml(), {"log_moe_bias_norms=false"}).ok());
}

}  // namespace
}  // namespace precast
