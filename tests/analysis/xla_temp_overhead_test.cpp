// xla_on_chip_arenas_bytes against XLA's own buffer assignments of MaxText's steps: for every TPU
// generation, the largest sum of the preallocated-temp allocations of the memory colours other
// than HBM (0) and host memory (5) among the rows of benchmarks/xla_reference (peaks/<id>.txt, the
// row's topology from reference.csv, refused rows included), read here from those files; 0 off
// TPUs; the estimated extra; and the loop-carried buffers of a plan of XLA's arena, whose
// uncarried peak is a candidate for the TPU backend's "Unpadded" figure.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <string>

#include "compiler/analysis/BufferAssignment.h"
#include "compiler/analysis/XlaTempOverhead.h"
#include "compiler/autodiff/TrainStep.h"
#include "compiler/frontend/Frontend.h"
#include "tests/support/ConfigTestUtil.h"

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

// generation -> the largest on-chip preallocated-temp bytes among its rows' peaks/ files.
std::map<std::string, int64_t> largest_on_chip_arenas_by_generation() {
  const std::regex arena(R"(color (\d+)\s+preallocated-temp\s+\d+ allocations\s+(\d+) B)");
  std::map<std::string, int64_t> largest;
  for (const auto& [id, generation] : row_generations()) {
    std::filesystem::path peaks = kReference / "peaks" / (id + ".txt");
    if (!std::filesystem::exists(peaks)) continue;
    std::string text = read_text(peaks);
    int64_t bytes = 0;
    for (std::sregex_iterator it(text.begin(), text.end(), arena), end; it != end; ++it) {
      std::string colour = (*it)[1].str();
      if (colour != "0" && colour != "5") bytes += std::stoll((*it)[2].str());
    }
    largest[generation] = std::max(largest[generation], bytes);
  }
  return largest;
}

TEST(XlaTempOverhead, OnChipArenasAreTheLargestOfEachGenerationsRows) {
  std::map<std::string, int64_t> largest = largest_on_chip_arenas_by_generation();
  ASSERT_EQ(largest.size(), 5u) << "rows of v4, v5e, v5p, v6e and tpu7x expected in peaks/";
  for (const auto& [generation, bytes] : largest) {
    EXPECT_EQ(xla_on_chip_arenas_bytes(generation), bytes) << generation;
  }
  // v4's CMEM arena (colour 3): 128 MiB and 6180 B of colours 2 and 6 (mistral-7b on v4-32).
  EXPECT_EQ(xla_on_chip_arenas_bytes("v4"), 128 * 1024 * 1024 + 6144 + 36);
  // v5e's VMEM arena (colour 1): 112 MiB, and 9392 B of colours 2, 4 and 6 (gemma2-2b b2 s8192).
  EXPECT_EQ(xla_on_chip_arenas_bytes("v5e") / (1024 * 1024), 112);
}

TEST(XlaTempOverhead, NoOnChipArenasOffTpus) {
  EXPECT_EQ(xla_on_chip_arenas_bytes("cpu"), 0);
  EXPECT_EQ(xla_on_chip_arenas_bytes("h100"), 0);
  EXPECT_EQ(xla_on_chip_arenas_bytes(""), 0);
}

// The estimated extra: 1.5 bf16 stacks [layers, tokens, emb_dim]. llama2-7b b1 s2048 on one
// device's share: 1.5 x 32 x 2048 x 4096 x 2 bytes = 805,306,368 (768 MiB); gemma2-2b's 13
// local/global pairs at b4 s4096, emb 2304: 1.5 x 13 x 16384 x 2304 x 2 = 1,472,200,704.
TEST(XlaTempOverhead, TheExtraIsOneAndAHalfScanStacks) {
  EXPECT_EQ(xla_temp_extra_bytes(32, 2048, 4096), 805306368);
  EXPECT_EQ(xla_temp_extra_bytes(13, 4 * 4096, 2304), 1472200704);
  EXPECT_EQ(xla_temp_extra_bytes(0, 2048, 4096), 0);
  EXPECT_EQ(xla_temp_extra_bytes(32, 0, 4096), 0);
}

// The product's TPU plan adds both to temp and keeps the arena apart; --xla-arena's leaves temp
// the arena and still reports them.
TEST(XlaTempOverhead, AddedToTempUnlessThePlanIsTheArenaAlone) {
  MemoryPlan plan;
  plan.temp_bytes = 1000;
  add_xla_temp_overheads(plan, "v5p", 32, 2048, 4096, true);
  EXPECT_EQ(plan.xla_on_chip_arenas_bytes, 50146864);
  EXPECT_EQ(plan.xla_temp_extra_bytes, 805306368);
  EXPECT_EQ(plan.temp_bytes, 1000 + 50146864 + 805306368);
  EXPECT_EQ(plan.arena_bytes(), 1000);
  EXPECT_NE(format_xla_temp_line(plan).find("estimated extra 768.00 MiB"), std::string::npos);
  MemoryPlan arena;
  arena.temp_bytes = 1000;
  add_xla_temp_overheads(arena, "v5p", 32, 2048, 4096, false);
  EXPECT_EQ(arena.temp_bytes, 1000);
  EXPECT_EQ(arena.arena_bytes(), 1000);
  EXPECT_EQ(arena.xla_temp_extra_bytes, 805306368);
  MemoryPlan cpu;
  cpu.temp_bytes = 1000;
  add_xla_temp_overheads(cpu, "cpu", 0, 0, 0, true);
  EXPECT_EQ(cpu.temp_bytes, 1000);
  EXPECT_EQ(format_xla_temp_line(cpu), "");
}

// The candidate for the TPU backend's U (MemoryPlan::uncarried_peak_bytes, evaluated by
// compare.py --extra-models) on the tiny llama2 (emb 32, mlp 48, 2 scanned layers, vocab 64, batch
// 2 x 16 tokens, no remat) in a plan of XLA's arena: the loop-carried buffers are the stacked
// weight gradients (2 layers each) and nothing else. Each layer's backward reads only its own
// layer's forward values here (no recomputation from a layer input), so no residual is carried
// from one iteration to the next; none of the 20 bf16 weight copies (7 kernels and 2 norm scales
// of each layer, the embedding, the unembedding) is, XLA's loops reading them as loop-invariant
// values. uncarried_peak_bytes is the most bytes of the other buffers live at one position
// (checked here position by position); without model_arena nothing is carried and it is the
// plan's peak.
std::unique_ptr<frontend::ForwardModel> tiny_llama2(const ir::Function** step) {
  Config config = testing::load_derived(
      testing::base_yml(),
      {"model_name=llama2-7b", "override_model_config=true", "base_emb_dim=32", "base_mlp_dim=48",
       "base_num_decoder_layers=2", "head_dim=8", "vocab_size=64", "max_target_length=16",
       "per_device_batch_size=2", "base_num_query_heads=4", "base_num_kv_heads=2"},
      1);
  Expected<ModelSpec> spec = model_spec_from_config(config);
  if (!spec.ok()) return nullptr;
  frontend::ForwardOptions options;
  options.loss_sums = true;
  Expected<frontend::ForwardModel> forward = frontend::lower_forward(*spec, 2, 16, options);
  if (!forward.ok()) return nullptr;
  auto model = std::make_unique<frontend::ForwardModel>(std::move(*forward));
  Expected<autodiff::TrainStepLayout> layout = autodiff::add_train_step(
      model->module, model->module.function(0), model->weights.size(), {});
  if (!layout.ok()) return nullptr;
  *step = layout->function;
  return model;
}

TEST(XlaTempOverhead, LoopCarriedBuffersOfTheTinyLlama2) {
  const ir::Function* step = nullptr;
  std::unique_ptr<frontend::ForwardModel> model = tiny_llama2(&step);
  ASSERT_NE(model, nullptr);
  const ir::Function& f = *step;
  for (bool arena : {true, false}) {
    SCOPED_TRACE(arena ? "xla arena" : "without model_arena");
    BufferOptions options;
    options.stacked_layer_gradients = true;
    options.xla.enabled = true;
    options.xla.model_arena = arena;
    MemoryPlan plan = plan_memory(f, options);
    int carried_copies = 0, uncarried_copies = 0, stacked = 0, carried = 0, residuals = 0;
    for (const Buffer& b : plan.buffers) {
      if (!b.value.valid() || b.offset < 0) continue;
      const ir::Op& op = f.op(f.defining_op(b.value));
      bool copy = op.kind == ir::OpKind::kConvert && f.is_param(f.operands(op)[0]) &&
                  f.type(b.value).dtype == ir::DType::kBF16;
      if (copy && b.loop_carried) ++carried_copies;
      if (copy && !b.loop_carried) ++uncarried_copies;
      if (b.layers == 2) {
        ++stacked;
        EXPECT_EQ(b.loop_carried, arena);
      }
      if (b.category == MemoryCategory::kSavedActivations && op.facts.in_layer() && !copy) {
        ++residuals;
        EXPECT_FALSE(b.loop_carried);
      }
      carried += b.loop_carried;
    }
    int64_t most = 0;
    for (int32_t p = 0; p <= static_cast<int32_t>(f.num_ops()); ++p) {
      int64_t live = 0;
      for (const Buffer& b : plan.buffers) {
        if (b.offset >= 0 && !b.loop_carried && b.start <= p && p <= b.end) live += b.bytes;
      }
      most = std::max(most, live);
    }
    EXPECT_EQ(plan.uncarried_peak_bytes, most);
    EXPECT_GE(stacked, 7);  // the 7 kernels' gradients at least
    EXPECT_EQ(carried_copies, 0);
    if (arena) {
      EXPECT_EQ(uncarried_copies, 20);  // one buffer per weight
      EXPECT_GT(residuals, 0);
      EXPECT_EQ(carried, stacked);
      EXPECT_LT(plan.uncarried_peak_bytes, plan.peak_live_bytes);
    } else {
      EXPECT_EQ(carried, 0);
      EXPECT_EQ(plan.uncarried_peak_bytes, plan.peak_live_bytes);
    }
  }
}

}  // namespace
}  // namespace precast
