// Role: the on-chip arenas XLA counts in a TPU step's temp, per TPU generation
// (XlaTempOverhead.h).
#include "compiler/analysis/XlaTempOverhead.h"

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

}  // namespace precast
