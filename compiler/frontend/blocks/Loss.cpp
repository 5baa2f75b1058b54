#include <cmath>

#include "compiler/frontend/blocks/Blocks.h"

namespace precast::frontend {

using ir::DotDims;
using ir::DType;
using ir::TensorType;
using ir::Value;

Status logits_and_loss(Context& c, Value y) {
  const ModelSpec& s = c.spec();
  ir::Builder& b = c.b();
  int64_t rows = c.rows(), length = c.length(), e = s.emb_dim, v = s.vocab_size;
  DType stat = c.stat();
  std::vector<int64_t> logit_dims{rows, length, v};
  Value logits;
  b.set_region(ir::OpRegion::kLogits);  // the logits and the loss
  if (s.logits_via_embedding) {
    b.set_scope("decoder/logits_via_embedding");
    DotDims dims;
    dims.lhs_contract = {2};
    dims.rhs_contract = {1};
    logits = b.dot_general(y, c.declared("token_embedder.embedding"), dims);
    if (s.normalize_embedding_logits) {
      logits = b.div(
          logits, b.constant(std::sqrt(static_cast<double>(e)), TensorType{c.act(), logit_dims}));
    }
  } else {
    logits = dense(c, y,
                   {"decoder.logits_dense.kernel",
                    {e, v},
                    {"embed_vocab", "vocab"},
                    InitKind::kTruncatedNormal,
                    truncated_normal_fan_in(e)},
                   1);
  }
  b.set_scope("decoder/logits");
  if (s.final_logits_soft_cap && *s.final_logits_soft_cap > 0) {
    Value cap = b.splat(*s.final_logits_soft_cap, logits);
    logits = b.mul(b.tanh(b.div(logits, cap)), cap);
  }
  if (b.type(logits).dtype != stat) logits = b.convert(logits, stat);
  c.axes(logits, {"activation_embed_and_logits_batch", "activation_length", "activation_vocab"});

  b.set_scope("loss");
  TensorType token_type{stat, {rows, length}};
  Value max = b.reduce_max(logits, {2});
  Value shifted = b.sub(logits, b.broadcast_in_dim(max, logit_dims, {0, 1}));
  Value lse = b.add(b.log(b.reduce_sum(b.exp(shifted), {2})), max);
  Value classes = b.iota(TensorType{DType::kS32, logit_dims}, 2);
  Value is_target = b.compare(classes, b.broadcast_in_dim(c.batch(3), logit_dims, {0, 1}),
                              ir::ComparisonDirection::kEq);
  Value target_logit = b.reduce_sum(b.select(is_target, logits, b.splat(0.0, logits)), {2});
  Value xent = b.sub(lse, target_logit);
  Value z = b.mul(b.constant(s.z_loss_multiplier, token_type), b.mul(lse, lse));
  if (s.z_loss_multiplier != 0) xent = b.add(xent, z);
  Value real = b.compare(c.batch(5), b.constant(0, TensorType{DType::kS32, {rows, length}}),
                         ir::ComparisonDirection::kNe);
  Value weights = b.convert(real, stat);
  Value total_weights = b.reduce_sum(weights, {0, 1});
  Value loss = b.reduce_sum(b.mul(xent, weights), {0, 1});
  Value z_loss = b.reduce_sum(b.mul(z, weights), {0, 1});
  if (c.options().loss_sums) {
    b.with_name(loss, "xent_sum");
    b.with_name(z_loss, "z_loss_sum");
  } else {
    Value denominator = b.add(total_weights, b.scalar(1e-8, stat));
    loss = b.with_name(b.div(loss, denominator), "loss");
    z_loss = b.with_name(b.div(z_loss, denominator), "z_loss");
  }
  b.with_name(total_weights, "total_weights");
  if (c.options().return_logits) {
    b.with_name(logits, "logits");
    b.set_results({loss, z_loss, total_weights, logits});
  } else {
    b.set_results({loss, z_loss, total_weights});
  }
  return b.status();
}

}  // namespace precast::frontend
