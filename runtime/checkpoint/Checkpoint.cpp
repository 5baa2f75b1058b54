#include "runtime/checkpoint/Checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <system_error>
#include <string_view>
#include <thread>

#include "compiler/artifact/Sha256.h"
#include "runtime/checkpoint/DurableFile.h"
#include "runtime/checkpoint/JsonValue.h"
#include "runtime/checkpoint/Sha256Streams.h"

namespace precast::checkpoint {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFormat = "precast-checkpoint";
constexpr int64_t kVersion = 1;         // one state file per rank
constexpr int64_t kShardedVersion = 2;  // a world of one's state as shards ("state_shards")

Error damaged(const fs::path& file, const std::string& what) {
  return Error(ExitCode::kIncompatible, fmt::format("{}: {}", file.string(), what));
}

// A directory name that is a step number ("12"); nullopt for anything else ("12.tmp").
std::optional<int64_t> step_of(const std::string& name) {
  int64_t step = 0;
  auto r = std::from_chars(name.data(), name.data() + name.size(), step);
  if (r.ec != std::errc() || r.ptr != name.data() + name.size() || step < 0) return std::nullopt;
  if (std::to_string(step) != name) return std::nullopt;  // "007" is not ours
  return step;
}

// One state file as metadata.json lists it; a rank's piece also names the rank and its mesh
// coordinates (where the piece sits in the global tensors).
struct StateFileEntry {
  std::string name;
  int64_t bytes = 0;
  std::string sha256;
  int64_t rank = -1;  // -1: the whole state of one process
  std::vector<int64_t> mesh_coordinates;
};

std::string metadata_json(int64_t step, const CheckpointIdentity& identity,
                          const std::vector<StateFileEntry>& files,
                          const std::string& data_position, int64_t state_shards = 1) {
  std::vector<std::string> entries;
  for (const StateFileEntry& f : files) {
    std::string piece = f.rank < 0 ? std::string()
                                   : fmt::format(", \"rank\": {}, \"mesh_coordinates\": [{}]",
                                                 f.rank, fmt::join(f.mesh_coordinates, ", "));
    entries.push_back(fmt::format("    {}: {{\"bytes\": {}, \"sha256\": \"{}\"{}}}",
                                  json_quote(f.name), f.bytes, f.sha256, piece));
  }
  std::string data = data_position.empty()
                         ? fmt::format("{{\"dataset_type\": \"synthetic\", \"next_step\": {}}}",
                                       step + 1)
                         : data_position;
  const bool sharded = state_shards > 1;
  return fmt::format(
      "{{\n  \"format\": \"{}\",\n  \"version\": {},\n  \"step\": {},\n"
      "  \"config_hash\": {},\n  \"world_size\": {},\n{}"
      "  \"data\": {},\n"
      "  \"files\": {{\n{}\n  }}\n}}\n",
      kFormat, sharded ? kShardedVersion : kVersion, step, json_quote(identity.config_hash),
      identity.world_size,
      sharded ? fmt::format("  \"state_shards\": {},\n", state_shards) : std::string(), data,
      fmt::join(entries, ",\n"));
}

Status remove_tree(const fs::path& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) {
    return Error(ExitCode::kFailure,
                 fmt::format("cannot remove {}: {}", path.string(), ec.message()));
  }
  return Status::success();
}

Status rename_path(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec) {
    return Error(ExitCode::kFailure, fmt::format("cannot rename {} to {}: {}", from.string(),
                                                 to.string(), ec.message()));
  }
  return Status::success();
}

Status delete_beyond(const fs::path& root, int64_t max_to_keep) {
  std::vector<int64_t> steps = committed_steps(root.string());
  if (max_to_keep <= 0 || static_cast<int64_t>(steps.size()) <= max_to_keep) {
    return Status::success();
  }
  size_t excess = steps.size() - static_cast<size_t>(max_to_keep);
  for (size_t i = 0; i < excess; ++i) {
    // Renamed out of the step namespace first, so a crash mid-deletion leaves no half a
    // checkpoint under a step name.
    fs::path victim = root / std::to_string(steps[i]);
    fs::path doomed = root / (std::to_string(steps[i]) + ".deleting");
    PRECAST_RETURN_IF_ERROR(remove_tree(doomed));
    PRECAST_RETURN_IF_ERROR(rename_path(victim, doomed));
    PRECAST_RETURN_IF_ERROR(remove_tree(doomed));
  }
  return sync_directory(root.string());
}

Expected<std::string> required_string(const JsonValue& metadata, const fs::path& file,
                                      const std::string& key) {
  const JsonValue* v = metadata.find(key);
  if (v == nullptr || v->kind != JsonValue::Kind::kString) {
    return damaged(file, fmt::format("field \"{}\" is missing or not a string", key));
  }
  return v->text;
}

Expected<int64_t> required_int(const JsonValue& metadata, const fs::path& file,
                               const std::string& key) {
  const JsonValue* v = metadata.find(key);
  int64_t out = 0;
  if (v == nullptr || !v->as_int(out)) {
    return damaged(file, fmt::format("field \"{}\" is missing or not an integer", key));
  }
  return out;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// PRECAST_TEST_CHECKPOINT_WRITE_DELAY_MS (tests only): a pause after the state files are written
// and before metadata.json and the commit marker, so that a test can kill a run inside a write.
void test_only_pause_inside_write() {
  static const char* delay = std::getenv("PRECAST_TEST_CHECKPOINT_WRITE_DELAY_MS");
  if (delay != nullptr) std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(delay)));
}

// How a state file is written: O_DIRECT where the state's memory is aligned (an asynchronous
// writer's snapshot; DurableFile.h), unless PRECAST_CHECKPOINT_DIRECT_IO=0 (benchmarks and tests:
// the buffered path, as on a file system that refuses O_DIRECT).
DirectIo state_file_direct_io() {
  const char* text = std::getenv("PRECAST_CHECKPOINT_DIRECT_IO");
  return text != nullptr && std::string_view(text) == "0" ? DirectIo::kNever
                                                          : DirectIo::kWhereAligned;
}

// Writes `state` as a safetensors file, fsynced; its name, size and SHA-256 (hashed as written:
// one pass over the state).
Expected<StateFileEntry> write_state_file(const fs::path& file,
                                          const std::vector<TensorView>& state,
                                          WriteReport* report) {
  std::string header;
  PRECAST_RETURN_IF_ERROR(encode_safetensors(state, header));
  std::vector<ByteRange> pieces{{header.data(), header.size()}};
  StateFileEntry entry;
  entry.name = file.filename().string();
  entry.bytes = static_cast<int64_t>(header.size());
  for (const TensorView& t : state) {
    auto bytes = static_cast<size_t>(tensor_view_bytes(t));
    pieces.push_back({t.data, bytes});
    entry.bytes += static_cast<int64_t>(bytes);
  }
  artifact::Sha256 hasher;
  PRECAST_RETURN_IF_ERROR(
      write_file_durably(file.string(), pieces, &hasher, state_file_direct_io(), report));
  entry.sha256 = artifact::to_hex(hasher.finish());
  return entry;
}

// A state of this many bytes or more is saved as shards (kShardedStateMinBytes unless
// PRECAST_CHECKPOINT_SHARD_BYTES says otherwise: tests shard small states with it).
int64_t sharded_state_min_bytes() {
  const char* text = std::getenv("PRECAST_CHECKPOINT_SHARD_BYTES");
  if (text == nullptr) return kShardedStateMinBytes;
  int64_t value = 0;
  auto r = std::from_chars(text, text + std::strlen(text), value);
  return r.ec == std::errc() && value > 0 ? value : kShardedStateMinBytes;
}

// Pieces of a shard written (and hashed) per round: each shard's next 4 MiB, so that the shards'
// hash streams advance together and each piece is still in the cache when it is written.
constexpr size_t kShardPieceBytes = size_t{4} << 20;

// Writes the shards of `state` into `dir`, each fsynced, the shards' next pieces hashed together
// (Sha256Streams) right before they are written; their names, sizes and SHA-256s.
Expected<std::vector<StateFileEntry>> write_state_shards(
    const fs::path& dir, const std::vector<TensorView>& state,
    const std::vector<std::vector<size_t>>& shards, WriteReport* report) {
  const size_t count = shards.size();
  std::vector<std::string> headers(count);
  std::vector<std::vector<ByteRange>> ranges(count);
  std::vector<StateFileEntry> entries(count);
  std::vector<std::unique_ptr<DurableFileWriter>> files;
  for (size_t k = 0; k < count; ++k) {
    std::vector<TensorView> views;
    for (size_t i : shards[k]) views.push_back(state[i]);
    PRECAST_RETURN_IF_ERROR(encode_safetensors(views, headers[k]));
    std::vector<ByteRange> pieces{{headers[k].data(), headers[k].size()}};
    entries[k].name = state_shard_name(static_cast<int64_t>(k), static_cast<int64_t>(count));
    entries[k].bytes = static_cast<int64_t>(headers[k].size());
    for (const TensorView& t : views) {
      auto bytes = static_cast<size_t>(tensor_view_bytes(t));
      pieces.push_back({t.data, bytes});
      entries[k].bytes += static_cast<int64_t>(bytes);
    }
    ranges[k] = join_adjacent_ranges(pieces);
    PRECAST_ASSIGN_OR_RETURN(std::unique_ptr<DurableFileWriter> file,
                             DurableFileWriter::create((dir / entries[k].name).string(),
                                                       state_file_direct_io()));
    files.push_back(std::move(file));
  }
  struct Cursor {
    size_t range = 0;
    size_t offset = 0;
  };
  std::vector<Cursor> cursors(count);
  Sha256Streams hashes(count);
  for (;;) {
    std::vector<std::string_view> pieces(count);
    bool any = false;
    for (size_t k = 0; k < count; ++k) {
      Cursor& c = cursors[k];
      if (c.range == ranges[k].size()) continue;
      const ByteRange& r = ranges[k][c.range];
      const size_t n = std::min(kShardPieceBytes, r.size - c.offset);
      pieces[k] = std::string_view(static_cast<const char*>(r.data) + c.offset, n);
      c.offset += n;
      if (c.offset == r.size) c = Cursor{c.range + 1, 0};
      any = true;
    }
    if (!any) break;
    hashes.update(pieces);
    for (size_t k = 0; k < count; ++k) {
      if (pieces[k].empty()) continue;
      PRECAST_RETURN_IF_ERROR(files[k]->write(pieces[k].data(), pieces[k].size()));
    }
  }
  std::vector<artifact::Sha256Digest> digests = hashes.finish();
  WriteReport total;
  for (size_t k = 0; k < count; ++k) {
    WriteReport one;
    PRECAST_RETURN_IF_ERROR(files[k]->finish(&one));
    total.direct_bytes += one.direct_bytes;
    total.buffered_bytes += one.buffered_bytes;
    total.direct_refused = total.direct_refused || one.direct_refused;
    entries[k].sha256 = artifact::to_hex(digests[k]);
  }
  if (report != nullptr) *report = total;
  return entries;
}

// metadata.json and the marker into <root>/<step>.tmp/ (which holds the state files), then the
// directory renamed into place and the oldest beyond max_to_keep deleted.
Status commit(const fs::path& root, int64_t step, const std::string& metadata,
              int64_t max_to_keep) {
  const fs::path final_dir = root / std::to_string(step);
  const fs::path temp_dir = root / (std::to_string(step) + ".tmp");
  test_only_pause_inside_write();
  PRECAST_RETURN_IF_ERROR(write_file_durably((temp_dir / kMetadataFile).string(),
                                             {{metadata.data(), metadata.size()}}));
  PRECAST_RETURN_IF_ERROR(sync_directory(temp_dir.string()));
  // The marker last: a directory without it was never finished.
  std::string marker = artifact::to_hex(artifact::sha256(metadata)) + "\n";
  PRECAST_RETURN_IF_ERROR(
      write_file_durably((temp_dir / kCommitMarker).string(), {{marker.data(), marker.size()}}));
  PRECAST_RETURN_IF_ERROR(sync_directory(temp_dir.string()));

  // A directory of the same step (damaged, or skipped at resume) gives way to the new one.
  const fs::path replaced = root / (std::to_string(step) + ".replaced");
  bool replacing = fs::exists(final_dir);
  if (replacing) {
    PRECAST_RETURN_IF_ERROR(remove_tree(replaced));
    PRECAST_RETURN_IF_ERROR(rename_path(final_dir, replaced));
  }
  PRECAST_RETURN_IF_ERROR(rename_path(temp_dir, final_dir));
  PRECAST_RETURN_IF_ERROR(sync_directory(root.string()));
  if (replacing) PRECAST_RETURN_IF_ERROR(remove_tree(replaced));
  return delete_beyond(root, max_to_keep);
}

}  // namespace

std::string state_file_name(int64_t world_size, int64_t rank) {
  return world_size <= 1 ? std::string(kStateFile) : fmt::format("state.rank-{}.safetensors", rank);
}

Status save_checkpoint(const std::string& root_text, int64_t step,
                       const CheckpointIdentity& identity, const std::vector<TensorView>& state,
                       int64_t max_to_keep, const std::string& data_position,
                       WriteReport* report) {
  const fs::path root(root_text);
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) {
    return Error(ExitCode::kFailure,
                 fmt::format("checkpoint_dir={}: cannot create it: {}", root_text, ec.message()));
  }
  const fs::path temp_dir = root / (std::to_string(step) + ".tmp");
  PRECAST_RETURN_IF_ERROR(remove_tree(temp_dir));  // left by a run killed while saving
  fs::create_directory(temp_dir, ec);
  if (ec) {
    return Error(ExitCode::kFailure,
                 fmt::format("cannot create {}: {}", temp_dir.string(), ec.message()));
  }

  const std::vector<std::vector<size_t>> shards = plan_state_shards(state);
  std::vector<StateFileEntry> files;
  if (shards.size() > 1) {
    PRECAST_ASSIGN_OR_RETURN(files, write_state_shards(temp_dir, state, shards, report));
  } else {
    PRECAST_ASSIGN_OR_RETURN(StateFileEntry file,
                             write_state_file(temp_dir / kStateFile, state, report));
    files.push_back(std::move(file));
  }
  return commit(root, step,
                metadata_json(step, identity, files, data_position,
                              static_cast<int64_t>(shards.size())),
                max_to_keep);
}

std::string state_shard_name(int64_t index, int64_t count) {
  return fmt::format("state-{:05d}-of-{:05d}.safetensors", index + 1, count);
}

std::vector<std::vector<size_t>> plan_state_shards(const std::vector<TensorView>& state) {
  int64_t total = 0;
  for (const TensorView& t : state) total += tensor_view_bytes(t);
  const size_t count = total >= sharded_state_min_bytes()
                           ? std::min(static_cast<size_t>(kMaxStateShards), state.size())
                           : 1;
  std::vector<std::vector<size_t>> shards(count);
  if (count <= 1) {
    for (size_t i = 0; i < state.size(); ++i) shards.front().push_back(i);
    return shards;
  }
  std::vector<size_t> order(state.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return tensor_view_bytes(state[a]) > tensor_view_bytes(state[b]);
  });
  std::vector<int64_t> load(count, 0);
  for (size_t i : order) {
    size_t best = 0;
    for (size_t k = 1; k < count; ++k) {
      if (std::make_pair(load[k], shards[k].size()) <
          std::make_pair(load[best], shards[best].size())) {
        best = k;
      }
    }
    shards[best].push_back(i);
    load[best] += tensor_view_bytes(state[i]);
  }
  for (std::vector<size_t>& shard : shards) std::sort(shard.begin(), shard.end());
  return shards;
}

std::vector<size_t> snapshot_offsets(const std::vector<TensorView>& state, size_t* total) {
  std::vector<size_t> offsets(state.size(), 0);
  size_t at = 0;
  for (const std::vector<size_t>& shard : plan_state_shards(state)) {
    at = (at + kDirectIoAlignment - 1) / kDirectIoAlignment * kDirectIoAlignment;
    for (size_t i : shard) {
      offsets[i] = at;
      at += static_cast<size_t>(tensor_view_bytes(state[i]));
    }
  }
  if (total != nullptr) *total = at;
  return offsets;
}

Status save_checkpoint_piece(const std::string& root_text, int64_t step, int64_t rank,
                             const std::vector<TensorView>& state) {
  const fs::path temp_dir = fs::path(root_text) / (std::to_string(step) + ".tmp");
  std::error_code ec;
  fs::create_directories(temp_dir, ec);  // by whichever rank comes first
  if (ec) {
    return Error(ExitCode::kFailure,
                 fmt::format("cannot create {}: {}", temp_dir.string(), ec.message()));
  }
  Expected<StateFileEntry> written = write_state_file(temp_dir / state_file_name(2, rank), state, nullptr);
  if (!written.ok()) return written.error();
  return Status::success();
}

Status commit_checkpoint_pieces(const std::string& root_text, int64_t step,
                                const CheckpointIdentity& identity,
                                const std::vector<std::vector<int64_t>>& coordinates,
                                int64_t max_to_keep, const std::string& data_position) {
  const fs::path root(root_text);
  const fs::path temp_dir = root / (std::to_string(step) + ".tmp");
  std::vector<StateFileEntry> files;
  for (int64_t rank = 0; rank < identity.world_size; ++rank) {
    StateFileEntry f;
    f.name = state_file_name(identity.world_size, rank);
    PRECAST_ASSIGN_OR_RETURN(FileDigest digest, hash_file((temp_dir / f.name).string()));
    f.bytes = digest.bytes;
    f.sha256 = artifact::to_hex(digest.sha256);
    f.rank = rank;
    if (static_cast<size_t>(rank) < coordinates.size()) {
      f.mesh_coordinates = coordinates[static_cast<size_t>(rank)];
    }
    files.push_back(std::move(f));
  }
  return commit(root, step, metadata_json(step, identity, files, data_position), max_to_keep);
}

std::vector<int64_t> committed_steps(const std::string& root) {
  std::vector<int64_t> steps;
  std::error_code ec;
  fs::directory_iterator it(root, ec);
  if (ec) return steps;
  for (const fs::directory_entry& entry : it) {
    std::optional<int64_t> step = step_of(entry.path().filename().string());
    if (step && entry.is_directory(ec) && fs::exists(entry.path() / kCommitMarker, ec)) {
      steps.push_back(*step);
    }
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

namespace {

// A state file as metadata.json records it.
struct PieceRecord {
  fs::path file;
  int64_t bytes = 0;
  std::string sha256;
};

// A checkpoint's metadata, verified against the marker, with every other rank's piece verified
// against its size and hash; this rank's state files (its piece, or a world of one's shards) are
// listed in `own`, not yet read.
struct VerifiedMetadata {
  LoadedCheckpoint checkpoint;  // state still empty
  std::vector<PieceRecord> own;
};

Error digest_differs(const PieceRecord& record, int64_t bytes, const std::string& sha) {
  if (bytes != record.bytes) {
    return damaged(record.file, fmt::format("{} bytes, but {} records {}: the file is truncated "
                                            "or damaged",
                                            bytes, kMetadataFile, record.bytes));
  }
  return damaged(record.file, fmt::format("SHA-256 {} differs from {} recorded in {}: the file "
                                          "is damaged",
                                          sha, record.sha256, kMetadataFile));
}

// The digest against the record; an Error (exit 4) naming the file when they differ.
Status check_digest(const PieceRecord& record, const FileDigest& digest) {
  std::string sha = artifact::to_hex(digest.sha256);
  if (digest.bytes == record.bytes && sha == record.sha256) return Status::success();
  return digest_differs(record, digest.bytes, sha);
}

Expected<VerifiedMetadata> read_metadata(const fs::path& dir, int64_t rank) {
  const fs::path marker_file = dir / kCommitMarker;
  const fs::path metadata_file = dir / kMetadataFile;
  if (!fs::exists(marker_file)) {
    return damaged(marker_file,
                   "missing: the checkpoint was never committed (a save was "
                   "interrupted); it is not loaded");
  }
  PRECAST_ASSIGN_OR_RETURN(std::string marker, read_whole_file(marker_file.string()));
  PRECAST_ASSIGN_OR_RETURN(std::string metadata_text, read_whole_file(metadata_file.string()));
  std::string metadata_sha = artifact::to_hex(artifact::sha256(metadata_text));
  if (marker != metadata_sha + "\n") {
    return damaged(metadata_file,
                   fmt::format("SHA-256 {} differs from {} recorded in {}: the file is damaged",
                               metadata_sha, marker.substr(0, 64), kCommitMarker));
  }
  Expected<JsonValue> metadata = parse_json(metadata_text);
  if (!metadata.ok()) return damaged(metadata_file, metadata.error().message());
  PRECAST_ASSIGN_OR_RETURN(std::string format, required_string(*metadata, metadata_file, "format"));
  PRECAST_ASSIGN_OR_RETURN(int64_t version, required_int(*metadata, metadata_file, "version"));
  if (format != kFormat || (version != kVersion && version != kShardedVersion)) {
    return damaged(metadata_file,
                   fmt::format("format {} version {}, but this precast reads {} versions {} and {}",
                               format, version, kFormat, kVersion, kShardedVersion));
  }
  VerifiedMetadata out;
  LoadedCheckpoint& c = out.checkpoint;
  c.directory = dir.string();
  PRECAST_ASSIGN_OR_RETURN(c.step, required_int(*metadata, metadata_file, "step"));
  PRECAST_ASSIGN_OR_RETURN(c.identity.config_hash,
                           required_string(*metadata, metadata_file, "config_hash"));
  PRECAST_ASSIGN_OR_RETURN(c.identity.world_size,
                           required_int(*metadata, metadata_file, "world_size"));
  if (c.identity.world_size < 1 || rank < 0 || rank >= c.identity.world_size) {
    return damaged(metadata_file,
                   fmt::format("world_size {} has no rank {}", c.identity.world_size, rank));
  }
  if (const JsonValue* data = metadata->find("data")) c.data = *data;
  // A world of one's state in shards (version 2).
  int64_t shards = 1;
  if (const JsonValue* count = metadata->find("state_shards")) {
    if (!count->as_int(shards) || shards < 2 || shards > kMaxStateShards ||
        c.identity.world_size != 1 || version != kShardedVersion) {
      return damaged(metadata_file,
                     fmt::format("field \"state_shards\" is {} with world_size {} in version {}; "
                                 "a sharded state has 2 to {} shards, world_size 1, version {}",
                                 count->text.empty() ? std::string("not a number") : count->text,
                                 c.identity.world_size, version, kMaxStateShards,
                                 kShardedVersion));
    }
  }
  // Every state file (one per rank) is verified on every rank, so all ranks judge a checkpoint
  // alike and resume from the same step; each reads its own piece (hashed as it is read).
  const JsonValue* files = metadata->find("files");
  for (int64_t r = 0; r < c.identity.world_size; ++r) {
    std::vector<std::string> names;
    if (shards > 1) {
      for (int64_t k = 0; k < shards; ++k) names.push_back(state_shard_name(k, shards));
    } else {
      names.push_back(state_file_name(c.identity.world_size, r));
    }
    for (const std::string& name : names) {
      const JsonValue* entry = files == nullptr ? nullptr : files->find(name);
      if (entry == nullptr) {
        return damaged(metadata_file, fmt::format("field \"files\" does not list {}", name));
      }
      PieceRecord record;
      record.file = dir / name;
      PRECAST_ASSIGN_OR_RETURN(record.bytes, required_int(*entry, metadata_file, "bytes"));
      PRECAST_ASSIGN_OR_RETURN(record.sha256, required_string(*entry, metadata_file, "sha256"));
      if (r == rank) {
        out.own.push_back(std::move(record));
        continue;
      }
      PRECAST_ASSIGN_OR_RETURN(FileDigest digest, hash_file(record.file.string()));
      PRECAST_RETURN_IF_ERROR(check_digest(record, digest));
    }
  }
  return out;
}

// An open state file read front to back, every byte read fed to the hasher.
class HashedReader {
 public:
  explicit HashedReader(const fs::path& file) : file_(file) {
    fd_ = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  }
  ~HashedReader() {
    if (fd_ >= 0) ::close(fd_);
  }
  HashedReader(const HashedReader&) = delete;
  HashedReader& operator=(const HashedReader&) = delete;

  // The file's size; an Error naming it when it cannot be opened.
  Expected<int64_t> size() const {
    struct stat st {};
    if (fd_ < 0 || ::fstat(fd_, &st) != 0) {
      return damaged(file_, fmt::format("cannot open it: {}", std::strerror(errno)));
    }
    return static_cast<int64_t>(st.st_size);
  }
  // Reads exactly `size` bytes into `into`, hashed; false at an error or the file's end.
  bool read(char* into, size_t size) {
    while (size > 0) {
      ssize_t n = ::read(fd_, into, std::min(size, kChunkBytes));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      hasher_.update(into, static_cast<size_t>(n));
      into += n;
      size -= static_cast<size_t>(n);
      read_ += n;
    }
    return true;
  }
  // Reads exactly `size` bytes into `into` without hashing them (the caller hashes them with the
  // other files', read_piece_into), then asks the kernel to start reading the next `ahead` bytes
  // so that the disk works while the caller hashes; false at an error or the file's end.
  bool read_unhashed(char* into, size_t size, size_t ahead) {
    while (size > 0) {
      ssize_t n = ::read(fd_, into, size);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      into += n;
      size -= static_cast<size_t>(n);
      read_ += n;
    }
    if (ahead > 0) {
      ::posix_fadvise(fd_, static_cast<off_t>(read_), static_cast<off_t>(ahead),
                      POSIX_FADV_WILLNEED);
    }
    return true;
  }
  // Hashes the rest of the file without keeping it; false at a read error.
  bool read_rest() {
    std::string chunk(kChunkBytes, '\0');
    for (;;) {
      ssize_t n = ::read(fd_, chunk.data(), chunk.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return false;
      if (n == 0) return true;
      hasher_.update(chunk.data(), static_cast<size_t>(n));
      read_ += n;
    }
  }
  int64_t bytes_read() const { return read_; }
  std::string sha256() { return artifact::to_hex(hasher_.finish()); }

 private:
  static constexpr size_t kChunkBytes = size_t{4} << 20;
  fs::path file_;
  int fd_ = -1;
  artifact::Sha256 hasher_;
  int64_t read_ = 0;
};

// Reading a piece straight into the step's buffers: `damage` is set when the file is damaged
// (the checkpoint is skipped); `wrote` when some of its bytes already reached the buffers.
struct DirectRead {
  std::optional<Error> damage;
  bool wrote = false;
};

// The rest of the file hashed: its damage when it differs from the record, else nullopt.
std::optional<Error> damage_of_rest(HashedReader& reader, const PieceRecord& record) {
  if (!reader.read_rest()) {
    return damaged(record.file, fmt::format("cannot read it: {}", std::strerror(errno)));
  }
  std::string sha = reader.sha256();
  if (reader.bytes_read() != record.bytes || sha != record.sha256) {
    return digest_differs(record, reader.bytes_read(), sha);
  }
  return std::nullopt;
}

// A fault found in the file before its data was read: the file's damage when the hash of the
// whole file shows some (it explains the fault), else the fault itself.
DirectRead refused(HashedReader& reader, const PieceRecord& record, Error fault) {
  std::optional<Error> damage = damage_of_rest(reader, record);
  return DirectRead{damage ? *damage : std::move(fault), false};
}

// One state file's header, read and decoded; on a fault, the DirectRead that refuses the file.
// `header`: the bytes read (the first 8 and the header), which the data's hash continues.
std::optional<DirectRead> read_header(HashedReader& reader, const PieceRecord& record,
                                      std::vector<TensorPlace>& places, std::string& header) {
  Expected<int64_t> size = reader.size();
  if (!size.ok()) return DirectRead{size.error(), false};
  if (*size != record.bytes) return DirectRead{digest_differs(record, *size, ""), false};
  const auto file_size = static_cast<uint64_t>(*size);
  std::string prefix(std::min<uint64_t>(8, file_size), '\0');
  if (!reader.read(prefix.data(), prefix.size())) {
    return refused(reader, record, damaged(record.file, "cannot read its header"));
  }
  if (file_size >= 8) {
    uint64_t length = safetensors_header_length(prefix);
    if (length <= file_size - 8 && length <= (uint64_t{100} << 20)) {
      prefix.resize(8 + length);
      if (!reader.read(prefix.data() + 8, length)) {
        return refused(reader, record, damaged(record.file, "cannot read its header"));
      }
    }
  }
  Expected<std::vector<TensorPlace>> decoded =
      decode_safetensors_header(prefix, file_size, record.file.string());
  if (!decoded.ok()) return refused(reader, record, decoded.error());
  places = std::move(decoded).value();
  header = std::move(prefix);
  return std::nullopt;
}

// This rank's state files (its piece, or a world of one's shards) read once each, in file order,
// straight into `destinations` (no copy of a whole file), hashed as read. Every header is decoded
// and the tensors they hold together checked against this run's state before any data is read,
// so a checkpoint of another run never touches the buffers (and is an Error, exit 4, when the
// files themselves are intact).
Expected<DirectRead> read_piece_into(const VerifiedMetadata& metadata,
                                     const CheckpointIdentity& identity,
                                     const std::vector<TensorView>& state,
                                     const std::vector<void*>& destinations) {
  const std::vector<PieceRecord>& records = metadata.own;
  std::vector<std::unique_ptr<HashedReader>> readers;
  std::vector<std::vector<TensorPlace>> places(records.size());
  std::vector<std::string> headers(records.size());
  LoadedCheckpoint shapes = metadata.checkpoint;
  for (size_t k = 0; k < records.size(); ++k) {
    readers.push_back(std::make_unique<HashedReader>(records[k].file));
    if (std::optional<DirectRead> fault =
            read_header(*readers[k], records[k], places[k], headers[k])) {
      return std::move(*fault);
    }
    for (const TensorPlace& p : places[k]) shapes.state.push_back(p.tensor);
  }
  Status matches = check_checkpoint_matches(shapes, identity, state);
  if (!matches.ok()) {
    for (size_t k = 0; k < records.size(); ++k) {
      std::optional<Error> damage = damage_of_rest(*readers[k], records[k]);
      if (damage) return DirectRead{std::move(*damage), false};
    }
    return matches.error();  // intact: another run's checkpoint
  }
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < state.size(); ++i) index[state[i].name] = i;
  // The files' data, read in rounds of up to 4 MiB of each file straight into the step's buffers
  // (a piece never crosses a tensor's end), each round's pieces hashed together: SHA-256 of a
  // file is serial, but sixteen files advance at once in the lanes of one AVX-512 register
  // (Sha256Streams), as the writer hashed them. Each read asks the kernel for the file's next
  // piece at once, so that the disk reads it while this thread hashes.
  constexpr size_t kPieceBytes = size_t{4} << 20;
  struct Cursor {
    size_t place = 0;   // the tensor being read
    uint64_t done = 0;  // of its bytes
  };
  std::vector<Cursor> cursors(records.size());
  Sha256Streams streams(records.size());
  for (size_t k = 0; k < records.size(); ++k) streams.update_one(k, headers[k]);
  DirectRead out;
  std::vector<std::string_view> pieces(records.size());
  for (bool more = true; more;) {
    more = false;
    for (size_t k = 0; k < records.size(); ++k) {
      Cursor& c = cursors[k];
      pieces[k] = {};
      while (c.place < places[k].size() && c.done == places[k][c.place].bytes) {
        c.place++;
        c.done = 0;
      }
      if (c.place == places[k].size()) continue;
      const TensorPlace& p = places[k][c.place];
      const auto n = static_cast<size_t>(std::min<uint64_t>(kPieceBytes, p.bytes - c.done));
      char* into = static_cast<char*>(destinations[index.at(p.tensor.name)]) + c.done;
      out.wrote = true;
      if (!readers[k]->read_unhashed(into, n, kPieceBytes)) {
        out.damage = damaged(records[k].file,
                             fmt::format("the file ends or fails inside tensor {}: it is "
                                         "truncated or damaged",
                                         p.tensor.name));
        return out;
      }
      pieces[k] = std::string_view(into, n);
      c.done += n;
      more = true;
    }
    if (more) streams.update(pieces);
  }
  const std::vector<artifact::Sha256Digest> digests = streams.finish();
  for (size_t k = 0; k < records.size(); ++k) {
    std::string sha = artifact::to_hex(digests[k]);
    if (readers[k]->bytes_read() != records[k].bytes || sha != records[k].sha256) {
      out.damage = digest_differs(records[k], readers[k]->bytes_read(), sha);
      return out;
    }
  }
  return out;
}

// The step directories under `root`, the highest step first.
std::vector<std::pair<int64_t, fs::path>> step_directories(const std::string& root) {
  std::vector<std::pair<int64_t, fs::path>> candidates;
  std::error_code ec;
  fs::directory_iterator it(root, ec);
  if (ec) return candidates;
  for (const fs::directory_entry& entry : it) {
    std::optional<int64_t> step = step_of(entry.path().filename().string());
    if (step && entry.is_directory(ec)) candidates.push_back({*step, entry.path()});
  }
  std::sort(candidates.begin(), candidates.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  return candidates;
}

void warn_skipping(std::ostream* warnings, const fs::path& path, const Error& why) {
  if (warnings != nullptr) {
    *warnings << fmt::format("Warning: skipping checkpoint {}: {}\n", path.string(),
                             why.message());
  }
}

}  // namespace

Expected<LoadedCheckpoint> read_checkpoint(const std::string& directory, int64_t rank) {
  PRECAST_ASSIGN_OR_RETURN(VerifiedMetadata metadata, read_metadata(fs::path(directory), rank));
  LoadedCheckpoint out = std::move(metadata.checkpoint);
  for (const PieceRecord& own : metadata.own) {
    artifact::Sha256 hasher;
    PRECAST_ASSIGN_OR_RETURN(std::string state_bytes, read_whole_file(own.file.string(), &hasher));
    FileDigest digest;
    digest.bytes = static_cast<int64_t>(state_bytes.size());
    digest.sha256 = hasher.finish();
    PRECAST_RETURN_IF_ERROR(check_digest(own, digest));
    PRECAST_ASSIGN_OR_RETURN(std::vector<Tensor> tensors,
                             decode_safetensors(state_bytes, own.file.string()));
    for (Tensor& t : tensors) out.state.push_back(std::move(t));
    out.state_files.push_back(own.file.filename().string());
  }
  return out;
}

std::optional<LoadedCheckpoint> latest_checkpoint(const std::string& root, std::ostream* warnings,
                                                  int64_t rank) {
  for (const auto& [step, path] : step_directories(root)) {
    Expected<LoadedCheckpoint> loaded = read_checkpoint(path.string(), rank);
    if (loaded.ok()) return std::move(loaded).value();
    warn_skipping(warnings, path, loaded.error());
  }
  return std::nullopt;
}

Status check_checkpoint_matches(const LoadedCheckpoint& checkpoint,
                                const CheckpointIdentity& expected,
                                const std::vector<TensorView>& expected_state) {
  std::vector<std::string> differences;
  if (checkpoint.identity.config_hash != expected.config_hash) {
    differences.push_back(fmt::format("config_hash {} (this artifact: {})",
                                      checkpoint.identity.config_hash, expected.config_hash));
  }
  if (checkpoint.identity.world_size != expected.world_size) {
    differences.push_back(fmt::format("world_size {} (this run: {})",
                                      checkpoint.identity.world_size, expected.world_size));
  }
  std::map<std::string, const Tensor*> saved;
  for (const Tensor& t : checkpoint.state) saved[t.name] = &t;
  for (const TensorView& want : expected_state) {
    auto it = saved.find(want.name);
    if (it == saved.end()) {
      differences.push_back(fmt::format("tensor {} is missing", want.name));
      continue;
    }
    const Tensor& got = *it->second;
    if (got.dtype != want.dtype || got.shape != want.shape) {
      differences.push_back(fmt::format("tensor {} is {} {} (this artifact: {} {})", want.name,
                                        got.dtype, shape_text(got.shape), want.dtype,
                                        shape_text(want.shape)));
    }
    saved.erase(it);
  }
  for (const auto& [name, t] : saved) {
    differences.push_back(fmt::format("tensor {} is not part of this artifact's state", name));
  }
  if (differences.empty()) return Status::success();
  return Error(ExitCode::kIncompatible,
               fmt::format("checkpoint {} does not belong to this run: {}; resume it with the "
                           "artifact it was saved with, or point checkpoint_dir (run_name, "
                           "base_output_directory) elsewhere to start afresh",
                           checkpoint.directory, fmt::join(differences, "; ")));
}

Expected<std::string> inspect_checkpoint(const std::string& directory) {
  const fs::path dir(directory);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return usage_error(
        fmt::format("{}: not a directory; give a checkpoint step directory "
                    "(<checkpoint_dir>/<step>) or a checkpoint_dir",
                    directory));
  }
  bool is_step = fs::exists(dir / kMetadataFile) || fs::exists(dir / kStateFile) ||
                 fs::exists(dir / state_file_name(2, 0)) || fs::exists(dir / kCommitMarker);
  if (!is_step) {
    std::vector<std::pair<int64_t, std::string>> lines;
    for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
      std::optional<int64_t> step = step_of(entry.path().filename().string());
      if (!step) continue;
      Expected<LoadedCheckpoint> c = read_checkpoint(entry.path().string());
      lines.push_back(
          {*step,
           c.ok() ? fmt::format("{}: verified, step {}", entry.path().string(), c->step)
                  : fmt::format("{}: damaged: {}", entry.path().string(), c.error().message())});
    }
    if (lines.empty()) {
      return usage_error(fmt::format("{}: no checkpoint step directories in it", directory));
    }
    std::sort(lines.begin(), lines.end());
    std::string out;
    for (const auto& [step, line] : lines) out += line + "\n";
    return out;
  }
  PRECAST_ASSIGN_OR_RETURN(LoadedCheckpoint c, read_checkpoint(directory));
  int64_t total = 0;
  for (const Tensor& t : c.state) total += static_cast<int64_t>(t.bytes.size());
  std::string out = fmt::format(
      "Checkpoint {}\n  step {} (a resume starts at step {}), world size {}, config hash {}\n"
      "  verified: {} present, {} against its SHA-256, {} against the SHA-256 in {}\n"
      "  {}{} tensors, {} bytes\n",
      directory, c.step, c.step + 1, c.identity.world_size, c.identity.config_hash, kCommitMarker,
      kMetadataFile,
      c.identity.world_size > 1
          ? fmt::format("every state.rank-<r>.safetensors ({})", c.identity.world_size)
      : c.state_files.size() > 1
          ? fmt::format("{} shards ({} to {})", c.state_files.size(), c.state_files.front(),
                        c.state_files.back())
          : std::string(kStateFile),
      kMetadataFile, c.identity.world_size > 1 ? "rank 0's piece: " : "", c.state.size(), total);
  size_t width = 4;
  for (const Tensor& t : c.state) width = std::max(width, t.name.size());
  out += fmt::format("  {:<{}}  {:<5}  {:<16}  {}\n", "name", width, "dtype", "shape", "bytes");
  for (const Tensor& t : c.state) {
    out += fmt::format("  {:<{}}  {:<5}  {:<16}  {}\n", t.name, width, safetensors_dtype(t.dtype),
                       shape_text(t.shape), t.bytes.size());
  }
  return out;
}

Expected<std::optional<int64_t>> restore_latest_checkpoint(const std::string& root,
                                                           const CheckpointIdentity& identity,
                                                           const std::vector<TensorView>& state,
                                                           const std::vector<void*>& destinations,
                                                           std::ostream* log, int64_t rank,
                                                           JsonValue* data) {
  std::optional<fs::path> overwritten;  // a damaged checkpoint whose bytes reached the buffers
  for (const auto& [step, path] : step_directories(root)) {
    Expected<VerifiedMetadata> metadata = read_metadata(path, rank);
    if (!metadata.ok()) {
      warn_skipping(log, path, metadata.error());
      continue;
    }
    PRECAST_ASSIGN_OR_RETURN(DirectRead read,
                             read_piece_into(*metadata, identity, state, destinations));
    if (read.damage) {
      warn_skipping(log, path, *read.damage);
      if (read.wrote && !overwritten) overwritten = path;
      continue;
    }
    if (data != nullptr) *data = metadata->checkpoint.data;
    return std::optional<int64_t>(metadata->checkpoint.step);
  }
  if (overwritten) {
    // Its data was read into the state before its hash told it was damaged, and no older
    // checkpoint replaced it: the initial state is gone, so the run cannot start afresh either.
    return Error(ExitCode::kIncompatible,
                 fmt::format("no checkpoint under {} verifies, and the damaged {} was read into "
                             "the state before its SHA-256 showed the damage: move the damaged "
                             "step directories out of {} to start afresh, or put back an intact "
                             "copy",
                             root, overwritten->string(), root));
  }
  return std::optional<int64_t>();
}

}  // namespace precast::checkpoint
