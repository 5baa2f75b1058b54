// Role: what compiled code runs with — the GEMM implementation and the thread pool — as one
// value the runtime owns and passes to every step function (the entry's fourth argument, a
// `const RuntimeContext*`), which generated code hands on to precast_gemm_f32/f64 and
// precast_parallel_for. No process-wide state: two contexts may run side by side.
#pragma once

namespace precast {

class ThreadPool;

enum class GemmImpl { kOpenBlas, kEigen };

struct RuntimeContext {
  GemmImpl impl = GemmImpl::kOpenBlas;
  ThreadPool* pool = nullptr;  // null: one thread, the caller's
};

}  // namespace precast
