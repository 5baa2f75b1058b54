// Derived keys (maxtext-facts §a): global_parameter_scale, batch sizes (fractional and with
// gradient accumulation), schedule -1 rules, output paths; and the validation errors.
#include <gtest/gtest.h>

#include "compiler/config/ModelSpec.h"
#include "tests/support/ConfigTestUtil.h"

namespace precast {
namespace {

using testing::base_yml;
using testing::load;
using testing::load_derived;

struct Dims {
  int64_t emb, heads, kv_heads, mlp, layers;
};

Dims dims_for_scale(int64_t scale) {
  Config c = load_derived(base_yml(), {"global_parameter_scale=" + std::to_string(scale)}, 1);
  return {c.get_int("emb_dim"), c.get_int("num_query_heads"), c.get_int("num_kv_heads"),
          c.get_int("mlp_dim"), c.get_int("num_decoder_layers")};
}

TEST(GlobalParameterScale, HeadsAndMlpThenEmbThenLayers) {
  // Base: emb 2048, heads 16, kv 16, mlp 7168, layers 16.
  Dims s1 = dims_for_scale(1);
  EXPECT_EQ(s1.emb, 2048);
  EXPECT_EQ(s1.heads, 16);
  EXPECT_EQ(s1.mlp, 7168);
  EXPECT_EQ(s1.layers, 16);
  Dims s2 = dims_for_scale(2);
  EXPECT_EQ(s2.emb, 2048);
  EXPECT_EQ(s2.heads, 32);
  EXPECT_EQ(s2.kv_heads, 32);
  EXPECT_EQ(s2.mlp, 14336);
  EXPECT_EQ(s2.layers, 16);
  Dims s4 = dims_for_scale(4);
  EXPECT_EQ(s4.emb, 4096);
  EXPECT_EQ(s4.heads, 32);
  EXPECT_EQ(s4.mlp, 14336);
  EXPECT_EQ(s4.layers, 16);
  Dims s8 = dims_for_scale(8);
  EXPECT_EQ(s8.emb, 4096);
  EXPECT_EQ(s8.heads, 32);
  EXPECT_EQ(s8.mlp, 14336);
  EXPECT_EQ(s8.layers, 32);
  Dims s16 = dims_for_scale(16);
  EXPECT_EQ(s16.emb, 4096);
  EXPECT_EQ(s16.heads, 64);
  EXPECT_EQ(s16.mlp, 28672);
  EXPECT_EQ(s16.layers, 32);
}

Status derive_with(std::vector<std::string> overrides, int64_t devices = 1) {
  Expected<Config> config = load(base_yml(), std::move(overrides));
  if (!config.ok()) return config.error();
  return derive_keys(*config, devices);
}

std::string message_of(const Status& s) {
  return s.ok() ? "<ok>" : s.error().message();
}

TEST(GlobalParameterScale, MustBeAPowerOfTwo) {
  Status s = derive_with({"global_parameter_scale=3"});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().exit_code(), 2);
  EXPECT_EQ(message_of(s).rfind("global_parameter_scale=3: Global parameter scale should be a "
                                "power of two.",
                                0),
            0u)
      << message_of(s);
  EXPECT_EQ(message_of(derive_with({"global_parameter_scale=0"})),
            "global_parameter_scale=0: Global parameter scale cannot be zero.");
  EXPECT_FALSE(derive_with({"global_parameter_scale=-4"}).ok());
}

struct Batch {
  int64_t micro, global, load;
};
Batch batch_for(std::vector<std::string> overrides, int64_t devices) {
  Config c = load_derived(base_yml(), std::move(overrides), devices);
  return {c.get_int("micro_batch_size_to_train_on"), c.get_int("global_batch_size_to_train_on"),
          c.get_int("global_batch_size_to_load")};
}

// MaxText's pyconfig rule: a run starts from one source at most.
TEST(LoadPaths, AtMostOneOfTheTwoIsSet) {
  EXPECT_TRUE(derive_with({"load_parameters_path=/tmp/a"}).ok());
  EXPECT_TRUE(derive_with({"load_full_state_path=/tmp/b"}).ok());
  Status both = derive_with({"load_parameters_path=/tmp/a", "load_full_state_path=/tmp/b"});
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(both.error().exit_code(), 2);
  EXPECT_EQ(message_of(both),
            "load_parameters_path='/tmp/a' (command line argument 1), load_full_state_path='/tmp/b' "
            "(command line argument 2): At most one of load_parameters_path or "
            "load_full_state_path should be set.");
}

TEST(BatchSizes, WholeBatchPerDevice) {
  Batch b = batch_for({"per_device_batch_size=2"}, 8);
  EXPECT_EQ(b.micro, 16);
  EXPECT_EQ(b.global, 16);
  EXPECT_EQ(b.load, 16);
}

TEST(BatchSizes, GradientAccumulationMultipliesGlobalAndLoaded) {
  Batch b = batch_for({"per_device_batch_size=2", "gradient_accumulation_steps=4"}, 8);
  EXPECT_EQ(b.micro, 16);
  EXPECT_EQ(b.global, 64);
  EXPECT_EQ(b.load, 64);
}

TEST(BatchSizes, FractionalLoadsOneRowPerDevice) {
  Batch b = batch_for({"per_device_batch_size=0.5"}, 8);
  EXPECT_EQ(b.micro, 4);
  EXPECT_EQ(b.global, 4);
  EXPECT_EQ(b.load, 8);
  Batch g = batch_for({"per_device_batch_size=0.25", "gradient_accumulation_steps=2"}, 16);
  EXPECT_EQ(g.micro, 4);
  EXPECT_EQ(g.global, 8);
  EXPECT_EQ(g.load, 32);
}

TEST(BatchSizes, ExpansionFactorScalesTheLoadedBatch) {
  Batch b = batch_for({"per_device_batch_size=2", "expansion_factor_real_data=2"}, 4);
  EXPECT_EQ(b.micro, 8);
  EXPECT_EQ(b.global, 8);
  EXPECT_EQ(b.load, 16);
}

TEST(BatchSizes, LessThanOneRowIsAnError) {
  Status s = derive_with({"per_device_batch_size=0.1"}, 4);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(message_of(s).find("trains on fewer than one row"), std::string::npos);
}

TEST(BatchSizes, EvalBatchDefaultsToTrainBatch) {
  Config c = load_derived(base_yml(), {"per_device_batch_size=3"}, 2);
  EXPECT_DOUBLE_EQ(c.get_float("eval_per_device_batch_size"), 3.0);
  EXPECT_EQ(c.get_int("global_batch_size_to_eval_on"), 6);
}

TEST(Schedule, MinusOneTakesTheOtherValue) {
  Config a = load_derived(base_yml(), {"steps=200"}, 1);
  EXPECT_EQ(a.get_int("learning_rate_schedule_steps"), 200);
  Config b = load_derived(base_yml(), {"steps=-1", "learning_rate_schedule_steps=70"}, 1);
  EXPECT_EQ(b.get_int("steps"), 70);
  Config c = load_derived(base_yml(), {"steps=50", "learning_rate_schedule_steps=70"}, 1);
  EXPECT_EQ(c.get_int("steps"), 50);
  EXPECT_EQ(c.get_int("learning_rate_schedule_steps"), 70);
  EXPECT_FALSE(derive_with({"steps=-1", "learning_rate_schedule_steps=-1"}).ok());
}

TEST(Paths, OutputDirectoriesFollowRunName) {
  Config c = load_derived(base_yml(), {"run_name=exp1", "base_output_directory=/tmp/out"}, 1);
  EXPECT_EQ(c.get_string("checkpoint_dir"), "/tmp/out/exp1/checkpoints/");
  EXPECT_EQ(c.get_string("metrics_dir"), "/tmp/out/exp1/metrics/");
  EXPECT_EQ(c.get_string("tensorboard_dir"), "/tmp/out/exp1/tensorboard/");
}

TEST(Paths, DefaultRunNameIsModelAndDate) {
  Config c = load_derived(base_yml(), {"model_name=llama2-7b"}, 1);
  const std::string& name = c.get_string("run_name");
  ASSERT_EQ(name.size(), std::string("llama2-7b_2026-01-01-00-00").size()) << name;
  EXPECT_EQ(name.rfind("llama2-7b_", 0), 0u);
  EXPECT_EQ(c.get_string("base_output_directory"), "./maxtext_output");
}

TEST(Numerics, MuDtypeInheritsWeightDtypeAndZeroSoftCapsAreNone) {
  Config c = load_derived(base_yml(), {"weight_dtype=bfloat16"}, 1);
  EXPECT_EQ(c.get_string("mu_dtype"), "bfloat16");
  EXPECT_TRUE(c.get("attn_logits_soft_cap").is_none());
  Config g = load_derived(base_yml(), {"model_name=gemma2-2b"}, 1);
  EXPECT_DOUBLE_EQ(g.get_float("attn_logits_soft_cap"), 50.0);
}

TEST(Parallelism, ListsFollowMeshAxesWithPipelineAsStage) {
  Config c = load_derived(base_yml(), {"ici_expert_parallelism=2", "ici_tensor_parallelism=4"}, 8);
  // mesh_axes: diloco, data, stage (ici_pipeline_parallelism), fsdp, ..., tensor, ..., expert, ...
  EXPECT_EQ(c.get("ici_parallelism").to_yaml(), "[1, 1, 1, -1, 1, 1, 1, 1, 4, 1, 2, 1]");
  EXPECT_EQ(c.get("dcn_parallelism").to_yaml(), "[1, -1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]");
  // The stage axis itself takes no parallelism: pipeline parallelism is refused by name.
  EXPECT_NE(message_of(derive_with({"ici_pipeline_parallelism=2"}))
                .find("ici_pipeline_parallelism is not supported yet"),
            std::string::npos);
}

TEST(Parallelism, AxisOutsideTheMeshMustStayOne) {
  Status s = derive_with({"ici_sequence_parallelism=2"});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(message_of(s).find("mesh_axes has no 'sequence' axis"), std::string::npos)
      << message_of(s);
}

TEST(Validation, SizesMustBePositive) {
  EXPECT_EQ(message_of(derive_with({"base_emb_dim=0"})),
            "base_emb_dim=0 (command line argument 1): must be greater than zero.");
  EXPECT_EQ(message_of(derive_with({"per_device_batch_size=-1"})),
            "per_device_batch_size=-1.0 (command line argument 1): must be greater than zero.");
  EXPECT_FALSE(derive_with({"max_target_length=0"}).ok());
  EXPECT_FALSE(derive_with({"vocab_size=-5"}).ok());
  EXPECT_FALSE(derive_with({"head_dim=0"}).ok());
}

TEST(Validation, MaxTextMessages) {
  EXPECT_NE(
      message_of(derive_with({"attention_type=local_sliding"}))
          .find("`sliding_window_size` must be an integer > 0 for 'local_sliding' attention."),
      std::string::npos);
  EXPECT_NE(message_of(derive_with({"compile_topology_num_slices=0"}))
                .find("You must set compile_topology_num_slices to a positive integer"),
            std::string::npos);
  EXPECT_NE(message_of(derive_with({"base_num_query_heads=12", "base_num_kv_heads=5"}))
                .find("is not a multiple of num_kv_heads"),
            std::string::npos);
}

TEST(ModelSpec, UnsupportedFamiliesAndFeaturesAreNamed) {
  Config c = load_derived(base_yml(), {"decoder_block=gemma4"}, 1);
  Expected<ModelSpec> spec = model_spec_from_config(c);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.error().message(),
            "decoder_block='gemma4' (command line argument 1): model family 'gemma4' is not "
            "supported yet. Supported families: llama2, mistral, gemma, gemma2, gpt3, qwen3, "
            "qwen2, gemma3, olmo3, deepseek, mixtral, qwen3_moe, gpt_oss, llama4.");
  // Experts in a family without MoE layers, and MLA outside deepseek, are refused by key.
  Expected<ModelSpec> moe = model_spec_from_config(load_derived(base_yml(), {"num_experts=8"}, 1));
  ASSERT_FALSE(moe.ok());
  EXPECT_NE(moe.error().message().find("num_experts=8 (command line argument 1): "
                                       "mixture-of-experts layers are supported for decoder_block "
                                       "deepseek, mixtral, qwen3_moe, gpt_oss and llama4, not "
                                       "yet for "
                                       "llama2"),
            std::string::npos)
      << moe.error().message();
  Expected<ModelSpec> mla =
      model_spec_from_config(load_derived(base_yml(), {"attention_type=mla"}, 1));
  ASSERT_FALSE(mla.ok());
  EXPECT_NE(mla.error().message().find("attention_type=mla is supported for decoder_block "
                                       "deepseek only"),
            std::string::npos);
  // capacity_factor, load_balance_loss_weight and the loss-free bias update are lowered.
  EXPECT_TRUE(derive_with({"model_name=deepseek3-671b", "capacity_factor=1.25",
                           "load_balance_loss_weight=0.01"})
                  .ok());
  EXPECT_TRUE(derive_with({"model_name=deepseek3-671b", "routed_bias_update_rate=0.001"}).ok());
  auto spec_error = [](std::vector<std::string> overrides) {
    Expected<ModelSpec> s = model_spec_from_config(load_derived(base_yml(), overrides, 1));
    return s.ok() ? std::string() : s.error().message();
  };
  // The bias update: deepseek's (MaxText refuses it elsewhere), and it needs a bias to move.
  EXPECT_EQ(spec_error({"model_name=deepseek3-671b", "routed_bias_update_rate=0.001"}), "");
  EXPECT_EQ(spec_error({"model_name=gpt-oss-20b", "routed_bias_update_rate=0.001"}),
            "routed_bias_update_rate=0.001 (command line argument 2): loss-free load balancing "
            "is only supported for the deepseek decoder block (as in MaxText); set "
            "routed_bias_update_rate=0.");
  EXPECT_EQ(spec_error({"model_name=deepseek2-16b", "routed_bias_update_rate=0.001"}),
            "routed_bias_update_rate=0.001 (command line argument 2): moves the routing bias, and "
            "routed_bias=false has none; set routed_bias=true or routed_bias_update_rate=0.");
  EXPECT_EQ(spec_error({"model_name=deepseek3-671b", "routed_bias_update_rate=-1"}),
            "routed_bias_update_rate=-1.0 (command line argument 2): must be >= 0 (0: off).");
  // Routing groups are deepseek3's: refused elsewhere and when they do not split the experts.
  EXPECT_NE(spec_error({"model_name=deepseek2-16b", "n_routing_groups=8", "topk_routing_group=4"})
                .find("routing groups are read by deepseek3's routing only"),
            std::string::npos);
  EXPECT_NE(spec_error({"model_name=deepseek3-671b", "n_routing_groups=7", "topk_routing_group=4"})
                .find("n_routing_groups=7 (command line argument 2): must divide num_experts "
                      "(256) into groups of at least 2 experts."),
            std::string::npos)
      << spec_error({"model_name=deepseek3-671b", "n_routing_groups=7", "topk_routing_group=4"});
  EXPECT_NE(spec_error({"model_name=deepseek3-671b", "n_routing_groups=8"})
                .find("topk_routing_group=-1"),
            std::string::npos);
  EXPECT_EQ(spec_error({"model_name=deepseek3-671b", "n_routing_groups=8", "topk_routing_group=4"}),
            "");
  EXPECT_NE(message_of(derive_with({"quantization=int8"}))
                .find("quantization is not supported yet (quantization='int8')"),
            std::string::npos);
  // A rope_type Precast does not lower is refused by name, not run as default RoPE; yarn is
  // lowered, for positions below max_position_embeddings.
  Expected<ModelSpec> ntk = model_spec_from_config(load_derived(base_yml(), {"rope_type=ntk"}, 1));
  ASSERT_FALSE(ntk.ok());
  EXPECT_EQ(ntk.error().message(),
            "rope_type='ntk' (command line argument 1): rope_type 'ntk' is not supported yet; "
            "use default, llama3.1 or yarn.");
  EXPECT_TRUE(model_spec_from_config(load_derived(base_yml(), {"rope_type=yarn"}, 1)).ok());
  Expected<ModelSpec> long_yarn = model_spec_from_config(load_derived(
      base_yml(), {"rope_type=yarn", "max_position_embeddings=1024", "max_target_length=2048"}, 1));
  ASSERT_FALSE(long_yarn.ok());
  EXPECT_EQ(long_yarn.error().message(),
            "max_position_embeddings=1024 (command line argument 2): rope_type=yarn needs "
            "max_target_length (2048) <= max_position_embeddings; raise max_position_embeddings "
            "or shorten max_target_length.");
  // Blocks of several layers only where MaxText scans them (olmo3).
  Expected<ModelSpec> blocks = model_spec_from_config(
      load_derived(base_yml(), {"inhomogeneous_layer_cycle_interval=2"}, 1));
  ASSERT_FALSE(blocks.ok());
  EXPECT_NE(blocks.error().message().find(
                "inhomogeneous_layer_cycle_interval=2 (command line argument 1): blocks of several "
                "layers are not supported yet for decoder_block llama2; set it to 1."),
            std::string::npos);
  EXPECT_TRUE(model_spec_from_config(load_derived(base_yml(), {"rope_type=llama3.1"}, 1)).ok());
  // MaxText's muon is refused as not supported yet; a name MaxText does not know either is an error.
  Expected<ModelSpec> muon = model_spec_from_config(load_derived(base_yml(), {"opt_type=muon"}, 1));
  ASSERT_FALSE(muon.ok());
  EXPECT_EQ(muon.error().message(),
            "opt_type='muon' (command line argument 1): optimizer 'muon' is not supported yet; "
            "use adamw, adam_pax or sgd.");
  EXPECT_EQ(spec_error({"opt_type=lion"}),
            "opt_type='lion' (command line argument 1): optimizer 'lion' is not one of MaxText's "
            "(adamw, adam_pax, sgd, muon); use adamw, adam_pax or sgd.");
  // gemma3's vision encoder: only its text decoder is lowered.
  Status vision = derive_with({"model_name=gemma3-4b", "use_multimodal=true"});
  ASSERT_FALSE(vision.ok());
  EXPECT_NE(message_of(vision).find("use_multimodal is not supported yet (use_multimodal=true)"),
            std::string::npos);
}

TEST(ModelSpec, ContextParallelStrategyIsAllGatherOrRing) {
  EXPECT_EQ(load_derived(base_yml(), {}, 1).get_string("context_parallel_strategy"), "all_gather");
  EXPECT_TRUE(
      model_spec_from_config(load_derived(base_yml(), {"context_parallel_strategy=ring"}, 1)).ok());
  Config usp = load_derived(base_yml(), {"context_parallel_strategy=usp"}, 1);
  Expected<ModelSpec> spec = model_spec_from_config(usp);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.error().message(),
            "context_parallel_strategy='usp' (command line argument 1): context parallel strategy "
            "'usp' is not supported; use all_gather or ring.");
}

}  // namespace
}  // namespace precast
