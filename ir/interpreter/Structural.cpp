// Data movement and reduction kernels of the reference interpreter.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "ir/interpreter/Kernels.h"

namespace precast::ir::kernels {
namespace {

// Visits every index of `dims` in row-major order as fn(n, offset, index), with
// offset = base + sum(index[d] * strides[d]) kept up to date incrementally.
template <typename Fn>
void for_each_index(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
                    int64_t base, Fn&& fn) {
  int64_t total = 1;
  for (int64_t d : dims) total *= d;
  std::vector<int64_t> index(dims.size(), 0);
  int64_t offset = base;
  for (int64_t n = 0; n < total; ++n) {
    fn(n, offset, index);
    for (size_t d = dims.size(); d-- > 0;) {
      ++index[d];
      offset += strides[d];
      if (index[d] < dims[d]) break;
      offset -= strides[d] * dims[d];
      index[d] = 0;
    }
  }
}

// out[n] = x[base + sum(index[d] * strides[d])] over the result's dimensions.
HostTensor gather_strided(const HostTensor& x, const TensorType& result,
                          const std::vector<int64_t>& strides, int64_t base) {
  HostTensor out = HostTensor::filled(result, 0.0);
  for_each_index(result.dims, strides, base,
                 [&](int64_t n, int64_t offset, const std::vector<int64_t>&) {
                   out.values[n] = x.values[offset];
                 });
  return out;
}

HostTensor broadcast_in_dim(const KernelInput& in) {
  const HostTensor& x = *in.operands[0];
  std::span<const int64_t> dims = in.attrs.ints(AttrKey::kDims);
  std::vector<int64_t> x_strides = row_major_strides(x.type.dims);
  std::vector<int64_t> strides(in.result.dims.size(), 0);
  for (size_t i = 0; i < dims.size(); ++i) {
    if (x.type.dims[i] != 1) strides[dims[i]] = x_strides[i];
  }
  return gather_strided(x, in.result, strides, 0);
}

HostTensor slice(const KernelInput& in) {
  const HostTensor& x = *in.operands[0];
  std::span<const int64_t> start = in.attrs.ints(AttrKey::kStart);
  std::span<const int64_t> stride = in.attrs.ints(AttrKey::kStride);
  std::vector<int64_t> x_strides = row_major_strides(x.type.dims);
  std::vector<int64_t> strides(x_strides.size());
  int64_t base = 0;
  for (size_t d = 0; d < x_strides.size(); ++d) {
    base += start[d] * x_strides[d];
    strides[d] = x_strides[d] * (stride.empty() ? 1 : stride[d]);
  }
  return gather_strided(x, in.result, strides, base);
}

HostTensor concatenate(const KernelInput& in) {
  int64_t dimension = in.attrs.integer(AttrKey::kDimension);
  int64_t outer = 1;
  for (int64_t d = 0; d < dimension; ++d) outer *= in.result.dims[d];
  HostTensor out = HostTensor::filled(in.result, 0.0);
  auto write = out.values.begin();
  for (int64_t o = 0; o < outer; ++o) {
    for (const HostTensor* part : in.operands) {
      int64_t chunk = outer == 0 ? 0 : static_cast<int64_t>(part->values.size()) / outer;
      auto read = part->values.begin() + o * chunk;
      write = std::copy(read, read + chunk, write);
    }
  }
  return out;
}

HostTensor pad(const KernelInput& in) {
  const HostTensor& x = *in.operands[0];
  std::span<const int64_t> low = in.attrs.ints(AttrKey::kLow);
  std::span<const int64_t> interior = in.attrs.ints(AttrKey::kInterior);
  HostTensor out = HostTensor::filled(in.result, in.operands[1]->values[0]);
  std::vector<int64_t> out_strides = row_major_strides(in.result.dims);
  std::vector<int64_t> no_strides(x.type.dims.size(), 0);
  for_each_index(x.type.dims, no_strides, 0,
                 [&](int64_t n, int64_t, const std::vector<int64_t>& index) {
                   int64_t offset = 0;
                   for (size_t d = 0; d < index.size(); ++d) {
                     int64_t step = 1 + (interior.empty() ? 0 : interior[d]);
                     int64_t c = low[d] + index[d] * step;
                     if (c < 0 || c >= in.result.dims[d]) return;  // cropped by negative padding
                     offset += c * out_strides[d];
                   }
                   out.values[offset] = x.values[n];
                 });
  return out;
}

double reduce_initial(OpKind kind, DType dtype) {
  if (kind == OpKind::kReduceSum) return 0.0;
  bool is_max = kind == OpKind::kReduceMax;
  switch (dtype) {
    case DType::kS32:
      return is_max ? -2147483648.0 : 2147483647.0;
    case DType::kU32:
      return is_max ? 0.0 : 4294967295.0;
    default:
      return is_max ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
  }
}

HostTensor reduce(const KernelInput& in) {
  const HostTensor& x = *in.operands[0];
  std::span<const int64_t> dims = in.attrs.ints(AttrKey::kDims);
  HostTensor out = HostTensor::filled(in.result, reduce_initial(in.kind, x.type.dtype));
  // Kept dimensions advance through the output; reduced ones stay on the same element.
  std::vector<int64_t> out_strides = row_major_strides(in.result.dims);
  std::vector<int64_t> strides(x.type.dims.size(), 0);
  for (size_t d = 0, kept = 0; d < x.type.dims.size(); ++d) {
    bool reduced = std::find(dims.begin(), dims.end(), static_cast<int64_t>(d)) != dims.end();
    if (!reduced) strides[d] = out_strides[kept++];
  }
  for_each_index(x.type.dims, strides, 0,
                 [&](int64_t n, int64_t offset, const std::vector<int64_t>&) {
                   double& acc = out.values[offset];
                   double v = x.values[n];
                   if (in.kind == OpKind::kReduceSum) {
                     acc += v;
                   } else if (std::isnan(v) || std::isnan(acc)) {
                     acc = std::numeric_limits<double>::quiet_NaN();
                   } else {
                     acc = in.kind == OpKind::kReduceMax ? std::max(acc, v) : std::min(acc, v);
                   }
                 });
  return out;
}

// Splits a table around `axis`: [outer, rows, inner].
struct AxisSplit {
  int64_t outer = 1, rows = 1, inner = 1;
};
AxisSplit split_at(const TensorType& t, int64_t axis) {
  AxisSplit s;
  for (int64_t d = 0; d < t.rank(); ++d) {
    if (d < axis) s.outer *= t.dims[d];
    if (d == axis) s.rows = t.dims[d];
    if (d > axis) s.inner *= t.dims[d];
  }
  return s;
}

// Ids out of range clamp into the table, as XLA's gather does.
HostTensor take(const KernelInput& in) {
  const HostTensor& table = *in.operands[0];
  const HostTensor& ids = *in.operands[1];
  AxisSplit s = split_at(table.type, in.attrs.integer(AttrKey::kAxis));
  HostTensor out = HostTensor::filled(in.result, 0.0);
  if (s.rows == 0) return out;  // nothing to read from an empty table
  int64_t count = static_cast<int64_t>(ids.values.size());
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t j = 0; j < count; ++j) {
      int64_t row = std::clamp<int64_t>(static_cast<int64_t>(ids.values[j]), 0, s.rows - 1);
      auto read = table.values.begin() + (o * s.rows + row) * s.inner;
      std::copy(read, read + s.inner, out.values.begin() + (o * count + j) * s.inner);
    }
  }
  return out;
}

// Per row of the last dimension: indices sorted by value, largest first, ties by lower index
// (a stable sort), as jax.lax.top_k. NaN sorts below every number.
HostTensor top_k(const KernelInput& in) {
  const HostTensor& x = *in.operands[0];
  int64_t n = x.type.dims.back();
  int64_t k = in.attrs.integer(AttrKey::kK);
  HostTensor out = HostTensor::filled(in.result, 0.0);
  int64_t rows = n == 0 ? 0 : static_cast<int64_t>(x.values.size()) / n;
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = x.values.data() + r * n;
    std::iota(order.begin(), order.end(), 0);
    auto above = [row](int64_t a, int64_t b) {
      double va = row[a], vb = row[b];
      if (std::isnan(vb)) return !std::isnan(va);
      return va > vb;
    };
    std::stable_sort(order.begin(), order.end(), above);
    for (int64_t j = 0; j < k; ++j)
      out.values[static_cast<size_t>(r * k + j)] =
          static_cast<double>(order[static_cast<size_t>(j)]);
  }
  return out;
}

// Ids out of range are dropped, as XLA's scatter does.
HostTensor scatter_add(const KernelInput& in) {
  HostTensor out = *in.operands[0];
  const HostTensor& ids = *in.operands[1];
  const HostTensor& updates = *in.operands[2];
  AxisSplit s = split_at(out.type, in.attrs.integer(AttrKey::kAxis));
  int64_t count = static_cast<int64_t>(ids.values.size());
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t j = 0; j < count; ++j) {
      auto row = static_cast<int64_t>(ids.values[j]);
      if (row < 0 || row >= s.rows) continue;
      for (int64_t q = 0; q < s.inner; ++q) {
        out.values[(o * s.rows + row) * s.inner + q] +=
            updates.values[(o * count + j) * s.inner + q];
      }
    }
  }
  return out;
}

// Row (r, n) of lhs [R,N,K] times rhs[ids[r, n]] ([G,K,M]); an id outside [0, G) gives zeros.
HostTensor grouped_dot(const KernelInput& in) {
  const HostTensor& lhs = *in.operands[0];
  const HostTensor& rhs = *in.operands[1];
  const HostTensor& ids = *in.operands[2];
  int64_t rows = lhs.type.dims[0] * lhs.type.dims[1], k = lhs.type.dims[2];
  int64_t groups = rhs.type.dims[0], m = rhs.type.dims[2];
  HostTensor out = HostTensor::filled(in.result, 0.0);
  for (int64_t n = 0; n < rows; ++n) {
    auto g = static_cast<int64_t>(ids.values[static_cast<size_t>(n)]);
    if (g < 0 || g >= groups) continue;
    for (int64_t c = 0; c < k; ++c) {
      double a = lhs.values[static_cast<size_t>(n * k + c)];
      const double* w = rhs.values.data() + (g * k + c) * m;
      double* o = out.values.data() + n * m;
      for (int64_t j = 0; j < m; ++j) o[j] += a * w[j];
    }
  }
  return out;
}

// Group g of the result [G,K,M]: the sum of lhs[r,n,:]ᵀ · dout[r,n,:] over rows with ids == g.
HostTensor grouped_dot_weight_grad(const KernelInput& in) {
  const HostTensor& lhs = *in.operands[0];
  const HostTensor& dout = *in.operands[1];
  const HostTensor& ids = *in.operands[2];
  int64_t rows = lhs.type.dims[0] * lhs.type.dims[1], k = lhs.type.dims[2];
  int64_t groups = in.result.dims[0], m = in.result.dims[2];
  HostTensor out = HostTensor::filled(in.result, 0.0);
  for (int64_t n = 0; n < rows; ++n) {
    auto g = static_cast<int64_t>(ids.values[static_cast<size_t>(n)]);
    if (g < 0 || g >= groups) continue;
    const double* d = dout.values.data() + n * m;
    for (int64_t c = 0; c < k; ++c) {
      double a = lhs.values[static_cast<size_t>(n * k + c)];
      double* o = out.values.data() + (g * k + c) * m;
      for (int64_t j = 0; j < m; ++j) o[j] += a * d[j];
    }
  }
  return out;
}

}  // namespace

std::vector<double> transpose_values(const HostTensor& x, std::span<const int64_t> permutation) {
  std::vector<int64_t> x_strides = row_major_strides(x.type.dims);
  TensorType result{x.type.dtype, {}};
  std::vector<int64_t> strides;
  for (int64_t p : permutation) {
    result.dims.push_back(x.type.dims[p]);
    strides.push_back(x_strides[p]);
  }
  return gather_strided(x, result, strides, 0).values;
}

HostTensor data_movement(const KernelInput& in) {
  const HostTensor& x = *in.operands[0];
  switch (in.kind) {
    case OpKind::kBroadcastInDim:
      return broadcast_in_dim(in);
    case OpKind::kReshape:
      return HostTensor::of(in.result, x.values);
    case OpKind::kTranspose:
      return HostTensor::of(in.result, transpose_values(x, in.attrs.ints(AttrKey::kPermutation)));
    case OpKind::kSlice:
      return slice(in);
    case OpKind::kConcatenate:
      return concatenate(in);
    default:
      return pad(in);
  }
}

HostTensor reduction(const KernelInput& in) {
  switch (in.kind) {
    case OpKind::kTake:
      return take(in);
    case OpKind::kScatterAdd:
      return scatter_add(in);
    case OpKind::kTopK:
      return top_k(in);
    case OpKind::kGroupedDot:
      return grouped_dot(in);
    case OpKind::kGroupedDotWeightGrad:
      return grouped_dot_weight_grad(in);
    default:
      return reduce(in);
  }
}

}  // namespace precast::ir::kernels
