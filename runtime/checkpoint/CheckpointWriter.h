// Role: when a run's checkpoints are written (async_checkpointing). Synchronous: the save happens
// inside save(). Asynchronous (MaxText's default): save() copies the state into the writer's own
// snapshot buffer — after that the training loop may overwrite its buffers — and a background
// thread writes the snapshot with save_checkpoint (same files, same commit protocol); the
// snapshot is one 4096-aligned buffer holding each state file's tensors (state.safetensors, or a
// large state's shards) from an aligned offset, so each file's data goes from it straight to the
// disk with O_DIRECT (no copy into the page cache). At most one
// save is in flight: the next save() (or wait()) first waits for the previous one, and returns its
// error if it failed. A process killed mid-write leaves only `<step>.tmp/`, which resume ignores.
// With copy_on_writer(true) (the training loop's default) the copy too moves to the background
// thread: save() returns at once, the writer copies while the next step's forward and backward
// passes only read the state, and the loop calls release_state() before the first kernel that
// writes it (StepExecutable::set_before_state_write), waiting only if the copy is unfinished.
#pragma once

#include <cstddef>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "ir/support/Error.h"
#include "runtime/checkpoint/Checkpoint.h"

namespace precast::checkpoint {

// One finished save, for the log: `saved checkpoint at step N in S s`.
struct CompletedSave {
  int64_t step = 0;
  double seconds = 0;  // writing, hashing, fsyncs and the rename (the copy not included)
  double copy_seconds = 0;  // the snapshot copy (on the writer with copy_on_writer, else the caller's)
  bool copied_on_writer = false;
  double state_wait_seconds = 0;  // how long release_state() waited for this save's copy
  int64_t bytes = 0;   // the state's tensors
  int64_t direct_bytes = 0;  // of the state file, written with O_DIRECT (the rest buffered)
};

// Copies each tensor of `state` to its offset in `snapshot` (snapshot_offsets, Checkpoint.h), the
// bytes split into `threads` equal ranges copied at once (the calling thread takes the last;
// 1: the calling thread alone). With the copy in save() (PRECAST_CHECKPOINT_COPY=caller) the
// step's other cores may be idle between two steps, so two threads could halve the loop's wait
// where the memory bandwidth allows it; one is used until a quiet host shows the gain
// (benchmarks/README.md). The writer's own copy (copy_on_writer) runs on the writer alone.
void copy_into_snapshot(const std::vector<TensorView>& state, const std::vector<size_t>& offsets,
                        char* snapshot, int threads);

class CheckpointWriter {
 public:
  explicit CheckpointWriter(bool asynchronous) : asynchronous_(asynchronous) {}
  // Waits for a save in flight (a destructor cannot report its error: call wait() first).
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Saves `state` as the checkpoint of `step` under `root` (Checkpoint.h's save_checkpoint).
  // Returns once the state's bytes are no longer needed: after the copy (asynchronous) or after
  // the commit (synchronous). Errors: the previous save's, or this one's (exit 1 naming the file).
  // `data_position`: metadata.json's "data" (save_checkpoint).
  Status save(const std::string& root, int64_t step, const CheckpointIdentity& identity,
              const std::vector<TensorView>& state, int64_t max_to_keep,
              const std::string& data_position = "");
  // Waits for the save in flight, if any; its error.
  Status wait();
  // Asynchronous writer: `on` moves each save's snapshot copy from save() to the background
  // thread, so that save() returns before the copy and the caller must call release_state()
  // before it next writes the state's buffers. The benchmark knob PRECAST_CHECKPOINT_COPY=caller
  // keeps the copy in save(). Returns whether the copy is now the writer's.
  bool copy_on_writer(bool on);
  // Waits until the save in flight (if any) no longer reads the caller's state buffers: its copy
  // is done. Returns the seconds waited (0 when the copy had finished, or there is no save).
  double release_state();
  // Asynchronous writer: allocates the snapshot buffer for `state` and touches every page now,
  // at start-up and outside the steps' timing, so that the first save's copy pays no allocation
  // or page faults (1.0 CPU s against 0.18 for a reused buffer of 1.61 GB, benchmarks/README.md).
  // Returns the seconds it took (0 for a synchronous writer, which has no snapshot).
  double prepare(const std::vector<TensorView>& state);
  // The end of a run: waits for the save in flight, if any, and logs on `log` how long the run
  // waited for it and for which step (its own line: the wait belongs to no step, and MaxText too
  // waits for its last save before it exits); then the save's error, if it failed.
  Status finish(std::ostream* log);
  // Saves finished since the last call, oldest first.
  std::vector<CompletedSave> take_completed();
  bool asynchronous() const { return asynchronous_; }

 private:
  bool asynchronous_;
  std::thread worker_;
  // Makes the snapshot hold at least `bytes`; a new buffer is 4096-aligned (the state file's
  // data then goes to the disk with O_DIRECT, DurableFile.h) and, with `touch`, every page is
  // written once so that the kernel maps them all now.
  void reserve_snapshot(size_t bytes, bool touch);

  struct FreeSnapshot {
    void operator()(char* p) const;
  };
  std::unique_ptr<char, FreeSnapshot> snapshot_;  // the state copied for the save in flight
  size_t snapshot_capacity_ = 0;
  int64_t in_flight_step_ = -1;  // the step of the save in flight; -1: none
  std::mutex priority_mutex_;   // guards waiting_ and writer_idle_
  bool waiting_ = false;        // a wait() is joining the writer
  bool writer_idle_ = false;    // the writer runs under SCHED_IDLE (a benchmark knob)
  bool copy_on_writer_ = false;
  std::mutex state_mutex_;      // guards state_in_use_
  std::condition_variable state_released_;
  bool state_in_use_ = false;   // the writer still copies from the caller's state buffers
  std::mutex mutex_;            // guards result_ and completed_
  std::optional<Error> result_;
  std::vector<CompletedSave> completed_;
  std::vector<std::pair<int64_t, double>> state_waits_;  // release_state()'s waits, by step
};

}  // namespace precast::checkpoint
