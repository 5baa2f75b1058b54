#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "compiler/frontend/blocks/Blocks.h"

namespace precast::frontend {
namespace {

using ir::DotDims;
using ir::DType;
using ir::TensorType;
using ir::Value;

WeightInfo logits_dense_info(const ModelSpec& s) {
  return {"decoder.logits_dense.kernel",
          {s.emb_dim, s.vocab_size},
          {"embed_vocab", "vocab"},
          InitKind::kTruncatedNormal,
          truncated_normal_fan_in(s.emb_dim)};
}

// The output head on y [rows, length, E]: logits [rows, length, V] in the statistics dtype.
Value head_logits(Context& c, Value y) {
  const ModelSpec& s = c.spec();
  ir::Builder& b = c.b();
  std::vector<int64_t> logit_dims = b.type(y).dims;
  logit_dims.back() = s.vocab_size;
  Value logits;
  if (s.logits_via_embedding) {
    b.set_scope("decoder/logits_via_embedding");
    DotDims dims;
    dims.lhs_contract = {2};
    dims.rhs_contract = {1};
    logits = b.dot_general(y, c.declared("token_embedder.embedding"), dims);
    if (s.normalize_embedding_logits) {
      logits = b.div(logits, b.constant(std::sqrt(static_cast<double>(s.emb_dim)),
                                        TensorType{c.act(), logit_dims}));
    }
  } else {
    logits = dense(c, y, logits_dense_info(s), 1);
  }
  b.set_scope("decoder/logits");
  if (s.final_logits_soft_cap && *s.final_logits_soft_cap > 0) {
    Value cap = b.splat(*s.final_logits_soft_cap, logits);
    logits = b.mul(b.tanh(b.div(logits, cap)), cap);
  }
  if (b.type(logits).dtype != c.stat()) logits = b.convert(logits, c.stat());
  c.axes(logits, {"activation_embed_and_logits_batch", "activation_length", "activation_vocab"});
  return logits;
}

struct LossSums {
  Value loss, z_loss, total_weights;
};

// Cross entropy (with z-loss) of logits [rows, length, V] against targets, summed over the real
// tokens (segmentation != 0), and the number of those tokens.
LossSums cross_entropy_sums(Context& c, Value logits, Value targets, Value segmentation) {
  const ModelSpec& s = c.spec();
  ir::Builder& b = c.b();
  DType stat = c.stat();
  std::vector<int64_t> logit_dims = b.type(logits).dims;
  std::vector<int64_t> token_dims{logit_dims[0], logit_dims[1]};
  b.set_scope("loss");
  TensorType token_type{stat, token_dims};
  Value max = b.reduce_max(logits, {2});
  Value shifted = b.sub(logits, b.broadcast_in_dim(max, logit_dims, {0, 1}));
  Value lse = b.add(b.log(b.reduce_sum(b.exp(shifted), {2})), max);
  Value classes = b.iota(TensorType{DType::kS32, logit_dims}, 2);
  Value is_target = b.compare(classes, b.broadcast_in_dim(targets, logit_dims, {0, 1}),
                              ir::ComparisonDirection::kEq);
  Value target_logit = b.reduce_sum(b.select(is_target, logits, b.splat(0.0, logits)), {2});
  Value xent = b.sub(lse, target_logit);
  Value z = b.mul(b.constant(s.z_loss_multiplier, token_type), b.mul(lse, lse));
  if (s.z_loss_multiplier != 0) xent = b.add(xent, z);
  Value real = b.compare(segmentation, b.constant(0, TensorType{DType::kS32, token_dims}),
                         ir::ComparisonDirection::kNe);
  Value weights = b.convert(real, stat);
  LossSums sums;
  sums.total_weights = b.reduce_sum(weights, {0, 1});
  sums.loss = b.reduce_sum(b.mul(xent, weights), {0, 1});
  sums.z_loss = b.reduce_sum(b.mul(z, weights), {0, 1});
  return sums;
}

// MaxText's vocabulary tiling (utils/vocabulary_tiling.py): the head and the cross entropy over
// num_vocab_tiling tiles of the tokens, summed. MaxText tiles the flattened batch x length rows
// under a custom VJP whose backward recomputes each tile's logits; here each tile is a slice of
// the sequence (every device keeps its batch rows, so a tile is local: rows x length / N tokens
// per device, as MaxText's resharded tile), and each tile is its own checkpointed region (a
// `layer` past the decoder's) whose backward the remat pass recomputes from y. The sums are
// the same tokens' sums in another order: equal to the untiled loss to f32 round-off.
LossSums tiled_cross_entropy_sums(Context& c, Value y) {
  const ModelSpec& s = c.spec();
  ir::Builder& b = c.b();
  int64_t rows = c.rows(), length = c.length(), tiles = s.num_vocab_tiling;
  int64_t tile = length / tiles;
  // The head's weight (converted to the activation dtype once) outside the tiles: every tile
  // reads it, none recomputes it.
  if (!s.logits_via_embedding) {
    ir::Builder::ScopeGuard scope(b, "");
    b.set_scope(Context::scope_of("decoder.logits_dense"));
    c.weight(logits_dense_info(s));
  }
  int16_t first_layer = 0;
  const ir::Function& f = c.function();
  for (ir::OpIndex i = 0; i < f.num_ops(); ++i)
    first_layer = std::max<int16_t>(first_layer, static_cast<int16_t>(f.op(i).facts.layer + 1));
  LossSums total;
  for (int64_t k = 0; k < tiles; ++k) {
    b.set_layer(static_cast<int16_t>(first_layer + k));
    b.set_scope(fmt::format("loss/vocab_tile_{}", k));
    std::vector<int64_t> start{0, k * tile}, limit{rows, (k + 1) * tile};
    Value y_tile = b.slice(y, {0, k * tile, 0}, {rows, (k + 1) * tile, s.emb_dim});
    Value targets = b.slice(c.batch(3), start, limit);
    Value segmentation = b.slice(c.batch(5), start, limit);
    LossSums sums = cross_entropy_sums(c, head_logits(c, y_tile), targets, segmentation);
    if (k == 0) {
      total = sums;
    } else {
      total.loss = b.add(total.loss, sums.loss);
      total.z_loss = b.add(total.z_loss, sums.z_loss);
      total.total_weights = b.add(total.total_weights, sums.total_weights);
    }
  }
  b.set_layer(ir::kNoLayer);
  b.set_scope("loss");
  return total;
}

}  // namespace

Status logits_and_loss(Context& c, Value y) {
  const ModelSpec& s = c.spec();
  ir::Builder& b = c.b();
  b.set_region(ir::OpRegion::kLogits);  // the logits and the loss
  bool tiled = s.num_vocab_tiling > 1 && !c.options().return_logits;
  if (tiled && c.length() % s.num_vocab_tiling != 0) {
    return usage_error(fmt::format(
        "num_vocab_tiling={}: Precast tiles the sequence, and max_target_length {} is not "
        "divisible by it; choose a divisor of max_target_length",
        s.num_vocab_tiling, c.length()));
  }
  Value logits;
  LossSums sums;
  if (tiled) {
    sums = tiled_cross_entropy_sums(c, y);
  } else {
    logits = head_logits(c, y);
    sums = cross_entropy_sums(c, logits, c.batch(3), c.batch(5));
  }
  Value loss = sums.loss, z_loss = sums.z_loss, total_weights = sums.total_weights;
  if (c.options().loss_sums) {
    b.with_name(loss, "xent_sum");
    b.with_name(z_loss, "z_loss_sum");
  } else {
    Value denominator = b.add(total_weights, b.scalar(1e-8, c.stat()));
    loss = b.div(loss, denominator);
    if (c.moe_lb_losses().empty()) b.with_name(loss, "loss");
    z_loss = b.with_name(b.div(z_loss, denominator), "z_loss");
  }
  b.with_name(total_weights, "total_weights");
  std::vector<Value> results{loss, z_loss, total_weights};
  if (c.options().return_logits) results.push_back(b.with_name(logits, "logits"));
  if (!c.moe_lb_losses().empty()) {
    // MaxText's moe_lb_loss: the mean of the MoE layers' losses, added to the loss (not to
    // xent_sum: the train step adds it after normalising).
    Value lb = c.moe_lb_losses()[0];
    for (size_t i = 1; i < c.moe_lb_losses().size(); ++i) lb = b.add(lb, c.moe_lb_losses()[i]);
    double layers = static_cast<double>(c.moe_lb_losses().size());
    lb = b.with_name(b.mul(lb, b.scalar(1.0 / layers, c.stat())), "moe_lb_loss");
    if (!c.options().loss_sums) results[0] = b.with_name(b.add(loss, lb), "loss");
    results.push_back(lb);
  }
  for (const auto& [bias, update] : c.routed_bias_updates()) {
    results.push_back(b.with_name(update, "routed_bias_update." + bias));
  }
  b.set_results(results);
  return b.status();
}

}  // namespace precast::frontend
