// Role: what XLA's memory_analysis() counts in a TPU step's temp beyond its preallocated-temp
// arena in HBM (memory colour 0, the arena XlaStepAccounting::model_arena plans).
//
// temp_size_in_bytes = the HBM arena + the arenas of the chip's on-chip memories (VMEM, colour 1;
// SMEM, colour 2; v4's CMEM, colour 3; colours 4 and 6), which XLA's buffer assignment packs apart
// from HBM, + an extra the TPU backend adds after buffer assignment
// (benchmarks/xla_reference/README.md, "What memory_analysis() adds to the arenas"). The on-chip
// arenas are read off the dumps per generation; the extra is not modelled yet. TPU targets only: a
// CPU plan is what the CPU backend allocates and has neither.
#pragma once

#include <cstdint>
#include <string_view>

namespace precast {

// The on-chip arenas XLA reports in a TPU step's temp on a chip of `generation` ("v5e", "v6e",
// ...): the largest sum of the preallocated-temp allocations of every memory colour but HBM (0)
// and host memory (5) among the MaxText steps compiled for that generation in
// benchmarks/xla_reference/peaks (it moves by at most 17% with the program, never above this).
// 0 for every non-TPU generation.
int64_t xla_on_chip_arenas_bytes(std::string_view generation);

}  // namespace precast
