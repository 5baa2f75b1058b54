#include "runtime/train/LoadState.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <system_error>

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/DurableFile.h"
#include "runtime/checkpoint/Safetensors.h"
#include "runtime/train/TensorElements.h"
#include "runtime/train/TensorShard.h"

namespace fs = std::filesystem;

namespace precast::runtime {
namespace {

// What a load path names, read and verified.
struct TensorSource {
  std::string description;     // for messages: "checkpoint DIR (step N)" or "safetensors FILE"
  std::optional<int64_t> step;  // a checkpoint's; none for a plain safetensors file
  std::vector<checkpoint::Tensor> tensors;
};

Error incompatible(const std::string& key, const std::string& message) {
  return Error(ExitCode::kIncompatible, fmt::format("{}: {}", key, message));
}

Expected<TensorSource> read_source(const std::string& key, const std::string& path) {
  std::error_code ec;
  fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status)) {
    return incompatible(key, fmt::format("{} does not exist; give a checkpoint step directory "
                                         "(.../checkpoints/<step>), a checkpoint_dir, or a "
                                         ".safetensors file",
                                         path));
  }
  TensorSource source;
  if (fs::is_regular_file(status)) {
    PRECAST_ASSIGN_OR_RETURN(std::string bytes, checkpoint::read_whole_file(path));
    PRECAST_ASSIGN_OR_RETURN(source.tensors, checkpoint::decode_safetensors(bytes, path));
    source.description = fmt::format("safetensors file {}", path);
    return source;
  }
  // A step directory holds the commit marker; otherwise take the latest committed step below.
  checkpoint::LoadedCheckpoint loaded;
  if (fs::exists(fs::path(path) / checkpoint::kCommitMarker) ||
      fs::exists(fs::path(path) / checkpoint::kStateFile)) {
    PRECAST_ASSIGN_OR_RETURN(loaded, checkpoint::read_checkpoint(path));
  } else {
    std::optional<checkpoint::LoadedCheckpoint> latest =
        checkpoint::latest_checkpoint(path, nullptr);
    if (!latest) {
      return incompatible(key, fmt::format("{} holds no committed checkpoint (no <step>/ with {}) "
                                           "and is not one; give a checkpoint step directory, a "
                                           "checkpoint_dir with a committed step, or a "
                                           ".safetensors file",
                                           path, checkpoint::kCommitMarker));
    }
    loaded = std::move(*latest);
  }
  if (loaded.identity.world_size != 1) {
    return incompatible(key, fmt::format("checkpoint {} was saved by {} ranks as pieces; only "
                                         "checkpoints of whole tensors (world size 1) load yet",
                                         loaded.directory, loaded.identity.world_size));
  }
  source.description = fmt::format("checkpoint {} (step {})", loaded.directory, loaded.step);
  source.step = loaded.step;
  source.tensors = std::move(loaded.state);
  return source;
}

bool is_floating(const std::string& dtype) {
  return dtype == "f64" || dtype == "f32" || dtype == "bf16" || dtype == "f16";
}

std::string shape_text(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// Copies this device's piece of every destination from `source`. `convert` allows a floating
// source of another precision. Every problem is collected, then reported at once.
Status copy_pieces(const std::string& key, const TensorSource& source,
                   std::span<const StateDestination> destinations,
                   const std::vector<artifact::MeshAxis>& mesh,
                   std::span<const int64_t> coordinates, bool convert, std::ostream* log) {
  std::map<std::string, const checkpoint::Tensor*> by_name;
  for (const checkpoint::Tensor& t : source.tensors) by_name[t.name] = &t;
  std::vector<std::string> problems;
  std::map<std::string, int> conversions;  // "F32 -> bf16" -> tensors
  struct Copy {
    const StateDestination* to;
    const checkpoint::Tensor* from;
    TensorShard shard;
  };
  std::vector<Copy> copies;
  for (const StateDestination& d : destinations) {
    const artifact::TensorSignature& want = *d.tensor;
    PRECAST_ASSIGN_OR_RETURN(TensorShard shard, tensor_shard(want, mesh, coordinates));
    auto it = by_name.find(want.name);
    if (it == by_name.end()) {
      problems.push_back(fmt::format("{} is missing", want.name));
      continue;
    }
    const checkpoint::Tensor& got = *it->second;
    if (got.shape != shard.global_dims) {
      problems.push_back(fmt::format("{} is {} there, this artifact's is {}", want.name,
                                     shape_text(got.shape), shape_text(shard.global_dims)));
      continue;
    }
    if (got.dtype != want.dtype) {
      if (!convert || !is_floating(got.dtype) || !is_floating(want.dtype)) {
        problems.push_back(fmt::format("{} is {} there, this artifact's is {}", want.name,
                                       got.dtype, want.dtype));
        continue;
      }
      ++conversions[fmt::format("{} to {}", got.dtype, want.dtype)];
    }
    copies.push_back({&d, &got, std::move(shard)});
  }
  if (!problems.empty()) {
    std::vector<std::string> names;
    for (const checkpoint::Tensor& t : source.tensors) {
      if (names.size() == 3) break;
      names.push_back(t.name);
    }
    return incompatible(
        key, fmt::format("{} does not fit this artifact: {}. Tensors are matched by MaxText-style "
                         "name (e.g. {}); `precast checkpoint inspect` lists a checkpoint's, and "
                         "the source has e.g. {}",
                         source.description, fmt::join(problems, "; "),
                         destinations.empty() ? std::string("-") : destinations[0].tensor->name,
                         names.empty() ? std::string("no tensors") : fmt::format("{}", fmt::join(names, ", "))));
  }
  for (const Copy& c : copies) {
    const artifact::TensorSignature& want = *c.to->tensor;
    const int64_t n = elements(want);
    const int64_t from_bytes = dtype_bytes(c.from->dtype);
    const int64_t to_bytes = dtype_bytes(want.dtype);
    auto* out = static_cast<uint8_t*>(c.to->data);
    const char* in = c.from->bytes.data();
    const bool same = c.from->dtype == want.dtype;
    if (same && c.shard.whole()) {
      std::memcpy(out, in, static_cast<size_t>(n * to_bytes));
      continue;
    }
    for (int64_t i = 0; i < n; ++i) {
      int64_t g = c.shard.whole() ? i : c.shard.global_index(i);
      if (same) {
        std::memcpy(out + i * to_bytes, in + g * from_bytes, static_cast<size_t>(to_bytes));
      } else {
        store(out, i, want.dtype, load(in + g * from_bytes, c.from->dtype));
      }
    }
  }
  if (log != nullptr) {
    *log << fmt::format("{}: loaded {} tensors from {}", key, copies.size(), source.description);
    if (source.tensors.size() > copies.size()) {
      *log << fmt::format(" ({} others there ignored)", source.tensors.size() - copies.size());
    }
    for (const auto& [what, count] : conversions) {
      *log << fmt::format("; converted {} tensors from {}", count, what);
    }
    *log << "\n";
  }
  return Status::success();
}

}  // namespace

Status load_parameters(const std::string& path, std::span<const StateDestination> parameters,
                       const std::vector<artifact::MeshAxis>& mesh,
                       std::span<const int64_t> coordinates, std::ostream* log) {
  constexpr const char* kKey = "load_parameters_path";
  PRECAST_ASSIGN_OR_RETURN(TensorSource source, read_source(kKey, path));
  return copy_pieces(kKey, source, parameters, mesh, coordinates, /*convert=*/true, log);
}

Expected<int64_t> load_full_state(const std::string& path,
                                  std::span<const StateDestination> state,
                                  const std::vector<artifact::MeshAxis>& mesh,
                                  std::span<const int64_t> coordinates, std::ostream* log) {
  constexpr const char* kKey = "load_full_state_path";
  PRECAST_ASSIGN_OR_RETURN(TensorSource source, read_source(kKey, path));
  if (!source.step) {
    return incompatible(kKey, fmt::format("{} is a plain safetensors file, which records no "
                                          "step; give a Precast checkpoint directory, or load "
                                          "its parameters with load_parameters_path",
                                          path));
  }
  PRECAST_RETURN_IF_ERROR(copy_pieces(kKey, source, state, mesh, coordinates,
                                      /*convert=*/false, log));
  return *source.step;
}

}  // namespace precast::runtime
