// The sampler's token choice (runtime/eval/Decoding.h, MaxText's decode_sampling_* keys): each
// strategy's frequencies over many draws against the probabilities worked by hand from the
// logits log 0.5, log 0.3, log 0.2 (softmax gives back 0.5, 0.3, 0.2), and the refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "runtime/eval/Decoding.h"

namespace precast::runtime {
namespace {

const std::vector<Candidate> kSorted = {
    {std::log(0.5), 7}, {std::log(0.3), 3}, {std::log(0.2), 11}};

// The fraction of 40,000 draws that give each of ids 7, 3 and 11.
std::vector<double> frequencies(const DecodeSettings& settings) {
  uint64_t state = kDecodeSeed;
  std::map<uint32_t, int> counts;
  const int draws = 40000;
  for (int i = 0; i < draws; ++i) ++counts[choose_token(kSorted, settings, state)];
  return {counts[7] / double(draws), counts[3] / double(draws), counts[11] / double(draws)};
}

DecodeSettings settings(const std::string& strategy, int64_t top_k, double p, double t) {
  DecodeSettings s;
  s.strategy = strategy;
  s.top_k = top_k;
  s.nucleus_p = p;
  s.temperature = t;
  return s;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 0.01) << "id " << i;
}

TEST(Decoding, EachStrategyDrawsWithTheHandWorkedProbabilities) {
  // greedy: the largest always; weighted at T = 1: 0.5, 0.3, 0.2.
  expect_near(frequencies(settings("greedy", 0, -1, 1)), {1, 0, 0});
  expect_near(frequencies(settings("weighted", 0, -1, 1)), {0.5, 0.3, 0.2});
  // T = 0.5 squares the probabilities: 0.25, 0.09, 0.04 over 0.38.
  expect_near(frequencies(settings("weighted", 0, -1, 0.5)),
              {0.25 / 0.38, 0.09 / 0.38, 0.04 / 0.38});
  // topk 2: 0.5 and 0.3 over 0.8.
  expect_near(frequencies(settings("topk", 2, -1, 1)), {0.625, 0.375, 0});
  // nucleus 0.6: cumulative 0.5 < 0.6, then 0.8 reaches it: the two largest, 0.625 and 0.375.
  expect_near(frequencies(settings("nucleus", 0, 0.6, 1)), {0.625, 0.375, 0});
  // nucleus 0.4: 0.5 already reaches it: the largest alone.
  expect_near(frequencies(settings("nucleus", 0, 0.4, 1)), {1, 0, 0});
  // composite top 2 then nucleus 0.7 within them (0.625 < 0.7, then 1.0): both, 0.625 / 0.375;
  // nucleus 0.5 within them (0.625 reaches it): the largest alone.
  expect_near(frequencies(settings("composite", 2, 0.7, 1)), {0.625, 0.375, 0});
  expect_near(frequencies(settings("composite", 2, 0.5, 1)), {1, 0, 0});
}

TEST(Decoding, TheSameStateGivesTheSameTokens) {
  DecodeSettings s = settings("weighted", 0, -1, 1);
  uint64_t a = kDecodeSeed, b = kDecodeSeed;
  for (int i = 0; i < 100; ++i) EXPECT_EQ(choose_token(kSorted, s, a), choose_token(kSorted, s, b));
  EXPECT_EQ(s.candidates(259), 259);
  EXPECT_EQ(settings("topk", 10, -1, 1).candidates(259), 10);
  EXPECT_EQ(settings("greedy", 0, -1, 1).candidates(259), 1);
}

TEST(Decoding, BadKeysAreRefusedNamingTheKeyAndTheFix) {
  auto message = [](std::map<std::string, std::string> config) {
    Expected<DecodeSettings> s = decode_settings(config);
    EXPECT_FALSE(s.ok());
    if (s.ok()) return std::string();
    EXPECT_EQ(s.error().exit_code(), 2);
    return s.error().message();
  };
  EXPECT_NE(message({{"decode_sampling_strategy", "beam"}})
                .find("decode_sampling_strategy=beam: MaxText's strategies are greedy, weighted, "
                      "nucleus, topk and composite"),
            std::string::npos);
  EXPECT_NE(message({{"decode_sampling_strategy", "topk"}})
                .find("decode_sampling_top_k=0: decode_sampling_strategy=topk needs a top_k > 0"),
            std::string::npos);
  EXPECT_NE(message({{"decode_sampling_strategy", "nucleus"}, {"decode_sampling_nucleus_p", "1.5"}})
                .find("decode_sampling_nucleus_p=1.5: decode_sampling_strategy=nucleus needs a "
                      "probability in (0, 1]"),
            std::string::npos);
  EXPECT_NE(
      message({{"decode_sampling_strategy", "weighted"}, {"decode_sampling_temperature", "0"}})
          .find("decode_sampling_temperature=0: decode_sampling_strategy=weighted draws"),
      std::string::npos);
  EXPECT_NE(message({{"decode_sampling_top_k", "ten"}}).find("decode_sampling_top_k=ten"),
            std::string::npos);
  Expected<DecodeSettings> plain = decode_settings({});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->strategy, "greedy");
}

}  // namespace
}  // namespace precast::runtime
