// Layering, precedence, typing, logical_axis_rules merging and the loader's error messages.
#include <gtest/gtest.h>

#include <cstdlib>

#include "compiler/config/ConfigValue.h"
#include "tests/support/ConfigTestUtil.h"

namespace precast {
namespace {

using testing::base_yml;
using testing::error_of;
using testing::load;
using testing::TempDir;

TEST(ConfigValue, TypesScalarsLikeYaml) {
  EXPECT_EQ(type_plain_scalar("24"), ConfigValue::integer(24));
  EXPECT_TRUE(type_plain_scalar("500_000").is_int());
  EXPECT_EQ(type_plain_scalar("500_000").as_int(), 500000);
  EXPECT_TRUE(type_plain_scalar("1e-3").is_float());
  EXPECT_DOUBLE_EQ(type_plain_scalar("1.e-05").as_float(), 1e-5);
  EXPECT_DOUBLE_EQ(type_plain_scalar("1.").as_float(), 1.0);
  EXPECT_EQ(type_plain_scalar("True"), ConfigValue::boolean(true));
  EXPECT_TRUE(type_plain_scalar("None").is_none());
  EXPECT_TRUE(type_plain_scalar("v5p-128").is_string());
  EXPECT_TRUE(type_plain_scalar("c4/en:3.1.0").is_string());
}

TEST(ConfigValue, PrintsLikePython) {
  EXPECT_EQ(python_float_repr(1e-5), "1e-05");
  EXPECT_EQ(python_float_repr(3e-5), "3e-05");
  EXPECT_EQ(python_float_repr(0.1), "0.1");
  EXPECT_EQ(python_float_repr(12.0), "12.0");
  EXPECT_EQ(python_float_repr(0.0001), "0.0001");
  EXPECT_EQ(python_float_repr(1e16), "1e+16");
  ConfigValue rule = ConfigValue::list(
      {ConfigValue::string("embed"),
       ConfigValue::list({ConfigValue::string("fsdp"), ConfigValue::string("tensor")})});
  EXPECT_EQ(rule.to_python(/*tuples=*/true), "('embed', ('fsdp', 'tensor'))");
  EXPECT_EQ(rule.to_python(), "['embed', ['fsdp', 'tensor']]");
  EXPECT_EQ(ConfigValue::list({ConfigValue::string("x")}).to_python(true), "('x',)");
}

TEST(ConfigValue, YamlRoundTrip) {
  for (const char* text : {"1.0e-05", "[['a', ['b', 'c']], ['d', 'e']]", "true", "-3", "'x y'"}) {
    ConfigValue v = type_plain_scalar(text);
    if (text[0] == '[' || text[0] == '\'') {
      Expected<Override> o = parse_override(std::string("k=") + text, "test");
      ASSERT_TRUE(o.ok());
      v = o->value;
    }
    Expected<Override> back = parse_override("k=" + v.to_yaml(), "test");
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back->value, v) << text;
  }
}

TEST(Layering, BaseThenModelThenCommandLine) {
  TempDir dir;
  dir.write("base.yml", "base_config: " + base_yml().string() + "\nsteps: 10\nvocab_size: 100\n");
  dir.write("models/tiny.yml", "vocab_size: 200\nhead_dim: 32\n");
  Expected<Config> config = load(dir.path() / "base.yml", {"model_name=tiny", "steps=20"});
  ASSERT_TRUE(config.ok()) << error_of(config);
  EXPECT_EQ(config->get_int("steps"), 20);
  EXPECT_EQ(config->entry("steps").source, ValueSource::kCommandLine);
  EXPECT_EQ(config->get_int("vocab_size"), 200);
  EXPECT_EQ(config->entry("vocab_size").source, ValueSource::kModel);
  EXPECT_EQ(config->entry("vocab_size").origin, (dir.path() / "models/tiny.yml").string() + ":1");
  EXPECT_EQ(config->get_int("head_dim"), 32);
  // Untouched keys come from the real base.yml.
  EXPECT_EQ(config->get_int("base_emb_dim"), 2048);
  EXPECT_EQ(config->entry("base_emb_dim").source, ValueSource::kBase);
}

TEST(Layering, BaseConfigChainChildWins) {
  TempDir dir;
  dir.write("parent.yml", "base_config: " + base_yml().string() + "\nsteps: 5\nhead_dim: 64\n");
  dir.write("child.yml", "base_config: parent.yml\nsteps: 7\n");
  Expected<Config> config = load(dir.path() / "child.yml");
  ASSERT_TRUE(config.ok()) << error_of(config);
  EXPECT_EQ(config->get_int("steps"), 7);
  EXPECT_EQ(config->get_int("head_dim"), 64);
}

TEST(Layering, BaseConfigCycleIsAnError) {
  TempDir dir;
  dir.write("a.yml", "base_config: b.yml\n");
  dir.write("b.yml", "base_config: a.yml\n");
  Expected<Config> config = load(dir.path() / "a.yml");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(error_of(config).find("loops back"), std::string::npos) << error_of(config);
}

TEST(Layering, EnvironmentVariablesWinAndConflictWithCommandLine) {
  ::setenv("M_STEPS", "33", 1);
  ConfigRequest request;
  request.config_file = base_yml();
  Expected<Config> config = load_config(request);
  ASSERT_TRUE(config.ok()) << error_of(config);
  EXPECT_EQ(config->get_int("steps"), 33);
  EXPECT_EQ(config->entry("steps").source, ValueSource::kEnvironment);
  request.overrides = {"steps=2"};
  config = load_config(request);
  ASSERT_FALSE(config.ok());
  EXPECT_NE(error_of(config).find("Key 'steps' is overridden by both CLI"), std::string::npos)
      << error_of(config);
  ::unsetenv("M_STEPS");
}

TEST(ModelConflict, DifferentValueIsAnError) {
  Expected<Config> config = load(base_yml(), {"model_name=gpt3-6b", "max_target_length=2048"});
  ASSERT_FALSE(config.ok());
  EXPECT_NE(error_of(config).find("Keys ['max_target_length'] are overridden by both model config "
                                  "and CLI/kwargs with different values. This is not allowed, "
                                  "unless setting override_model_config=true."),
            std::string::npos)
      << error_of(config);
}

TEST(ModelConflict, SameValueIsAllowed) {
  Expected<Config> config = load(base_yml(), {"model_name=gpt3-6b", "max_target_length=1024"});
  ASSERT_TRUE(config.ok()) << error_of(config);
  EXPECT_EQ(config->get_int("max_target_length"), 1024);
}

TEST(ModelConflict, OverrideModelConfigLetsTheCommandLineWin) {
  Expected<Config> config = load(
      base_yml(), {"model_name=gpt3-6b", "max_target_length=2048", "override_model_config=true"});
  ASSERT_TRUE(config.ok()) << error_of(config);
  EXPECT_EQ(config->get_int("max_target_length"), 2048);
  EXPECT_EQ(config->entry("max_target_length").source, ValueSource::kCommandLine);
}

TEST(ModelName, InstructSuffixIsStripped) {
  Expected<Config> config = load(base_yml(), {"model_name=llama2-7b-Instruct"});
  ASSERT_TRUE(config.ok()) << error_of(config);
  EXPECT_EQ(config->get_int("base_emb_dim"), 4096);
}

TEST(ModelName, UnknownNameListsClosestModels) {
  Expected<Config> config = load(base_yml(), {"model_name=llama2-7c"});
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.error().exit_code(), 2);
  EXPECT_NE(error_of(config).find("unknown model_name 'llama2-7c'. Did you mean 'llama2-7b'"),
            std::string::npos)
      << error_of(config);
}

TEST(ModelName, UnsupportedFamilyIsNamed) {
  Expected<Config> config = load(base_yml(), {"model_name=gemma4-26b"});
  ASSERT_FALSE(config.ok());
  EXPECT_NE(error_of(config).find("model family 'gemma4' (model_name 'gemma4-26b') is not "
                                  "supported yet"),
            std::string::npos)
      << error_of(config);
}

// Rules as "name:axes" strings, for compact expectations.
std::vector<std::string> rule_list(const Config& config) {
  std::vector<std::string> out;
  for (const ConfigValue& rule : config.get("logical_axis_rules").as_list()) {
    out.push_back(rule.as_list()[0].as_string() + ":" + rule.as_list()[1].to_yaml());
  }
  return out;
}

TEST(AxisRules, ModelRulesReplaceSameNamedRulesAndAppend) {
  // llama2-7b sets [['norm', 'fsdp']]: the base ['norm', ['tensor']] goes, the new rule is last.
  Expected<Config> config = load(base_yml(), {"model_name=llama2-7b"});
  ASSERT_TRUE(config.ok()) << error_of(config);
  std::vector<std::string> rules = rule_list(*config);
  EXPECT_EQ(rules.back(), "norm:'fsdp'");
  EXPECT_EQ(std::count_if(rules.begin(), rules.end(),
                          [](const std::string& r) { return r.rfind("norm:", 0) == 0; }),
            1);
}

TEST(AxisRules, CommandLineMergesAfterModelAndDropsAllDuplicates) {
  Expected<Config> config = load(base_yml(), {"model_name=llama2-7b",
                                              "logical_axis_rules=[['embed', ['tensor']], "
                                              "['norm', []]]"});
  ASSERT_TRUE(config.ok()) << error_of(config);
  std::vector<std::string> rules = rule_list(*config);
  ASSERT_GE(rules.size(), 2u);
  EXPECT_EQ(rules[rules.size() - 2], "embed:['tensor']");
  EXPECT_EQ(rules.back(), "norm:[]");
  // Both base `embed` fallbacks are gone.
  EXPECT_EQ(std::count_if(rules.begin(), rules.end(),
                          [](const std::string& r) { return r.rfind("embed:", 0) == 0; }),
            1);
  // Rule order of untouched names is kept: activation_batch still precedes mlp.
  auto pos = [&](const std::string& prefix) {
    return std::find_if(rules.begin(), rules.end(),
                        [&](const std::string& r) { return r.rfind(prefix, 0) == 0; }) -
           rules.begin();
  };
  EXPECT_LT(pos("activation_batch:"), pos("mlp:"));
}

TEST(AxisRules, OverrideReplacesTheWholeList) {
  Expected<Config> config = load(
      base_yml(), {"logical_axis_rules=[['embed', 'fsdp']]", "override_logical_axis_rules=true"});
  ASSERT_TRUE(config.ok()) << error_of(config);
  EXPECT_EQ(rule_list(*config), std::vector<std::string>{"embed:'fsdp'"});
}

TEST(Errors, UnknownCommandLineKeyNamesClosestKey) {
  Expected<Config> config = load(base_yml(), {"steps=3", "per_device_batchsize=4"});
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(error_of(config).rfind("command line argument 2: unknown config key "
                                   "'per_device_batchsize'. Did you mean 'per_device_batch_size', "
                                   "'eval_per_device_batch_size'",
                                   0),
            0u)
      << error_of(config);
  EXPECT_NE(error_of(config).find("`precast keys` lists every key"), std::string::npos);
}

TEST(Errors, UnknownFileKeyNamesFileAndLine) {
  TempDir dir;
  dir.write("x.yml", "base_config: " + base_yml().string() + "\nsteps: 4\nlerning_rate: 0.1\n");
  Expected<Config> config = load(dir.path() / "x.yml");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(error_of(config).find((dir.path() / "x.yml").string() +
                                  ":3: unknown config key 'lerning_rate'. Did you mean "
                                  "'learning_rate'"),
            std::string::npos)
      << error_of(config);
}

TEST(Errors, TypeMismatchNamesKeyValueAndType) {
  Expected<Config> config = load(base_yml(), {"steps=many"});
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(error_of(config),
            "command line argument 1: key 'steps' expects an integer, got string 'many'. Fix the "
            "value (default: 150001).");
}

TEST(Errors, MalformedYamlNamesLineAndColumn) {
  TempDir dir;
  dir.write("bad.yml", "steps: 4\nvocab_size: [1, 2\nhead_dim: 3\n");
  Expected<Config> config = load(dir.path() / "bad.yml");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.error().exit_code(), 2);
  EXPECT_NE(error_of(config).find((dir.path() / "bad.yml").string() + ":3:"), std::string::npos)
      << error_of(config);
  EXPECT_NE(error_of(config).find("malformed YAML"), std::string::npos);
}

TEST(Errors, MissingConfigFile) {
  Expected<Config> config = load("/nonexistent/precast.yml");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(error_of(config),
            "config file '/nonexistent/precast.yml' does not exist. Pass an existing YAML file, "
            "e.g. configs/base.yml.");
}

TEST(Errors, DerivedKeysCannotBeSet) {
  Expected<Config> config = load(base_yml(), {"emb_dim=4096"});
  ASSERT_FALSE(config.ok());
  EXPECT_NE(error_of(config).find("'emb_dim' is derived"), std::string::npos) << error_of(config);
}

TEST(Errors, OverrideWithoutEquals) {
  Expected<Config> config = load(base_yml(), {"steps"});
  ASSERT_FALSE(config.ok());
  EXPECT_NE(error_of(config).find("is not of the form key=value"), std::string::npos);
}

TEST(Typing, IntegralFloatIsAcceptedForIntegerKeysAndIntForFloatKeys) {
  Expected<Config> config = load(base_yml(), {"steps=10.0", "per_device_batch_size=2"});
  ASSERT_TRUE(config.ok()) << error_of(config);
  EXPECT_EQ(config->get_int("steps"), 10);
  EXPECT_DOUBLE_EQ(config->get_float("per_device_batch_size"), 2.0);
  EXPECT_TRUE(config->get("per_device_batch_size").is_float());
}

TEST(BaseYml, EqualsTheRegistryDefaults) {
  Expected<Config> config = load(base_yml());
  ASSERT_TRUE(config.ok()) << error_of(config);
  for (const KeySpec& spec : key_registry()) {
    if (spec.derived) continue;
    const ConfigEntry& entry = config->entry(spec.name);
    EXPECT_EQ(entry.source, ValueSource::kBase) << spec.name << " missing from configs/base.yml";
    EXPECT_EQ(entry.value, spec.default_value()) << spec.name;
  }
  EXPECT_EQ(registry_as_yaml().size() > 0, true);
}

TEST(BaseYml, EveryModelConfigLoads) {
  int count = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(testing::source_dir() / "configs" / "models")) {
    std::string name = entry.path().stem().string();
    if (name == "unsupported") continue;
    Expected<Config> config = load(base_yml(), {"model_name=" + name});
    EXPECT_TRUE(config.ok()) << name << ": " << error_of(config);
    ++count;
  }
  EXPECT_EQ(count, 56);  // the yml files of configs/models but unsupported.yml
}

TEST(ConfigPrint, MaxTextFormatSortedWithSources) {
  Config config = testing::load_derived(base_yml(), {"steps=5"}, 4);
  std::string text = format_config(config, /*show_sources=*/false);
  EXPECT_NE(text.find("Config param steps: 5\n"), std::string::npos);
  EXPECT_NE(text.find("Config param decoder_block: DecoderBlockType.LLAMA2\n"), std::string::npos);
  EXPECT_NE(text.find("Config param dtype: bfloat16\n"), std::string::npos);
  EXPECT_NE(text.find("Config param mlp_activations: ['silu', 'linear']\n"), std::string::npos);
  EXPECT_NE(text.find("Config param logical_axis_rules: (('circular_repeats', ()), "),
            std::string::npos);
  EXPECT_LT(text.find("Config param adam_b1:"), text.find("Config param steps:"));
  std::string sourced = format_config(config, /*show_sources=*/true);
  EXPECT_NE(sourced.find("Config param steps: 5  [command line: command line argument 1]\n"),
            std::string::npos);
  EXPECT_NE(sourced.find("Config param emb_dim: 2048  [derived]\n"), std::string::npos);
}

}  // namespace
}  // namespace precast
