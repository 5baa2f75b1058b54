#include "compiler/analysis/TpuLayout.h"

#include <algorithm>
#include <limits>

namespace precast {
namespace {

int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// The rows of a tile for `dim` on the second-minor axis: the smallest power of two that holds it
// up to the type's full tile, then whole tiles.
int64_t sublane_padded(int64_t dim, int64_t tile_rows) {
  if (dim >= tile_rows) return round_up(dim, tile_rows);
  int64_t rows = 1;
  while (rows < dim) rows *= 2;
  return rows;
}

}  // namespace

int64_t tpu_buffer_bytes(const ir::TensorType& type) {
  const int64_t element = ir::bytes_per_element(type.dtype);
  const std::vector<int64_t>& dims = type.dims;
  int64_t bytes = 0;
  if (dims.empty()) {
    bytes = element;
  } else if (dims.size() == 1) {
    // Tiles of 1024 words once a vector fills one (f32[2304] takes 3072 floats), else of 128.
    int64_t raw = dims[0] * element;
    bytes = round_up(raw, raw >= 4096 ? 4096 : kTpuMinAllocationBytes);
  } else {
    const int64_t tile_rows = element >= 4 ? 8 : element == 2 ? 16 : 32;
    int64_t all = 1;
    for (int64_t d : dims) all *= d;
    if (all == 0) return 0;
    int64_t best = std::numeric_limits<int64_t>::max();
    for (size_t minor = 0; minor < dims.size(); ++minor) {
      for (size_t second = 0; second < dims.size(); ++second) {
        if (second == minor) continue;
        int64_t rest = all / dims[minor] / dims[second];
        int64_t padded = rest * round_up(dims[minor], 128) * sublane_padded(dims[second], tile_rows);
        best = std::min(best, padded);
      }
    }
    bytes = best * element;
  }
  return std::max(bytes, kTpuMinAllocationBytes);
}

}  // namespace precast
