// Role: what XLA's memory_analysis() counts in a TPU step's temp beyond its preallocated-temp
// arena in HBM (memory colour 0, the arena XlaStepAccounting::model_arena plans).
//
// temp_size_in_bytes = the HBM arena + the arenas of the chip's on-chip memories (VMEM, colour 1;
// SMEM, colour 2; v4's CMEM, colour 3; colours 4 and 6), which XLA's buffer assignment packs apart
// from HBM, + an extra the TPU backend adds after buffer assignment
// (benchmarks/xla_reference/README.md, "What memory_analysis() adds to the arenas"). The on-chip
// arenas are read off the dumps per generation; the extra is an estimate fitted to
// benchmarks/xla_reference/reference.csv (xla_temp_extra_bytes). TPU targets only: a CPU plan is
// what the CPU backend allocates and has neither.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "compiler/analysis/BufferAssignment.h"

namespace precast {

// The on-chip arenas XLA reports in a TPU step's temp on a chip of `generation` ("v5e", "v6e",
// ...): the largest sum of the preallocated-temp allocations of every memory colour but HBM (0)
// and host memory (5) among the MaxText steps compiled for that generation in
// benchmarks/xla_reference/peaks (it moves by at most 17% with the program, never above this).
// 0 for every non-TPU generation.
int64_t xla_on_chip_arenas_bytes(std::string_view generation);

// The extra: what memory_analysis()'s temp holds beyond every arena of the buffer assignment XLA
// dumps. What is known (benchmarks/xla_reference/README.md): no field or log line names it; it is
// not the backend's HBM scratch, no fusion's buffers and not the VMEM-resident values; it trades
// bytes with the colour-0 arena (dot-product attention's scores land in either), so
// memory_analysis() reads the allocation of the program the backend finally emits, not the dumped
// one; it grows with the batch and the layers and hardly with the remat policy, and on most rows is
// 0.7-2.2 times the scan's stacked layer inputs [L, B, S, E] in bf16.
//
// AN ESTIMATE, not a mechanism, until that is found: kXlaTempExtraStacks (1.5) bf16 stacks of
// [layers, tokens per device, emb_dim], `layers` being the decoder layers the scan iterates over
// (gemma2's local/global pairs). The form was chosen by leave-one-out error over the compiled rows
// of reference.csv among K scan stacks, bytes per token per layer, a fraction of the arena, one
// layer's [B, S, E] and bytes per token (`benchmarks/xla_reference/compare.py --fit-extra`
// prints them); K scan stacks had the smallest error. Its known bias: XLA's extra is a smaller
// multiple of the stack on the largest models (llama3.1-70b on tpu7x-64: 0.69 stacks, temp +33%
// here), so far larger models are over-estimated (the safe direction). 0 when any input is not
// positive.
inline constexpr double kXlaTempExtraStacks = 1.5;
int64_t xla_temp_extra_bytes(int64_t layers, int64_t tokens_per_device, int64_t emb_dim);

// Sets `plan`'s on-chip arenas (of `generation`) and estimated extra, and with `in_temp` adds them
// to its temp (the product's TPU plan); without it temp stays the arena (--xla-arena).
void add_xla_temp_overheads(MemoryPlan& plan, std::string_view generation, int64_t layers,
                            int64_t tokens_per_device, int64_t emb_dim, bool in_temp);

// "XLA temp: arena A + on-chip arenas B + estimated extra C (...)" for `precast analyze`; empty
// for a plan without them (CPU targets).
std::string format_xla_temp_line(const MemoryPlan& plan);

}  // namespace precast
