#include "compiler/config/ModelSpec.h"

#include <array>
#include <utility>

namespace precast {
namespace {

constexpr std::array<std::pair<std::string_view, DecoderFamily>, 14> kSupportedFamilies = {{
    {"llama2", DecoderFamily::kLlama2},
    {"mistral", DecoderFamily::kMistral},
    {"gemma", DecoderFamily::kGemma},
    {"gemma2", DecoderFamily::kGemma2},
    {"gpt3", DecoderFamily::kGpt3},
    {"qwen3", DecoderFamily::kQwen3},
    {"qwen2", DecoderFamily::kQwen2},
    {"gemma3", DecoderFamily::kGemma3},
    {"olmo3", DecoderFamily::kOlmo3},
    {"deepseek", DecoderFamily::kDeepseek},
    {"mixtral", DecoderFamily::kMixtral},
    {"qwen3_moe", DecoderFamily::kQwen3Moe},
    {"gpt_oss", DecoderFamily::kGptOss},
    {"llama4", DecoderFamily::kLlama4},
}};

// MaxText decoder blocks Precast knows of but does not lower yet.
constexpr std::string_view kKnownUnsupportedFamilies[] = {
    "default",          "deepseek4",  "envy",    "gemma4", "gemma4_small",
    "qwen3_custom_moe", "qwen3_next", "qwen3_5", "simple", "simple_mlp"};

Error unsupported(const Config& config, std::string_view key, const std::string& what) {
  const ConfigEntry& entry = config.entry(key);
  return usage_error(std::string(key) + "=" + entry.value.to_yaml() + " (" + entry.origin +
                     "): " + what);
}

Expected<DecoderFamily> family_of(const Config& config) {
  const std::string& block = config.get_string("decoder_block");
  for (const auto& [name, family] : kSupportedFamilies) {
    if (name == block) return family;
  }
  for (std::string_view name : kKnownUnsupportedFamilies) {
    if (name == block) {
      return unsupported(config, "decoder_block",
                         "model family '" + block +
                             "' is not supported yet. Supported "
                             "families: " +
                             supported_families_list() + ".");
    }
  }
  return unsupported(config, "decoder_block",
                     "unknown decoder family '" + block +
                         "'. Supported families: " + supported_families_list() + ".");
}

// Routing groups (MaxText's deepseek_routing, used for model names starting deepseek3): both keys
// set or neither; whole groups of at least two experts; enough experts in the kept groups.
Status check_routing_groups(const Config& config) {
  int64_t groups = config.get_int("n_routing_groups");
  int64_t kept = config.get_int("topk_routing_group");
  if (groups == -1 && kept == -1) return Status::success();
  if (config.get_string("decoder_block") != "deepseek" ||
      !config.get_string("model_name").starts_with("deepseek3")) {
    return unsupported(config, "n_routing_groups",
                       "routing groups are read by deepseek3's routing only (decoder_block "
                       "deepseek, model_name starting deepseek3); set n_routing_groups=-1 and "
                       "topk_routing_group=-1.");
  }
  int64_t experts = config.get_int("num_experts");
  if (groups < 1 || experts % groups != 0 || experts / groups < 2) {
    return unsupported(config, "n_routing_groups",
                       "must divide num_experts (" + std::to_string(experts) +
                           ") into groups of at least 2 experts.");
  }
  if (kept < 1 || kept > groups ||
      kept * (experts / groups) < config.get_int("num_experts_per_tok")) {
    return unsupported(config, "topk_routing_group",
                       "must be between 1 and n_routing_groups, and its groups must hold at least "
                       "num_experts_per_tok experts.");
  }
  return Status::success();
}

// deepseek's auxiliary-loss-free balancing moves the routing bias: MaxText's rule (deepseek
// decoder blocks only), and a bias to move.
Status check_routed_bias_update(const Config& config) {
  double rate = config.get_float("routed_bias_update_rate");
  if (rate == 0) return Status::success();
  if (!(rate > 0)) {
    return unsupported(config, "routed_bias_update_rate", "must be >= 0 (0: off).");
  }
  if (config.get_string("decoder_block") != "deepseek") {
    return unsupported(config, "routed_bias_update_rate",
                       "loss-free load balancing is only supported for the deepseek decoder "
                       "block (as in MaxText); set routed_bias_update_rate=0.");
  }
  if (!config.get_bool("routed_bias")) {
    return unsupported(config, "routed_bias_update_rate",
                       "moves the routing bias, and routed_bias=false has none; set "
                       "routed_bias=true or routed_bias_update_rate=0.");
  }
  return Status::success();
}

bool is_moe_family(const std::string& block) {
  return block == "deepseek" || block == "mixtral" || block == "qwen3_moe" || block == "gpt_oss" ||
         block == "llama4";
}

// MaxText's MoE and MLA rules (maxtext-facts §a) and what Precast lowers of them.
Status check_mixture_of_experts(const Config& config) {
  const std::string& block = config.get_string("decoder_block");
  bool mla = config.get_string("attention_type") == "mla";
  if (mla != (block == "deepseek")) {
    return unsupported(config, "attention_type",
                       mla ? "attention_type=mla is supported for decoder_block deepseek only; "
                             "use global."
                           : "decoder_block deepseek is lowered with attention_type=mla only; "
                             "set attention_type=mla.");
  }
  PRECAST_RETURN_IF_ERROR(check_routed_bias_update(config));
  int64_t experts = config.get_int("num_experts");
  if (experts < 1) {
    return unsupported(config, "num_experts", "must be at least 1 (1: dense layers).");
  }
  if (experts > 1 && !is_moe_family(block)) {
    return unsupported(config, "num_experts",
                       "mixture-of-experts layers are supported for decoder_block deepseek, "
                       "mixtral, qwen3_moe, gpt_oss and llama4, not yet for " +
                           block + "; set num_experts=1.");
  }
  if (experts == 1 && is_moe_family(block)) {
    return unsupported(config, "num_experts",
                       "decoder_block " + block + " needs num_experts > 1 (its layers are "
                       "mixtures of experts).");
  }
  if (experts == 1) return Status::success();
  int64_t per_token = config.get_int("num_experts_per_tok");
  if (per_token < 1 || per_token > experts) {
    return unsupported(config, "num_experts_per_tok",
                       "must be between 1 and num_experts (" + std::to_string(experts) + ").");
  }
  if (config.get_int("moe_mlp_dim") <= 0) {
    return unsupported(config, "base_moe_mlp_dim",
                       "a mixture-of-experts model needs an expert width > 0; set "
                       "base_moe_mlp_dim.");
  }
  int64_t dense_layers = block == "deepseek" ? config.get_int("first_num_dense_layers") : 0;
  if (dense_layers < 0 || dense_layers > config.get_int("num_decoder_layers")) {
    return unsupported(config, "first_num_dense_layers",
                       "must be between 0 and num_decoder_layers.");
  }
  if (block != "deepseek" && config.get_int("first_num_dense_layers") != 0) {
    return unsupported(config, "first_num_dense_layers",
                       "is read by decoder_block deepseek only; leave it at 0.");
  }
  // MaxText's fully-MoE check (no dense first layers, no interleaved dense layers, single-layer
  // blocks); qwen3_moe sets base_mlp_dim to base_moe_mlp_dim instead (DerivedKeys), its dense
  // width being unused.
  bool fully_moe = dense_layers == 0 && config.get_int("interleave_moe_layer_step") == 1 &&
                   config.get_int("inhomogeneous_layer_cycle_interval") == 1;
  if (fully_moe && block != "qwen3_moe" &&
      config.get_int("base_mlp_dim") != config.get_int("base_moe_mlp_dim")) {
    return unsupported(config, "base_mlp_dim",
                       "for a fully MoE model, base_mlp_dim must equal base_moe_mlp_dim (" +
                           std::to_string(config.get_int("base_moe_mlp_dim")) + ").");
  }
  const std::string& score = config.get_string("routed_score_func");
  if (score != "" && score != "softmax" && score != "sigmoid") {
    return unsupported(config, "routed_score_func",
                       "score function '" + score + "' is not supported yet; use softmax, "
                       "sigmoid or '' (none).");
  }
  PRECAST_RETURN_IF_ERROR(check_routing_groups(config));
  if (block != "deepseek" && block != "llama4") {
    for (std::string_view key : {"shared_experts"}) {
      if (config.get_int(key) != 0) {
        return unsupported(config, key,
                           "is read by decoder_block deepseek and llama4 only; leave it at 0.");
      }
    }
  }
  return Status::success();
}

// attention_sink and mlp_activations_limit are gpt_oss's (its sinks and clamped experts); other
// families do not lower them.
Status check_gpt_oss_keys(const Config& config) {
  if (config.get_string("decoder_block") == "gpt_oss") return Status::success();
  if (config.get_bool("attention_sink")) {
    return unsupported(config, "attention_sink",
                       "attention sinks are supported for decoder_block gpt_oss only, not yet "
                       "for " +
                           config.get_string("decoder_block") + "; set attention_sink=false.");
  }
  if (config.get_float("mlp_activations_limit") > 0) {
    return unsupported(config, "mlp_activations_limit",
                       "the clamped expert activation is supported for decoder_block gpt_oss "
                       "only, not yet for " +
                           config.get_string("decoder_block") +
                           "; set mlp_activations_limit=-1.0.");
  }
  return Status::success();
}

// llama4's keys: read by llama4 only (refused off their defaults elsewhere); for llama4, MaxText's
// own checks (types.py) with its messages, and the values its layer pattern needs.
Status check_llama4_keys(const Config& config) {
  if (config.get_string("decoder_block") != "llama4") {
    bool set[] = {config.get_int("interleave_moe_layer_step") != 1,
                  config.get_int("nope_layer_interval") != -1,
                  config.get_int("chunk_attn_window_size") != 0,
                  config.get_bool("temperature_tuning")};
    const char* keys[] = {"interleave_moe_layer_step", "nope_layer_interval",
                          "chunk_attn_window_size", "temperature_tuning"};
    for (int i = 0; i < 4; ++i) {
      if (!set[i]) continue;
      return unsupported(config, keys[i],
                         "is read by decoder_block llama4 only, not yet by " +
                             config.get_string("decoder_block") +
                             "; leave it at its default (interleave_moe_layer_step=1, "
                             "nope_layer_interval=-1, chunk_attn_window_size=0, "
                             "temperature_tuning=false).");
    }
    return Status::success();
  }
  if (config.get_float("capacity_factor") >= 0) {
    return unsupported(config, "capacity_factor",
                       "Llama4 decoder has not been tested with capacity_factor >= 0 -- please "
                       "set that value to -1 for now! (MaxText's check)");
  }
  if (config.get_int("num_experts_per_tok") > 1) {
    return unsupported(config, "num_experts_per_tok",
                       "Only top-1 routing is supported for Llama4 for now! (MaxText's check); "
                       "set num_experts_per_tok=1.");
  }
  int64_t step = config.get_int("interleave_moe_layer_step");
  if (step < 1) {
    return unsupported(config, "interleave_moe_layer_step",
                       "must be >= 1 (1: every layer MoE, 2: every second layer).");
  }
  int64_t layers = config.get_int("base_num_decoder_layers");
  if (layers % step != 0) {
    return unsupported(config, "interleave_moe_layer_step",
                       "The number of decoder layers (" + std::to_string(layers) +
                           ") must be divisible by interleave moe layer step (" +
                           std::to_string(step) + ") (MaxText's check).");
  }
  if (config.get_int("nope_layer_interval") < 1) {
    return unsupported(config, "nope_layer_interval",
                       "llama4 needs nope_layer_interval >= 1 (every n-th layer without RoPE and "
                       "with global attention; MaxText's FLOP count divides by it); the llama4 "
                       "model files set 4.");
  }
  if (config.get_int("chunk_attn_window_size") < 1) {
    return unsupported(config, "chunk_attn_window_size",
                       "`chunk_attn_window_size` must be an integer > 0 for 'chunk' attention "
                       "(llama4's RoPE layers; MaxText's check); the llama4 model files set 8192.");
  }
  return Status::success();
}

// Values of implemented keys that Precast does not lower yet (keys whose whole feature is missing,
// such as num_experts or quantization, are refused while loading the config: KeyRegistry.h).
Status check_features(const Config& config) {
  const std::string& attention_type = config.get_string("attention_type");
  if (attention_type != "global" && attention_type != "local_sliding" && attention_type != "mla") {
    return unsupported(config, "attention_type",
                       "attention type '" + attention_type +
                           "' is not supported yet; use global, local_sliding or mla.");
  }
  PRECAST_RETURN_IF_ERROR(check_mixture_of_experts(config));
  const std::string& attention = config.get_string("attention");
  if (attention != "autoselected" && attention != "dot_product" && attention != "flash") {
    return unsupported(config, "attention",
                       "attention kernel '" + attention +
                           "' is not available; use autoselected, dot_product or flash.");
  }
  const std::string& strategy = config.get_string("context_parallel_strategy");
  if (strategy != "all_gather" && strategy != "ring") {
    return unsupported(
        config, "context_parallel_strategy",
        "context parallel strategy '" + strategy + "' is not supported; use all_gather or ring.");
  }
  const std::string& rope_type = config.get_string("rope_type");
  if (rope_type != "default" && rope_type != "llama3.1" && rope_type != "yarn") {
    return unsupported(
        config, "rope_type",
        "rope_type '" + rope_type + "' is not supported yet; use default, llama3.1 or yarn.");
  }
  // MaxText's YaRN table has max_position_embeddings rows; a position past it has no row.
  if (rope_type == "yarn" &&
      config.get_int("max_target_length") > config.get_int("max_position_embeddings")) {
    return unsupported(config, "max_position_embeddings",
                       "rope_type=yarn needs max_target_length (" +
                           std::to_string(config.get_int("max_target_length")) +
                           ") <= max_position_embeddings; raise max_position_embeddings or "
                           "shorten max_target_length.");
  }
  // Only olmo3 and gpt_oss among the lowered families scan blocks of several layers (their
  // local/global patterns); the others scan single layers.
  PRECAST_RETURN_IF_ERROR(check_gpt_oss_keys(config));
  PRECAST_RETURN_IF_ERROR(check_llama4_keys(config));
  if (config.get_string("decoder_block") != "olmo3" &&
      config.get_string("decoder_block") != "gpt_oss" &&
      config.get_string("decoder_block") != "llama4" &&
      config.get_int("inhomogeneous_layer_cycle_interval") != 1) {
    return unsupported(config, "inhomogeneous_layer_cycle_interval",
                       "blocks of several layers are not supported yet for decoder_block " +
                           config.get_string("decoder_block") + "; set it to 1.");
  }
  const std::string& opt = config.get_string("opt_type");
  if (opt == "muon") {  // one of MaxText's optimizers that Precast does not lower
    return unsupported(config, "opt_type",
                       "optimizer 'muon' is not supported yet; use adamw, adam_pax or sgd.");
  }
  if (opt != "adamw" && opt != "adam_pax" && opt != "sgd") {
    return unsupported(config, "opt_type",
                       "optimizer '" + opt +
                           "' is not one of MaxText's (adamw, adam_pax, sgd, muon); use adamw, "
                           "adam_pax or sgd.");
  }
  for (std::string_view key : {"dtype", "weight_dtype", "grad_dtype", "mu_dtype"}) {
    const std::string& dtype = config.get_string(key);
    if (dtype != "float32" && dtype != "bfloat16" && dtype != "float16") {
      return unsupported(config, key,
                         "dtype '" + dtype +
                             "' is not supported; use float32, bfloat16 or "
                             "float16.");
    }
  }
  return Status::success();
}

std::optional<double> optional_float(const Config& config, std::string_view key) {
  const ConfigValue& v = config.get(key);
  if (v.is_none()) return std::nullopt;
  return v.as_float();
}

}  // namespace

std::string_view decoder_family_name(DecoderFamily family) {
  for (const auto& [name, f] : kSupportedFamilies) {
    if (f == family) return name;
  }
  return "?";
}

std::string supported_families_list() {
  std::string out;
  for (const auto& [name, family] : kSupportedFamilies) {
    out += (out.empty() ? "" : ", ") + std::string(name);
  }
  return out;
}

Expected<ModelSpec> model_spec_from_config(const Config& config) {
  PRECAST_ASSIGN_OR_RETURN(DecoderFamily family, family_of(config));
  PRECAST_RETURN_IF_ERROR(check_features(config));
  ModelSpec spec;
  spec.model_name = config.get_string("model_name");
  spec.decoder_block = config.get_string("decoder_block");
  spec.family = family;
  spec.emb_dim = config.get_int("emb_dim");
  spec.num_query_heads = config.get_int("num_query_heads");
  spec.num_kv_heads = config.get_int("num_kv_heads");
  spec.head_dim = config.get_int("head_dim");
  spec.mlp_dim = config.get_int("mlp_dim");
  spec.num_decoder_layers = config.get_int("num_decoder_layers");
  spec.vocab_size = config.get_int("vocab_size");
  spec.mlp.activations = config.get_string_list("mlp_activations");
  spec.logits_via_embedding = config.get_bool("logits_via_embedding");
  spec.normalize_embedding_logits = config.get_bool("normalize_embedding_logits");
  spec.attention.fused_qkv = config.get_bool("fused_qkv");
  spec.mlp.fused = config.get_bool("fused_mlp");
  spec.attention.qk_norm = config.get_bool("use_qk_norm");
  spec.attention.bias = config.get_bool("attention_bias");
  spec.mlp.bias = config.get_bool("mlp_bias");
  spec.mlp.activations_limit = config.get_float("mlp_activations_limit");
  spec.attention.sink = config.get_bool("attention_sink");
  spec.use_post_attn_norm = config.get_bool("use_post_attn_norm");
  spec.use_post_ffw_norm = config.get_bool("use_post_ffw_norm");
  spec.scan_layers = config.get_bool("scan_layers");
  spec.trainable_position_size = config.get_int("trainable_position_size");
  spec.attention.kernel = config.get_string("attention");
  spec.attention.type = config.get_string("attention_type");
  spec.attention.sliding_window_size = config.get_int("sliding_window_size");
  spec.attention.logits_soft_cap = optional_float(config, "attn_logits_soft_cap");
  spec.final_logits_soft_cap = optional_float(config, "final_logits_soft_cap");
  spec.normalization_layer_epsilon = config.get_float("normalization_layer_epsilon");
  spec.z_loss_multiplier = config.get_float("z_loss_multiplier");
  spec.num_vocab_tiling = config.get_int("num_vocab_tiling");
  spec.rope.type = config.get_string("rope_type");
  spec.rope.min_timescale = config.get_int("rope_min_timescale");
  spec.rope.max_timescale = config.get_int("rope_max_timescale");
  spec.rope.local_max_timescale = config.get_int("local_rope_max_timescale");
  spec.rope.linear_scaling_factor = config.get_float("rope_linear_scaling_factor");
  spec.rope.use_scale = config.get_bool("rope_use_scale");
  spec.rope.yarn.factor = config.get_int("rope_factor");
  spec.rope.yarn.original_max_position_embeddings =
      config.get_int("original_max_position_embeddings");
  spec.rope.yarn.max_position_embeddings = config.get_int("max_position_embeddings");
  spec.rope.yarn.beta_fast = config.get_int("beta_fast");
  spec.rope.yarn.beta_slow = config.get_int("beta_slow");
  spec.rope.yarn.interleave = config.get_bool("rope_interleave");
  spec.rope.yarn.truncate = config.get_bool("rope_truncate");
  spec.rope.yarn.attention_scaling = config.get_bool("rope_attention_scaling");
  spec.inhomogeneous_layer_cycle_interval = config.get_int("inhomogeneous_layer_cycle_interval");
  spec.mla.enabled = spec.attention.type == "mla";
  spec.mla.q_lora_rank = config.get_int("q_lora_rank");
  spec.mla.kv_lora_rank = config.get_int("kv_lora_rank");
  spec.mla.qk_nope_head_dim = config.get_int("qk_nope_head_dim");
  spec.mla.qk_rope_head_dim = config.get_int("qk_rope_head_dim");
  spec.mla.v_head_dim = config.get_int("v_head_dim");
  spec.mla.mscale = config.get_float("mscale");
  spec.mla.legacy_param_count = config.get_bool("mla_legacy_param_count");
  spec.moe.num_experts = config.get_int("num_experts");
  spec.moe.experts_per_token = config.get_int("num_experts_per_tok");
  spec.moe.moe_mlp_dim = config.get_int("moe_mlp_dim");
  spec.moe.shared_experts = config.get_int("shared_experts");
  spec.moe.first_num_dense_layers = config.get_int("first_num_dense_layers");
  spec.moe.score_func = config.get_string("routed_score_func");
  spec.moe.routed_bias = config.get_bool("routed_bias");
  spec.moe.norm_topk_prob = config.get_bool("norm_topk_prob");
  spec.moe.routed_scaling_factor = config.get_float("routed_scaling_factor");
  spec.moe.weights_before_bias = spec.model_name.starts_with("deepseek3");
  spec.moe.n_routing_groups = config.get_int("n_routing_groups");
  spec.moe.topk_routing_group = config.get_int("topk_routing_group");
  spec.moe.routed_bias_update_rate = config.get_float("routed_bias_update_rate");
  spec.moe.load_balance_loss_weight = config.get_float("load_balance_loss_weight");
  spec.moe.capacity_factor = config.get_float("capacity_factor");
  spec.moe.sparse_matmul = config.get_bool("sparse_matmul");
  spec.moe.dispatch_no_expert_sharding = config.get_bool("moe_dispatch_no_expert_sharding");
  spec.llama4.interleave_moe_layer_step = config.get_int("interleave_moe_layer_step");
  spec.llama4.nope_layer_interval = config.get_int("nope_layer_interval");
  spec.llama4.chunk_attn_window_size = config.get_int("chunk_attn_window_size");
  spec.llama4.temperature_tuning = config.get_bool("temperature_tuning");
  spec.dtype = config.get_string("dtype");
  spec.weight_dtype = config.get_string("weight_dtype");
  spec.grad_dtype = config.get_string("grad_dtype");
  spec.mu_dtype = config.get_string("mu_dtype");
  spec.opt_type = config.get_string("opt_type");
  spec.remat_policy = config.get_string("remat_policy");
  if (spec.mlp.activations.empty()) {
    return unsupported(config, "mlp_activations", "needs at least one activation.");
  }
  return spec;
}

BatchSpec batch_spec_from_config(const Config& config) {
  BatchSpec batch;
  batch.per_device_batch_size = config.get_float("per_device_batch_size");
  batch.max_target_length = config.get_int("max_target_length");
  batch.gradient_accumulation_steps = config.get_int("gradient_accumulation_steps");
  batch.num_target_devices = config.get_int("num_target_devices");
  batch.micro_batch_size_to_train_on = config.get_int("micro_batch_size_to_train_on");
  batch.global_batch_size_to_train_on = config.get_int("global_batch_size_to_train_on");
  batch.global_batch_size_to_load = config.get_int("global_batch_size_to_load");
  return batch;
}

}  // namespace precast
