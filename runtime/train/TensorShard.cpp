#include "runtime/train/TensorShard.h"

#include <fmt/format.h>

#include <string>

namespace precast::runtime {
namespace {

// "P('a', None, ('b', 'c'))" → {{a}, {}, {b, c}}; "" → no dimension listed (replicated).
Expected<std::vector<std::vector<std::string>>> parse_sharding(const std::string& text) {
  std::vector<std::vector<std::string>> dims;
  if (text.empty()) return dims;
  auto refuse = [&] {
    return Error(ExitCode::kIncompatible,
                 fmt::format("sharding \"{}\" does not parse as P(...); recompile with this "
                             "build's precast compile",
                             text));
  };
  if (text.size() < 3 || text.compare(0, 2, "P(") != 0 || text.back() != ')') return refuse();
  std::string body = text.substr(2, text.size() - 3);
  size_t i = 0;
  while (i < body.size()) {
    while (i < body.size() && (body[i] == ' ' || body[i] == ',')) ++i;
    if (i >= body.size()) break;
    std::vector<std::string> axes;
    if (body.compare(i, 4, "None") == 0) {
      i += 4;
    } else {
      bool group = body[i] == '(';
      if (group) ++i;
      while (i < body.size() && body[i] != ')') {
        while (i < body.size() && (body[i] == ' ' || body[i] == ',')) ++i;
        if (i >= body.size() || body[i] != '\'') return refuse();
        size_t end = body.find('\'', i + 1);
        if (end == std::string::npos) return refuse();
        axes.push_back(body.substr(i + 1, end - i - 1));
        i = end + 1;
        if (!group) break;
      }
      if (group) {
        if (i >= body.size()) return refuse();
        ++i;  // ')'
      }
    }
    dims.push_back(std::move(axes));
  }
  return dims;
}

}  // namespace

int64_t TensorShard::global_index(int64_t local) const {
  int64_t global = 0, stride = 1;
  for (size_t d = local_dims.size(); d-- > 0;) {
    int64_t digit = local % local_dims[d];
    local /= local_dims[d];
    global += (offsets[d] + digit) * stride;
    stride *= global_dims[d];
  }
  return global;
}

Expected<TensorShard> tensor_shard(const artifact::TensorSignature& tensor,
                                   const std::vector<artifact::MeshAxis>& mesh,
                                   std::span<const int64_t> coordinates) {
  auto refuse = [&](const std::string& why) {
    return Error(ExitCode::kIncompatible,
                 fmt::format("input '{}' (sharding \"{}\"): {}; recompile with this build's "
                             "precast compile",
                             tensor.name, tensor.sharding, why));
  };
  Expected<std::vector<std::vector<std::string>>> dims = parse_sharding(tensor.sharding);
  if (!dims.ok()) return refuse(dims.error().message());
  if (dims->size() > tensor.shape.size()) {
    return refuse(
        fmt::format("{} dimensions listed for a tensor of {}", dims->size(), tensor.shape.size()));
  }
  TensorShard shard;
  shard.local_dims = tensor.shape;
  shard.global_dims = tensor.shape;
  shard.offsets.assign(tensor.shape.size(), 0);
  for (size_t d = 0; d < dims->size(); ++d) {
    int64_t position = 0, count = 1;
    for (const std::string& name : (*dims)[d]) {
      size_t axis = 0;
      while (axis < mesh.size() && mesh[axis].name != name) ++axis;
      if (axis == mesh.size()) return refuse(fmt::format("the mesh has no axis '{}'", name));
      int64_t coordinate = axis < coordinates.size() ? coordinates[axis] : 0;
      position = position * mesh[axis].size + coordinate;
      count *= mesh[axis].size;
    }
    shard.global_dims[d] = tensor.shape[d] * count;
    shard.offsets[d] = position * tensor.shape[d];
  }
  return shard;
}

}  // namespace precast::runtime
