// Role: what XLA counts in a TPU step's temp beyond its HBM arena: the on-chip arenas per TPU
// generation and the estimated extra (XlaTempOverhead.h).
#include "compiler/analysis/XlaTempOverhead.h"

#include "compiler/analysis/Bytes.h"

#include <fmt/format.h>

#include <array>
#include <utility>

namespace precast {

namespace {

// generation -> the largest sum of the non-HBM, non-host preallocated-temp allocations of its rows
// in benchmarks/xla_reference/peaks (jax 0.11.2, libtpu 0.0.48.1). Almost all of it is one arena:
// VMEM (colour 1) from v5e on, CMEM (colour 3) on v4; SMEM (colour 2), colours 4 and 6 hold a
// few KiB at most. v4: mistral-7b b4 s4096 on v4-32 (128 MiB of CMEM; gpt3-6b on v4-16 127 434
// 364); v5e: gemma2-2b b2 s8192 on v5e-8 (112 MiB of VMEM and 9392 B; smallest 98 315 840); v5p:
// llama3.1-8b b4 s8192 on v5p-64 (smallest 44 044 336, context parallel); v6e: the default model
// b1 s2048 on v6e-32 (smallest 99 096 672); tpu7x: llama3.1-70b b2 s8192 on tpu7x-64 (the other
// row 62 928 448).
constexpr std::array<std::pair<std::string_view, int64_t>, 5> kOnChipArenaBytes = {{
    {"v4", 134223908},
    {"v5e", 117449904},
    {"v5p", 50146864},
    {"v6e", 100571212},
    {"tpu7x", 64853564},
}};

}  // namespace

int64_t xla_on_chip_arenas_bytes(std::string_view generation) {
  for (const auto& [name, bytes] : kOnChipArenaBytes) {
    if (name == generation) return bytes;
  }
  return 0;
}

int64_t xla_temp_extra_bytes(int64_t layers, int64_t tokens_per_device, int64_t emb_dim) {
  if (layers <= 0 || tokens_per_device <= 0 || emb_dim <= 0) return 0;
  constexpr int64_t kBf16Bytes = 2;
  double stack = static_cast<double>(layers) * static_cast<double>(tokens_per_device) *
                 static_cast<double>(emb_dim) * kBf16Bytes;
  return static_cast<int64_t>(kXlaTempExtraStacks * stack);
}

void add_xla_temp_overheads(MemoryPlan& plan, std::string_view generation, int64_t layers,
                            int64_t tokens_per_device, int64_t emb_dim, bool in_temp) {
  plan.xla_on_chip_arenas_bytes = xla_on_chip_arenas_bytes(generation);
  plan.xla_temp_extra_bytes = xla_temp_extra_bytes(layers, tokens_per_device, emb_dim);
  plan.xla_overheads_in_temp = in_temp;
  if (in_temp) plan.temp_bytes += plan.xla_on_chip_arenas_bytes + plan.xla_temp_extra_bytes;
}

std::string format_xla_temp_line(const MemoryPlan& plan) {
  if (plan.xla_on_chip_arenas_bytes == 0 && plan.xla_temp_extra_bytes == 0) return "";
  std::string parts = fmt::format(
      "arena {} + on-chip arenas (VMEM) {} + estimated extra {} ({:g} bf16 scan stacks [layers, "
      "tokens, emb_dim], an estimate fitted to benchmarks/xla_reference/reference.csv: its "
      "mechanism is not known)",
      format_bytes(plan.arena_bytes()), format_bytes(plan.xla_on_chip_arenas_bytes),
      format_bytes(plan.xla_temp_extra_bytes), kXlaTempExtraStacks);
  if (plan.xla_overheads_in_temp) return "XLA temp on the TPU: " + parts;
  return "Temp is XLA's arena alone (--xla-arena); memory_analysis() adds to it: " +
         parts.substr(parts.find(" + ") + 3);
}
}  // namespace precast
