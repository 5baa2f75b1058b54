// Routed mixture-of-experts (MaxText's RoutedMoE; dropless, or with capacity_factor on the dense
// path): the router, one-hot mask (indices carry no gradient, the scores they select do), the
// routing weights of MaxText's variants; then either (sparse_matmul=true, MaxText's default) each
// token's chosen experts as grouped matmuls over its num_experts_per_tok copies, or (false) every
// expert computed on every token, combined with weights that are zero for the experts a token did
// not choose, or (false, with capacity_factor) MaxText's dispatch of each expert's first C tokens
// into [X, B, C, E] slots, the experts on their slots, and the combine back.
// compiler/frontend/README.md has the math.
#include <algorithm>
#include <cmath>
#include <limits>

#include "compiler/frontend/blocks/Blocks.h"

namespace precast::frontend {
namespace {

using ir::Builder;
using ir::DType;
using ir::TensorType;
using ir::Value;

// x's last dimension reduced by sum, broadcast back to x's shape.
Value sum_last_broadcast(Builder& b, Value x) {
  std::vector<int64_t> dims = b.type(x).dims;
  int64_t last = static_cast<int64_t>(dims.size()) - 1;
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < last; ++i) keep.push_back(i);
  return b.broadcast_in_dim(b.reduce_sum(x, {last}), dims, keep);
}

Value max_last_broadcast(Builder& b, Value x) {
  std::vector<int64_t> dims = b.type(x).dims;
  int64_t last = static_cast<int64_t>(dims.size()) - 1;
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < last; ++i) keep.push_back(i);
  return b.broadcast_in_dim(b.reduce_max(x, {last}), dims, keep);
}

Value softmax_last(Builder& b, Value x) {
  Value e = b.exp(b.sub(x, max_last_broadcast(b, x)));
  return b.div(e, sum_last_broadcast(b, e));
}

// 1 where an index is among `chosen` [..., K], else 0: [..., n] in `dtype`.
Value chosen_mask(Builder& b, Value chosen, int64_t n, DType dtype) {
  std::vector<int64_t> dims = b.type(chosen).dims;
  int64_t rank = static_cast<int64_t>(dims.size());
  std::vector<int64_t> one_hot_dims = dims;
  one_hot_dims.push_back(n);
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < rank; ++i) keep.push_back(i);
  Value ids = b.broadcast_in_dim(chosen, one_hot_dims, keep);
  Value index = b.iota(TensorType{DType::kS32, one_hot_dims}, rank);
  Value one_hot = b.convert(b.compare(ids, index, ir::ComparisonDirection::kEq), dtype);
  return b.reduce_sum(one_hot, {rank - 1});
}

// deepseek3's routing groups (MaxText's expert_group_mask): the experts split into
// n_routing_groups groups, each scored by the sum of its two best scores; only the experts of
// the topk_routing_group best groups may be chosen (the others' scores become -inf).
Value restrict_to_groups(Builder& b, Value scores, const MoeSpec& m) {
  std::vector<int64_t> dims = b.type(scores).dims;  // [R, T, X]
  int64_t groups = m.n_routing_groups, per_group = m.num_experts / groups;
  DType dtype = b.type(scores).dtype;
  Value grouped = b.reshape(scores, {dims[0], dims[1], groups, per_group});
  Value best_two = chosen_mask(b, b.top_k(grouped, 2), per_group, dtype);
  Value group_scores = b.reduce_sum(b.mul(best_two, grouped), {3});  // [R, T, G]
  Value kept = chosen_mask(b, b.top_k(group_scores, m.topk_routing_group), groups, dtype);
  Value expert_kept =
      b.reshape(b.broadcast_in_dim(kept, {dims[0], dims[1], groups, per_group}, {0, 1, 2}), dims);
  Value is_kept = b.compare(expert_kept, b.splat(0.0, expert_kept), ir::ComparisonDirection::kGt);
  return b.select(is_kept, scores, b.splat(-std::numeric_limits<double>::infinity(), scores));
}

// MaxText's load_balance_loss (Switch Transformer's, per sequence): with f = the fraction of a
// row's tokens routed to each expert (the chosen mask summed over its T tokens / T) and P = the
// row's mean of softmax(s_b) (in `dtype`), mean over rows and experts of f·P, times X² and the
// weight. `mask` [R, T, X] is the chosen experts (no gradient); `scores` s_b [R, T, X] in stat.
Value load_balance_loss(Context& c, Value scores, Value mask) {
  Builder& b = c.b();
  const MoeSpec& m = c.spec().moe;
  std::vector<int64_t> dims = b.type(scores).dims;
  double rows = static_cast<double>(dims[0]), length = static_cast<double>(dims[1]);
  double experts = static_cast<double>(dims[2]);
  // jnp.mean over a `dtype` array: summed in f32, the mean rounded to `dtype`.
  auto in_act = [&](Value v) {
    return c.act() == c.stat() ? v : b.convert(b.convert(v, c.act()), c.stat());
  };
  auto mean_over_length = [&](Value v) {  // [R, T, X] -> [R, X]
    Value sum = b.reduce_sum(v, {1});
    return b.mul(sum, b.splat(1.0 / length, sum));
  };
  Value density = mean_over_length(mask);
  Value density_prob = in_act(mean_over_length(in_act(softmax_last(b, scores))));
  Value total = b.reduce_sum(b.mul(density, density_prob), {0, 1});
  double scale = experts * experts * m.load_balance_loss_weight / (rows * experts);
  return b.mul(total, b.scalar(scale, c.stat()));
}

// MaxText's expert capacity (generate_masks): C = int(max(ceil(T·k / X)·capacity_factor,
// capacity_factor)) tokens per expert and row.
int64_t expert_capacity(const MoeSpec& m, int64_t length) {
  double tokens = static_cast<double>(length * m.experts_per_token);
  double per_expert = std::ceil(tokens / static_cast<double>(m.num_experts));
  return static_cast<int64_t>(std::max(per_expert * m.capacity_factor, m.capacity_factor));
}

// x's running sum along dimension 1 (inclusive), by doubling steps: after the step with shift d
// each element holds the sum of the 2d elements ending at it. Exact for counts below 2^24 in f32.
Value running_sum_over_length(Builder& b, Value x) {
  std::vector<int64_t> dims = b.type(x).dims;
  int64_t length = dims[1];
  Value zero = b.scalar(0.0, b.type(x).dtype);
  for (int64_t shift = 1; shift < length; shift *= 2) {
    std::vector<int64_t> limit = dims;
    limit[1] = length - shift;
    Value head = b.slice(x, std::vector<int64_t>(dims.size(), 0), limit);
    std::vector<int64_t> low(dims.size(), 0), high(dims.size(), 0);
    low[1] = shift;
    x = b.add(x, b.pad(head, zero, low, high));
  }
  return x;
}

// MaxText's token dropping with capacity_factor > 0 (generate_masks): along each row's sequence,
// an expert keeps the first C tokens that chose it (MaxText counts over the flattened (token,
// choice) order; a token chooses an expert at most once, so that is the token order). Returns
// the dispatch mask [R, T, X, C]: 1 at (token, expert, its slot) for each kept choice, the slot
// being the token's place in its expert's queue; dropped and unchosen pairs have no slot.
Value dispatch_mask(Builder& b, Value mask, const MoeSpec& m) {
  std::vector<int64_t> dims = b.type(mask).dims;  // [R, T, X]
  int64_t capacity = expert_capacity(m, dims[1]);
  DType dtype = b.type(mask).dtype;
  Value count = running_sum_over_length(b, mask);  // this token's place in its expert's queue
  Value within =
      b.compare(count, b.splat(static_cast<double>(capacity), count), ir::ComparisonDirection::kLe);
  Value place = b.mul(b.mul(count, mask), b.convert(within, dtype));  // 1-based; 0: no slot
  std::vector<int64_t> slot_dims{dims[0], dims[1], dims[2], capacity};
  Value slot = b.add(b.convert(b.iota(TensorType{DType::kS32, slot_dims}, 3), dtype),
                     b.splat(1.0, b.broadcast_in_dim(place, slot_dims, {0, 1, 2})));
  Value at = b.compare(b.broadcast_in_dim(place, slot_dims, {0, 1, 2}), slot,
                       ir::ComparisonDirection::kEq);
  return b.convert(at, dtype);
}

// deepseek's auxiliary-loss-free balancing (MaxText's calculate_load_balance_updates): an
// expert's load is how many (token, choice) pairs of the batch chose it, padding included; its
// bias moves by rate toward the mean load R*T*K/X: rate * sign(mean - load), 0 at the mean.
Value routed_bias_update(Builder& b, Value mask, const MoeSpec& m) {
  const std::vector<int64_t>& dims = b.type(mask).dims;  // [R, T, X]
  Value load = b.reduce_sum(mask, {0, 1});
  double mean = static_cast<double>(dims[0] * dims[1] * m.experts_per_token) /
                static_cast<double>(m.num_experts);
  Value direction = b.unary(ir::OpKind::kSign, b.sub(b.splat(mean, load), load));
  return b.mul(direction, b.splat(m.routed_bias_update_rate, direction));
}

// The routing weights of the chosen experts: [R, T, K] from weights [R, T, X] (zero where not
// chosen) and the chosen indices [R, T, K], through a one-hot of the indices (exact: one term).
Value chosen_weights(Builder& b, Value weights, Value chosen) {
  std::vector<int64_t> dims = b.type(chosen).dims;  // [R, T, K]
  int64_t experts = b.type(weights).dims.back();
  std::vector<int64_t> one_hot_dims{dims[0], dims[1], dims[2], experts};
  Value ids = b.broadcast_in_dim(chosen, one_hot_dims, {0, 1, 2});
  Value index = b.iota(TensorType{DType::kS32, one_hot_dims}, 3);
  Value one_hot =
      b.convert(b.compare(ids, index, ir::ComparisonDirection::kEq), b.type(weights).dtype);
  Value spread = b.broadcast_in_dim(weights, one_hot_dims, {0, 1, 3});
  return b.reduce_sum(b.mul(one_hot, spread), {3});
}

// The experts' kernels, with MaxText's names, shapes, logical axes and initialisers.
struct ExpertKernels {
  Value wi_0, wi_1, wo;
};

Value expert_kernel(Context& c, const std::string& name, std::vector<int64_t> dims,
                    std::initializer_list<std::string_view> axes, int64_t fan_in) {
  std::vector<std::string> names(axes.begin(), axes.end());
  return c.weight({name, std::move(dims), std::move(names), InitKind::kTruncatedNormal,
                   truncated_normal_fan_in(fan_in)});
}

// gpt_oss's expert biases (mlp_bias; MaxText's wi_0_bias, wi_1_bias [X, Mm], wo_bias [X, E],
// zeros): each row [R, T*K, F] gets its expert's bias (MaxText's transform_bias), in `dtype`.
Value add_expert_bias(Context& c, Value rows, const std::string& name, Value ids,
                      std::initializer_list<std::string_view> axes) {
  Builder& b = c.b();
  std::string scope(b.scope());
  int64_t experts = c.spec().moe.num_experts, features = b.type(rows).dims.back();
  std::vector<std::string> names(axes.begin(), axes.end());
  Value bias = c.weight({name, {experts, features}, std::move(names), InitKind::kZeros});
  b.set_scope(scope);
  Value picked = b.take(b.convert(bias, b.type(rows).dtype), ids, 0);  // [R, T*K, F]
  return b.add(rows, picked);
}

// The same biases on the dense path: [R, T, X, F] gets bias [X, F] broadcast over the tokens.
Value add_dense_expert_bias(Context& c, Value h, const std::string& name,
                            std::initializer_list<std::string_view> axes) {
  Builder& b = c.b();
  std::string scope(b.scope());
  std::vector<int64_t> dims = b.type(h).dims;
  std::vector<std::string> names(axes.begin(), axes.end());
  Value bias = c.weight({name, {dims[2], dims[3]}, std::move(names), InitKind::kZeros});
  b.set_scope(scope);
  return b.add(h, b.broadcast_in_dim(b.convert(bias, b.type(h).dtype), dims, {2, 3}));
}

// The experts' gated activation: act_0(gate) * up, or gpt_oss's clamped form when
// mlp_activations_limit > 0.
Value expert_activation(Context& c, Value gate, Value up) {
  const ModelSpec& s = c.spec();
  if (s.mlp.activations_limit > 0) {
    return clamped_glu(c.b(), s.mlp.activations[0], s.mlp.activations_limit, gate, up);
  }
  return c.b().mul(mlp_activation(c.b(), s.mlp.activations[0], gate), up);
}

// sparse_matmul=true (MaxText's default): every token repeated once per chosen expert, rows
// [R, T*K] with the expert of each row as its group, each expert's matrices applied to its rows
// by grouped matmuls ([R, T*K, Mm] activations, not [R, T, X, Mm]); the rows' outputs weighted
// and summed back per token. MaxText sorts the rows by expert first (contiguous groups for its
// GEMM kernel); grouped_dot takes the rows in any order, so they stay in token order here: the
// same products, sums and sizes.
Value sparse_experts(Context& c, Value x, Value chosen, Value weights, const std::string& p,
                     const std::string& scope_name) {
  const ModelSpec& s = c.spec();
  const MoeSpec& m = s.moe;
  Builder& b = c.b();
  int64_t e = s.emb_dim, experts = m.num_experts, width = m.moe_mlp_dim;
  int64_t rows = c.rows(), length = c.length(), k = m.experts_per_token, n = length * k;
  b.set_scope(scope_name);
  Value routed = b.reshape(chosen_weights(b, weights, chosen), {rows, n});
  Value ids = b.reshape(chosen, {rows, n});
  Value repeated = b.reshape(b.broadcast_in_dim(x, {rows, length, k, e}, {0, 1, 3}), {rows, n, e});
  c.axes(repeated, {"activation_batch", "activation_length", "activation_embed"});
  auto expert_input = [&](const char* name) {
    Value kernel = expert_kernel(c, p + name, {experts, e, width},
                                 {"exp", "embed_moe", "mlp_moe"}, e);
    b.set_scope(scope_name + "/" + name);
    Value h = b.grouped_dot(repeated, kernel, ids);  // [R, T*K, Mm]
    if (s.mlp.bias) {
      h = add_expert_bias(c, h, p + name + "_bias", ids, {"exp", "activation_mlp"});
    }
    b.with_checkpoint(h, std::string("moe_mlp") + name);
    return c.axes(h, {"activation_batch", "activation_length", "activation_mlp_moe"});
  };
  Value gate = expert_input("wi_0");
  Value up = expert_input("wi_1");
  b.set_scope(scope_name);
  Value hidden = expert_activation(c, gate, up);
  // Without biases the weights scale the hidden rows ([R, T*K, Mm]); with them (mlp_bias,
  // gpt_oss) MaxText weights wo's output after adding its bias, so the weights come after wo.
  if (!s.mlp.bias) hidden = b.mul(hidden, b.broadcast_in_dim(routed, {rows, n, width}, {0, 1}));
  Value wo = expert_kernel(c, p + "wo", {experts, width, e}, {"exp", "mlp_moe", "embed_moe"}, width);
  b.set_scope(scope_name + "/wo");
  Value out_rows = b.grouped_dot(hidden, wo, ids);  // [R, T*K, E]
  if (s.mlp.bias) {
    out_rows = add_expert_bias(c, out_rows, p + "wo_bias", ids, {"exp", "activation_embed"});
    out_rows = b.mul(out_rows, b.broadcast_in_dim(routed, {rows, n, e}, {0, 1}));
  }
  b.with_checkpoint(out_rows, "moe_mlpwo");
  c.axes(out_rows, {"activation_batch", "activation_length", "activation_embed"});
  Value out = b.reduce_sum(b.reshape(out_rows, {rows, length, k, e}), {2});
  return c.residual_axes(out);
}

// sparse_matmul=false with capacity_factor (MaxText's dense_matmul with token dropping): the
// tokens dispatched into each expert's C slots ([X, R, C, E], "BSM,BSEC -> EBCM"), each expert's
// MLP on its slots, the slots combined back with the routing weights ("EBCM,BSEC -> BSM"). The
// logical axes are MaxText's: the masks split over the batch, the dispatched tokens and the
// expert MLP over the experts (`activation_exp`) and the batch (`activation_batch_moe`, which
// comes first in the rules and so takes `expert` unless moe_dispatch_no_expert_sharding peels it
// off: `.peel_expert`, Sharding.h). With the peel the experts' outputs stay split by expert too
// (MaxText constrains them unpeeled; laid out so, the wo matmul would gather the expert stack)
// and the combine, batch-split, reads them through an all-to-all over `expert`, as the dispatch
// reaches the experts through one.
Value capacity_experts(Context& c, Value x, Value slots, Value weights, const std::string& p,
                       const std::string& scope_name) {
  const ModelSpec& s = c.spec();
  const MoeSpec& m = s.moe;
  Builder& b = c.b();
  int64_t e = s.emb_dim, experts = m.num_experts, width = m.moe_mlp_dim;
  std::vector<int64_t> slot_dims = b.type(slots).dims;  // [R, T, X, C]
  std::string_view batch =
      m.dispatch_no_expert_sharding ? "activation_batch_moe.peel_expert" : "activation_batch_moe";
  const std::initializer_list<std::string_view> mask_axes{
      "activation_batch_moe", "activation_norm_length_moe", "", ""};
  b.set_scope(scope_name + "/dispatch");
  c.axes(slots, mask_axes);
  Value combine = b.mul(slots, b.broadcast_in_dim(weights, slot_dims, {0, 1, 2}));
  c.axes(combine, mask_axes);
  ir::DotDims dispatch_dims;  // [R, T, E] x [R, T, X, C] -> [R, E, X, C]
  dispatch_dims.lhs_batch = {0};
  dispatch_dims.rhs_batch = {0};
  dispatch_dims.lhs_contract = {1};
  dispatch_dims.rhs_contract = {1};
  Value dispatched = b.transpose(b.dot_general(x, slots, dispatch_dims), {2, 0, 3, 1});
  c.axes(dispatched, {"activation_exp", batch, "", "activation_embed_moe"});
  ir::DotDims expert_dims;  // [X, R, C, in] x [X, in, out] -> [X, R, C, out]
  expert_dims.lhs_batch = {0};
  expert_dims.rhs_batch = {0};
  expert_dims.lhs_contract = {3};
  expert_dims.rhs_contract = {1};
  auto expert_input = [&](const char* name) {
    Value kernel = expert_kernel(c, p + name, {experts, e, width},
                                 {"exp", "embed_moe", "mlp_moe"}, e);
    b.set_scope(scope_name + "/" + name);
    Value h = b.dot_general(dispatched, kernel, expert_dims);  // [X, R, C, Mm]
    c.axes(h, {"activation_exp", batch, "", "activation_mlp"});
    return b.with_checkpoint(h, std::string("moe_mlp") + name);
  };
  Value gate = expert_input("wi_0");
  Value up = expert_input("wi_1");
  b.set_scope(scope_name);
  Value hidden = b.mul(mlp_activation(b, s.mlp.activations[0], gate), up);
  Value wo = expert_kernel(c, p + "wo", {experts, width, e}, {"exp", "mlp_moe", "embed_moe"}, width);
  b.set_scope(scope_name + "/wo");
  Value out_slots = b.dot_general(hidden, wo, expert_dims);  // [X, R, C, E]
  c.axes(out_slots, {"activation_exp", batch, "", "activation_embed_moe"});
  b.with_checkpoint(out_slots, "moe_mlpwo");
  b.set_scope(scope_name + "/combine");
  ir::DotDims combine_dims;  // [R, T, X, C] x [X, R, C, E] -> [R, T, E]
  combine_dims.lhs_batch = {0};
  combine_dims.rhs_batch = {1};
  combine_dims.lhs_contract = {2, 3};
  combine_dims.rhs_contract = {0, 2};
  return c.residual_axes(b.dot_general(combine, out_slots, combine_dims));
}

}  // namespace

Value moe(Context& c, Value x, const MoeBlock& block) {
  const ModelSpec& s = c.spec();
  const MoeSpec& m = s.moe;
  Builder& b = c.b();
  std::string p = block.prefix + ".";
  std::string scope_name = Context::scope_of(p);
  Builder::ScopeGuard guard(b, "");
  int64_t e = s.emb_dim, experts = m.num_experts, width = m.moe_mlp_dim;
  int64_t rows = c.rows(), length = c.length();

  // Router: scores, the score function, the selection bias.
  Value logits = dense(c, x,
                       {p + "gate.kernel",
                        {e, experts},
                        {block.gate_axis, ""},
                        InitKind::kTruncatedNormal,
                        truncated_normal_fan_in(e)},
                       1);
  b.set_scope(scope_name + "/gate");
  Value scores = b.convert(logits, c.stat());
  if (m.score_func == "softmax") scores = softmax_last(b, scores);
  if (m.score_func == "sigmoid") scores = b.logistic(scores);
  Value unbiased = scores;
  if (m.routed_bias) {
    Value bias = c.weight({p + "gate.bias", {experts}, {""}, InitKind::kZeros});
    b.set_scope(scope_name + "/gate");
    scores = b.add(scores, b.broadcast_in_dim(b.convert(bias, c.stat()), b.type(scores).dims, {2}));
  }
  c.axes(scores, {"activation_batch", "activation_length", ""});

  // Selection and weights (MaxText's get_topk): the top k of the scores, as a mask.
  Value selection = m.n_routing_groups > 0 ? restrict_to_groups(b, scores, m) : scores;
  Value chosen = b.top_k(selection, m.experts_per_token);
  Value mask = chosen_mask(b, chosen, experts, c.stat());
  if (m.load_balance_loss_weight > 0) c.add_moe_lb_loss(load_balance_loss(c, scores, mask));
  if (m.routed_bias && m.routed_bias_update_rate > 0 && c.options().routed_bias_updates) {
    c.add_routed_bias_update(p + "gate.bias", routed_bias_update(b, mask, m));
  }
  Value weights;
  if (block.llama4_router) {
    // llama4 (top-1): the chosen expert's input is x * sigmoid(its logit), its output weighted
    // by 1 (MaxText's RoutedMoE for DecoderBlockType.LLAMA4).
    Value chosen_logit = b.reduce_sum(b.mul(scores, mask), {2});  // [R, T]
    Value gain = b.logistic(chosen_logit);
    if (c.stat() != c.act()) gain = b.convert(gain, c.act());
    x = c.residual_axes(b.mul(x, b.broadcast_in_dim(gain, b.type(x).dims, {0, 1})));
    weights = mask;
  } else if (block.deepseek_weights) {
    // The chosen scores (deepseek3: before the bias); sigmoid scores renormalised; scaled.
    weights = b.mul(m.weights_before_bias ? unbiased : scores, mask);
    if (m.score_func == "sigmoid") {
      Value sum = sum_last_broadcast(b, weights);
      weights = b.div(weights, b.add(sum, b.splat(1e-20, sum)));
    }
    weights = b.mul(weights, b.splat(m.routed_scaling_factor, weights));
  } else {
    // A softmax over the chosen scores; norm_topk_prob divides by their sum again.
    Value exp = b.mul(b.exp(b.sub(scores, max_last_broadcast(b, scores))), mask);
    weights = b.div(exp, sum_last_broadcast(b, exp));
    if (m.norm_topk_prob) weights = b.div(weights, sum_last_broadcast(b, weights));
  }
  if (c.stat() != c.act()) weights = b.convert(weights, c.act());
  if (m.sparse_matmul) return sparse_experts(c, x, chosen, weights, p, scope_name);
  if (m.drops_tokens()) {
    Value slots = dispatch_mask(b, mask, m);
    if (c.stat() != c.act()) slots = b.convert(slots, c.act());
    return capacity_experts(c, x, slots, weights, p, scope_name);
  }

  // Every expert on every token: [R, T, X, M] hidden, weighted, then contracted over X and M.
  // The hidden's logical axes are MaxText's for its dense dispatch (`activation_batch_moe` ahead
  // of `activation_exp` in the rules): the batch keeps every batch axis, `expert` included, and
  // the expert dimension stays whole, as MaxText's [E, B, C, H] (capacity) and its propagated
  // [B, S, E, H] (dropless) are laid out.
  std::vector<int64_t> hidden_dims{rows, length, experts, width};
  const std::initializer_list<std::string_view> dense_hidden_axes{
      "activation_batch_moe", "activation_length_moe", "activation_exp", "activation_mlp_moe"};
  auto expert_input = [&](const char* name) {
    Value kernel = c.weight({p + name,
                             {experts, e, width},
                             {"exp", "embed_moe", "mlp_moe"},
                             InitKind::kTruncatedNormal,
                             truncated_normal_fan_in(e)});
    b.set_scope(scope_name + "/" + name);
    ir::DotDims dims;
    dims.lhs_contract = {2};
    dims.rhs_contract = {1};
    Value h = b.dot_general(x, kernel, dims);  // [R, T, X, M]
    if (s.mlp.bias) h = add_dense_expert_bias(c, h, p + name + "_bias", {"exp", "activation_mlp"});
    b.with_checkpoint(h, std::string("moe_mlp") + name);
    return c.axes(h, dense_hidden_axes);
  };
  Value gate = expert_input("wi_0");
  Value up = expert_input("wi_1");
  b.set_scope(scope_name);
  Value hidden = expert_activation(c, gate, up);
  hidden = b.mul(hidden, b.broadcast_in_dim(weights, hidden_dims, {0, 1, 2}));
  Value wo = c.weight({p + "wo",
                       {experts, width, e},
                       {"exp", "mlp_moe", "embed_moe"},
                       InitKind::kTruncatedNormal,
                       truncated_normal_fan_in(width)});
  b.set_scope(scope_name + "/wo");
  ir::DotDims out_dims;
  out_dims.lhs_contract = {2, 3};
  out_dims.rhs_contract = {0, 1};
  Value out = b.dot_general(hidden, wo, out_dims);
  if (s.mlp.bias) {  // sum_x w_x wo_bias[x]: each expert's output bias, weighted
    Value spread = b.broadcast_in_dim(weights, {rows, length, experts, e}, {0, 1, 2});
    Value biases =
        add_dense_expert_bias(c, b.splat(0.0, spread), p + "wo_bias", {"exp", "activation_embed"});
    out = b.add(out, b.reduce_sum(b.mul(spread, biases), {2}));
  }
  b.with_checkpoint(out, "moe_mlpwo");
  return c.residual_axes(out);
}

}  // namespace precast::frontend
