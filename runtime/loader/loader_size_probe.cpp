// A minimal program that links only precast_runtime_loader: loads an object file, binds one
// callback, calls `int64_t SYMBOL(int64_t ARG)` and prints the result and the load+link time.
// Its stripped size and start-up time stand in for what the loader adds to precast-run.
//
//   precast_loader_probe OBJECT SYMBOL [ARG]
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <vector>

#include "runtime/loader/ObjectLoader.h"

namespace {

int64_t probe_callback_total = 0;

extern "C" void precast_probe_callback(int64_t value) {
  probe_callback_total += value;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s OBJECT SYMBOL [ARG]\n", argv[0]);
    return 2;
  }
  std::ifstream file(argv[1], std::ios::binary);
  if (!file) {
    std::fprintf(stderr, "%s: cannot open\n", argv[1]);
    return 2;
  }
  std::vector<char> object((std::istreambuf_iterator<char>(file)),
                           std::istreambuf_iterator<char>());
  int64_t argument = argc > 3 ? std::strtoll(argv[3], nullptr, 10) : 0;

  precast::runtime::SymbolTable symbols = {
      {"precast_probe_callback", reinterpret_cast<const void*>(&precast_probe_callback)},
      {"expf", reinterpret_cast<const void*>(static_cast<float (*)(float)>(&::expf))},
  };
  precast::runtime::LoadOptions options;
  options.object_name = argv[1];
  auto start = std::chrono::steady_clock::now();
  auto loaded = precast::runtime::load_object(object, symbols, options);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", loaded.error().message().c_str());
    return loaded.error().exit_code();
  }
  auto entry = loaded->function<int64_t(int64_t)>(argv[2]);
  double link_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!entry.ok()) {
    std::fprintf(stderr, "%s\n", entry.error().message().c_str());
    return entry.error().exit_code();
  }
  int64_t result = (*entry)(argument);
  std::printf("result %lld callback_total %lld load_link_ms %.3f linked_bytes %zu\n",
              static_cast<long long>(result), static_cast<long long>(probe_callback_total), link_ms,
              loaded->linked_bytes());
  return 0;
}
