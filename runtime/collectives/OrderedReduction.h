// Role: the one place where collectives combine values: the group's pieces reduced in rank
// order, so a result depends only on the inputs (not on the transport, MPI's algorithm choice or
// the rank that computes it) and every rank can be handed the same bits.
#pragma once

#include <cstdint>

#include "runtime/collectives/Communicator.h"

namespace precast::runtime {

// out[e] = pieces[0][e] op pieces[1][e] op ... op pieces[n-1][e], left to right, where piece p
// starts at element p * count of `pieces`. Per type:
//   f32, f64    accumulate in their own type;
//   bf16, f16   accumulate in f32 and round to the type once, at the end (nearest even);
//   s32, u32    sums wrap around (two's complement);
//   pred        sum and max are both logical or (any non-zero byte gives 1);
//   max         a NaN in any piece gives NaN; of equal values the earliest piece's is kept.
// `out` must not overlap `pieces`.
void reduce_in_order(const void* pieces, int64_t num_pieces, int64_t count, ElementType type,
                     ReduceOp op, void* out);

// bf16 and f16 from and to f32, rounding to nearest even (a NaN stays a NaN).
float bf16_to_f32(uint16_t bits);
uint16_t f32_to_bf16(float value);
float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float value);

}  // namespace precast::runtime
