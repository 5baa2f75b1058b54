// Role: the runtime's counts of the collectives a process ran (calls, bytes, bytes sent to other
// ranks, seconds), per kind and network, named as `precast analyze` names its predictions
// (compiler/analysis/MemoryReport.h, count_collectives), so the two compare key by key.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace precast::runtime {

enum class CollectiveOp : uint8_t {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kCollectivePermute,
  kBarrier,
  kBroadcast,
};

// "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute", "barrier",
// "broadcast": the compiler report's spelling.
std::string_view collective_op_name(CollectiveOp op);

struct CollectiveCounter {
  int64_t calls = 0;
  // The compiler's per-device definition: the full buffer of the call on this rank, that is the
  // gathered result for all-gather (group size x count elements) and the operand for the others
  // (all-reduce: count; reduce-scatter and all-to-all: group size x count; collective-permute:
  // count); broadcast counts its buffer, barrier nothing.
  int64_t bytes = 0;
  // What this rank handed to MPI for other ranks (its own piece excluded): equal to the
  // compiler's wire bytes (ring algorithms) when the counts split evenly over the group.
  int64_t sent_bytes = 0;
  double seconds = 0;  // wall time from the call to its completion on this rank, waits included
};

class CollectiveCounters {
 public:
  // Adds one call of `op` over a group inside one slice (ICI) or spanning slices (DCN).
  void record(CollectiveOp op, bool spans_slices, int64_t bytes, int64_t sent_bytes,
              double seconds);
  void clear() { counters_.clear(); }

  // Keyed "all-reduce ICI", "all-gather DCN", ... as count_collectives keys its totals; only
  // the kinds that ran.
  const std::map<std::string, CollectiveCounter>& by_kind() const { return counters_; }
  CollectiveCounter total() const;

  // A table: one line per kind (calls, bytes, bytes sent, seconds) and a total line; "none" when
  // nothing ran.
  std::string format() const;

 private:
  std::map<std::string, CollectiveCounter> counters_;
};

}  // namespace precast::runtime
