// The runtime's f32 attention and its gradient, for generated code: query blocks of
// kAttentionQueryBlock rows against the keys the block may see, the inner products as GEMMs of
// the context's implementation (one thread per call), the softmax in vector code between them.
//
// Determinism: one task per (batch, head, query block) forward and per (batch, kv head)
// backward; each task owns the elements it writes and computes them in a fixed order with
// single-threaded GEMMs whose tiles depend only on the shape, so every thread count gives the
// same bits.
#pragma once

#include <cstdint>

extern "C" {

// One attention op, as generated code fills it in. Row-major f32 buffers:
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
  const float* out;   // backward only
  const float* dout;  // backward only
  float* result;      // forward: out
  float* dq;          // backward
  float* dk;          // backward
  float* dv;          // backward
  const int32_t* q_segment;   // optional
  const int32_t* kv_segment;  // optional
} PrecastAttentionArgs;

// `context` is the step's const precast::RuntimeContext* (its GEMM implementation and pool; null:
// OpenBLAS on the calling thread).
void precast_attention_f32(const void* context, const PrecastAttentionArgs* args);
void precast_attention_grad_f32(const void* context, const PrecastAttentionArgs* args);

}  // extern "C"

namespace precast {

// Query rows per block: the scores of a block (rows x visible keys) stay in the L2 cache.
inline constexpr int64_t kAttentionQueryBlock = 64;

}  // namespace precast
