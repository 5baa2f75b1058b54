// xla_vmem_arena_bytes against XLA's own buffer assignments of MaxText's steps: for every TPU
// generation, the largest memory-colour-1 preallocated-temp allocation among the rows of
// benchmarks/xla_reference (peaks/<id>.txt, the row's topology from reference.csv), read here from
// those files; no row's VMEM arena above it, and generations without one (v4, GPUs, CPUs) 0.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "compiler/analysis/XlaTempOverhead.h"

namespace precast {
namespace {

const std::filesystem::path kReference =
    std::filesystem::path(PRECAST_SOURCE_DIR) / "benchmarks" / "xla_reference";

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// row id -> generation ("v6e-32" -> "v6e"), from reference.csv's id and topology columns.
std::map<std::string, std::string> row_generations() {
  std::map<std::string, std::string> generations;
  std::istringstream csv(read_text(kReference / "reference.csv"));
  std::string line;
  std::getline(csv, line);  // header: id,model_name,topology,...
  while (std::getline(csv, line)) {
    std::istringstream fields(line);
    std::string id, model, topology;
    std::getline(fields, id, ',');
    std::getline(fields, model, ',');
    std::getline(fields, topology, ',');
    generations[id] = topology.substr(0, topology.find('-'));
  }
  return generations;
}

// generation -> the largest colour-1 preallocated-temp bytes among its rows' peaks/ files (0 for a
// generation whose rows have none).
std::map<std::string, int64_t> largest_colour1_by_generation() {
  const std::regex colour1(R"(color 1\s+preallocated-temp\s+\d+ allocations\s+(\d+) B)");
  std::map<std::string, int64_t> largest;
  for (const auto& [id, generation] : row_generations()) {
    std::filesystem::path peaks = kReference / "peaks" / (id + ".txt");
    if (!std::filesystem::exists(peaks)) continue;
    std::string text = read_text(peaks);
    std::smatch match;
    int64_t bytes = std::regex_search(text, match, colour1) ? std::stoll(match[1].str()) : 0;
    largest[generation] = std::max(largest[generation], bytes);
  }
  return largest;
}

TEST(XlaTempOverhead, VmemArenaIsTheLargestColourOneOfEachGenerationsRows) {
  std::map<std::string, int64_t> largest = largest_colour1_by_generation();
  ASSERT_EQ(largest.size(), 5u) << "rows of v4, v5e, v5p, v6e and tpu7x expected in peaks/";
  for (const auto& [generation, bytes] : largest) {
    EXPECT_EQ(xla_vmem_arena_bytes(generation), bytes) << generation;
  }
  // The figures as the dumps print them (memory-usage report, "vmem (color=1)").
  EXPECT_EQ(xla_vmem_arena_bytes("v5e"), 112 * 1024 * 1024);
  EXPECT_EQ(xla_vmem_arena_bytes("v4"), 0);
}

TEST(XlaTempOverhead, NoVmemArenaOffTpus) {
  EXPECT_EQ(xla_vmem_arena_bytes("cpu"), 0);
  EXPECT_EQ(xla_vmem_arena_bytes("h100"), 0);
  EXPECT_EQ(xla_vmem_arena_bytes(""), 0);
}

}  // namespace
}  // namespace precast
