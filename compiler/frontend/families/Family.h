// Decoder families: what each provides (FamilyHooks), the one table that maps a decoder_block to
// them (FamilyTable.cpp), and the helpers the family files share. A family is one file here that
// composes the blocks of compiler/frontend/blocks/ into MaxText's decoder layer and states
// MaxText's parameter-count and FLOP formulas for it (maxtext-facts §d).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "compiler/config/ModelSpec.h"
#include "compiler/frontend/Frontend.h"
#include "compiler/frontend/blocks/Context.h"

namespace precast::frontend {

// Model FLOPs of one training step on one device before gradient accumulation: forward and
// backward (x3), MaxText's conventions (causal halving, unembedding only).
struct FlopParts {
  long double learnable = 0;  // weight matmuls incl. unembedding
  long double attention = 0;  // q.k and p.v products
};

struct FamilyHooks {
  DecoderFamily family;
  // Refusals beyond the common ones (what the family cannot lower), naming the key.
  Status (*check)(const ModelSpec&);
  // Embedding, decoder layers, final norm, then logits_and_loss.
  Status (*build)(Context&);
  // What MaxText's modules allocate; equal to the weights build() declares.
  int64_t (*count_parameters)(const ModelSpec&);
  FlopParts (*flops)(const ModelSpec&, const BatchSpec&);
  // How MaxText scans the family's layers (Frontend.h); single_layer_scan for most.
  ScanLayout (*scan)(const ModelSpec&);
};

// The family's hooks (every DecoderFamily has a row in FamilyTable.cpp).
const FamilyHooks& family_hooks(DecoderFamily family);

// --- Shared by the family files (Common.cpp) ----------------------------------------------------

// Runs `layer(x, prefix)` for every decoder layer with prefix "decoder.layers_<i>." (or
// prefix_of(i)), the ops
// carrying layer=i and the layer's scope, the layer input named decoder_layer_input.
using LayerFunction = std::function<ir::Value(ir::Value x, const std::string& prefix)>;
// Layer i's weight prefix: "decoder.layers_<i>." unless a family names its layers otherwise.
using LayerPrefix = std::function<std::string(int64_t layer)>;
ir::Value decoder_layers(Context& c, ir::Value x, const LayerFunction& layer,
                         const LayerPrefix& prefix_of = nullptr);

// head_dim must be even for rotary embeddings; attention_bias, mlp_bias and use_qk_norm, which
// only some families lower, are refused.
Status check_rotary(const ModelSpec& spec);
// check_rotary, but use_qk_norm is lowered.
Status check_rotary_with_qk_norm(const ModelSpec& spec);
// Families whose scanned blocks alternate sliding-window and global layers (olmo3, gpt_oss):
// sliding_window_size positive, inhomogeneous_layer_cycle_interval the family's `pattern`
// (MaxText picks a layer's attention type by its index within the block, so other block sizes
// would change which layers are global; `blocks` says the pattern in words), and with
// scan_layers a whole number of blocks (MaxText scans whole blocks only).
Status check_sliding_window_blocks(const ModelSpec& m, std::string_view family, int64_t pattern,
                                   std::string_view blocks);

// Formula pieces (maxtext-facts §d).
int64_t attention_kernel_parameters(const ModelSpec& m);  // q, k, v and out kernels
int64_t mlp_parameters(const ModelSpec& m, bool biases);
// Token embedding, the learned position table (trainable_position_size > 0), logits_dense
// unless tied, and a final norm of `final_norm` parameters.
int64_t embedding_and_head_parameters(const ModelSpec& m, int64_t final_norm);
struct FlopTerms {
  long double b = 0, t = 0, h = 0, d = 0, layers = 0;
  long double ffn = 0, qkv = 0, projection = 0, embedding = 0, causal_attention = 0;
};
FlopTerms flop_terms(const ModelSpec& m, const BatchSpec& batch);
// MaxText's default branch: every layer a full causal attention layer.
FlopParts default_flops(const ModelSpec& m, const BatchSpec& batch);
// Every layer a scanned block of its own.
ScanLayout single_layer_scan(const ModelSpec& m);

// --- The families (one file each) ---------------------------------------------------------------
Status build_llama2(Context& c);  // llama2 and mistral
int64_t llama2_parameters(const ModelSpec& m);

Status build_gemma(Context& c);
int64_t gemma_parameters(const ModelSpec& m);

Status check_gemma2(const ModelSpec& m);
Status build_gemma2(Context& c);
int64_t gemma2_parameters(const ModelSpec& m);
FlopParts gemma2_flops(const ModelSpec& m, const BatchSpec& batch);

Status check_gpt3(const ModelSpec& m);
Status build_gpt3(Context& c);
int64_t gpt3_parameters(const ModelSpec& m);

// qwen3's layer, with q/k/v biases when `qkv_biases` (qwen2 shares it).
Status build_qwen(Context& c, bool qkv_biases);
Status build_qwen3(Context& c);
int64_t qwen3_parameters(const ModelSpec& m);

Status check_gemma3(const ModelSpec& m);
Status build_gemma3(Context& c);
int64_t gemma3_parameters(const ModelSpec& m);
FlopParts gemma3_flops(const ModelSpec& m, const BatchSpec& batch);
ScanLayout gemma3_scan(const ModelSpec& m);

Status check_qwen2(const ModelSpec& m);
Status build_qwen2(Context& c);
int64_t qwen2_parameters(const ModelSpec& m);

Status check_olmo3(const ModelSpec& m);
Status build_olmo3(Context& c);
int64_t olmo3_parameters(const ModelSpec& m);
ScanLayout olmo3_scan(const ModelSpec& m);

// Mixture-of-experts families (Deepseek.cpp, Mixtral.cpp). check_moe: what every MoE family
// needs (experts are act(x wi_0) * (x wi_1)).
Status check_moe(const ModelSpec& m);
// The router (gate kernel, bias) and the experts' wi_0, wi_1, wo of one MoE layer.
int64_t routed_experts_parameters(const ModelSpec& m);
// A decoder of `dense` MLP layers then MoE layers (routed experts plus the shared experts' MLP of
// width shared_experts·moe_mlp_dim), each layer with `attention` weights and two norms, plus the
// embedding, the head and the final norm (deepseek, llama4).
int64_t dense_and_moe_decoder_parameters(const ModelSpec& m, int64_t dense, int64_t attention);
// MLA's kernels and norms of one layer (with mla_legacy_param_count, MaxText's unused ones too).
int64_t mla_parameters(const ModelSpec& m);

Status check_deepseek(const ModelSpec& m);
Status build_deepseek(Context& c);
int64_t deepseek_parameters(const ModelSpec& m);
FlopParts deepseek_flops(const ModelSpec& m, const BatchSpec& batch);
ScanLayout deepseek_scan(const ModelSpec& m);

Status check_mixtral(const ModelSpec& m);
Status build_mixtral(Context& c);
Status build_qwen3_moe(Context& c);
int64_t mixtral_parameters(const ModelSpec& m);  // qwen3_moe's too (qk-norm scales when set)
FlopParts mixtral_flops(const ModelSpec& m, const BatchSpec& batch);

// gpt_oss (GptOss.cpp): mixtral's layer with attention biases and sinks, expert biases, the
// clamped activation, and alternating sliding-window / global layers in scanned blocks of 2.
Status check_gpt_oss(const ModelSpec& m);
Status build_gpt_oss(Context& c);
int64_t gpt_oss_parameters(const ModelSpec& m);
FlopParts gpt_oss_flops(const ModelSpec& m, const BatchSpec& batch);
ScanLayout gpt_oss_scan(const ModelSpec& m);

// llama4 (Llama4.cpp): NoPE global layers every nope_layer_interval, chunked attention on the
// others, MoE layers (top-1 sigmoid router, shared experts) every interleave_moe_layer_step,
// dense MLPs between; scanned in blocks of inhomogeneous_layer_cycle_interval.
Status check_llama4(const ModelSpec& m);
Status build_llama4(Context& c);
int64_t llama4_parameters(const ModelSpec& m);
FlopParts llama4_flops(const ModelSpec& m, const BatchSpec& batch);
ScanLayout llama4_scan(const ModelSpec& m);

}  // namespace precast::frontend
