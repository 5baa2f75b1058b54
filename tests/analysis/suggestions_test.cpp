// `precast analyze`'s out-of-memory suggestions: the halving search that runs two probes at a
// time answers as the one-at-a-time binary search does (probe sets and answers counted by hand),
// and llama3.1-405b on v5p-1024 at MaxText's per_device_batch_size=12 is told the batch that
// fits, derived by hand from the batch axes and the printed plan.
#include <gtest/gtest.h>

#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "compiler/driver/Analyze.h"
#include "tests/support/ConfigTestUtil.h"

namespace precast {
namespace {

// The smallest k in [low, high] with fits(k), probed one at a time as suggest_fits did before it
// probed two at a time: the reference the concurrent search must agree with.
int sequential_halving(int low, int high, const std::function<bool(int)>& fits) {
  int found = 0;
  while (low <= high) {
    int k = (low + high) / 2;
    if (fits(k)) {
      found = k;
      high = k - 1;
    } else {
      low = k + 1;
    }
  }
  return found;
}

// A predicate that records which k it was asked about (from any thread).
struct Probes {
  std::function<bool(int)> fits;
  std::mutex mutex;
  std::set<int> asked;
  std::function<bool(int)> recording() {
    return [this](int k) {
      std::lock_guard<std::mutex> lock(mutex);
      asked.insert(k);
      return fits(k);
    };
  }
};

TEST(SmallestFittingHalving, HandCountedProbes) {
  // 405B's case: halvings 1..2, only k = 2 fits. One round: k = 1 and, on speculation, k = 2.
  Probes two;
  two.fits = [](int k) { return k >= 2; };
  EXPECT_EQ(smallest_fitting_halving(1, 2, two.recording()), 2);
  EXPECT_EQ(two.asked, (std::set<int>{1, 2}));

  // Halvings 1..6, fits from k = 4: the binary search asks 3 (no), 5 (yes), 4 (yes) -> 4; the
  // speculation asks 5 while 3 runs (then needed) and 6 while 5 runs (unused).
  Probes six;
  six.fits = [](int k) { return k >= 4; };
  EXPECT_EQ(smallest_fitting_halving(1, 6, six.recording()), 4);
  EXPECT_EQ(six.asked, (std::set<int>{3, 4, 5, 6}));

  // Nothing fits: 3, 5, 6 (each "no" leads right) -> 0.
  Probes none;
  none.fits = [](int) { return false; };
  EXPECT_EQ(smallest_fitting_halving(1, 6, none.recording()), 0);
  EXPECT_EQ(none.asked, (std::set<int>{3, 5, 6}));

  // An empty range (the state alone is too big: high = 0) asks nothing.
  Probes empty;
  empty.fits = [](int) { return true; };
  EXPECT_EQ(smallest_fitting_halving(1, 0, empty.recording()), 0);
  EXPECT_TRUE(empty.asked.empty());
}

TEST(SmallestFittingHalving, SameAnswerAsOneAtATime) {
  // Every threshold on every range suggest_fits can search (high 0..6), and every one of the
  // 2^6 predicates on 1..6, monotone or not: the same answer as the sequential search.
  for (int high = 0; high <= 6; ++high) {
    for (int mask = 0; mask < 64; ++mask) {
      auto fits = [mask](int k) { return ((mask >> (k - 1)) & 1) != 0; };
      EXPECT_EQ(smallest_fitting_halving(1, high, fits), sequential_halving(1, high, fits))
          << "high " << high << " mask " << mask;
    }
  }
}

Expected<AnalysisReport> analyze_405b(const std::string& batch) {
  ConfigRequest request;
  request.config_file = testing::base_yml();
  request.overrides = {"model_name=llama3.1-405b", "compile_topology=v5p-1024",
                       "per_device_batch_size=" + batch};
  request.read_environment = false;
  return analyze(request, testing::source_dir() / "configs" / "topologies.yml");
}

TEST(Suggestions, Llama405bOnV5p1024FitsAtBatchThree) {
  // MaxText's llama3.1-405b config (per_device_batch_size=12, 2048 tokens) on v5p-1024: 512
  // chips, ici_fsdp_parallelism=-1 takes them all, so the batch axes hold 512 devices and the
  // 12 x 512 = 6144 rows must split into 512 equal shares: of the halvings 6, 3, 1.5, ... only 6
  // (3072 rows) and 3 (1536 rows) do (1.5 x 512 = 768 is not a multiple of 512).
  ConfigRequest request;
  request.config_file = testing::base_yml();
  request.overrides = {"model_name=llama3.1-405b", "compile_topology=v5p-1024"};
  request.read_environment = false;
  std::filesystem::path topologies = testing::source_dir() / "configs" / "topologies.yml";
  Expected<AnalysisReport> base = analyze(request, topologies);
  ASSERT_TRUE(base.ok()) << base.error().message();
  ASSERT_EQ(base->resolved.mesh.num_devices, 512);
  ASSERT_EQ(base->batch.per_device_batch_size, 12.0);
  ASSERT_FALSE(base->fits());

  // 6 cannot fit, by the printed plan at 12: the weights and optimizer state (argument bytes)
  // do not depend on the batch, and temp grows with it from a non-negative fixed part
  // (temp(b) = fixed + b x per_row with fixed >= 0), so temp(6) >= temp(12) x 6 / 12.
  // 8.91 GiB + 265.69 GiB / 2 = 141.8 GiB against the v5p's 95.74 GiB.
  const MemoryPlan& plan = base->memory.plan;
  int64_t at_six_at_least = plan.argument_bytes + plan.temp_bytes / 2;
  EXPECT_GT(at_six_at_least, base->memory_limit_bytes);
  // The same bound leaves room at 3 (8.91 + 265.69 / 4 = 75.3 GiB): 3 is the candidate, and the
  // analysis at 3 fits.
  EXPECT_LT(plan.argument_bytes + plan.temp_bytes / 4, base->memory_limit_bytes);
  Expected<AnalysisReport> three = analyze_405b("3");
  ASSERT_TRUE(three.ok()) << three.error().message();
  EXPECT_TRUE(three->fits());

  // The search's answer: per_device_batch_size=3 alone (full remat is already the lightest
  // policy but for minimal_offloaded, which does not fit at 12, and fsdp already holds every
  // device), after three re-analyses: batch 6 and 3, and remat_policy=minimal_offloaded.
  int analyses = 0;
  std::vector<std::string> suggestions = suggest_fits(request, topologies, *base, &analyses);
  EXPECT_EQ(suggestions, (std::vector<std::string>{"per_device_batch_size=3"}));
  EXPECT_EQ(analyses, 3);
}

}  // namespace
}  // namespace precast
