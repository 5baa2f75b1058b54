// The one table of decoder families: a new family is one row here (plus its name in
// ModelSpec.cpp's list of decoder blocks) and one file in this folder.
#include <array>
#include <cstdlib>

#include "compiler/frontend/families/Family.h"

namespace precast::frontend {
namespace {

constexpr std::array<FamilyHooks, 14> kFamilies = {{
    {DecoderFamily::kLlama2, check_rotary, build_llama2, llama2_parameters, default_flops,
     single_layer_scan},
    {DecoderFamily::kMistral, check_rotary, build_llama2, llama2_parameters, default_flops,
     single_layer_scan},
    {DecoderFamily::kGemma, check_rotary, build_gemma, gemma_parameters, default_flops,
     single_layer_scan},
    {DecoderFamily::kGemma2, check_gemma2, build_gemma2, gemma2_parameters, gemma2_flops,
     single_layer_scan},
    {DecoderFamily::kGpt3, check_gpt3, build_gpt3, gpt3_parameters, default_flops,
     single_layer_scan},
    {DecoderFamily::kQwen3, check_rotary_with_qk_norm, build_qwen3, qwen3_parameters, default_flops,
     single_layer_scan},
    {DecoderFamily::kQwen2, check_qwen2, build_qwen2, qwen2_parameters, default_flops,
     single_layer_scan},
    {DecoderFamily::kGemma3, check_gemma3, build_gemma3, gemma3_parameters, gemma3_flops,
     gemma3_scan},
    // MaxText counts olmo3 with its default branch: every layer full causal attention.
    {DecoderFamily::kOlmo3, check_olmo3, build_olmo3, olmo3_parameters, default_flops, olmo3_scan},
    {DecoderFamily::kDeepseek, check_deepseek, build_deepseek, deepseek_parameters, deepseek_flops,
     deepseek_scan},
    {DecoderFamily::kMixtral, check_mixtral, build_mixtral, mixtral_parameters, mixtral_flops,
     single_layer_scan},
    {DecoderFamily::kQwen3Moe, check_moe, build_qwen3_moe, mixtral_parameters, mixtral_flops,
     single_layer_scan},
    {DecoderFamily::kGptOss, check_gpt_oss, build_gpt_oss, gpt_oss_parameters, gpt_oss_flops,
     gpt_oss_scan},
    {DecoderFamily::kLlama4, check_llama4, build_llama4, llama4_parameters, llama4_flops,
     llama4_scan},
}};

}  // namespace

const FamilyHooks& family_hooks(DecoderFamily family) {
  for (const FamilyHooks& hooks : kFamilies) {
    if (hooks.family == family) return hooks;
  }
  // ModelSpec only names families with a row; a missing row is a programming error.
  std::abort();
}

ScanLayout scan_layout(const ModelSpec& spec) {
  return family_hooks(spec.family).scan(spec);
}

}  // namespace precast::frontend
