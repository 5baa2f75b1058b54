// ModelSpec: the model and batch a resolved Config describes, in typed form. The frontend lowers
// it to IR; the formula analysis computes MaxText's parameter and FLOP numbers from it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compiler/config/Config.h"
#include "ir/support/Error.h"

namespace precast {

enum class DecoderFamily {
  kLlama2,
  kMistral,
  kGemma,
  kGemma2,
  kGpt3,
  kQwen3,
  kQwen2,
  kGemma3,
  kOlmo3,
  kDeepseek,
  kMixtral,
  kQwen3Moe,
  kGptOss,
  kLlama4
};

// Options of the attention block beyond its dimensions (the families set what they use).
struct AttentionSpec {
  bool qk_norm = false;    // use_qk_norm: RMSNorm over head_dim of q and k, before RoPE
  bool bias = false;  // attention_bias: biases on the q/k/v projections (qwen2; gpt_oss out too)
  bool sink = false;  // attention_sink: a learned logit per query head in the softmax (gpt_oss)
  bool fused_qkv = false;  // fused_qkv
  std::optional<double> logits_soft_cap;  // attn_logits_soft_cap
  std::string kernel;                     // attention: autoselected | dot_product | flash
  std::string type;                       // attention_type: global | local_sliding
  int64_t sliding_window_size = 0;
};

// Options of the MLP block.
struct MlpSpec {
  std::vector<std::string> activations;  // mlp_activations
  bool bias = false;                     // mlp_bias
  double activations_limit = -1.0;       // mlp_activations_limit (> 0: gpt_oss's clamped experts)
  bool fused = false;                    // fused_mlp
};

// YaRN's rotary embedding (rope_type=yarn, MaxText's YarnRotaryEmbedding): frequencies between
// the base ones and the base ones divided by `factor`, blended over the dimensions whose
// rotations within the original context lie between beta_slow and beta_fast.
struct YarnSpec {
  int64_t factor = 40;  // rope_factor
  int64_t original_max_position_embeddings = 4096;
  int64_t max_position_embeddings = 163840;  // positions must stay below it
  int64_t beta_fast = 32;
  int64_t beta_slow = 1;
  bool interleave = true;          // rope_interleave: input pairs (x[2i], x[2i+1]), else halves
  bool truncate = true;            // rope_truncate: floor/ceil the correction range
  bool attention_scaling = false;  // rope_attention_scaling: output * (0.1 ln(factor) + 1)
};

// The rotary position embedding: its type (default, llama3.1, yarn), timescales and scaling.
struct RopeSpec {
  std::string type;                    // rope_type
  int64_t min_timescale = 1;           // rope_min_timescale
  int64_t max_timescale = 10000;       // rope_max_timescale (theta)
  int64_t local_max_timescale = -1;    // local_rope_max_timescale
  double linear_scaling_factor = 1.0;  // rope_linear_scaling_factor
  bool use_scale = true;               // rope_use_scale (llama3.1)
  YarnSpec yarn;
};

// Multi-head latent attention (attention_type=mla, deepseek): queries through an optional
// low-rank projection, keys and values through a shared low-rank latent, RoPE on a separate
// slice of each head.
struct MlaSpec {
  bool enabled = false;
  int64_t q_lora_rank = 0;  // 0: a plain query projection
  int64_t kv_lora_rank = 512;
  int64_t qk_nope_head_dim = 128;
  int64_t qk_rope_head_dim = 64;
  int64_t v_head_dim = 128;
  double mscale = 1.0;  // YaRN's softmax scale factor (0.1 mscale ln(rope_factor) + 1)^2
  // mla_legacy_param_count: count the unused key/value (and query) kernels MaxText's MLA
  // allocated before its September 2025 fix (maxtext-facts §d, the 15.933 B of deepseek2-16b).
  bool legacy_param_count = false;
};

// Mixture-of-experts layers (num_experts > 1): a router picks num_experts_per_tok experts per
// token (dropless), every expert is a gated MLP of width moe_mlp_dim, shared experts run on
// every token.
struct MoeSpec {
  int64_t num_experts = 1;
  int64_t experts_per_token = 1;    // num_experts_per_tok
  int64_t moe_mlp_dim = 0;
  int64_t shared_experts = 0;
  int64_t first_num_dense_layers = 0;  // deepseek: the first layers are dense MLPs
  std::string score_func;              // routed_score_func: "", softmax or sigmoid
  bool routed_bias = false;            // a bias on the router scores, for selection
  bool norm_topk_prob = false;
  double routed_scaling_factor = 1.0;
  // deepseek3 routing (model names starting deepseek3): the weights are the scores before the
  // bias; deepseek2's include it (MaxText's GateLogit and get_topk).
  bool weights_before_bias = false;
  // deepseek3 routing groups (n_routing_groups, topk_routing_group; -1: none): experts may only
  // be chosen from the topk_routing_group groups with the best sums of their two best scores.
  int64_t n_routing_groups = -1;
  int64_t topk_routing_group = -1;
  // deepseek's auxiliary-loss-free balancing (routed_bias_update_rate; 0: off): the train step
  // moves each MoE layer's gate.bias by rate * sign(mean load - expert load) after the update.
  double routed_bias_update_rate = 0;
  // MaxText's load-balancing loss (load_balance_loss_weight; 0: none), added to the training loss.
  double load_balance_loss_weight = 0.0;
  // MaxText's capacity_factor (<= 0: dropless): each expert takes at most
  // int(max(ceil(T·k / X)·capacity_factor, capacity_factor)) tokens of a row, first come first
  // served along the sequence; the weights of the others are dropped (zeroed).
  // Only with sparse_matmul=false: MaxText's sparse (grouped) path ignores it and stays dropless.
  double capacity_factor = -1.0;
  // sparse_matmul: each token's chosen experts computed as grouped matmuls over [B, S*k] rows
  // (MaxText's default); false: every expert on every token, masked.
  bool sparse_matmul = true;
  // moe_dispatch_no_expert_sharding: the capacity path's dispatched tokens and expert MLP are
  // split over the experts on `expert` (the batch keeps its other axes): expert parallelism
  // with all-to-all dispatch and combine, as MaxText's _maybe_shard_moe_dispatch peels it.
  bool dispatch_no_expert_sharding = false;
  bool drops_tokens() const { return capacity_factor > 0 && !sparse_matmul; }
  bool enabled() const { return num_experts > 1; }
};

// llama4's layer pattern and attention (MaxText's Llama4DecoderLayer; read by llama4 only).
struct Llama4Spec {
  // Layer i is MoE when (i + 1) % interleave_moe_layer_step == 0, else a dense MLP.
  int64_t interleave_moe_layer_step = 1;
  // Layer i has no RoPE and attends globally when (i + 1) % nope_layer_interval == 0.
  int64_t nope_layer_interval = -1;
  int64_t chunk_attn_window_size = 0;  // the RoPE layers attend causally within such chunks
  // The NoPE layers scale q by 0.1 log(floor((position + 1) / 8192) + 1) + 1.
  bool temperature_tuning = false;
};

struct ModelSpec {
  std::string model_name;
  std::string decoder_block;  // as configured, e.g. "llama2"
  DecoderFamily family = DecoderFamily::kLlama2;

  int64_t emb_dim = 0;
  int64_t num_query_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t mlp_dim = 0;
  int64_t num_decoder_layers = 0;  // gemma2: (local, global) pairs
  int64_t vocab_size = 0;
  MlpSpec mlp;

  bool logits_via_embedding = false;
  bool normalize_embedding_logits = true;
  AttentionSpec attention;
  MlaSpec mla;
  MoeSpec moe;
  Llama4Spec llama4;
  bool use_post_attn_norm = false;
  bool use_post_ffw_norm = false;
  bool scan_layers = true;
  int64_t trainable_position_size = -1;  // > 0: learned position table (gpt3)

  std::optional<double> final_logits_soft_cap;
  double normalization_layer_epsilon = 1e-5;
  double z_loss_multiplier = 0.0;
  // num_vocab_tiling: the output head and cross entropy computed in this many tiles of the
  // tokens, each recomputed in its backward, so one tile's logits exist at a time.
  int64_t num_vocab_tiling = 1;
  RopeSpec rope;
  // Layers per scanned block (inhomogeneous_layer_cycle_interval; olmo3: its pattern of 3 local
  // and 1 global layer).
  int64_t inhomogeneous_layer_cycle_interval = 1;

  std::string dtype, weight_dtype, grad_dtype, mu_dtype;
  std::string opt_type;
  std::string remat_policy;
};

// Batch shape of one training step on one device (maxtext-facts §a, §d).
struct BatchSpec {
  double per_device_batch_size = 1;  // may be fractional
  int64_t max_target_length = 0;
  int64_t gradient_accumulation_steps = 1;
  int64_t num_target_devices = 1;
  int64_t micro_batch_size_to_train_on = 0;   // rows, all devices
  int64_t global_batch_size_to_train_on = 0;  // rows per optimizer step, all devices
  int64_t global_batch_size_to_load = 0;
};

// Requires derive_keys() to have run. Unsupported families and features are errors that say so.
Expected<ModelSpec> model_spec_from_config(const Config& config);
BatchSpec batch_spec_from_config(const Config& config);

std::string_view decoder_family_name(DecoderFamily family);
// Families Precast lowers, for messages: "llama2, mistral, gemma, gemma2, gpt3".
std::string supported_families_list();

}  // namespace precast
