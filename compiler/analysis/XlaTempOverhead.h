// Role: what XLA's memory_analysis() counts in a TPU step's temp beyond its preallocated-temp
// arena of memory colour 0 (the arena XlaStepAccounting::model_arena plans).
//
// temp_size_in_bytes = colour-0 arena + the VMEM arena (memory colour 1, the TPU core's vector
// scratch memory that XLA's buffer assignment packs apart from HBM) + an extra the TPU backend
// adds after buffer assignment (benchmarks/xla_reference/README.md, "What memory_analysis() adds
// to the arena"). The VMEM arena is read off the dumps per generation; the extra is not modelled
// yet. TPU targets only: a CPU plan is what the CPU backend allocates and has neither.
#pragma once

#include <cstdint>
#include <string_view>

namespace precast {

// The VMEM arena (memory colour 1) XLA reports in a TPU step's temp on a chip of `generation`
// ("v5e", "v6e", ...): the largest colour-1 preallocated-temp allocation of the MaxText steps
// compiled for that generation in benchmarks/xla_reference/peaks (it moves by at most 17% with
// the program, never above this). 0 for a generation with no VMEM arena in its dumps (v4) and for
// every non-TPU generation.
int64_t xla_vmem_arena_bytes(std::string_view generation);

}  // namespace precast
