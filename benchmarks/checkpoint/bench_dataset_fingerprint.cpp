// What the dataset's content fingerprint (runtime/data/Fingerprint.h) adds to a run's start-up:
// writes a uint16 token file of M million tokens (default 250: 500 MB) in documents of 1,000
// tokens, then, with the file in the page cache, times load_corpus (map, check every id against
// vocab_size, fingerprint, split; the training documents served from the mapping) and, over the
// same mapped bytes, the CRC-32C by the CPU's instruction and by the table, and SHA-256 (the
// alternative weighed in runtime/data/README.md). Each: wall seconds, this thread's CPU seconds
// and GB/s; the fastest of REPS runs (default 3), as a shared machine only ever slows a run down.
// Usage: bench_dataset_fingerprint [MILLION_TOKENS] [DIRECTORY] [REPS]
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "benchmarks/checkpoint/PhaseTiming.h"
#include "compiler/artifact/Sha256.h"
#include "runtime/data/Corpus.h"
#include "runtime/data/Fingerprint.h"
#include "runtime/data/TokenFile.h"

namespace {

using namespace precast;
namespace fs = std::filesystem;

using bench::fastest;
using bench::Timing;

void fail(const std::string& what) {
  fmt::print(stderr, "bench_dataset_fingerprint: {}\n", what);
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t millions = argc > 1 ? std::atoll(argv[1]) : 250;
  const fs::path dir = fs::path(argc > 2 ? argv[2] : "/tmp") /
                       fmt::format("precast_bench_dataset_{}", ::getpid());
  const int reps = argc > 3 ? std::atoi(argv[3]) : 3;
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path file = dir / "big.tokens";
  {
    data::TokenDocuments docs;
    const uint64_t count = static_cast<uint64_t>(millions) * 1'000'000;
    docs.tokens.resize(count);
    uint32_t state = 1;
    for (uint64_t i = 0; i < count; ++i) {
      state = state * 1103515245u + 12345u;
      docs.tokens[i] = (state >> 16) % 32000;
    }
    docs.starts.clear();
    for (uint64_t s = 0; s < count; s += 1000) docs.starts.push_back(s);
    docs.starts.push_back(count);
    Status written = data::write_token_file(file.string(), docs);
    if (!written.ok()) fail(written.error().message());
  }
  const auto bytes = static_cast<size_t>(fs::file_size(file));
  int fd = ::open(file.c_str(), O_RDONLY);
  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) fail("cannot map " + file.string());

  data::DataSettings settings;
  settings.type = "tokens";
  settings.path = file.string();
  std::vector<std::pair<std::string, Timing>> rows;
  uint32_t sink = 0;
  rows.push_back({"load_corpus (map, check ids, fingerprint, split)", fastest(reps, [&] {
                    Expected<data::Corpus> corpus = data::load_corpus(settings, 32000);
                    if (!corpus.ok()) fail(corpus.error().message());
                    sink ^= corpus->train.sources[0].crc32c;
                  })});
  rows.push_back({"CRC-32C, CPU instruction (the fingerprint)", fastest(reps, [&] {
                    sink ^= data::content_crc32c(map, bytes);
                  })});
  rows.push_back({"CRC-32C, table", fastest(reps, [&] {
                    sink ^= data::content_crc32c_portable(map, bytes);
                  })});
  rows.push_back({"SHA-256 (libcrypto)", fastest(reps, [&] {
                    artifact::Sha256 h;
                    h.update(map, bytes);
                    sink ^= h.finish()[0];
                  })});
  ::munmap(map, bytes);
  fs::remove_all(dir);

  fmt::print("Token file: {} million uint16 tokens, {:.0f} MB, in the page cache; fastest of {} "
             "runs (checksum {:x}).\n\n",
             millions, static_cast<double>(bytes) / 1e6, reps, sink & 0xf);
  fmt::print("| phase | wall s | CPU s (this thread) | GB/s |\n|---|---|---|---|\n");
  for (const auto& [name, t] : rows) {
    fmt::print("| {} | {:.3f} | {:.3f} | {:.2f} |\n", name, t.wall, t.cpu,
               static_cast<double>(bytes) / 1e9 / t.wall);
  }
  return 0;
}
