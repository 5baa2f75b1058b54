// num_vocab_tiling against the untiled loss: one AdamW step of a tiny llama2 on the interpreter
// gives the same metrics and new weights (f32 round-off: the same tokens summed in another
// order), with and without the remat pass (which recomputes each tile's logits in its backward);
// the buffer plan of a CPU step holds one tile's logits, [rows, T / N, V], where the untiled one
// holds [rows, T, V] (hand count); MaxText's divisibility check refuses with its message.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "compiler/Pipeline.h"
#include "compiler/analysis/BufferAssignment.h"
#include "compiler/autodiff/Remat.h"
#include "compiler/autodiff/TrainStep.h"
#include "compiler/config/ResolvedConfig.h"
#include "compiler/frontend/Frontend.h"
#include "ir/Interpreter.h"
#include "ir/Verifier.h"
#include "tests/support/ConfigTestUtil.h"

namespace precast {
namespace {

using ir::DType;
using ir::HostTensor;

constexpr int64_t kRows = 2;
constexpr int64_t kLength = 8;
constexpr int64_t kVocab = 32;

ModelSpec tiny_llama(int64_t tiles) {
  Config config = testing::load_derived(
      testing::base_yml(),
      {"model_name=llama2-7b", "override_model_config=true", "base_emb_dim=16", "base_mlp_dim=24",
       "base_num_decoder_layers=2", "head_dim=4", "vocab_size=32", "max_target_length=8",
       "per_device_batch_size=2", "base_num_query_heads=4", "base_num_kv_heads=2", "dtype=float32",
       "z_loss_multiplier=0.0001", "num_vocab_tiling=" + std::to_string(tiles)},
      1);
  Expected<ModelSpec> spec = model_spec_from_config(config);
  EXPECT_TRUE(spec.ok()) << (spec.ok() ? "" : spec.error().message());
  return *spec;
}

// One AdamW step from MaxText's initialisation (seed 3) on fixed tokens, every result.
std::vector<HostTensor> one_step(int64_t tiles, bool remat) {
  frontend::ForwardOptions options;
  options.loss_sums = true;
  Expected<frontend::ForwardModel> forward =
      frontend::lower_forward(tiny_llama(tiles), kRows, kLength, options);
  EXPECT_TRUE(forward.ok()) << (forward.ok() ? "" : forward.error().message());
  if (!forward.ok()) return {};
  EXPECT_TRUE(frontend::add_init_function(*forward).ok());
  std::vector<HostTensor> seed = {HostTensor::scalar(3, DType::kU32)};
  Expected<std::vector<HostTensor>> weights = ir::interpret(forward->module, "init", seed);
  EXPECT_TRUE(weights.ok());
  size_t num_weights = forward->weights.size();
  autodiff::TrainStepSpec spec;
  Expected<autodiff::TrainStepLayout> layout =
      autodiff::add_train_step(forward->module, forward->module.function(0), num_weights, spec);
  EXPECT_TRUE(layout.ok()) << (layout.ok() ? "" : layout.error().message());
  size_t index = forward->module.num_functions() - 1;
  if (remat) {
    Expected<autodiff::RematPolicy> full = autodiff::remat_policy("full");
    EXPECT_TRUE(full.ok());
    Expected<autodiff::RematResult> rewritten =
        autodiff::apply_remat(forward->module, index, *full);
    EXPECT_TRUE(rewritten.ok()) << (rewritten.ok() ? "" : rewritten.error().message());
  }
  EXPECT_TRUE(ir::verify_module(forward->module).ok());

  std::vector<HostTensor> args = *weights;
  for (int moment = 0; moment < 2; ++moment) {
    for (size_t i = 0; i < num_weights; ++i)
      args.push_back(HostTensor::filled((*weights)[i].type, 0));
  }
  args.push_back(HostTensor::scalar(0, DType::kS32));
  ir::TensorType batch{DType::kS32, {kRows, kLength}};
  std::vector<double> tokens, targets, positions, segments;
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t t = 0; t < kLength; ++t) {
      tokens.push_back(static_cast<double>((7 * r + 5 * t + 1) % kVocab));
      targets.push_back(static_cast<double>((7 * r + 5 * t + 6) % kVocab));
      positions.push_back(static_cast<double>(t));
      segments.push_back(r == 1 && t >= 6 ? 0 : 1);  // two padding tokens
    }
  }
  for (const std::vector<double>* array :
       {&tokens, &positions, &segments, &targets, &positions, &segments}) {
    args.push_back(HostTensor::of(batch, *array));
  }
  for (double v : {1e-2, 0.9, 0.95, 1e-8, 0.0, 0.1, 1.0}) args.push_back(HostTensor::scalar(v));
  Expected<std::vector<HostTensor>> out =
      ir::interpret(forward->module.function(index), args, ir::InterpreterOptions{});
  EXPECT_TRUE(out.ok()) << (out.ok() ? "" : out.error().message());
  return out.ok() ? *out : std::vector<HostTensor>();
}

void expect_same_step(const std::vector<HostTensor>& tiled,
                      const std::vector<HostTensor>& untiled) {
  ASSERT_EQ(tiled.size(), untiled.size());
  ASSERT_FALSE(tiled.empty());
  for (size_t k = 0; k < tiled.size(); ++k) {
    ASSERT_EQ(tiled[k].values.size(), untiled[k].values.size()) << "result " << k;
    for (size_t i = 0; i < tiled[k].values.size(); ++i) {
      double a = tiled[k].values[i], b = untiled[k].values[i];
      EXPECT_NEAR(a, b, 2e-6 * std::max(1.0, std::abs(b))) << "result " << k << " element " << i;
    }
  }
}

TEST(VocabTiling, OneStepEqualsTheUntiledStep) {
  std::vector<HostTensor> untiled = one_step(1, false);
  for (int64_t tiles : {2, 4, 8}) {
    SCOPED_TRACE("num_vocab_tiling=" + std::to_string(tiles));
    expect_same_step(one_step(tiles, false), untiled);
    expect_same_step(one_step(tiles, true), untiled);
  }
  // The metrics follow the weights, mu, nu and count: loss, lm_loss, ..., total_weights = 14
  // real tokens of 16.
  size_t metrics = untiled.size() - autodiff::kNumMetrics;
  EXPECT_EQ(untiled[metrics + 4].values[0], 14);
}

// The largest logits-shaped buffer ([rows, tokens, V]) of a CPU step's plan: f32 [rows, T / N, V]
// (the logits kernel's gradient, [E, V], is of the same region and left out).
int64_t largest_logits_buffer(int64_t tiles) {
  ConfigRequest request;
  request.config_file = testing::base_yml();
  request.overrides = {"base_emb_dim=256",          "base_mlp_dim=256",
                       "base_num_decoder_layers=2", "per_device_batch_size=1",
                       "max_target_length=256",     "num_vocab_tiling=" + std::to_string(tiles)};
  request.read_environment = false;
  Expected<ResolvedConfig> resolved =
      resolve_config(request, testing::source_dir() / "configs" / "topologies.yml");
  EXPECT_TRUE(resolved.ok()) << (resolved.ok() ? "" : resolved.error().message());
  if (!resolved.ok()) return -1;
  Expected<TrainProgram> program =
      run_pipeline(resolved->config, resolved->topology, resolved->mesh);
  EXPECT_TRUE(program.ok()) << (program.ok() ? "" : program.error().message());
  if (!program.ok() || !program->plan) return -1;
  int64_t largest = 0;
  const ir::Function& step = *program->layout.function;
  for (const Buffer& b : program->plan->buffers) {
    const ir::TensorType& type = step.type(b.value);
    if (b.category == MemoryCategory::kLogitsAndLoss && type.rank() == 3 && type.dims[2] == 32000) {
      largest = std::max(largest, b.bytes);
    }
  }
  return largest;
}

TEST(VocabTiling, ThePlanHoldsOneTilesLogits) {
  // cpu-1: one row of 256 tokens, V = 32000, f32 logits.
  EXPECT_EQ(largest_logits_buffer(1), int64_t{1} * 256 * 32000 * 4);
  EXPECT_EQ(largest_logits_buffer(4), int64_t{1} * 64 * 32000 * 4);
}

TEST(VocabTiling, RefusedWithMaxTextsMessage) {
  Expected<Config> config =
      testing::load(testing::base_yml(),
                    {"per_device_batch_size=1", "max_target_length=6", "num_vocab_tiling=4"});
  ASSERT_TRUE(config.ok()) << config.error().message();
  Status derived = derive_keys(*config, 1);
  ASSERT_FALSE(derived.ok());
  EXPECT_NE(derived.error().message().find("Per device batch size times sequence length should "
                                           "be divisible by the number of vocab tiles."),
            std::string::npos)
      << derived.error().message();
  // 2 x 6 = 12 tokens divide into 4 tiles (MaxText's check passes), but Precast slices the
  // sequence, and 6 does not divide into 4: refused as not supported yet, naming both keys.
  Expected<Config> rows =
      testing::load(testing::base_yml(),
                    {"per_device_batch_size=2", "max_target_length=6", "num_vocab_tiling=4"});
  ASSERT_TRUE(rows.ok()) << rows.error().message();
  Status sliced = derive_keys(*rows, 1);
  ASSERT_FALSE(sliced.ok());
  EXPECT_NE(sliced.error().message().find(
                "num_vocab_tiling=4 (command line argument 3), max_target_length=6 (command line "
                "argument 2): num_vocab_tiling that does not divide max_target_length is not "
                "supported yet"),
            std::string::npos)
      << sliced.error().message();
}

}  // namespace
}  // namespace precast
