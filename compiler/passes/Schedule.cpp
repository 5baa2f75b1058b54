#include "compiler/passes/Schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <future>
#include <queue>
#include <span>
#include <utility>

#include "ir/Builder.h"
#include "ir/Rewriter.h"

namespace precast {
namespace {

using ir::Function;
using ir::Op;
using ir::OpIndex;
using ir::Value;

constexpr uint32_t kNone = UINT32_MAX;

// Adjacency lists in one array: row i is items[begin[i], begin[i + 1]).
struct Rows {
  std::vector<uint32_t> begin{0};
  std::vector<uint32_t> items;

  void end_row() { begin.push_back(static_cast<uint32_t>(items.size())); }
  std::span<const uint32_t> row(size_t i) const {
    return {items.data() + begin[i], begin[i + 1] - begin[i]};
  }
};

// Turns per-source lists of (source, target) pairs into rows indexed by source.
Rows group_by_source(size_t sources, const std::vector<std::pair<uint32_t, uint32_t>>& pairs) {
  Rows rows;
  std::vector<uint32_t> count(sources + 1, 0);
  for (const auto& [source, target] : pairs) ++count[source + 1];
  for (size_t s = 0; s < sources; ++s) count[s + 1] += count[s];
  rows.begin = count;
  rows.items.resize(pairs.size());
  for (const auto& [source, target] : pairs) rows.items[count[source]++] = target;
  return rows;
}

// List scheduling over the ops that run on their own ("real" ops: every op but those whose
// single result is fused into its users). A real op's inputs are found through the fused values
// it reads: it depends on the real ops defining the stored values it reaches and reads their
// buffers. Fused ops are emitted just before the first real op that needs them.
class ListScheduler {
 public:
  ListScheduler(const Function& f, const std::function<int64_t(Value)>& bytes,
                const ScheduleOptions& options)
      : f_(f), bytes_(bytes), options_(options) {}

  std::vector<OpIndex> run() {
    size_t n = f_.num_ops();
    collect_inputs();
    mark_outputs_and_donations();
    allocated_.resize(n);
    for (OpIndex i = 0; i < n; ++i) allocated_[i] = allocated(i);
    std::vector<std::pair<uint32_t, uint32_t>> edges;  // (before, after) between real ops
    for (OpIndex i = 0; i < n; ++i) {
      for (uint32_t d : deps_.row(i)) edges.emplace_back(d, i);
    }
    edges.insert(edges.end(), donation_edges_.begin(), donation_edges_.end());
    Rows successors = group_by_source(n, edges);
    std::vector<uint32_t> waiting(n, 0);
    for (const auto& [before, after] : edges) ++waiting[after];

    std::vector<std::pair<uint32_t, uint32_t>> reader_pairs;
    for (OpIndex i = 0; i < n; ++i) {
      for (uint32_t r : reads_.row(i)) reader_pairs.emplace_back(r, i);
    }
    readers_ = group_by_source(f_.num_values(), reader_pairs);
    remaining_.assign(f_.num_values(), 0);
    for (size_t v = 0; v < f_.num_values(); ++v) {
      remaining_[v] = static_cast<uint32_t>(readers_.row(v).size());
    }
    gain_.assign(n, 0);
    for (OpIndex i = 0; i < n; ++i) {
      for (uint32_t r : reads_.row(i)) {
        if (remaining_[r] == 1 && freeable(r)) gain_[i] += bytes_of(r);
      }
    }

    scheduled_.assign(n, false);
    ready_.assign(n, false);
    advance_window();
    for (OpIndex i = 0; i < n; ++i) {
      if (!fused_op(i) && waiting[i] == 0) make_ready(i);
    }
    std::vector<OpIndex> order;
    order.reserve(n);
    while (!heap_.empty() || !deferred_.empty()) {
      if (heap_.empty()) {
        admit(deferred_.top());
        deferred_.pop();
      }
      auto [key, i] = heap_.top();
      heap_.pop();
      if (scheduled_[i] || key != priority(i)) continue;  // superseded by a later entry
      emit_fused_inputs(i, order);
      order.push_back(i);
      scheduled_[i] = true;
      release_reads(i);
      for (uint32_t s : successors.row(i)) {
        if (--waiting[s] == 0) make_ready(s);
      }
      advance_window();
    }
    // Every fused op has a real reader downstream, so none is left; keep the order complete if
    // one were (it would only read parameters or fused values).
    for (OpIndex i = 0; i < n; ++i) {
      if (!scheduled_[i]) order.push_back(i);
    }
    return order;
  }

 private:
  Value buffer_of(Value v) const { return options_.buffers.empty() ? v : options_.buffers[v.id]; }
  bool fused_value(Value v) const { return !buffer_of(v).valid(); }
  bool fused_op(OpIndex i) const {
    const Op& op = f_.op(i);
    return op.num_results == 1 && fused_value(f_.result(op));
  }
  int64_t bytes_of(uint32_t buffer) const { return std::max<int64_t>(bytes_(Value{buffer}), 0); }
  // A buffer whose last reader frees it: not an output (those live to the end).
  bool freeable(uint32_t buffer) const { return !output_[buffer]; }

  // deps_ (real ops each real op waits for), reads_ (temp buffers it reads), fused_inputs_ (the
  // fused ops computed inside it) and, for donated parameters, which real ops read them.
  void collect_inputs() {
    size_t n = f_.num_ops(), values = f_.num_values();
    std::vector<uint32_t> value_stamp(values, kNone), buffer_stamp(values, kNone),
        op_stamp(n, kNone);
    std::vector<Value> stack;
    std::vector<uint32_t> fused_inputs;
    param_readers_.assign(values, {});
    for (OpIndex i = 0; i < n; ++i) {
      if (!fused_op(i)) {
        for (Value u : f_.operands(f_.op(i))) stack.push_back(u);
      }
      fused_inputs.clear();
      while (!stack.empty()) {
        Value u = stack.back();
        stack.pop_back();
        if (value_stamp[u.id] == i) continue;
        value_stamp[u.id] = i;
        if (f_.is_param(u)) {
          param_readers_[u.id].push_back(i);
          continue;
        }
        OpIndex def = f_.defining_op(u);
        if (fused_value(u)) {
          fused_inputs.push_back(def);
          for (Value w : f_.operands(f_.op(def))) stack.push_back(w);
          continue;
        }
        if (op_stamp[def] != i) {
          op_stamp[def] = i;
          deps_.items.push_back(def);
        }
        Value b = buffer_of(u);
        if (f_.is_param(b)) {  // a reshape viewing a parameter reads the parameter
          param_readers_[b.id].push_back(i);
        } else if (buffer_stamp[b.id] != i) {
          buffer_stamp[b.id] = i;
          reads_.items.push_back(b.id);
        }
      }
      std::sort(fused_inputs.begin(), fused_inputs.end());
      fused_inputs_.items.insert(fused_inputs_.items.end(), fused_inputs.begin(),
                                 fused_inputs.end());
      deps_.end_row();
      reads_.end_row();
      fused_inputs_.end_row();
    }
  }

  // Outputs are never freed. A result donated to a parameter that the original order wrote in
  // place (after every read of the parameter) costs nothing and must stay after those reads:
  // edges that the original order satisfies, so they cannot close a cycle.
  void mark_outputs_and_donations() {
    output_.assign(f_.num_values(), false);
    in_place_.assign(f_.num_values(), false);
    std::span<const Value> results = f_.results();
    for (Value r : results) {
      Value b = buffer_of(r);
      if (b.valid() && !f_.is_param(b)) output_[b.id] = true;
    }
    for (size_t k = 0; k < results.size(); ++k) {
      int32_t alias = f_.result_alias(k);
      Value b = buffer_of(results[k]);
      if (alias < 0 || !b.valid() || f_.is_param(b)) continue;
      Value p = f_.params()[static_cast<size_t>(alias)];
      OpIndex def = f_.defining_op(b);
      const std::vector<uint32_t>& readers = param_readers_[p.id];
      bool in_place = std::all_of(readers.begin(), readers.end(),
                                  [&](uint32_t reader) { return reader <= def; });
      if (!in_place) continue;
      in_place_[b.id] = true;
      for (uint32_t reader : readers) {
        if (reader != def) donation_edges_.emplace_back(reader, def);
      }
    }
  }

  int64_t allocated(OpIndex i) const {
    const Op& op = f_.op(i);
    int64_t total = 0;
    for (uint32_t r = 0; r < op.num_results; ++r) {
      Value v = f_.result(op, r);
      if (buffer_of(v) == v && !in_place_[v.id]) total += bytes_of(v.id);
    }
    return total;
  }

  int64_t priority(OpIndex i) const { return gain_[i] - allocated_[i]; }

  // A ready op competes once it is within the window of the earliest unscheduled op.
  void make_ready(OpIndex i) {
    if (options_.window == 0 || i < frontier_ + options_.window) {
      admit(i);
    } else {
      deferred_.push(i);
    }
  }

  void admit(OpIndex i) {
    ready_[i] = true;
    heap_.emplace(priority(i), i);
  }

  // The earliest unscheduled real op is always ready (the original order is topological and
  // every extra edge points forward in it), so the window never stalls the schedule.
  void advance_window() {
    if (options_.window == 0) return;
    while (frontier_ < f_.num_ops() && (scheduled_[frontier_] || fused_op(frontier_))) {
      ++frontier_;
    }
    while (!deferred_.empty() && deferred_.top() < frontier_ + options_.window) {
      admit(deferred_.top());
      deferred_.pop();
    }
  }

  // After i runs, a buffer with one reader left frees its bytes when that reader runs.
  void release_reads(OpIndex i) {
    for (uint32_t r : reads_.row(i)) {
      if (--remaining_[r] != 1 || !freeable(r) || bytes_of(r) == 0) continue;
      for (uint32_t reader : readers_.row(r)) {
        if (scheduled_[reader]) continue;
        gain_[reader] += bytes_of(r);
        if (ready_[reader]) heap_.emplace(priority(reader), reader);
        break;
      }
    }
  }

  void emit_fused_inputs(OpIndex i, std::vector<OpIndex>& order) {
    for (uint32_t fused : fused_inputs_.row(i)) {
      if (scheduled_[fused]) continue;
      scheduled_[fused] = true;
      order.push_back(fused);
    }
  }

  // Highest priority first; equal priorities in the original order.
  struct Later {
    bool operator()(const std::pair<int64_t, OpIndex>& a,
                    const std::pair<int64_t, OpIndex>& b) const {
      if (a.first != b.first) return a.first < b.first;
      return a.second > b.second;
    }
  };

  const Function& f_;
  const std::function<int64_t(Value)>& bytes_;
  const ScheduleOptions& options_;
  Rows deps_, reads_, fused_inputs_, readers_;
  std::vector<std::vector<uint32_t>> param_readers_;
  std::vector<std::pair<uint32_t, uint32_t>> donation_edges_;
  std::vector<bool> output_, in_place_, scheduled_, ready_;
  std::vector<uint32_t> remaining_;
  std::vector<int64_t> gain_, allocated_;
  std::priority_queue<std::pair<int64_t, OpIndex>, std::vector<std::pair<int64_t, OpIndex>>, Later>
      heap_;
  std::priority_queue<OpIndex, std::vector<OpIndex>, std::greater<OpIndex>> deferred_;
  size_t frontier_ = 0;
};

std::vector<Value> identity_map(size_t num_values) {
  std::vector<Value> map(num_values);
  for (size_t v = 0; v < num_values; ++v) map[v] = Value{static_cast<uint32_t>(v)};
  return map;
}

bool is_identity(const std::vector<OpIndex>& order) {
  for (size_t k = 0; k < order.size(); ++k) {
    if (order[k] != k) return false;
  }
  return true;
}

// position[op] in `order`, after checking it is a permutation in which every op follows the ops
// defining its operands.
Expected<std::vector<uint32_t>> check_order(const Function& f, const std::vector<OpIndex>& order) {
  size_t n = f.num_ops();
  if (order.size() != n) {
    return usage_error(fmt::format("schedule for @{}: {} ops ordered, the function has {}",
                                   f.name(), order.size(), n));
  }
  std::vector<uint32_t> position(n, kNone);
  for (size_t k = 0; k < n; ++k) {
    OpIndex i = order[k];
    if (i >= n || position[i] != kNone) {
      return usage_error(fmt::format(
          "schedule for @{}: entry {} (op {}) is out of range or repeated", f.name(), k, i));
    }
    for (Value u : f.operands(f.op(i))) {
      if (f.is_param(u) || position[f.defining_op(u)] != kNone) continue;
      return usage_error(
          fmt::format("schedule for @{}: op {} is placed before op {}, which defines its operand",
                      f.name(), i, f.defining_op(u)));
    }
    position[i] = static_cast<uint32_t>(k);
  }
  return position;
}

// f's ops in `order` as a new function of m's context; value_map receives old id -> new value.
Expected<std::unique_ptr<Function>> rebuild(ir::Module& m, size_t function_index,
                                            const std::vector<OpIndex>& order,
                                            std::vector<Value>& value_map) {
  PRECAST_RETURN_IF_ERROR(check_order(m.function(function_index), order));
  ir::Rewriter rewriter(m, function_index);
  for (OpIndex i : order) rewriter.clone(i);
  value_map = rewriter.value_map();
  return rewriter.release("schedule");
}

// `options` of the original function, restated for its rebuilt copy: values through value_map,
// op positions through the new order.
BufferOptions carry_options(const BufferOptions& options, const Function& f,
                            const std::vector<OpIndex>& order,
                            const std::vector<Value>& value_map) {
  BufferOptions carried = options;
  if (options.bytes) {
    std::vector<Value> old_of(value_map.size());
    for (size_t v = 0; v < value_map.size(); ++v) {
      if (value_map[v].valid()) old_of[value_map[v].id] = Value{static_cast<uint32_t>(v)};
    }
    carried.bytes = [old_of = std::move(old_of), bytes = options.bytes](Value v) {
      return bytes(old_of[v.id]);
    };
  }
  for (Value& v : carried.host_values) v = value_map[v.id];
  for (Value& v : carried.materialize) v = value_map[v.id];
  std::vector<int32_t> position(f.num_ops());
  for (size_t k = 0; k < order.size(); ++k) position[order[k]] = static_cast<int32_t>(k);
  auto move = [&](int32_t p) {
    return p >= 0 && static_cast<size_t>(p) < position.size() ? position[static_cast<size_t>(p)]
                                                              : p;
  };
  for (TransientBuffer& t : carried.transients) t.position = move(t.position);
  for (auto& [index, end] : carried.transient_ends) end = move(end);
  return carried;
}

}  // namespace

std::vector<OpIndex> memory_aware_order(const Function& f,
                                        const std::function<int64_t(Value)>& bytes,
                                        const ScheduleOptions& options) {
  return ListScheduler(f, bytes, options).run();
}

Expected<bool> apply_schedule(ir::Module& m, size_t function_index,
                              const std::vector<OpIndex>& order, std::vector<Value>* value_map) {
  const Function& f = m.function(function_index);
  std::vector<Value> map;
  if (is_identity(order) && order.size() == f.num_ops()) {
    if (value_map) *value_map = identity_map(f.num_values());
    return false;
  }
  PRECAST_ASSIGN_OR_RETURN(std::unique_ptr<Function> rebuilt,
                           rebuild(m, function_index, order, map));
  m.replace_function(function_index, std::move(rebuilt));
  if (value_map) *value_map = std::move(map);
  return true;
}

Expected<ScheduleResult> schedule_for_memory(ir::Module& m, size_t function_index,
                                             const BufferOptions& options,
                                             std::span<const uint32_t> windows) {
  const Function& f = m.function(function_index);
  // The original order's plan and the memory-aware orders only read f (and its context): the
  // plan is made on a second thread while this one orders. The rebuilds below intern into the
  // context, so they wait for it.
  std::future<MemoryPlan> original_plan =
      std::async(std::launch::async, [&f, &options] { return plan_memory(f, options); });

  ScheduleOptions schedule;
  schedule.buffers = value_buffers(f, options);
  // Host values are off the device arena, as plan_memory counts them (by their buffer).
  std::vector<bool> host(f.num_values(), false);
  for (Value v : options.host_values) {
    if (schedule.buffers[v.id].valid()) host[schedule.buffers[v.id].id] = true;
  }
  std::function<int64_t(Value)> bytes = [&](Value v) -> int64_t {
    if (host[v.id]) return 0;
    return options.bytes ? options.bytes(v) : f.type(v).byte_size();
  };

  std::vector<std::vector<OpIndex>> orders;
  for (uint32_t window : windows) {
    schedule.window = window;
    orders.push_back(memory_aware_order(f, bytes, schedule));
  }
  MemoryPlan original = original_plan.get();
  ScheduleResult result;
  result.temp_bytes_before = result.temp_bytes_after = original.temp_bytes;
  result.peak_live_bytes_before = result.peak_live_bytes_after = original.peak_live_bytes;

  std::unique_ptr<Function> best;
  std::vector<Value> best_map;
  for (size_t w = 0; w < windows.size(); ++w) {
    uint32_t window = windows[w];
    const std::vector<OpIndex>& order = orders[w];
    if (is_identity(order)) continue;
    std::vector<Value> map;
    PRECAST_ASSIGN_OR_RETURN(std::unique_ptr<Function> candidate,
                             rebuild(m, function_index, order, map));
    BufferOptions carried = carry_options(options, f, order, map);
    // The arena is at least the peak of live bytes: an order whose peak already exceeds the
    // best arena so far cannot win, and is passed over without packing (most of the cost).
    carried.pack = false;
    if (plan_memory(*candidate, carried).peak_live_bytes > result.temp_bytes_after) continue;
    carried.pack = true;
    MemoryPlan plan = plan_memory(*candidate, carried);
    bool better = plan.temp_bytes < result.temp_bytes_after ||
                  (plan.temp_bytes == result.temp_bytes_after && best &&
                   plan.peak_live_bytes < result.peak_live_bytes_after);
    if (!better) continue;
    result.temp_bytes_after = plan.temp_bytes;
    result.peak_live_bytes_after = plan.peak_live_bytes;
    result.window = window;
    result.plan = std::move(plan);
    best = std::move(candidate);
    best_map = std::move(map);
  }
  if (!best) {
    result.value_map = identity_map(f.num_values());
    result.plan = std::move(original);
    return result;
  }
  m.replace_function(function_index, std::move(best));
  result.changed = true;
  result.value_map = std::move(best_map);
  return result;
}

ir::Pass schedule_pass(SchedulePassOptions options) {
  if (!options.cache) options.cache = std::make_shared<PlanCache>();
  std::string summary = fmt::format(
      "reorder @{} to lower its buffer plan's temp bytes (kept only when they drop)",
      options.function);
  return ir::Pass("schedule", std::move(summary),
                  [options = std::move(options)](ir::Module& module) -> Expected<bool> {
                    PRECAST_ASSIGN_OR_RETURN(
                        size_t i, ir::function_for_pass(module, "schedule", options.function));
                    BufferOptions buffers = buffer_options(module.function(i), options.settings);
                    PRECAST_ASSIGN_OR_RETURN(ScheduleResult result,
                                             schedule_for_memory(module, i, buffers, options.windows));
                    PlanCache& cache = *options.cache;
                    cache.plan = std::move(result.plan);
                    cache.fingerprint = function_fingerprint(module.function(i));
                    cache.valid = true;
                    return result.changed;
                  });
}

}  // namespace precast
