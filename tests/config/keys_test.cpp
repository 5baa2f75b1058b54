// The key registry against MaxText's base.yml (every key registered, with MaxText's default), and
// the support statuses: "not supported yet" keys refused only off their default, by name.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <map>
#include <set>
#include <string>

#include "compiler/config/KeyRegistry.h"
#include "tests/support/ConfigTestUtil.h"

namespace precast {
namespace {

using testing::base_yml;
using testing::error_of;
using testing::load;
using testing::TempDir;

// MaxText's base.yml as data (tools/extract_maxtext_defaults.py): key -> YAML node, in file order.
std::vector<std::pair<std::string, YAML::Node>> maxtext_defaults() {
  YAML::Node root = YAML::LoadFile(
      (testing::source_dir() / "tests" / "config" / "data" / "maxtext_base_defaults.yml").string());
  std::vector<std::pair<std::string, YAML::Node>> out;
  for (auto it = root.begin(); it != root.end(); ++it) {
    out.emplace_back(it->first.as<std::string>(), it->second);
  }
  return out;
}

// The keys Precast adds to MaxText's (code generation, its own memory limit, the thread pool,
// the collective timeout, the CPU peak behind perf/mfu, MLA's legacy parameter count), and
// MaxText's hang diagnostics keys,
// which its base.yml had before e591f30.
const std::set<std::string> kPrecastOnlyKeys = {
    "collective_timeout_seconds",   "cpu_peak_tflops",     "hbm_limit_bytes",
    "num_threads",                  "target_cpu",          "target_triple",
    "collect_stack_trace",          "stack_trace_interval_seconds",
    "stack_trace_to_cloud",         "eval_dataset_path",   "sample_tokens",
    "sample_prompt",                "mla_legacy_param_count"};

// MaxText keys its base.yml leaves out (types.py fields with a default) that its model files set:
// the vision encoder of gemma3/llama4/qwen3-vl, deepseek4's bias-norm logging.
const std::set<std::string> kMaxTextModelFileKeys = {"vision_encoder_block", "log_moe_bias_norms"};

TEST(MaxTextKeys, EveryKeyOfBaseYmlIsRegisteredWithMaxTextsDefault) {
  auto defaults = maxtext_defaults();
  EXPECT_EQ(defaults.size(), 696u);  // the count PyYAML gives for MaxText's base.yml at e591f30
  for (const auto& [key, node] : defaults) {
    const KeySpec* spec = find_key(key);
    ASSERT_NE(spec, nullptr) << key << " is not in the key registry";
    EXPECT_FALSE(spec->derived) << key;
    ConfigValue value = config_value_from_key_yaml(*spec, node);
    ASSERT_TRUE(coerce_to_key_type(*spec, value))
        << key << ": MaxText's default " << value.to_yaml() << " is not a "
        << key_type_name(spec->type);
    EXPECT_EQ(value, spec->maxtext_default_value())
        << key << ": MaxText " << value.to_yaml() << ", registry "
        << spec->maxtext_default_value().to_yaml();
  }
}

TEST(MaxTextKeys, RegistryHoldsNoKeyMaxTextLacksBesidesPrecastsOwnAndDerived) {
  std::set<std::string> maxtext;
  for (const auto& [key, node] : maxtext_defaults()) maxtext.insert(key);
  for (const KeySpec& spec : key_registry()) {
    std::string name(spec.name);
    if (spec.derived || kPrecastOnlyKeys.count(name) > 0) continue;
    if (kMaxTextModelFileKeys.count(name) > 0) {
      EXPECT_EQ(maxtext.count(name), 0u) << name;
      continue;
    }
    EXPECT_EQ(maxtext.count(name), 1u) << name << " is registered but not a MaxText key";
  }
}

TEST(MaxTextKeys, OnlyTheDocumentedDefaultsDifferFromMaxText) {
  // Precast writes checkpoints only when asked, and reads no tfds data (refused by default).
  std::map<std::string, std::string> differing;
  for (const KeySpec& spec : key_registry()) {
    if (!spec.maxtext_default_yaml.empty()) {
      differing[std::string(spec.name)] = spec.default_value().to_yaml();
      EXPECT_NE(spec.default_value(), spec.maxtext_default_value()) << spec.name;
    }
  }
  std::map<std::string, std::string> expected = {{"dataset_type", "'synthetic'"},
                                                 {"enable_checkpointing", "false"}};
  EXPECT_EQ(differing, expected);
}

TEST(KeyStatus, EveryNotSupportedKeyAcceptsItsDefaultAndRefusesAnotherValueByName) {
  int checked = 0;
  for (const KeySpec& spec : key_registry()) {
    if (spec.status != KeyStatus::kNotSupported) continue;
    EXPECT_TRUE(check_key_supported(spec, spec.default_value(), "here").ok()) << spec.name;
    ConfigValue other;
    switch (spec.type) {
      case KeyType::kBool:
        other = ConfigValue::boolean(!spec.default_value().as_bool());
        break;
      case KeyType::kInt:
        other = ConfigValue::integer(
            spec.default_value().is_none() ? 7 : spec.default_value().as_int() + 7);
        break;
      case KeyType::kFloat:
        other = ConfigValue::floating(
            spec.default_value().is_none() ? 0.5 : spec.default_value().as_float() + 0.5);
        break;
      default:
        other = ConfigValue::string("something_else");
        break;
    }
    Status status = check_key_supported(spec, other, "here");
    ASSERT_FALSE(status.ok()) << spec.name;
    EXPECT_EQ(status.error().code(), ExitCode::kUsage);
    std::string name(spec.name);
    EXPECT_EQ(
        status.error().message().rfind("here: " + name + " is not supported yet (" + name + "=", 0),
        0u)
        << status.error().message();
    ++checked;
  }
  EXPECT_GT(checked, 100);
}

TEST(KeyStatus, CheckpointKeysAreImplemented) {
  for (const char* name : {"enable_checkpointing", "checkpoint_period",
                           "max_num_checkpoints_to_keep", "save_checkpoint_on_completion",
                           "load_parameters_path", "load_full_state_path"}) {
    ASSERT_NE(find_key(name), nullptr) << name;
    EXPECT_EQ(find_key(name)->status, KeyStatus::kImplemented) << name;
  }
  EXPECT_TRUE(load(base_yml(), {"steps=3", "enable_checkpointing=true", "checkpoint_period=2",
                                "max_num_checkpoints_to_keep=3"})
                  .ok());
  EXPECT_TRUE(load(base_yml(), {"steps=3", "load_full_state_path=/tmp/x"}).ok());
  // That at most one of the two load paths is set is derived_test's (LoadPaths).
}

TEST(KeyStatus, MemoryAndPipelineKeysAreRefusedOffTheirDefaultAndAcceptedAtIt) {
  const std::map<std::string, std::string> non_default = {
      {"parameter_memory_host_offload", "true"}, {"vocab_tiling_ag_once", "true"},
      {"ici_pipeline_parallelism", "2"},         {"dcn_pipeline_parallelism", "2"},
      {"num_layers_per_pipeline_stage", "2"},    {"pipeline_parallel_layers", "56"}};
  auto maxtext = maxtext_defaults();
  for (const auto& [key, value] : non_default) {
    Expected<Config> refused = load(base_yml(), {key + "=" + value});
    ASSERT_FALSE(refused.ok()) << key;
    EXPECT_NE(error_of(refused).find(key + " is not supported yet (" + key + "="),
              std::string::npos)
        << error_of(refused);
    EXPECT_EQ(error_of(refused).find("unknown"), std::string::npos) << error_of(refused);
    // MaxText's own default, written out, is accepted.
    for (const auto& [name, node] : maxtext) {
      if (name != key) continue;
      std::string text = YAML::Dump(node);
      Expected<Config> accepted = load(base_yml(), {key + "=" + text});
      EXPECT_TRUE(accepted.ok()) << key << "=" << text << ": " << error_of(accepted);
    }
  }
}

TEST(KeyStatus, RefusedFromAConfigFileWithItsLineAndAllOffendersNamed) {
  TempDir dir;
  dir.write("run.yml", "base_config: " + base_yml().string() +
                           "\nsteps: 4\nparameter_memory_host_offload: true\nprofiler: xplane\n");
  Expected<Config> config = load(dir.path() / "run.yml");
  ASSERT_FALSE(config.ok());
  std::string message = error_of(config);
  EXPECT_EQ(message.rfind("2 keys are not supported yet:", 0), 0u) << message;
  EXPECT_NE(message.find("run.yml:3: parameter_memory_host_offload is not supported yet"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("run.yml:4: profiler is not supported yet (profiler='xplane')"),
            std::string::npos)
      << message;
}

TEST(KeyStatus, KernelChoicesAreAcceptedWithAnyValue) {
  // MaxText's AOT tests set these; they choose TPU/GPU kernels and change nothing Precast plans.
  Expected<Config> config =
      load(base_yml(), {"megablox=false", "sparse_matmul=false", "use_tokamax_splash=true",
                        "use_tokamax_gmm=true", "sa_block_q=128", "sa_block_kv_dkv=128",
                        "enable_nnx=true", "use_iota_embed=true", "vllm_hf_overrides={a: 1}"});
  ASSERT_TRUE(config.ok()) << error_of(config);
  EXPECT_EQ(config->get_int("sa_block_q"), 128);
  EXPECT_EQ(config->get_string("vllm_hf_overrides"), "{a: 1}");
  for (std::string_view key : {"megablox", "use_tokamax_gmm", "use_tokamax_splash", "sa_block_q"}) {
    EXPECT_EQ(find_key(key)->status, KeyStatus::kNoEffect) << key;
  }
  // sparse_matmul picks the computation Precast plans (grouped or dense experts), and false is
  // what lets capacity_factor drop tokens (MaxText's dense path).
  EXPECT_EQ(find_key("sparse_matmul")->status, KeyStatus::kImplemented);
}

TEST(KeyStatus, UnknownKeysAreStillUnknown) {
  Expected<Config> config = load(base_yml(), {"sparse_matmull=true"});
  ASSERT_FALSE(config.ok());
  EXPECT_NE(error_of(config).find("unknown config key 'sparse_matmull'. Did you mean "
                                  "'sparse_matmul'"),
            std::string::npos)
      << error_of(config);
}

TEST(KeyStatus, TableAndYamlListTheStatus) {
  std::string table = registry_as_table();
  auto line_of = [&](const std::string& key) {
    size_t start = table.find("\n" + key + " ");
    EXPECT_NE(start, std::string::npos) << key;
    return table.substr(start + 1, table.find('\n', start + 1) - start - 1);
  };
  EXPECT_NE(line_of("ici_pipeline_parallelism").find(" not yet "), std::string::npos);
  EXPECT_NE(line_of("megablox").find(" no effect "), std::string::npos);
  EXPECT_NE(line_of("per_device_batch_size").find(" yes "), std::string::npos);
  std::string yaml = registry_as_yaml();
  EXPECT_NE(yaml.find("# [compile] [not yet] Pipeline parallelism is not supported yet"),
            std::string::npos);
  EXPECT_NE(yaml.find("\nsparse_matmul: true\n"), std::string::npos);
  EXPECT_EQ(key_status_name(KeyStatus::kNoEffect), "accepted; no effect on the plan");
  EXPECT_EQ(key_status_name(KeyStatus::kNotSupported), "not supported yet");
}

}  // namespace
}  // namespace precast
