// The blocks a decoder family composes: embedding, norms, rotary embeddings, attention, MLP and
// the output head with the loss. Each declares the weights it uses (through Context::weight)
// under the prefix it is given, with MaxText's names, shapes, logical axes and initialisers, and
// sets MaxText's checkpoint names on what it computes. compiler/frontend/README.md has the math.
#pragma once

#include <cstdint>
#include <string>

#include "compiler/frontend/blocks/Context.h"

namespace precast::frontend {

// --- Dense projection (Dense.cpp) ------------------------------------------------------------
// x's last `contract` dims times `kernel`'s first ones, in the scope of the kernel's prefix,
// plus `bias` (broadcast over the leading dims) when bias.name is not empty.
ir::Value dense(Context& c, ir::Value x, const WeightInfo& kernel, int64_t contract,
                const WeightInfo& bias = {});

// --- Embedding (Embedding.cpp) ---------------------------------------------------------------
// take(token_embedder.embedding, inputs); with positions > 0 (gpt3) adds
// take(decoder.position_embedder.embedding, inputs_position).
ir::Value embed_tokens(Context& c, int64_t positions = 0);

// --- Norms (Norm.cpp) ------------------------------------------------------------------------
// x * rsqrt(mean(x^2) + eps) * scale over x's last dim, statistics in the stat dtype. The scale
// [F] (F = x's last dim) is `scale_name`, initialised to one, axes (norm).
ir::Value rms_norm(Context& c, ir::Value x, const std::string& scale_name);
// An RMSNorm module `prefix` (prefix.scale) over the residual stream, in its own scope.
ir::Value rms_norm_block(Context& c, ir::Value x, const std::string& prefix);
// gpt3's LayerNorm module: (x - mean) * rsqrt(var + eps) * (1 + prefix.scale) + prefix.bias,
// both [E] initialised to zero, in the activation dtype.
ir::Value layer_norm_block(Context& c, ir::Value x, const std::string& prefix);

// --- Rotary position embedding (Rotary.cpp) ---------------------------------------------------
// x [R, T, N, D] rotated at inputs_position. Kinds (from the config): the default halves with
// optional linear scaling and a local max timescale for sliding-window (`local`) layers;
// llama3.1's interleaved pairs with its frequency scaling; YaRN (rope_type=yarn, every layer)
// rotating pairs or halves in the statistics dtype. `scale_local` false: local layers are
// not stretched by rope_linear_scaling_factor (gemma3).
ir::Value rotary(Context& c, ir::Value x, bool local, bool scale_local = true);

// --- Attention (Attention.cpp) ----------------------------------------------------------------
struct AttentionBlock {
  std::string prefix;       // "decoder.layers_3.self_attention" (no trailing dot)
  int64_t window = 0;       // > 0: sliding window
  bool fused_qkv = false;   // gpt3: one qkv_proj kernel [E, 3, H, D], q divided by sqrt(D)
  bool biases = false;      // gpt3: a bias on qkv_proj and out
  bool qkv_biases = false;  // qwen2 (attention_bias): biases on query, key and value, not out
  bool qk_norm = false;     // qwen3: RMSNorm over D of q and k (query_norm, key_norm) before RoPE
  bool qk_norm_all_heads = false;    // olmo3: the qk-norm over all heads at once ([H*D], [K*D])
  bool local_rope_unscaled = false;  // gemma3: no linear RoPE scaling in sliding-window layers
  double query_scale = 1;  // qwen3: q * D^-0.5 after RoPE (MaxText's query_pre_attn_scalar)
  bool out_bias = false;   // gpt_oss (attention_bias): a bias [E] on out as well
  bool sink = false;       // gpt_oss (attention_sink): prefix.sinks [H] join each softmax
  // llama4: causal within chunks of this many tokens (t sees s when t // chunk == s // chunk).
  int64_t chunk = 0;
  bool no_rope = false;     // llama4's NoPE layers: no rotary embedding
  bool l2_qk_norm = false;  // llama4 (use_qk_norm): q, k divided by their RMS over D after RoPE
  // llama4's NoPE layers (temperature_tuning): q times 0.1 log(floor((pos + 1) / 8192) + 1) + 1.
  bool temperature_tuning = false;
};
// Self-attention of x [R, T, E]: q/k/v projections, optional qk-norm, RoPE (not fused_qkv),
// causal attention with the segment mask (and the sinks), the output projection. Checkpoint
// names: query_proj,
// key_proj, value_proj (qkv_proj when fused), context, out_proj.
ir::Value attention(Context& c, ir::Value x, const AttentionBlock& block);

// --- MLP (Mlp.cpp) ----------------------------------------------------------------------------
struct MlpBlock {
  std::string prefix;       // "decoder.layers_3.mlp" (no trailing dot)
  int64_t width = 0;        // hidden width; 0: mlp_dim (deepseek's shared experts: S * moe_mlp_dim)
  bool biases = false;      // gpt3: a bias on every kernel
  bool layer_norm = false;  // gpt3: the MLP normalises its input (prefix.mlp_layer_norm)
};
// gpt_oss's clamped gated activation of the expert inputs (mlp_activations_limit L, MaxText's
// apply_ffn_activation): g = min(gate, L), u = clip(up, -L, L), g * act(1.702 g) * (u + 1).
ir::Value clamped_glu(ir::Builder& b, std::string_view activation, double limit, ir::Value gate,
                      ir::Value up);
// prod_a act_a(x Wi_a) Wo; checkpoint names mlpwi_<a> (mlpwi when one activation) and mlpwo.
ir::Value mlp(Context& c, ir::Value x, const MlpBlock& block);
// One of mlp_activations by name: silu, gelu (tanh approximation), relu, sigmoid, tanh, linear.
ir::Value mlp_activation(ir::Builder& b, std::string_view name, ir::Value x);

// --- Multi-head latent attention (Mla.cpp) ----------------------------------------------------
// deepseek's MLA of x [R, T, E] (attention_type=mla) under `prefix` ("decoder.layers_3.
// self_attention"): query (or wq_a, q_norm, wq_b), wkv_a, kv_norm, wkv_b, out; RoPE on the
// qk_rope_head_dim slice of each head, the key's shared by all heads; queries scaled by
// qk_head_dim^-0.5 (times YaRN's mscale^2). Checkpoint names query_wa_proj, mla_q, kv_wa_proj,
// mla_kv, query_proj, key_proj, value_proj, context, out_proj.
ir::Value mla_attention(Context& c, ir::Value x, const std::string& prefix);

// --- Mixture of experts (Moe.cpp) -------------------------------------------------------------
struct MoeBlock {
  std::string prefix;                  // "decoder.layers_3.MoeBlock_0" (no trailing dot)
  std::string gate_axis = "embed";     // the router kernel's first logical axis
  bool deepseek_weights = false;       // deepseek's routing weights (no softmax over the top k)
  // llama4's router (top-1): the chosen expert's input is scaled by sigmoid(its logit) and its
  // output taken with weight 1.
  bool llama4_router = false;
};
// Routed experts of x [R, T, E]: router scores (gate.kernel, optional gate.bias), the top
// num_experts_per_tok experts per token (dropless), their weights, and every expert's gated MLP
// (wi_0, wi_1 [X, E, M], wo [X, M, E]) computed densely and combined with the weights (zero for
// experts not chosen). Checkpoint names moe_mlpwi_0, moe_mlpwi_1, moe_mlpwo.
ir::Value moe(Context& c, ir::Value x, const MoeBlock& block);

// --- Output head and loss (Loss.cpp) ----------------------------------------------------------
// From the final-normed residual y: logits (logits_dense, or the embedding when tied), the
// final soft cap, cross entropy with z-loss over real tokens; sets the function's results.
Status logits_and_loss(Context& c, ir::Value y);

}  // namespace precast::frontend
