// The runtime's f32 attention gradient, for generated code: blocks of kAttentionQueryBlock query
// rows against the keys the block may see (keys past a causal or window edge are never
// multiplied), the products in register-blocked vector microkernels (k and v transposed once per
// kv head, no packing per product), the softmax per row between them. (The forward pass stays in
// the generated code's row-block kernel: measured, it was not slower than this form.)
//
// Determinism: one task per (batch, kv head); each task
// owns the elements it writes and computes them in a fixed order, so every thread count gives the
// same bits. The vector code is compiled for x86-64-v4 (AVX-512), x86-64-v3 (AVX2, FMA) and the
// baseline, picked at load time: results may differ between CPUs of different instruction sets.
#pragma once

#include <cstdint>

extern "C" {

// One attention_grad op, as generated code fills it in. Row-major f32 buffers:
//   q [batch, queries, heads, head_dim], k [batch, keys, kv_heads, head_dim],
//   v [batch, keys, kv_heads, value_dim], out and dout [batch, queries, heads, value_dim];
//   backward: dq, dk, dv shaped as q, k, v; optional s32 segment ids q_segment [batch, queries]
//   and kv_segment [batch, keys] (both null: none).
// Scores are scale * q.k; `causal` lets query t see keys s <= t; `window` > 0 keeps the keys with
// |t - s| < window, and segment ids, when given, equal ones. A row that sees no key weighs every
// key equally (1 / keys) and has no score gradient. Preconditions (the compiler checks them):
// causal and window leave every query row at least one key, heads is a multiple of kv_heads,
// every dimension >= 1.
typedef struct PrecastAttentionArgs {
  int64_t batch, queries, heads, head_dim, keys, kv_heads, value_dim;
  int64_t causal, window;
  double scale;
  const float* q;
  const float* k;
  const float* v;
  const float* out;
  const float* dout;
  float* dq;
  float* dk;
  float* dv;
  const int32_t* q_segment;   // optional
  const int32_t* kv_segment;  // optional
} PrecastAttentionArgs;

// `context` is the step's const precast::RuntimeContext* (its pool splits the tasks; null: one
// thread, the caller's).
void precast_attention_grad_f32(const void* context, const PrecastAttentionArgs* args);

}  // extern "C"

namespace precast {

// Query rows per block: the scores of a block (rows x visible keys) stay in the L2 cache.
inline constexpr int64_t kAttentionQueryBlock = 64;

}  // namespace precast
