// Where a checkpoint save's and restore's time goes, phase by phase, for a state of N MB (default
// 1610, the 110m config's parameters and Adam moments): the snapshot copy an asynchronous save
// makes on the training thread, SHA-256 alone, the write into the page cache, the fsync, an
// O_DIRECT write from an aligned buffer, the whole save_checkpoint (hashed while written,
// fsynced, committed) from unaligned memory (buffered) and from an aligned snapshot (O_DIRECT, as
// CheckpointWriter's), read_checkpoint (read,
// hashed while read, decoded) from the page cache and again after the file's pages are dropped,
// and a resume as it was (read_checkpoint, then a copy into the step's buffers) and as it is
// (restore_latest_checkpoint: read once, straight into the buffers, hashed as read).
// Each phase: wall seconds, this thread's CPU seconds (getrusage RUSAGE_THREAD: what the phase
// takes from the step's threads on a busy host; the kernel's writeback threads are not in it)
// and MB/s over the wall time. The fastest of REPS runs (default 2) is printed, as a shared
// machine only ever slows a phase down.
// Usage: bench_checkpoint_phases [MB] [DIRECTORY] [REPS] [hashes]  (hashes: only the hashing rows,
// with MB per CPU second)
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "benchmarks/checkpoint/PhaseTiming.h"
#include "compiler/artifact/Sha256.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/CheckpointWriter.h"
#include "runtime/checkpoint/DurableFile.h"
#include "runtime/checkpoint/Sha256Streams.h"

namespace {

using namespace precast;
namespace fs = std::filesystem;

using bench::fastest;
using bench::Timing;

void fail(const std::string& what) {
  fmt::print(stderr, "bench_checkpoint_phases: {}\n", what);
  std::exit(1);
}

void drop_cached_pages(const fs::path& file) {
  int fd = ::open(file.c_str(), O_RDONLY);
  if (fd < 0) fail("cannot open " + file.string());
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// Every file of a checkpoint step directory (its state file or shards).
void drop_cached_pages_of(const fs::path& step_directory) {
  for (const fs::directory_entry& e : fs::directory_iterator(step_directory)) {
    if (e.is_regular_file()) drop_cached_pages(e.path());
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t megabytes = argc > 1 ? std::atoll(argv[1]) : 1610;
  const fs::path dir = fs::path(argc > 2 ? argv[2] : "/tmp") /
                       fmt::format("precast_bench_checkpoint_{}", ::getpid());
  const int reps = argc > 3 ? std::atoi(argv[3]) : 2;
  const size_t bytes = static_cast<size_t>(megabytes) * 1'000'000;
  fs::remove_all(dir);
  fs::create_directories(dir);

  // The 110m config's 27 large tensors in their proportions (per set of parameters, mu and nu:
  // the embedding and the output head, 98 MB each at 1610 MB; the stacked query, key, value and
  // out kernels, 28 MB each; the stacked MLP kernels, 75 MB each), so that the shard plan and the
  // hash lanes see the real state's balance.
  const int64_t parts[] = {98, 98, 28, 28, 28, 28, 75, 75, 75};
  int64_t parts_total = 0;
  for (int64_t p : parts) parts_total += 3 * p;
  std::vector<float> state(bytes / 4);
  for (size_t i = 0; i < state.size(); ++i) state[i] = static_cast<float>(i % 1013) * 0.25f;
  std::vector<checkpoint::TensorView> views;
  std::vector<size_t> element_offsets;  // of each tensor in `state`
  size_t used = 0;
  for (int set = 0; set < 3; ++set) {
    for (size_t k = 0; k < std::size(parts); ++k) {
      const auto elements = static_cast<int64_t>(state.size()) * parts[k] / parts_total;
      views.push_back(
          {fmt::format("tensor_{}_{}", set, k), "f32", {elements}, state.data() + used});
      element_offsets.push_back(used);
      used += static_cast<size_t>(elements);
    }
  }
  state.resize(used);
  std::vector<size_t> byte_offsets;
  for (size_t e : element_offsets) byte_offsets.push_back(e * 4);
  const double mb = static_cast<double>(used * 4) / 1e6;
  const checkpoint::CheckpointIdentity identity{"bench", 1};
  auto nothing = [] {};

  std::vector<float> snapshot;
  std::vector<std::pair<std::string, Timing>> rows;
  rows.push_back({"snapshot copy, first (allocates)",
                  fastest(1, nothing, [&] { snapshot.assign(state.begin(), state.end()); })});
  rows.push_back({"snapshot copy, reused buffer", fastest(reps, nothing, [&] {
                    std::memcpy(snapshot.data(), state.data(), state.size() * 4);
                  })});
  // As CheckpointWriter::save copies (copy_into_snapshot), on one thread and on two; the CPU
  // column is the calling thread's alone.
  for (int threads : {1, 2}) {
    rows.push_back({fmt::format("snapshot copy, reused buffer, copy_into_snapshot on {} thread{}",
                                threads, threads == 1 ? "" : "s"),
                    fastest(reps, nothing, [&] {
                      checkpoint::copy_into_snapshot(
                          views, byte_offsets, reinterpret_cast<char*>(snapshot.data()), threads);
                    })});
  }
  rows.push_back({"SHA-256 alone (libcrypto)", fastest(reps, nothing, [&] {
                    artifact::Sha256 h;
                    h.update(state.data(), state.size() * 4);
                    (void)h.finish();
                  })});
  // SHA-256 of several files at once (Sha256Streams.h): the state hashed as one stream (the SHA
  // extensions: one file) and as sixteen streams of a sixteenth each (sixteen files, AVX-512),
  // fed 4 MiB a stream at a time as a writer of sixteen files would.
  auto hash_streams = [&](size_t count, checkpoint::Sha256Kernel kernel) {
    const size_t total = state.size() * 4, part = total / count, piece = size_t{4} << 20;
    const char* base = reinterpret_cast<const char*>(state.data());
    checkpoint::Sha256Streams streams(count, kernel);
    for (size_t at = 0; at < part; at += piece) {
      std::vector<std::string_view> pieces;
      for (size_t i = 0; i < count; ++i) {
        pieces.emplace_back(base + i * part + at, std::min(piece, part - at));
      }
      streams.update(pieces);
    }
    (void)streams.finish();
  };
  for (checkpoint::Sha256Kernel kernel :
       {checkpoint::Sha256Kernel::kPortable, checkpoint::Sha256Kernel::kShaNi,
        checkpoint::Sha256Kernel::kAvx512x16}) {
    if (!checkpoint::sha256_kernel_supported(kernel)) continue;
    const bool wide = kernel == checkpoint::Sha256Kernel::kAvx512x16;
    const size_t count = wide ? 16 : 1;
    rows.push_back({fmt::format("SHA-256, {} ({} kernel, Sha256Streams)",
                                wide ? "16 streams of a sixteenth each" : "one stream",
                                checkpoint::sha256_kernel_name(kernel)),
                    fastest(reps, nothing, [&] { hash_streams(count, kernel); })});
  }
  if (argc > 4 && std::string_view(argv[4]) == "hashes") {
    fmt::print("| phase ({:.0f} MB) | wall s | CPU s (this thread) | MB/s | MB per CPU s |\n"
               "|---|---|---|---|---|\n", mb);
    for (const auto& [name, t] : rows) {
      fmt::print("| {} | {:.3f} | {:.3f} | {:.0f} | {:.0f} |\n", name, t.wall, t.cpu,
                 mb / t.wall, mb / t.cpu);
    }
    fs::remove_all(dir);
    return 0;
  }
  const fs::path raw = dir / "raw.bin";
  int fd = -1;
  rows.push_back({"write(2) into the page cache, no fsync",
                  fastest(
                      reps,
                      [&] {
                        if (fd >= 0) ::close(fd);
                        fs::remove(raw);
                      },
                      [&] {
                        fd = ::open(raw.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
                        const char* p = reinterpret_cast<const char*>(state.data());
                        size_t left = state.size() * 4;
                        while (left > 0) {
                          ssize_t n = ::write(fd, p, std::min<size_t>(left, size_t{4} << 20));
                          if (n <= 0) fail("write failed");
                          p += n;
                          left -= static_cast<size_t>(n);
                        }
                      })});
  rows.push_back({"fsync of that file", fastest(1, nothing, [&] {
                    ::fsync(fd);
                    ::close(fd);
                  })});
  fs::remove(raw);
  // The same bytes from a 4096-aligned buffer (as CheckpointWriter's snapshot): O_DIRECT, no copy
  // into the page cache; the write and the fsync together, as the O_DIRECT write waits for the
  // disk itself.
  std::unique_ptr<char, decltype(&std::free)> aligned(
      static_cast<char*>(std::aligned_alloc(checkpoint::kDirectIoAlignment,
                                            (state.size() * 4 / checkpoint::kDirectIoAlignment + 1) *
                                                checkpoint::kDirectIoAlignment)),
      &std::free);
  if (aligned == nullptr) fail("cannot allocate the aligned buffer");
  std::memcpy(aligned.get(), state.data(), state.size() * 4);
  checkpoint::WriteReport report;
  rows.push_back({"O_DIRECT write from an aligned buffer + fsync", fastest(reps, nothing, [&] {
                    Status s = checkpoint::write_file_durably(
                        raw.string(), {{aligned.get(), state.size() * 4}}, nullptr,
                        checkpoint::DirectIo::kWhereAligned, &report);
                    if (!s.ok()) fail(s.error().message());
                  })});
  if (report.direct_refused) fail("the file system of " + dir.string() + " refuses O_DIRECT");
  fs::remove(raw);
  int64_t step = 0;
  // The asynchronous writer's snapshot layout: each state file's tensors from an aligned offset.
  size_t snapshot_bytes = 0;
  const std::vector<size_t> snapshot_layout = checkpoint::snapshot_offsets(views, &snapshot_bytes);
  std::unique_ptr<char, decltype(&std::free)> laid_out(
      static_cast<char*>(std::aligned_alloc(
          checkpoint::kDirectIoAlignment,
          (snapshot_bytes / checkpoint::kDirectIoAlignment + 1) * checkpoint::kDirectIoAlignment)),
      &std::free);
  if (laid_out == nullptr) fail("cannot allocate the snapshot buffer");
  checkpoint::copy_into_snapshot(views, snapshot_layout, laid_out.get(), 1);
  aligned.reset();
  std::vector<checkpoint::TensorView> aligned_views = views;
  for (size_t k = 0; k < views.size(); ++k) {
    aligned_views[k].data = laid_out.get() + snapshot_layout[k];
  }
  fmt::print("State files: {} ({} tensors)\n", checkpoint::plan_state_shards(views).size(),
             views.size());
  rows.push_back({"save_checkpoint from an aligned snapshot (O_DIRECT, hash while writing, "
                  "fsyncs, commit)",
                  fastest(reps, nothing, [&] {
                    Status s = checkpoint::save_checkpoint(dir.string(), step++, identity,
                                                           aligned_views, 1, "", &report);
                    if (!s.ok()) fail(s.error().message());
                    if (report.direct_bytes == 0) fail("no byte went with O_DIRECT");
                  })});
  // Forced buffered (the state's memory is unaligned anyway), last so that the reads below find
  // the file in the page cache.
  ::setenv("PRECAST_CHECKPOINT_DIRECT_IO", "0", 1);
  rows.push_back(
      {"save_checkpoint, buffered (hash while writing, fsyncs, commit)", fastest(reps, nothing, [&] {
         Status s = checkpoint::save_checkpoint(dir.string(), step++, identity, views, 1);
         if (!s.ok()) fail(s.error().message());
       })});
  ::unsetenv("PRECAST_CHECKPOINT_DIRECT_IO");
  laid_out.reset();
  const fs::path last = dir / std::to_string(step - 1);
  rows.push_back({"read_checkpoint, page cache (read+hash, decode)", fastest(reps, nothing, [&] {
                    if (!checkpoint::read_checkpoint(last.string()).ok()) fail("read failed");
                  })});
  rows.push_back({"read_checkpoint, pages dropped (from the disk)",
                  fastest(
                      reps, [&] { drop_cached_pages_of(last); },
                      [&] {
                        if (!checkpoint::read_checkpoint(last.string()).ok()) fail("read failed");
                      })});
  // A resume: as restore_latest_checkpoint did before issue 17's last change (read_checkpoint,
  // whose decode copies each tensor out of the file's bytes, then a copy into the step's
  // buffers), and as it does now (the file read once, straight into the buffers, hashed as read).
  snapshot = std::vector<float>();
  std::vector<float> restored(state.size());
  std::vector<void*> destinations;
  for (size_t e : element_offsets) destinations.push_back(restored.data() + e);
  rows.push_back({"resume before: read_checkpoint, then copied into the buffers, page cache",
                  fastest(reps, nothing, [&] {
                    Expected<checkpoint::LoadedCheckpoint> c = checkpoint::read_checkpoint(last.string());
                    if (!c.ok()) fail("read failed");
                    for (const checkpoint::Tensor& t : c->state) {
                      size_t k = 0;
                      while (views[k].name != t.name) ++k;
                      std::memcpy(destinations[k], t.bytes.data(), t.bytes.size());
                    }
                  })});
  auto restore = [&] {
    Expected<std::optional<int64_t>> r = checkpoint::restore_latest_checkpoint(
        dir.string(), identity, views, destinations, nullptr);
    if (!r.ok() || !r->has_value()) fail("restore failed");
  };
  rows.push_back({"restore_latest_checkpoint (straight into the buffers), page cache",
                  fastest(reps, nothing, restore)});
  rows.push_back({"restore_latest_checkpoint, pages dropped (from the disk)",
                  fastest(reps, [&] { drop_cached_pages_of(last); }, restore)});
  if (std::memcmp(restored.data(), state.data(), used * 4) != 0) {
    fail("restored differs");
  }
  fs::remove_all(dir);

  fmt::print(
      "State: {:.0f} MB in {} f32 tensors; fastest of {} runs (one for the first copy and the "
      "fsync).\n\n",
      mb, views.size(), reps);
  fmt::print("| phase | wall s | CPU s (this thread) | MB/s |\n|---|---|---|---|\n");
  for (const auto& [name, t] : rows) {
    fmt::print("| {} | {:.3f} | {:.3f} | {:.0f} |\n", name, t.wall, t.cpu, mb / t.wall);
  }
  return 0;
}
