// Role: a run's checkpoints on disk, `<checkpoint_dir>/<step>/`: the training state (parameters,
// optimizer state, count) as state.safetensors (a large state: as shards,
// state-<i>-of-<n>.safetensors, below; several ranks: each rank's piece, in its
// per-device shapes, as state.rank-<r>.safetensors), metadata.json (step, the artifact's IR hash,
// world size, data position, the size and SHA-256 of every file, each piece's rank and mesh
// coordinates) and commit_success.txt, which holds metadata.json's SHA-256 and is written last. A
// save writes `<step>.tmp/`, fsyncs every file and the directory, writes the marker, renames the
// directory into place and fsyncs the parent, so a crash at any moment leaves either no `<step>/`
// or a complete one.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "ir/support/Error.h"
#include "runtime/checkpoint/DurableFile.h"
#include "runtime/checkpoint/JsonValue.h"
#include "runtime/checkpoint/Safetensors.h"

namespace precast::checkpoint {

inline constexpr const char* kStateFile = "state.safetensors";
inline constexpr const char* kMetadataFile = "metadata.json";
inline constexpr const char* kCommitMarker = "commit_success.txt";

// What a checkpoint must agree with to be resumed by a run.
struct CheckpointIdentity {
  std::string config_hash;  // the artifact's IR hash: same shapes, dtypes, mesh and program
  int64_t world_size = 1;
};

struct LoadedCheckpoint {
  std::string directory;
  int64_t step = 0;  // the last step the saved state includes; a resume starts at step + 1
  CheckpointIdentity identity;
  std::vector<Tensor> state;  // file by file, each file's tensors in data-offset order
  std::vector<std::string> state_files;  // the files read (read_checkpoint), in order
  JsonValue data;  // metadata.json's "data" object: where the data source resumes
};

// Saves `state` after step `step` under `root` (created when missing), then, if max_to_keep > 0,
// deletes the oldest committed checkpoints beyond max_to_keep. `data_position` is the data
// source's position as a JSON object (metadata.json's "data"); empty: synthetic data's. I/O
// errors are exit 1 naming the file. One process (world size 1).
// The state file's data starts at a multiple of 4096 bytes (Safetensors.h); where the state's
// memory is one 4096-aligned block (CheckpointWriter's snapshot), its whole blocks are written
// with O_DIRECT (DurableFile.h), the rest buffered. `report`, when given, receives how many bytes
// of the state file went each way.
Status save_checkpoint(const std::string& root, int64_t step, const CheckpointIdentity& identity,
                       const std::vector<TensorView>& state, int64_t max_to_keep,
                       const std::string& data_position = "", WriteReport* report = nullptr);

// "state.safetensors" for a world of one, "state.rank-<r>.safetensors" for several.
std::string state_file_name(int64_t world_size, int64_t rank);

// A world of one whose state holds at least kShardedStateMinBytes (PRECAST_CHECKPOINT_SHARD_BYTES
// overrides it, for tests and benchmarks) is saved as up to kMaxStateShards shards,
// `state-00001-of-00016.safetensors` and so on, each a complete safetensors file of whole tensors
// with its own size and SHA-256 in metadata.json (whose "state_shards" gives their count; format
// version 2). A shard's SHA-256 is an ordinary one (`sha256sum`'s), but the shards are hashed
// together, sixteen streams in the lanes of AVX-512 registers where the CPU has them
// (Sha256Streams.h): about a third of the CPU seconds of one stream over the whole state. A
// smaller state keeps the single state.safetensors (version 1); both layouts are read.
inline constexpr int64_t kMaxStateShards = 16;
inline constexpr int64_t kShardedStateMinBytes = int64_t{256} << 20;
// "state-00003-of-00016.safetensors" for index 2 of 16.
std::string state_shard_name(int64_t index, int64_t count);
// The state's shards, each a list of indices into `state` in ascending order; one shard holding
// every tensor for a small state. The tensors are dealt largest first, each to the shard with the
// fewest bytes so far (ties: fewer tensors, then the lower index), so the shards' sizes are as even
// as whole tensors allow. Depends only on the tensors' byte sizes and order: the same state gives
// the same files on every host.
std::vector<std::vector<size_t>> plan_state_shards(const std::vector<TensorView>& state);
// Where each tensor of `state` sits in an asynchronous writer's snapshot: shard by shard, each
// shard's tensors one after another from a 4096-aligned offset, so that each shard file's data is
// one aligned range for O_DIRECT. `total` receives the bytes the snapshot needs.
std::vector<size_t> snapshot_offsets(const std::vector<TensorView>& state, size_t* total);

// Several ranks save in two phases: every rank writes its piece into `<root>/<step>.tmp/`
// (save_checkpoint_piece, fsynced), then, after a barrier, rank 0 alone hashes the pieces, writes
// metadata.json (each piece with its rank and `coordinates[rank]`, its place in the mesh) and the
// marker, renames the directory into place and deletes beyond max_to_keep
// (commit_checkpoint_pieces). A crash before the commit leaves no `<step>/`.
Status save_checkpoint_piece(const std::string& root, int64_t step, int64_t rank,
                             const std::vector<TensorView>& state);
Status commit_checkpoint_pieces(const std::string& root, int64_t step,
                                const CheckpointIdentity& identity,
                                const std::vector<std::vector<int64_t>>& coordinates,
                                int64_t max_to_keep, const std::string& data_position = "");

// Reads and verifies one checkpoint directory: the marker, metadata.json against the marker's
// hash, every listed file against its size and hash, the safetensors data. Errors (exit 4) name
// the file and what is wrong.
// With several ranks every piece is verified and `rank`'s is decoded into `state`.
Expected<LoadedCheckpoint> read_checkpoint(const std::string& directory, int64_t rank = 0);

// The committed checkpoint with the highest step under `root` that reads and verifies; each
// directory skipped on the way (uncommitted, damaged) gets one warning line on `warnings` naming
// it and the file. nullopt when there is none (or no root).
std::optional<LoadedCheckpoint> latest_checkpoint(const std::string& root, std::ostream* warnings,
                                                  int64_t rank = 0);

// The committed step directories under `root`, ascending (named by their step, holding the
// commit marker); unverified.
std::vector<int64_t> committed_steps(const std::string& root);

// A checkpoint that does not belong to this run: another IR hash or world size, a tensor missing,
// extra, or of another dtype or shape. Error (exit 4) naming each difference and the directory.
Status check_checkpoint_matches(const LoadedCheckpoint& checkpoint,
                                const CheckpointIdentity& expected,
                                const std::vector<TensorView>& expected_state);

// `precast checkpoint inspect DIR`: for a step directory, its step, identity, files and every
// tensor (name, dtype, shape, bytes), after verifying it (an Error naming the file otherwise);
// for a checkpoint_dir, one line per step directory: verified with its step, or why not.
Expected<std::string> inspect_checkpoint(const std::string& directory);

// Resumes a run: the latest committed checkpoint under `root` (skipping damaged ones with a
// warning on `log`), checked against `identity` and `state`, read into `destinations` (one
// writable buffer per entry of `state`, of its size). Returns the step it holds, nullopt when
// there is none. A checkpoint of another run is an Error (exit 4). `data`, when given, receives
// the checkpoint's data position (metadata.json's "data").
// The state file is read once, straight into `destinations`, and hashed as it is read (its
// header is checked against `state` first): the checks are read_checkpoint's, but the damage a
// hash finds is found after the bytes are in place. Then an older checkpoint is tried as usual;
// when none verifies, the state holds a damaged checkpoint's bytes and cannot start afresh:
// an Error (exit 4) naming the damaged directory.
Expected<std::optional<int64_t>> restore_latest_checkpoint(const std::string& root,
                                                           const CheckpointIdentity& identity,
                                                           const std::vector<TensorView>& state,
                                                           const std::vector<void*>& destinations,
                                                           std::ostream* log, int64_t rank = 0,
                                                           JsonValue* data = nullptr);

}  // namespace precast::checkpoint
