// Role: the VMEM arena XLA counts in a TPU step's temp, per TPU generation (XlaTempOverhead.h).
#include "compiler/analysis/XlaTempOverhead.h"

#include <array>
#include <utility>

namespace precast {

namespace {

// generation -> the largest colour-1 preallocated-temp allocation of its rows in
// benchmarks/xla_reference/peaks (jax 0.11.2, libtpu 0.0.48.1), with the row it came from.
// v4 rows (gpt3-6b on v4-16, mistral-7b on v4-32) have no colour-1 allocation.
// v5e: 112 MiB, gemma-2b b4 s2048 on v5e-16 and 6 more rows (smallest 98 304 000); v5p:
// llama3.1-8b b4 s8192 on v5p-64 (smallest 44 040 192, context parallel); v6e: the default model
// b1 s2048 on v6e-32 (smallest 99 090 432); tpu7x: llama3.1-70b b2 s8192 on tpu7x-64 (the other
// row 62 922 752).
constexpr std::array<std::pair<std::string_view, int64_t>, 4> kVmemArenaBytes = {{
    {"v5e", 117440512},
    {"v5p", 50143232},
    {"v6e", 100564992},
    {"tpu7x", 64840192},
}};

}  // namespace

int64_t xla_vmem_arena_bytes(std::string_view generation) {
  for (const auto& [name, bytes] : kVmemArenaBytes) {
    if (name == generation) return bytes;
  }
  return 0;
}

}  // namespace precast
