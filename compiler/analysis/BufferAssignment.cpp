#include "compiler/analysis/BufferAssignment.h"

#include "compiler/analysis/TpuLayout.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <span>
#include <string_view>
#include <tuple>
#include <unordered_map>

#include "compiler/analysis/Bytes.h"
#include "ir/Printer.h"
#include "ir/ValueNames.h"

namespace precast {
namespace {

using ir::Function;
using ir::Op;
using ir::OpIndex;
using ir::OpKind;
using ir::Value;

bool is_reduction(OpKind k) {
  return k == OpKind::kReduceSum || k == OpKind::kReduceMax || k == OpKind::kReduceMin;
}

// Ops a loop fusion can compute inside its consumer.
bool is_fusible(OpKind k) {
  return ir::is_elementwise(k) || k == OpKind::kBroadcastInDim || k == OpKind::kReshape ||
         k == OpKind::kIota || k == OpKind::kConstant;
}

// A per-device module's own piece (shard_slice: an index offset by the device's position, as
// XLA's dynamic-slice) of a value generated in place — an iota, a constant, a broadcast, or such
// a piece of one — is generated in place too (a one-hot mask's iota over the vocab shard); a
// piece of a stored value is stored, so the whole value need not stay live until its readers.
bool generated_piece(const ir::Function& f, const Op& op) {
  if (op.kind != OpKind::kShardSlice) return false;
  ir::OpIndex def = f.defining_op(f.operands(op)[0]);
  if (def == ir::kNoOp) return false;
  const Op& source = f.op(def);
  return source.kind == OpKind::kIota || source.kind == OpKind::kConstant ||
         source.kind == OpKind::kBroadcastInDim || generated_piece(f, source);
}

int64_t align(int64_t bytes, int64_t alignment) {
  return alignment <= 1 ? bytes : (bytes + alignment - 1) / alignment * alignment;
}

class Planner {
 public:
  Planner(const Function& f, const BufferOptions& options) : f_(f), options_(options) {}

  MemoryPlan run() {
    decide_buffers();
    defer_head_gradients();
    compute_liveness();
    MemoryPlan plan;
    plan.num_ops = f_.num_ops();
    account_arguments_and_outputs(plan);
    pack(plan);
    find_peak(plan);
    return plan;
  }

  // The buffer each value is stored in; an invalid Value for a fused one.
  std::vector<Value> value_buffers() {
    decide_buffers();
    std::vector<Value> buffers(f_.num_values());
    for (size_t v = 0; v < buffers.size(); ++v) {
      if (!fused_[v]) buffers[v] = buffer_[v];
    }
    return buffers;
  }

 private:
  // Which values get a buffer and which buffer each lives in: nothing here depends on the order
  // of the ops, only on the data flow (and scopes).
  void decide_buffers() {
    size_t n = f_.num_values();
    users_.assign(n, {});
    for (OpIndex i = 0; i < f_.num_ops(); ++i) {
      for (Value u : f_.operands(f_.op(i))) users_[u.id].push_back(i);
    }
    is_result_.assign(n, false);
    for (Value r : f_.results()) is_result_[r.id] = true;
    decide_fusion();
    assign_buffers();
  }

  int64_t bytes(Value v) const {
    if (options_.bytes) return options_.bytes(v);
    if (!xla_bytes_.empty() && xla_bytes_[v.id] >= 0) return xla_bytes_[v.id];
    return options_.xla.enabled ? tpu_buffer_bytes(f_.type(v)) : f_.type(v).byte_size();
  }

  // XLA's arguments: not the parameters jax.jit drops (never read) or MaxText bakes in.
  bool xla_argument(size_t number) const {
    if (!options_.xla.enabled) return true;
    size_t n = f_.params().size();
    if (number + options_.xla.trailing_constant_params >= n) return false;
    Value p = f_.params()[number];
    if (!users_[p.id].empty()) return true;
    for (Value r : f_.results()) {
      if (r.id == p.id) return true;
    }
    return false;
  }

  void decide_fusion() {
    fused_.assign(f_.num_values(), false);
    if (!options_.fuse) return;
    std::vector<bool> forced(f_.num_values(), false);
    for (Value v : options_.materialize) forced[v.id] = true;
    for (OpIndex i = static_cast<OpIndex>(f_.num_ops()); i-- > 0;) {
      const Op& op = f_.op(i);
      if (op.num_results != 1 || !loop_fusible(f_, op)) continue;
      Value v = f_.result(op);
      const std::vector<OpIndex>& users = users_[v.id];
      if (is_result_[v.id] || users.empty() || forced[v.id]) continue;
      // Constants and iotas are generated inside whatever reads them (a zero-filled scatter
      // target, a mask): never a buffer.
      if (op.kind == OpKind::kConstant || op.kind == OpKind::kIota) {
        fused_[v.id] = true;
        continue;
      }
      // Several users: a multi-output loop fusion (or, for broadcasts, iotas and constants, a
      // copy inside each user); either way no buffer, and the inputs stay live to the last user.
      // A value the backward pass reads is a residual kept across the step (a remat checkpoint,
      // a layer input): it is stored, not recomputed inside backward kernels.
      // XLA's arena (xla.model_arena) keeps that rule inside the decoder layers only (their
      // residuals are the scan's stacked outputs) and recomputes the output head's elementwise
      // chain (the f32 convert and max-shifted exp of the logits) inside its backward fusions,
      // keeping only the bf16 logits (benchmarks/xla_reference/README.md, the accounting of
      // gemma2-2b's peak).
      bool forward = op.facts.phase == ir::OpPhase::kForward &&
                     !(options_.xla.model_arena && !op.facts.in_layer());
      // In XLA's arena a scanned layer's value that another layer (or the code outside the
      // layers) reads leaves the loop body as a carry or a stacked output: it is stored, never
      // fused across the loop's iterations (gemma2's residual-stream gradient, an elementwise
      // chain of adds through every layer's backward, would otherwise keep each layer's
      // contributions live until the chain's end).
      bool scanned = options_.xla.model_arena && op.facts.in_layer() &&
                     scanned_layer(op.facts.layer);
      bool absorbed = std::all_of(users.begin(), users.end(), [&](OpIndex u) {
        const Op& user = f_.op(u);
        if (forward && user.facts.phase != ir::OpPhase::kForward) return false;
        if (scanned && user.facts.layer != op.facts.layer) return false;
        if (ir::is_elementwise(user.kind) || is_reduction(user.kind)) return true;
        return (user.kind == OpKind::kBroadcastInDim || user.kind == OpKind::kReshape ||
                user.kind == OpKind::kShardSlice) &&
               fused_[f_.result(user).id];
      });
      fused_[v.id] = absorbed;
    }
  }

  // buffer_[v]: the value whose buffer v lives in (itself, or a reshape's operand).
  void assign_buffers() {
    buffer_.resize(f_.num_values());
    for (size_t i = 0; i < f_.num_values(); ++i) buffer_[i] = Value{static_cast<uint32_t>(i)};
    for (const Op& op : f_.ops()) {
      if (op.kind != OpKind::kReshape) continue;
      Value v = f_.result(op), x = f_.operands(op)[0];
      if (!fused_[v.id] && !fused_[x.id] && !is_result_[v.id]) buffer_[v.id] = buffer_[x.id];
    }
  }

  // Where each op runs in the plan: its index in the op order, except in a plan of XLA's arena
  // (xla.model_arena) of scanned layers, where XLA runs the backward ops outside the decoder layers
  // that the layers' backward does not depend on (the output head's weight gradient: the
  // unembedding's dot of the final hidden states with the logits' gradient, its reduce-scatter; the
  // final norm's scale gradient) after the backward layer loop, so the bf16 logits gradient stays
  // live across that loop (default model b1 on v6e-32: `fusion.415{1}`, bf16[1,2048,32000], live
  // from the loss's backward to the windowed matmul `while.124` after the layers' `while.123`).
  // Those ops are placed at the last backward op of a scanned layer.
  void defer_head_gradients() {
    size_t n = f_.num_ops();
    position_.resize(n);
    std::iota(position_.begin(), position_.end(), 0);
    layer_span_ = {-1, -1};
    if (!options_.xla.model_arena || !options_.stacked_layer_gradients) return;
    for (OpIndex i = 0; i < n; ++i) {
      const Op& op = f_.op(i);
      if (!op.facts.in_layer() || !scanned_layer(op.facts.layer)) continue;
      if (layer_span_.first < 0) layer_span_.first = static_cast<int32_t>(i);
      if (op.facts.phase == ir::OpPhase::kBackward) layer_span_.second = static_cast<int32_t>(i);
    }
    if (layer_span_.second < 0) layer_span_ = {-1, -1};
    auto layer_backward = [&](const Op& op) {
      return op.facts.phase == ir::OpPhase::kBackward && op.facts.in_layer() &&
             scanned_layer(op.facts.layer);
    };
    OpIndex last = ir::kNoOp;
    for (OpIndex i = 0; i < n; ++i) {
      if (layer_backward(f_.op(i))) last = i;
    }
    if (last == ir::kNoOp) return;
    // needed[i]: a backward op of a scanned layer reads op i's results (through any chain).
    std::vector<bool> needed(n, false);
    for (OpIndex i = last + 1; i-- > 0;) {
      const Op& op = f_.op(i);
      if (!needed[i] && !layer_backward(op)) continue;
      needed[i] = true;
      for (Value u : f_.operands(op)) {
        OpIndex def = f_.defining_op(u);
        if (def != ir::kNoOp) needed[def] = true;
      }
    }
    for (OpIndex i = 0; i < last; ++i) {
      const Op& op = f_.op(i);
      if (!needed[i] && op.facts.phase == ir::OpPhase::kBackward && !op.facts.in_layer()) {
        position_[i] = static_cast<int32_t>(last);
      }
    }
  }

  // Marks every materialised buffer op `reader` reads (through fused producers) as used at its
  // plan position.
  void read(Value u, OpIndex reader, bool backward_reader, bool optimizer_reader) {
    if (stamp_[u.id] == static_cast<int32_t>(reader) + 1) return;  // already followed for it
    stamp_[u.id] = static_cast<int32_t>(reader) + 1;
    if (fused_[u.id]) {
      for (Value w : f_.operands(f_.op(f_.defining_op(u)))) {
        read(w, reader, backward_reader, optimizer_reader);
      }
      return;
    }
    int32_t position = position_[reader];
    Value b = buffer_[u.id];
    last_use_[b.id] = std::max(last_use_[b.id], position);
    if (backward_reader) read_by_backward_[b.id] = true;
    if (optimizer_reader) read_by_optimizer_[b.id] = true;
  }

  void compute_liveness() {
    size_t n = f_.num_values();
    last_use_.assign(n, -1);
    read_by_backward_.assign(n, false);
    read_by_optimizer_.assign(n, false);
    stamp_.assign(n, 0);
    for (OpIndex i = 0; i < f_.num_ops(); ++i) {
      const Op& op = f_.op(i);
      if (op.num_results == 1 && fused_[f_.result(op).id]) continue;  // runs inside its users
      bool backward = op.facts.phase == ir::OpPhase::kBackward;
      bool optimizer = op.facts.region == ir::OpRegion::kOptimizer;
      for (Value u : f_.operands(op)) read(u, i, backward, optimizer);
    }
  }

  MemoryCategory argument_category(Value p) const {
    const ir::TensorType& t = f_.type(p);
    if (f_.param_role(f_.value_info(p).number) == ir::ParamRole::kOptimizerState) {
      return MemoryCategory::kOptimizerState;
    }
    if (!ir::is_floating(t.dtype) || t.is_scalar()) return MemoryCategory::kBatch;
    return MemoryCategory::kParameters;
  }

  MemoryCategory temp_category(Value v) const {
    OpIndex def = f_.defining_op(v);
    const ir::OpFacts& facts = f_.op(def).facts;
    if (facts.phase == ir::OpPhase::kRecompute) return MemoryCategory::kRecomputation;
    if (facts.region == ir::OpRegion::kOptimizer || read_by_optimizer_[v.id]) {
      return MemoryCategory::kGradients;
    }
    switch (f_.op(def).kind) {
      case OpKind::kAllGather:
      case OpKind::kAllReduce:
      case OpKind::kReduceScatter:
      case OpKind::kAllToAll:
      case OpKind::kCollectivePermute:
      case OpKind::kRaggedAllToAll:
        return MemoryCategory::kCollectives;  // a per-device module's gathered or reduced values
      default:
        break;
    }
    if (facts.region == ir::OpRegion::kLogits) return MemoryCategory::kLogitsAndLoss;
    if (facts.phase != ir::OpPhase::kBackward && read_by_backward_[v.id]) {
      return MemoryCategory::kSavedActivations;
    }
    return MemoryCategory::kOther;
  }

  // Whether decoder layer `layer` runs inside the scan (not in gemma3's unscanned remainder),
  // and its place within its scanned block.
  bool scanned_layer(int16_t layer) const { return layer < options_.scanned_layers; }
  int64_t place_in_block(int16_t layer) const {
    return options_.scan_layers_per_block > 1 ? layer % options_.scan_layers_per_block : 0;
  }

  // A scanned model's layer weights as XLA holds them: one array per place in the scanned block
  // and place in the layer (the site of the ops reading the weight), stacked over the blocks and
  // laid out as one TPU array (an unscanned remainder layer's weights are arrays of their own),
  // and so for Adam's moments of those weights (parameters nw + i and 2 nw + i of weight i, after
  // the nw weights: the train step's order). Sets xla_bytes_ of the parameters and of the
  // results that alias them; returns the number of state arrays XLA's step has.
  int64_t stack_scanned_weights() {
    xla_bytes_.assign(f_.num_values(), -1);
    size_t n = f_.params().size(), nw = 0;
    while (nw < n && argument_category(f_.params()[nw]) == MemoryCategory::kParameters) ++nw;
    // One stack: the weights of one type at one site, the k-th such weight of each layer (a
    // dense layer's kernel and bias are read at one site; a norm's scale and bias too).
    using Key = std::tuple<int64_t, uint16_t, ir::TypeId, int32_t>;
    std::map<Key, std::vector<size_t>> by_site;
    std::map<std::tuple<int16_t, uint16_t, ir::TypeId>, int32_t> ordinal;
    int64_t arrays = 0;
    for (size_t i = 0; i < nw; ++i) {
      Value p = f_.params()[i];
      const std::vector<OpIndex>& users = users_[p.id];
      if (!options_.stacked_layer_gradients || users.empty() || !f_.op(users[0]).facts.in_layer() ||
          !scanned_layer(f_.op(users[0]).facts.layer)) {
        ++arrays;
        continue;
      }
      const ir::OpFacts& facts = f_.op(users[0]).facts;
      ir::TypeId type = f_.type_id(p);
      int32_t k = ordinal[{facts.layer, facts.site, type}]++;
      by_site[{place_in_block(facts.layer), facts.site, type, k}].push_back(i);
    }
    arrays += static_cast<int64_t>(by_site.size());
    for (const auto& [site, members] : by_site) {
      for (size_t copy = 0; copy < 3; ++copy) {  // the weights, mu, nu
        size_t first = copy * nw + members[0];
        // Moments exist only with Adam (optimizer-state parameters); SGD has none.
        if (first >= n) break;
        if (copy > 0 && f_.param_role(first) != ir::ParamRole::kOptimizerState) break;
        ir::TensorType stacked = f_.type(f_.params()[first]);
        stacked.dims.push_back(static_cast<int64_t>(members.size()));
        int64_t total = tpu_buffer_bytes(stacked);
        int64_t each = total / static_cast<int64_t>(members.size());
        for (size_t m = 0; m < members.size(); ++m) {
          size_t k = copy * nw + members[m];
          xla_bytes_[f_.params()[k].id] =
              m == 0 ? total - each * static_cast<int64_t>(members.size() - 1) : each;
        }
      }
    }
    bool moments = n >= 3 * nw && nw > 0 && f_.param_role(nw) == ir::ParamRole::kOptimizerState;
    arrays *= moments ? 3 : 1;
    for (size_t k = 0; k < f_.results().size(); ++k) {
      int32_t alias = f_.result_alias(k);
      if (alias >= 0) xla_bytes_[f_.results()[k].id] = xla_bytes_[f_.params()[alias].id];
    }
    return arrays;
  }

  void account_arguments_and_outputs(MemoryPlan& plan) {
    plan.argument_by_category.assign(static_cast<size_t>(MemoryCategory::kCount), 0);
    int64_t state_arrays = options_.xla.enabled ? stack_scanned_weights() : 0;
    for (size_t number = 0; number < f_.params().size(); ++number) {
      if (!xla_argument(number)) continue;
      Value p = f_.params()[number];
      int64_t b = bytes(p);
      plan.argument_bytes += b;
      plan.argument_by_category[static_cast<size_t>(argument_category(p))] += b;
    }
    if (options_.xla.enabled) {
      const XlaStepAccounting& x = options_.xla;
      plan.argument_bytes += x.extra_state_bytes;
      plan.argument_by_category[static_cast<size_t>(MemoryCategory::kBatch)] += x.extra_state_bytes;
      plan.output_bytes += x.extra_state_bytes + x.extra_output_bytes;
      plan.alias_bytes += x.extra_state_bytes;
      // The optimizer count is the one state scalar after the moments.
      int64_t elements = state_arrays + 1 + x.extra_state_arrays + x.metrics;
      int64_t granule = 8 * x.pointer_bytes;
      plan.output_bytes += (elements * x.pointer_bytes + granule - 1) / granule * granule;
    }
    std::vector<bool> counted(f_.num_values(), false);
    output_.assign(f_.num_values(), false);
    for (size_t k = 0; k < f_.results().size(); ++k) {
      Value r = f_.results()[k];
      Value b = buffer_[r.id];
      // XLA gives each element of the output tuple its own buffer, even one value returned twice.
      if (counted[b.id] && !options_.xla.enabled) continue;
      if (counted[b.id]) {
        plan.output_bytes += bytes(r);
        continue;
      }
      counted[b.id] = true;
      int64_t size = bytes(r);
      plan.output_bytes += size;
      if (f_.result_alias(k) >= 0) {
        plan.alias_bytes += size;
      } else if (!f_.is_param(b)) {
        output_[b.id] = true;
        Buffer out;
        out.value = b;
        out.bytes = size;
        out.start = static_cast<int32_t>(f_.defining_op(b));
        out.end = static_cast<int32_t>(f_.num_ops());
        out.output = true;
        out.category = temp_category(b);
        plan.buffers.push_back(out);
      }
    }
    // A result aliasing a donated parameter is written into the parameter's buffer when the
    // parameter is no longer read after the result is computed (the optimizer's in-place
    // update); otherwise it needs its own buffer until the end, copied in at exit.
    for (size_t k = 0; k < f_.results().size(); ++k) {
      int32_t alias = f_.result_alias(k);
      if (alias < 0) continue;
      Value r = buffer_[f_.results()[k].id];
      Value p = f_.params()[static_cast<size_t>(alias)];
      if (f_.is_param(r)) continue;
      // Only an elementwise op writes each element after reading the same element of its
      // operands; a transpose or a reduction writing into a buffer it still reads elsewhere
      // would overwrite values before it reads them.
      bool in_place = last_use_[p.id] <= static_cast<int32_t>(f_.defining_op(r)) &&
                      ir::is_elementwise(f_.op(f_.defining_op(r)).kind);
      if (in_place) {
        in_place_[r.id] = true;
      } else if (options_.xla.model_arena) {
        // XLA's copy insertion keeps the result in the donated parameter's buffer and copies the
        // parameter instead: the copy lives from the step's start to the parameter's last read
        // (ZeRO-1's replicated weights, whose update is the all-gather of the updated data
        // shards: llama2-7b data 16 on v5p-32 holds f32 copies of every whole weight,
        // `copy.492` f32[4096,32,11008] and its kind, across the backward layer loop,
        // benchmarks/xla_reference/peaks/llama2_7b_v5p32_zero1_d16_b1_s2048.txt).
        in_place_[r.id] = true;
        parameter_copies_.push_back(p);
      } else {
        aliased_output_[r.id] = true;
      }
    }
  }

  void pack(MemoryPlan& plan) {
    std::vector<bool> host(f_.num_values(), false);
    for (Value v : options_.host_values) host[buffer_[v.id].id] = true;
    std::vector<Buffer> temps, host_temps;  // device arena, host (offloaded) arena
    int32_t first_backward = -1;
    for (OpIndex i = 0; i < f_.num_ops() && first_backward < 0; ++i) {
      if (f_.op(i).facts.phase == ir::OpPhase::kBackward) {
        first_backward = static_cast<int32_t>(i);
      }
    }
    std::unordered_map<uint32_t, size_t> copies;  // weight -> its low-precision copy in temps
    for (OpIndex i = 0; i < f_.num_ops(); ++i) {
      const Op& op = f_.op(i);
      for (uint32_t r = 0; r < op.num_results; ++r) {
        Value v = f_.result(op, r);
        if (fused_[v.id] || buffer_[v.id].id != v.id || output_[v.id] || in_place_.count(v.id)) {
          continue;
        }
        Buffer t;
        t.value = v;
        t.bytes = bytes(v);
        t.start = position_[i];
        // An aliased result is written into its donated parameter at the end of the step;
        // until then it is a temporary that lives to the end.
        t.end = aliased_output_.count(v.id) ? static_cast<int32_t>(f_.num_ops())
                                            : std::max(last_use_[v.id], t.start);
        t.category = temp_category(v);
        if (options_.stacked_layer_gradients && first_backward >= 0 &&
            t.category == MemoryCategory::kGradients && op.facts.in_layer() &&
            scanned_layer(op.facts.layer)) {
          t.start = std::min(t.start, first_backward);
          if (options_.xla.enabled) t.bytes = scan_gradient_bytes(v, t.bytes);
        }
        t.loop_carried = loop_carried(op, v, t.category);
        if (t.bytes > 0 && !host[v.id] && merge_weight_copy(op, t, temps, copies)) continue;
        if (t.bytes > 0) (host[v.id] ? host_temps : temps).push_back(t);
      }
    }
    if (options_.stacked_layer_gradients) stack_layer_gradients(temps);
    add_attention_scores(temps);
    for (Value p : parameter_copies_) {
      Buffer copy;
      copy.value = Value{};  // no op defines it
      copy.bytes = bytes(p);
      copy.start = 0;
      copy.end = std::max(last_use_[p.id], 0);
      copy.category = argument_category(p);
      if (copy.bytes > 0) temps.push_back(copy);
    }
    std::vector<int32_t> ends;
    for (const TransientBuffer& extra : options_.transients) ends.push_back(extra.position);
    for (const auto& [index, end] : options_.transient_ends) ends[index] = end;
    for (size_t k = 0; k < options_.transients.size(); ++k) {
      const TransientBuffer& extra = options_.transients[k];
      Buffer t;
      t.value = Value{};
      t.bytes = extra.bytes;
      t.start = extra.position;
      t.end = std::max(ends[k], extra.position);
      t.category = extra.category;
      if (t.bytes > 0) temps.push_back(t);
    }
    if (!options_.pack) {
      for (Buffer& t : temps) t.offset = 0;
      plan.buffers.insert(plan.buffers.end(), temps.begin(), temps.end());
      for (const Buffer& t : host_temps) plan.host_temp_bytes += t.bytes;
      return;
    }
    // One arena per memory space: the offloaded values are packed the same way, apart.
    plan.host_temp_bytes = place(host_temps);
    plan.temp_bytes = place(temps);
    plan.buffers.insert(plan.buffers.end(), temps.begin(), temps.end());
  }

  // In a plan of XLA's arena (xla.model_arena), a weight's low-precision copy (a convert of the f32
  // weight, the per-device shard, to the bf16 the dots read) is made once and kept: XLA converts
  // each scanned stack of weights before the forward layer loop and keeps the bf16 stack until the
  // backward loop ends (default model b1 on v6e-32: `copy.383`, bf16[64,16,7168], live from before
  // the forward `while` to the end of the backward one), and the embedding's and the unembedding's
  // bf16 shards from their first reader to their last. Every convert of one weight shares that
  // buffer; a scanned layer's lives over all the layers' forward and backward. Returns whether
  // `t` (the buffer of op's result) was merged into such a copy (or started one) in `temps`.
  bool merge_weight_copy(const Op& op, Buffer& t, std::vector<Buffer>& temps,
                         std::unordered_map<uint32_t, size_t>& copies) const {
    if (!options_.xla.model_arena || op.kind != OpKind::kConvert || op.num_results != 1) {
      return false;
    }
    Value w = f_.operands(op)[0];
    if (!f_.is_param(w) || argument_category(w) != MemoryCategory::kParameters) return false;
    ir::DType from = f_.type(w).dtype, to = f_.type(f_.result(op)).dtype;
    if (!ir::is_floating(to) || ir::bytes_per_element(to) >= ir::bytes_per_element(from)) {
      return false;
    }
    t.loop_carried = false;  // read by XLA's loops as a loop-invariant value, not carried
    if (op.facts.in_layer() && scanned_layer(op.facts.layer) && layer_span_.first >= 0) {
      t.start = std::min(t.start, layer_span_.first);
      t.end = std::max(t.end, layer_span_.second);
    }
    auto [at, fresh] = copies.try_emplace(w.id, temps.size());
    if (fresh) {
      temps.push_back(t);
      return true;
    }
    Buffer& copy = temps[at->second];
    copy.start = std::min(copy.start, t.start);
    copy.end = std::max(copy.end, t.end);
    copy.bytes = std::max(copy.bytes, t.bytes);
    return true;
  }

  // In a plan of XLA's arena (xla.model_arena), attention without the flash kernel
  // (attention=dot_product) materialises its scores: XLA's fusions keep one layer's softmax in
  // f32, [batch, heads, query, key] per device, around the attention and its backward (llama2-7b
  // b1 s2048 on v5p-32: the arena grows by 546 MB = f32[32, 2048, 2048] + 9 MB over the splash
  // kernel's, benchmarks/xla_reference/README.md). Precast's attention op computes them inside
  // itself, so the plan adds them as a buffer live at each such op.
  void add_attention_scores(std::vector<Buffer>& temps) const {
    if (!options_.xla.model_arena || !options_.xla.attention_scores) return;
    for (OpIndex i = 0; i < f_.num_ops(); ++i) {
      const Op& op = f_.op(i);
      if (op.kind != OpKind::kAttention && op.kind != OpKind::kAttentionGrad) continue;
      std::span<const Value> operands = f_.operands(op);
      if (operands.size() < 3) continue;
      const ir::TensorType& q = f_.type(operands[0]);
      const ir::TensorType& k = f_.type(operands[1]);
      if (q.rank() != 4 || k.rank() != 4) continue;  // [batch, length, heads, head_dim]
      Buffer scores;
      scores.bytes = tpu_buffer_bytes(ir::TensorType{ir::DType::kF32,
                                                     {q.dims[0], q.dims[2], q.dims[1], k.dims[1]}});
      scores.start = scores.end = position_[i];
      scores.value = Value{};
      scores.category = MemoryCategory::kOther;
      temps.push_back(scores);
    }
  }

  // In a plan of XLA's arena of scanned layers, whether XLA's layer loops carry the buffer of
  // `op`'s result (of `category`) from one iteration to the next: a scanned layer's weight gradient
  // (the backward loop's stacked accumulator) or a scanned layer's value that the backward of
  // another layer reads (the next layer's input, the scan's stacked layer inputs), as the `(phi)`
  // values of XLA's dumps (benchmarks/xla_reference/carried.py). A residual only its own layer's
  // backward reads (what a remat policy saves beside the layer input) is not: XLA's extra hardly
  // moves with the remat policy, so the backend counts those stacks in U. The kept bf16 weight
  // copies are loop-invariant.
  bool loop_carried(const Op& op, Value v, MemoryCategory category) const {
    if (!options_.xla.model_arena || !options_.stacked_layer_gradients) return false;
    if (!op.facts.in_layer() || !scanned_layer(op.facts.layer)) return false;
    if (category == MemoryCategory::kGradients) return true;
    if (category != MemoryCategory::kSavedActivations) return false;
    auto other_layer_backward = [&](OpIndex u) {
      const ir::OpFacts& facts = f_.op(u).facts;
      return facts.phase != ir::OpPhase::kForward && facts.layer != op.facts.layer;
    };
    for (OpIndex u : users_[v.id]) {
      if (other_layer_backward(u)) return true;
      const Op& user = f_.op(u);
      if (user.kind != OpKind::kReshape || buffer_[f_.result(user).id].id != v.id) continue;
      for (OpIndex w : users_[f_.result(user).id]) {
        if (other_layer_backward(w)) return true;
      }
    }
    return false;
  }

  // A scanned layer's weight gradient as XLA's scan carries it: the backward loop body converts
  // the gradient to the weight's dtype before it accumulates it into the stacked buffer, so the
  // stack holds f32 gradients of f32 weights (llama2-7b's `wide.param.66{2}`,
  // f32[32 x 256 x 11008], benchmarks/xla_reference/peaks) where Precast's step converts later,
  // fused into the optimizer. The buffer's size is then that of its widest convert reader.
  int64_t scan_gradient_bytes(Value v, int64_t bytes) const {
    ir::TensorType type = f_.type(v);
    int64_t widest = bytes;
    for (OpIndex u : users_[v.id]) {
      const Op& user = f_.op(u);
      if (user.kind != OpKind::kConvert || user.num_results != 1) continue;
      ir::DType to = f_.type(f_.result(user)).dtype;
      if (!ir::is_floating(to) || ir::bytes_per_element(to) <= ir::bytes_per_element(type.dtype)) {
        continue;
      }
      widest = std::max(widest, tpu_buffer_bytes(ir::TensorType{to, type.dims}));
    }
    return widest;
  }

  // Largest-first best-fit: sets each buffer's offset; returns the arena's size.
  int64_t place(std::vector<Buffer>& temps) const {
    std::vector<size_t> order(temps.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if (temps[a].bytes != temps[b].bytes) return temps[a].bytes > temps[b].bytes;
      return temps[a].start < temps[b].start;
    });
    // Placed buffers: short-lived ones indexed by time bucket (each bucket in offset order), so a
    // query looks only at the buckets its live range spans; long-lived ones (gradients waiting for
    // the clip, saved activations) in one list kept sorted by offset, scanned without sorting.
    constexpr int32_t kBucket = 128;
    constexpr int32_t kLong = 4 * kBucket;
    size_t buckets = f_.num_ops() / kBucket + 2;
    std::vector<std::vector<uint32_t>> by_bucket(buckets);
    // Each bucket's occupied extents merged into disjoint intervals (rebuilt when the bucket
    // changed), for the buckets a query spans whole: every buffer in them overlaps the query, and
    // the union leaves the same gaps as the buffers one by one.
    std::vector<std::vector<std::pair<int64_t, int64_t>>> bucket_union(buckets);
    std::vector<bool> union_stale(buckets, true);
    std::vector<uint32_t> long_lived;  // sorted by offset
    std::vector<uint32_t> seen(temps.size(), 0);
    uint32_t stamp = 0;
    std::vector<std::pair<int64_t, int64_t>> short_taken, taken;  // [offset, end)
    int64_t arena = 0;
    auto extent = [&](const Buffer& o) {
      return std::make_pair(o.offset, o.offset + align(o.bytes, options_.alignment));
    };
    for (size_t index : order) {
      Buffer& t = temps[index];
      int64_t size = align(t.bytes, options_.alignment);
      size_t first = static_cast<size_t>(std::max(t.start, 0) / kBucket);
      size_t last = std::min(static_cast<size_t>(std::max(t.end, 0) / kBucket), buckets - 1);
      short_taken.clear();
      ++stamp;
      // Each bucket is in offset order: merge the buckets' runs instead of sorting. A buffer
      // spanning many buckets (a weight copy kept across the layer loops) sorts once instead:
      // merging run after run into the growing list would cost buckets^2.
      constexpr size_t kMergeBuckets = 8;
      bool merge = last - first < kMergeBuckets;
      for (size_t b = first; b <= last; ++b) {
        size_t run = short_taken.size();
        if (!merge && b > first && b < last) {
          std::vector<std::pair<int64_t, int64_t>>& merged = bucket_union[b];
          if (union_stale[b]) {
            merged.clear();
            for (uint32_t other : by_bucket[b]) {
              std::pair<int64_t, int64_t> e = extent(temps[other]);
              if (!merged.empty() && e.first <= merged.back().second) {
                merged.back().second = std::max(merged.back().second, e.second);
              } else {
                merged.push_back(e);
              }
            }
            union_stale[b] = false;
          }
          short_taken.insert(short_taken.end(), merged.begin(), merged.end());
          continue;
        }
        for (uint32_t other : by_bucket[b]) {
          if (seen[other] == stamp) continue;
          seen[other] = stamp;
          const Buffer& o = temps[other];
          if (o.start <= t.end && t.start <= o.end) short_taken.push_back(extent(o));
        }
        if (merge) {
          std::inplace_merge(short_taken.begin(),
                             short_taken.begin() + static_cast<std::ptrdiff_t>(run),
                             short_taken.end());
        }
      }
      if (!merge) std::sort(short_taken.begin(), short_taken.end());
      // Merge with the overlapping long-lived buffers, already in offset order.
      taken.clear();
      size_t k = 0;
      for (uint32_t other : long_lived) {
        const Buffer& o = temps[other];
        if (!(o.start <= t.end && t.start <= o.end)) continue;
        std::pair<int64_t, int64_t> e = extent(o);
        while (k < short_taken.size() && short_taken[k] < e) taken.push_back(short_taken[k++]);
        taken.push_back(e);
      }
      while (k < short_taken.size()) taken.push_back(short_taken[k++]);
      int64_t best = -1, best_gap = INT64_MAX, cursor = 0;
      for (const auto& [begin, end] : taken) {
        if (begin - cursor >= size && begin - cursor < best_gap) {
          best = cursor;
          best_gap = begin - cursor;
        }
        cursor = std::max(cursor, end);
      }
      t.offset = best >= 0 ? best : cursor;
      arena = std::max(arena, t.offset + size);
      if (t.end - t.start >= kLong) {
        auto at =
            std::lower_bound(long_lived.begin(), long_lived.end(), t.offset,
                             [&](uint32_t o, int64_t offset) { return temps[o].offset < offset; });
        long_lived.insert(at, static_cast<uint32_t>(index));
      } else {
        for (size_t b = first; b <= last; ++b) {
          std::vector<uint32_t>& bucket = by_bucket[b];
          auto at = std::upper_bound(
              bucket.begin(), bucket.end(), t.offset,
              [&](int64_t offset, uint32_t o) { return offset < temps[o].offset; });
          bucket.insert(at, static_cast<uint32_t>(index));
          union_stale[b] = true;
        }
      }
    }
    return arena;
  }

  // Merges the per-layer weight-gradient buffers of a scanned model into stacked ones, keyed by
  // the layer's place in its scanned block, the defining op's site (its place in the layer, the
  // same in every layer: OpFacts), the size and the buffer's ordinal among its layer's gradient
  // buffers of that site. An unscanned remainder layer's gradients stay buffers of their own.
  void stack_layer_gradients(std::vector<Buffer>& temps) const {
    std::map<std::tuple<int64_t, uint16_t, int64_t, int32_t>, size_t> stacks;
    std::map<std::tuple<int16_t, uint16_t, int64_t>, int32_t> ordinal;  // (layer, site, size)
    std::vector<Buffer> out;
    out.reserve(temps.size());
    for (const Buffer& t : temps) {
      const Op& op = f_.op(f_.defining_op(t.value));
      if (t.category != MemoryCategory::kGradients || !op.facts.in_layer() ||
          !scanned_layer(op.facts.layer)) {
        out.push_back(t);
        continue;
      }
      uint16_t key = op.facts.site;
      int32_t k = ordinal[{op.facts.layer, key, t.bytes}]++;
      auto [it, inserted] = stacks.emplace(
          std::make_tuple(place_in_block(op.facts.layer), key, t.bytes, k), out.size());
      if (inserted) {
        out.push_back(t);
        continue;
      }
      Buffer& stack = out[it->second];
      stack.bytes += t.bytes;
      stack.layers += 1;
      stack.start = std::min(stack.start, t.start);
      stack.end = std::max(stack.end, t.end);
    }
    temps = std::move(out);
  }

  void find_peak(MemoryPlan& plan) {
    std::vector<int64_t> delta(f_.num_ops() + 2, 0), uncarried(f_.num_ops() + 2, 0);
    for (const Buffer& b : plan.buffers) {
      if (b.offset < 0) continue;
      delta[static_cast<size_t>(b.start)] += b.bytes;
      delta[static_cast<size_t>(b.end) + 1] -= b.bytes;
      if (b.loop_carried) continue;
      uncarried[static_cast<size_t>(b.start)] += b.bytes;
      uncarried[static_cast<size_t>(b.end) + 1] -= b.bytes;
    }
    int64_t live = 0, live_uncarried = 0;
    for (size_t i = 0; i < f_.num_ops(); ++i) {
      live += delta[i];
      live_uncarried += uncarried[i];
      if (live > plan.peak_live_bytes) {
        plan.peak_live_bytes = live;
        plan.peak_position = static_cast<int32_t>(i);
      }
      plan.uncarried_peak_bytes = std::max(plan.uncarried_peak_bytes, live_uncarried);
    }
    plan.peak_by_category.assign(static_cast<size_t>(MemoryCategory::kCount), 0);
    for (const Buffer& b : plan.buffers) {
      if (b.offset >= 0 && b.start <= plan.peak_position && plan.peak_position <= b.end) {
        plan.peak_by_category[static_cast<size_t>(b.category)] += b.bytes;
      }
    }
  }

  const Function& f_;
  const BufferOptions& options_;
  std::vector<std::vector<OpIndex>> users_;
  std::vector<bool> is_result_, fused_, output_, read_by_backward_, read_by_optimizer_;
  std::vector<int64_t> xla_bytes_;  // a stacked weight's share of its TPU array; -1: its own
  std::vector<Value> buffer_;
  std::vector<int32_t> last_use_, stamp_;
  std::vector<int32_t> position_;  // each op's place in the plan (defer_head_gradients)
  // The first op of a scanned layer and the last backward one (plans of XLA's arena with
  // scanned layers); -1 otherwise.
  std::pair<int32_t, int32_t> layer_span_{-1, -1};
  std::unordered_map<uint32_t, bool> aliased_output_, in_place_;
  // Donated parameters XLA copies so that their updated values take their buffers (model_arena).
  std::vector<Value> parameter_copies_;
};

}  // namespace

std::string_view category_name(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::kParameters:
      return "parameters";
    case MemoryCategory::kOptimizerState:
      return "optimizer state";
    case MemoryCategory::kBatch:
      return "batch and scalars";
    case MemoryCategory::kGradients:
      return "gradients";
    case MemoryCategory::kSavedActivations:
      return "activations kept for backward";
    case MemoryCategory::kRecomputation:
      return "recomputation scratch";
    case MemoryCategory::kLogitsAndLoss:
      return "logits and loss";
    case MemoryCategory::kCollectives:
      return "collective buffers";
    case MemoryCategory::kOther:
      return "other temporaries";
    case MemoryCategory::kCount:
      break;
  }
  return "?";
}

bool loop_fusible(const ir::Function& function, const ir::Op& op) {
  return is_fusible(op.kind) || generated_piece(function, op);
}

MemoryPlan plan_memory(const ir::Function& function, const BufferOptions& options) {
  return Planner(function, options).run();
}

std::vector<ir::Value> value_buffers(const ir::Function& function, const BufferOptions& options) {
  return Planner(function, options).value_buffers();
}

std::vector<bool> materialized_values(const ir::Function& function, const BufferOptions& options) {
  std::vector<ir::Value> buffers = value_buffers(function, options);
  std::vector<bool> materialized(buffers.size());
  for (size_t v = 0; v < buffers.size(); ++v) materialized[v] = buffers[v].valid();
  return materialized;
}

std::string format_memory_line(const MemoryPlan& plan) {
  return fmt::format(
      "Total estimated memory size: {:.1f} GB, estimated output size: {:.1f} GB, estimated temp "
      "size: {:.1f} GB, estimated argument size: {:.1f} GB, Estimated host temp size: {:.1f} GB.",
      to_gib(plan.total_bytes()), to_gib(plan.output_bytes), to_gib(plan.temp_bytes),
      to_gib(plan.argument_bytes), to_gib(plan.host_temp_bytes));
}

std::string format_memory_breakdown(const ir::Function& f, const MemoryPlan& plan, size_t top,
                                    bool with_shardings) {
  std::string out;
  out += fmt::format("Memory per device: argument {}, output {} (aliased {}), temp {}, total {}\n",
                     format_bytes(plan.argument_bytes), format_bytes(plan.output_bytes),
                     format_bytes(plan.alias_bytes), format_bytes(plan.temp_bytes),
                     format_bytes(plan.total_bytes()));
  out += "  arguments:";
  for (size_t c = 0; c < plan.argument_by_category.size(); ++c) {
    if (plan.argument_by_category[c] == 0) continue;
    out += fmt::format(" {} {};", category_name(static_cast<MemoryCategory>(c)),
                       format_bytes(plan.argument_by_category[c]));
  }
  out += "\n";
  out += fmt::format(
      "  temp arena {} for {} live at the peak (op {} of {}):", format_bytes(plan.arena_bytes()),
      format_bytes(plan.peak_live_bytes), plan.peak_position, plan.num_ops);
  for (size_t c = 0; c < plan.peak_by_category.size(); ++c) {
    if (plan.peak_by_category[c] == 0) continue;
    out += fmt::format(" {} {};", category_name(static_cast<MemoryCategory>(c)),
                       format_bytes(plan.peak_by_category[c]));
  }
  out += "\n";
  std::vector<const Buffer*> largest;
  for (const Buffer& b : plan.buffers) largest.push_back(&b);
  std::stable_sort(largest.begin(), largest.end(),
                   [](const Buffer* a, const Buffer* b) { return a->bytes > b->bytes; });
  if (largest.size() > top) largest.resize(top);
  if (largest.empty()) return out;
  out += fmt::format("  {} largest buffers:\n", largest.size());
  ir::ValueNames names(f);
  for (const Buffer* b : largest) {
    if (!b->value.valid()) {
      bool copy = b->category == MemoryCategory::kParameters ||
                  b->category == MemoryCategory::kOptimizerState;
      out += fmt::format("    {:>12}  {:<24} {:<16} {:<28} live [{}, {}]  @{}\n",
                         format_bytes(b->bytes), "-", copy ? "(state copy)" : "(collective)",
                         category_name(b->category),
                         b->start, b->end, f.scope(f.op(static_cast<OpIndex>(b->start))));
      continue;
    }
    OpIndex def = f.defining_op(b->value);
    const Op& op = f.op(def);
    // A collective the partitioner inserted has no scope of its own: show its reader's.
    std::string scope(f.scope(op));
    for (OpIndex i = def + 1; scope.empty() && i < f.num_ops(); ++i) {
      for (Value u : f.operands(f.op(i))) {
        if (u.id == b->value.id) scope = fmt::format("{} (its reader)", f.scope(f.op(i)));
      }
    }
    std::string type = ir::to_string(f.type(b->value));
    if (b->layers > 1) {
      type = fmt::format("{} x {}", b->layers, type);
      scope += fmt::format(" (and the same place in {} more layers)", b->layers - 1);
    }
    std::string sharding;
    if (with_shardings && f.has_sharding(b->value))
      sharding = " " + ir::print_sharding(f, b->value);
    out += fmt::format("    {:>12}  {:<24} {:<16} {:<28} live [{}, {}]{}  @{}{}\n",
                       format_bytes(b->bytes), type, ir::op_name(op.kind),
                       category_name(b->category), b->start, b->end, b->output ? " output" : "",
                       scope.empty() ? "-" : scope, sharding);
  }
  return out;
}

}  // namespace precast
