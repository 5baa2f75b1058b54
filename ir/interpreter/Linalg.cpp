// Contraction kernels of the reference interpreter: dot_general and the direct attention kernels,
// forward and backward (Eigen maps over plain buffers; the only Eigen user in the IR library).
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <limits>

#include "ir/Composites.h"
#include "ir/interpreter/Kernels.h"

namespace precast::ir::kernels {
namespace {

using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstVector = Eigen::Map<const Eigen::VectorXd>;
using Vector = Eigen::Map<Eigen::VectorXd>;

bool contains(std::span<const int64_t> dims, int64_t d) {
  return std::find(dims.begin(), dims.end(), d) != dims.end();
}

int64_t product_of(const TensorType& t, std::span<const int64_t> dims) {
  int64_t p = 1;
  for (int64_t d : dims) p *= t.dims[d];
  return p;
}

std::vector<int64_t> free_dims(const TensorType& t, std::span<const int64_t> batch,
                               std::span<const int64_t> contract) {
  std::vector<int64_t> free;
  for (int64_t d = 0; d < t.rank(); ++d) {
    if (!contains(batch, d) && !contains(contract, d)) free.push_back(d);
  }
  return free;
}

std::vector<int64_t> joined(std::initializer_list<std::span<const int64_t>> parts) {
  std::vector<int64_t> out;
  for (auto p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// The attention mask and score transform of one (query, key) pair, shared by both algorithms.
struct AttentionScorer {
  double scale, softcap, mask_value;
  bool causal;
  int64_t window;
  const HostTensor* q_segment;
  const HostTensor* kv_segment;
  const HostTensor* q_positions;  // null: query t is at position t
  const HostTensor* kv_positions;

  bool visible(int64_t b, int64_t t, int64_t s, int64_t queries, int64_t keys) const {
    int64_t tp = q_positions ? static_cast<int64_t>(q_positions->values[t]) : t;
    int64_t sp = kv_positions ? static_cast<int64_t>(kv_positions->values[s]) : s;
    if (causal && sp > tp) return false;
    if (window > 0 && std::llabs(tp - sp) >= window) return false;
    if (q_segment && q_segment->values[b * queries + t] != kv_segment->values[b * keys + s]) {
      return false;
    }
    return true;
  }
  double transform(double dot) const {
    double score = dot * scale;
    return softcap > 0 ? softcap * std::tanh(score / softcap) : score;
  }
  // The score the softmax sees: transformed, or the mask value.
  double score(double dot, bool is_visible) const {
    return is_visible ? transform(dot) : mask_value;
  }
  // d transform / d (scale * dot): the soft cap's slope, 1 without one.
  double slope(double dot) const {
    if (softcap <= 0) return 1.0;
    double capped = std::tanh(dot * scale / softcap);
    return 1.0 - capped * capped;
  }
};

// The scorer of an attention or attention_grad whose masking operands (segment ids, then
// positions with `positions`) start at operand `first`.
AttentionScorer attention_scorer(const KernelInput& in, size_t first) {
  const size_t count = in.operands.size();
  const bool positions = in.attrs.flag(AttrKey::kPositions);
  const bool segmented = count - first == (positions ? 4u : 2u);
  return AttentionScorer{in.attrs.real(AttrKey::kScale),
                         in.attrs.real(AttrKey::kSoftcap),
                         attention_mask_value(in.operands[0]->type.dtype),
                         in.attrs.flag(AttrKey::kCausal),
                         in.attrs.integer(AttrKey::kSlidingWindow),
                         segmented ? in.operands[first] : nullptr,
                         segmented ? in.operands[first + 1] : nullptr,
                         positions ? in.operands[count - 2] : nullptr,
                         positions ? in.operands[count - 1] : nullptr};
}

}  // namespace

HostTensor dot_general(const KernelInput& in) {
  const HostTensor& lhs = *in.operands[0];
  const HostTensor& rhs = *in.operands[1];
  std::span<const int64_t> lhs_batch = in.attrs.ints(AttrKey::kLhsBatch);
  std::span<const int64_t> rhs_batch = in.attrs.ints(AttrKey::kRhsBatch);
  std::span<const int64_t> lhs_contract = in.attrs.ints(AttrKey::kLhsContract);
  std::span<const int64_t> rhs_contract = in.attrs.ints(AttrKey::kRhsContract);
  std::vector<int64_t> lhs_free = free_dims(lhs.type, lhs_batch, lhs_contract);
  std::vector<int64_t> rhs_free = free_dims(rhs.type, rhs_batch, rhs_contract);
  // Lay both out as batches of matrices: lhs [batch, M, K], rhs [batch, K, N].
  std::vector<double> a = transpose_values(lhs, joined({lhs_batch, lhs_free, lhs_contract}));
  std::vector<double> b = transpose_values(rhs, joined({rhs_batch, rhs_contract, rhs_free}));
  int64_t batch = product_of(lhs.type, lhs_batch);
  int64_t m = product_of(lhs.type, lhs_free);
  int64_t k = product_of(lhs.type, lhs_contract);
  int64_t n = product_of(rhs.type, rhs_free);
  HostTensor out = HostTensor::filled(in.result, 0.0);
  for (int64_t i = 0; i < batch; ++i) {
    Eigen::Map<const RowMatrix> left(a.data() + i * m * k, m, k);
    Eigen::Map<const RowMatrix> right(b.data() + i * k * n, k, n);
    Eigen::Map<RowMatrix> product(out.values.data() + i * m * n, m, n);
    product.noalias() = left * right;
  }
  return out;
}

namespace {

// attention's direct kernel; with `rows`, also each row's softmax max and sum (their type).
std::vector<HostTensor> attention_kernel(const KernelInput& in, const TensorType* rows) {
  const HostTensor& q = *in.operands[0];
  const HostTensor& k = *in.operands[1];
  const HostTensor& v = *in.operands[2];
  const int64_t batch = q.type.dims[0], queries = q.type.dims[1], heads = q.type.dims[2];
  const int64_t head_dim = q.type.dims[3], keys = k.type.dims[1], kv_heads = k.type.dims[2];
  const int64_t value_dim = v.type.dims[3], group = heads / kv_heads;
  const bool flash = in.attrs.flag(AttrKey::kFlash);
  const AttentionScorer scorer = attention_scorer(in, 3);
  // Flash processes keys in blocks with a running max and sum (online softmax); the plain
  // form scores the whole row first. Both see the same masked scores.
  const int64_t block = flash ? 64 : std::max<int64_t>(keys, 1);
  HostTensor out = HostTensor::filled(in.result, 0.0);
  HostTensor row_max =
      rows ? HostTensor::filled(*rows, -std::numeric_limits<double>::infinity()) : HostTensor{};
  HostTensor row_sum = rows ? HostTensor::filled(*rows, 0.0) : HostTensor{};
  std::vector<double> scores(static_cast<size_t>(block));
  Eigen::VectorXd acc(value_dim);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t kv_head = h / group;
      for (int64_t t = 0; t < queries; ++t) {
        ConstVector q_row(q.values.data() + ((b * queries + t) * heads + h) * head_dim, head_dim);
        double running_max = -std::numeric_limits<double>::infinity();
        double running_sum = 0.0;
        acc.setZero();
        for (int64_t start = 0; start < keys; start += block) {
          int64_t end = std::min(keys, start + block);
          double block_max = -std::numeric_limits<double>::infinity();
          for (int64_t s = start; s < end; ++s) {
            ConstVector k_row(k.values.data() + ((b * keys + s) * kv_heads + kv_head) * head_dim,
                              head_dim);
            double score = scorer.transform(q_row.dot(k_row));
            if (!scorer.visible(b, t, s, queries, keys)) score = scorer.mask_value;
            scores[s - start] = score;
            block_max = std::max(block_max, score);
          }
          double new_max = std::max(running_max, block_max);
          double correction = std::exp(running_max - new_max);
          running_sum *= correction;
          acc *= correction;
          for (int64_t s = start; s < end; ++s) {
            double weight = std::exp(scores[s - start] - new_max);
            ConstVector v_row(v.values.data() + ((b * keys + s) * kv_heads + kv_head) * value_dim,
                              value_dim);
            running_sum += weight;
            acc += weight * v_row;
          }
          running_max = new_max;
        }
        if (keys == 0) continue;  // an empty softmax contributes nothing (zeros)
        Eigen::Map<Eigen::VectorXd> out_row(
            out.values.data() + ((b * queries + t) * heads + h) * value_dim, value_dim);
        out_row = acc / running_sum;
        if (rows) {
          row_max.values[(b * queries + t) * heads + h] = running_max;
          row_sum.values[(b * queries + t) * heads + h] = running_sum;
        }
      }
    }
  }
  if (!rows) return {out};
  return {out, row_max, row_sum};
}

}  // namespace

HostTensor attention(const KernelInput& in) { return attention_kernel(in, nullptr)[0]; }

std::vector<HostTensor> attention_stats(const KernelInput& in) {
  const TensorType& q = in.operands[0]->type;
  TensorType rows{q.dtype == DType::kF64 ? DType::kF64 : DType::kF32,
                  {q.dims[0], q.dims[1], q.dims[2]}};
  return attention_kernel(in, &rows);
}

// Two passes over the keys per query row: the first finds the softmax's max and sum online,
// the second recomputes each weight p and adds its share to dq, dk and dv. Nothing larger than
// one row of q, k, v is held, so the [T,S] weights never exist, whatever `flash` says.
std::vector<HostTensor> attention_grad(const KernelInput& in) {
  const HostTensor& q = *in.operands[0];
  const HostTensor& k = *in.operands[1];
  const HostTensor& v = *in.operands[2];
  const HostTensor& out = *in.operands[3];
  const HostTensor& dout = *in.operands[4];
  const int64_t batch = q.type.dims[0], queries = q.type.dims[1], heads = q.type.dims[2];
  const int64_t head_dim = q.type.dims[3], keys = k.type.dims[1], kv_heads = k.type.dims[2];
  const int64_t value_dim = v.type.dims[3], group = heads / kv_heads;
  const AttentionScorer scorer = attention_scorer(in, 5);
  HostTensor dq = HostTensor::filled(q.type, 0.0);
  HostTensor dk = HostTensor::filled(k.type, 0.0);
  HostTensor dv = HostTensor::filled(v.type, 0.0);
  if (keys == 0) return {dq, dk, dv};  // an empty softmax: out is zeros whatever q is
  auto k_offset = [&](int64_t b, int64_t s, int64_t kv_head) {
    return ((b * keys + s) * kv_heads + kv_head) * head_dim;
  };
  auto v_offset = [&](int64_t b, int64_t s, int64_t kv_head) {
    return ((b * keys + s) * kv_heads + kv_head) * value_dim;
  };
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t kv_head = h / group;
      for (int64_t t = 0; t < queries; ++t) {
        const int64_t row = (b * queries + t) * heads + h;
        ConstVector q_row(q.values.data() + row * head_dim, head_dim);
        ConstVector out_row(out.values.data() + row * value_dim, value_dim);
        ConstVector dout_row(dout.values.data() + row * value_dim, value_dim);
        Vector dq_row(dq.values.data() + row * head_dim, head_dim);
        double row_max = -std::numeric_limits<double>::infinity();
        double row_sum = 0.0;
        for (int64_t s = 0; s < keys; ++s) {
          ConstVector k_row(k.values.data() + k_offset(b, s, kv_head), head_dim);
          double score = scorer.score(q_row.dot(k_row), scorer.visible(b, t, s, queries, keys));
          if (score > row_max) {
            row_sum = row_sum * std::exp(row_max - score) + 1.0;
            row_max = score;
          } else {
            row_sum += std::exp(score - row_max);
          }
        }
        const double delta = dout_row.dot(out_row);
        for (int64_t s = 0; s < keys; ++s) {
          ConstVector k_row(k.values.data() + k_offset(b, s, kv_head), head_dim);
          ConstVector v_row(v.values.data() + v_offset(b, s, kv_head), value_dim);
          Vector dk_row(dk.values.data() + k_offset(b, s, kv_head), head_dim);
          Vector dv_row(dv.values.data() + v_offset(b, s, kv_head), value_dim);
          const double dot = q_row.dot(k_row);
          const bool visible = scorer.visible(b, t, s, queries, keys);
          const double p = std::exp(scorer.score(dot, visible) - row_max) / row_sum;
          dv_row += p * dout_row;
          if (!visible) continue;  // a masked score is a constant: no gradient to q or k
          const double draw = p * (dout_row.dot(v_row) - delta) * scorer.slope(dot);
          dq_row += (scorer.scale * draw) * k_row;
          dk_row += (scorer.scale * draw) * q_row;
        }
      }
    }
  }
  return {dq, dk, dv};
}

}  // namespace precast::ir::kernels
