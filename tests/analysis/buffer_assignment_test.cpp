// Buffer assignment: fusion decides what gets a buffer, liveness over the schedule, best-fit
// packing and XLA's memory definitions, each checked against hand counts on small functions; the
// train step's argument/output/alias bytes against the sum of its parameters.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "compiler/analysis/BufferAssignment.h"
#include "compiler/analysis/MemoryTimeline.h"
#include "compiler/autodiff/TrainStep.h"
#include "compiler/frontend/Frontend.h"
#include "ir/Parser.h"
#include "tests/support/ConfigTestUtil.h"
#include "tests/support/IrTestSupport.h"

namespace precast {
namespace {

ir::Module parse(std::string_view text) { return ir::testing::parse_or_fail(text); }

// The tiny llama2 of several tests below (emb 32, mlp 48, 2 layers, 4 query heads of 8 over 2 kv
// heads, V 64, 2 x 16 tokens), lowered with its loss sums and differentiated into a train step;
// `forward.module` owns the step's function. Null (after a failed expectation) if any stage fails.
struct TinyTrainStep {
  frontend::ForwardModel forward;
  const ir::Function* step = nullptr;
};
std::unique_ptr<TinyTrainStep> tiny_llama2_train_step() {
  Config config = testing::load_derived(
      testing::base_yml(),
      {"model_name=llama2-7b", "override_model_config=true", "base_emb_dim=32", "base_mlp_dim=48",
       "base_num_decoder_layers=2", "head_dim=8", "vocab_size=64", "max_target_length=16",
       "per_device_batch_size=2", "base_num_query_heads=4", "base_num_kv_heads=2"},
      1);
  Expected<ModelSpec> spec = model_spec_from_config(config);
  EXPECT_TRUE(spec.ok());
  if (!spec.ok()) return nullptr;
  frontend::ForwardOptions forward_options;
  forward_options.loss_sums = true;
  Expected<frontend::ForwardModel> forward = frontend::lower_forward(*spec, 2, 16, forward_options);
  EXPECT_TRUE(forward.ok());
  if (!forward.ok()) return nullptr;
  auto tiny = std::make_unique<TinyTrainStep>();
  tiny->forward = std::move(*forward);
  Expected<autodiff::TrainStepLayout> step = autodiff::add_train_step(
      tiny->forward.module, tiny->forward.module.function(0), tiny->forward.weights.size(), {});
  EXPECT_TRUE(step.ok());
  if (!step.ok()) return nullptr;
  tiny->step = step->function;
  return tiny;
}

TEST(BufferAssignment, FusedElementwiseGetsNoBuffer) {
  ir::Module m = parse(R"(
func @f(%x: f32[256], %w: f32[256,256]) -> (f32[256]) {
  %a = exp %x : f32[256]
  %b = mul %a, %x : f32[256]
  %c = dot_general %b, %w {lhs_contract=[0], rhs_contract=[0]} : f32[256]
  %d = tanh %c : f32[256]
  return %d
}
)");
  MemoryPlan plan = plan_memory(m.function(0));
  // Arguments: 256 x 4 + 256 x 256 x 4.
  EXPECT_EQ(plan.argument_bytes, 1024 + 262144);
  EXPECT_EQ(plan.output_bytes, 1024);
  EXPECT_EQ(plan.alias_bytes, 0);
  // %a runs inside %b; %b (read by the dot at op 2) and %c (read by %d at op 3) overlap at op 2:
  // two 1 KiB buffers side by side.
  EXPECT_EQ(plan.temp_bytes, 2048);
  EXPECT_EQ(plan.total_bytes(), 263168 + 1024 + 2048);
  EXPECT_EQ(plan.peak_live_bytes, 2048);
  EXPECT_EQ(plan.peak_position, 2);

  BufferOptions unfused;
  unfused.fuse = false;
  // Without fusion %a gets a buffer too, live [0, 1] beside %b's [1, 2]: three at op 1 and 2
  // are never all live together: a+b at 1, b+c at 2, c at 3 -> arena 2 KiB still.
  MemoryPlan plain = plan_memory(m.function(0), unfused);
  EXPECT_EQ(plain.buffers.size(), 4u);  // a, b, c and the output d
  EXPECT_EQ(plain.temp_bytes, 2048);
}

// Offloaded values live in a host arena of their own, packed like the device one: two that are
// never live together share host memory, and the device arena holds neither.
TEST(BufferAssignment, OffloadedValuesArePackedInTheirOwnHostArena) {
  ir::Module m = parse(R"(
func @o(%x: f32[256], %w: f32[256,256]) -> (f32[256]) {
  %a = dot_general %x, %w {lhs_contract=[0], rhs_contract=[0]} : f32[256]
  %b = dot_general %a, %w {lhs_contract=[0], rhs_contract=[0]} : f32[256]
  %c = dot_general %b, %w {lhs_contract=[0], rhs_contract=[0]} : f32[256]
  %d = dot_general %c, %w {lhs_contract=[0], rhs_contract=[0]} : f32[256]
  return %d
}
)");
  const ir::Function& f = m.function(0);
  BufferOptions device_only;
  MemoryPlan plain = plan_memory(f, device_only);
  // a [0,1], b [1,2], c [2,3]: two 1 KiB buffers live at once.
  EXPECT_EQ(plain.temp_bytes, 2048);
  EXPECT_EQ(plain.host_temp_bytes, 0);
  BufferOptions offload;
  // a and c on the host: live [0,1] and [2,3], disjoint, so one 1 KiB host slot holds both.
  offload.host_values = {f.result(f.op(0)), f.result(f.op(2))};
  MemoryPlan plan = plan_memory(f, offload);
  EXPECT_EQ(plan.host_temp_bytes, 1024);
  EXPECT_EQ(plan.temp_bytes, 1024);  // b alone on the device
}

// In a per-device module: this device's piece of an iota (a one-hot mask's vocabulary index) is
// generated inside its reader like the iota; a piece of a stored value is a buffer of its own.
TEST(BufferAssignment, PiecesOfGeneratedValuesAreFused) {
  ir::Module m = parse(R"(
func @p(%t: s32[4,1], %w: f32[64,64]) -> (f32[4,16], f32[16,64]) {
  %i = iota {dimension=1} : s32[4,64]
  %mine = shard_slice %i {dimension=1, mesh_axes=[tensor], group_size=4} : s32[4,16]
  %tb = broadcast_in_dim %t {dims=[0, 1]} : s32[4,16]
  %hot = compare %mine, %tb {direction=eq} : pred[4,16]
  %one = constant 1.0 : f32[4,16]
  %zero = constant 0.0 : f32[4,16]
  %mask = select %hot, %one, %zero : f32[4,16]
  %g = dot_general %w, %w {lhs_contract=[1], rhs_contract=[0]} : f32[64,64]
  %piece = shard_slice %g {dimension=0, mesh_axes=[tensor], group_size=4} : f32[16,64]
  return %mask, %piece
}
)");
  MemoryPlan plan = plan_memory(m.function(0));
  // The iota, its piece, the broadcast, compare and constants run inside the select's kernel;
  // only the dot's 16 KiB result is a temp, and %piece (an output) is read from it.
  EXPECT_EQ(plan.temp_bytes, 64 * 64 * 4);
  EXPECT_EQ(plan.output_bytes, 4 * 16 * 4 + 16 * 64 * 4);
  // The shared predicate the CPU code generator checks its storage with says the same, op by
  // op: iota, its piece, broadcast, compare, the constants and select may fuse; the dot and the
  // piece of the dot's stored result may not.
  const ir::Function& f = m.function(0);
  std::vector<bool> want = {true, true, true, true, true, true, true, false, false};
  ASSERT_EQ(f.num_ops(), want.size());
  for (ir::OpIndex i = 0; i < f.num_ops(); ++i) {
    EXPECT_EQ(loop_fusible(f, f.op(i)), want[i]) << "op " << i;
  }
}

TEST(BufferAssignment, DonatedResultsUpdateInPlace) {
  ir::Module m = parse(R"(
func @g(%w: f32[64], %m: f32[64]) -> (f32[64] aliases %w, f32[64] aliases %m) {
  %g = mul %w, %w : f32[64]
  %m2 = add %m, %g : f32[64]
  %w2 = sub %w, %m2 : f32[64]
  return %w2, %m2
}
)");
  MemoryPlan plan = plan_memory(m.function(0));
  EXPECT_EQ(plan.argument_bytes, 512);
  EXPECT_EQ(plan.output_bytes, 512);
  EXPECT_EQ(plan.alias_bytes, 512);
  // %g is fused into %m2; %m2 and %w2 are written into %m and %w (neither is read after).
  EXPECT_EQ(plan.temp_bytes, 0);
  EXPECT_EQ(plan.total_bytes(), 512);
}

TEST(BufferAssignment, DonatedParameterReadLaterNeedsATemporary) {
  ir::Module m = parse(R"(
func @h(%w: f32[64]) -> (f32[64] aliases %w, f32[64]) {
  %n = neg %w : f32[64]
  %r = mul %w, %n : f32[64]
  return %n, %r
}
)");
  MemoryPlan plan = plan_memory(m.function(0));
  // %w is read by %r after %n exists, so %n cannot overwrite it: a 256-byte temporary to the
  // end; %r is a plain output.
  EXPECT_EQ(plan.argument_bytes, 256);
  EXPECT_EQ(plan.output_bytes, 512);
  EXPECT_EQ(plan.alias_bytes, 256);
  EXPECT_EQ(plan.temp_bytes, 256);
  EXPECT_EQ(plan.total_bytes(), 256 + 512 - 256 + 256);
}

// In a plan of XLA's arena (model_arena) the donated parameter is copied instead (ZeRO-1's
// replicated weights, whose update is an all-gather): the result takes %w's buffer and the copy
// of %w lives from the step's start (0) to its last read, %r at position 1.
TEST(BufferAssignment, XlaArenaCopiesADonatedParameterReadLater) {
  ir::Module m = parse(R"(
func @h(%w: f32[64]) -> (f32[64] aliases %w, f32[64]) {
  %n = neg %w : f32[64]
  %r = mul %w, %n : f32[64]
  return %n, %r
}
)");
  BufferOptions options;
  options.xla.model_arena = true;
  MemoryPlan plan = plan_memory(m.function(0), options);
  EXPECT_EQ(plan.argument_bytes, 256);
  EXPECT_EQ(plan.output_bytes, 512);
  EXPECT_EQ(plan.alias_bytes, 256);
  EXPECT_EQ(plan.temp_bytes, 256);
  std::vector<const Buffer*> temps;
  for (const Buffer& b : plan.buffers) {
    if (b.offset >= 0) temps.push_back(&b);
  }
  ASSERT_EQ(temps.size(), 1u);
  EXPECT_FALSE(temps[0]->value.valid());
  EXPECT_EQ(temps[0]->bytes, 256);
  EXPECT_EQ(temps[0]->start, 0);
  EXPECT_EQ(temps[0]->end, 1);
  EXPECT_EQ(temps[0]->category, MemoryCategory::kParameters);
  // Without it, %n's own temporary lives to the end (position 2, past the last op).
  MemoryPlan cpu = plan_memory(m.function(0));
  temps.clear();
  for (const Buffer& b : cpu.buffers) {
    if (b.offset >= 0) temps.push_back(&b);
  }
  ASSERT_EQ(temps.size(), 1u);
  EXPECT_TRUE(temps[0]->value.valid());
  EXPECT_EQ(temps[0]->start, 0);
  EXPECT_EQ(temps[0]->end, 2);
}

TEST(BufferAssignment, LargestFirstBestFitPacking) {
  // Live ranges (op positions): a [0,1] 8 KiB, b [1,3] 2 KiB, c [2,3] 4 KiB, d [3,4] 6 KiB.
  // Biggest first: a at 0; d overlaps nothing placed -> 0; c overlaps d [0,6K) -> 6K; b overlaps
  // a [0,8K), c [6K,10K), d [0,6K), no gap -> 10K. Arena 12 KiB = b + c + d live at op 3.
  ir::Module m = parse(R"(
func @p(%x: f32[1024]) -> (f32[]) {
  %a = concatenate %x, %x {dimension=0} : f32[2048]
  %b = slice %a {start=[0], limit=[512]} : f32[512]
  %c = concatenate %b, %b {dimension=0} : f32[1024]
  %d = concatenate %c, %b {dimension=0} : f32[1536]
  %s = reduce_sum %d {dims=[0]} : f32[]
  return %s
}
)");
  MemoryPlan plan = plan_memory(m.function(0));
  EXPECT_EQ(plan.temp_bytes, 12288);
  EXPECT_EQ(plan.peak_live_bytes, 12288);
  EXPECT_EQ(plan.peak_position, 3);
  for (const Buffer& b : plan.buffers) {
    if (b.bytes == 8192) {
      EXPECT_EQ(b.offset, 0);
    }
    if (b.bytes == 6144) {
      EXPECT_EQ(b.offset, 0);
    }
    if (b.bytes == 4096) {
      EXPECT_EQ(b.offset, 6144);
    }
    if (b.bytes == 2048) {
      EXPECT_EQ(b.offset, 10240);
    }
  }
}

TEST(MemoryTimeline, StacksArgumentsAndTemporariesAndMarksThePeak) {
  ir::Module m = parse(R"(
func @p(%x: f32[1024]) -> (f32[]) {
  %a = concatenate %x, %x {dimension=0} : f32[2048]
  %b = slice %a {start=[0], limit=[512]} : f32[512]
  %c = concatenate %b, %b {dimension=0} : f32[1024]
  %d = concatenate %c, %b {dimension=0} : f32[1536]
  %s = reduce_sum %d {dims=[0]} : f32[]
  return %s
}
)");
  MemoryPlan plan = plan_memory(m.function(0));
  MemoryTimeline t = memory_timeline(plan);
  // Five ops, five columns. Live: op 0 a; 1 a+b; 2 b+c; 3 b+c+d; 4 d+s, over the 4 KiB argument.
  ASSERT_EQ(t.positions.size(), 5u);
  EXPECT_EQ(t.arguments, 4096);
  EXPECT_EQ(t.peak_bytes, 4096 + 2048 + 4096 + 6144);
  EXPECT_EQ(t.peak_position, 3);
  int64_t at_zero = 0, at_four = 0;
  for (const std::vector<int64_t>& row : t.bytes) {
    at_zero += row[0];
    at_four += row[4];
  }
  EXPECT_EQ(at_zero, 4096 + 8192);
  EXPECT_EQ(at_four, 4096 + 6144 + 4);
  std::string svg = memory_timeline_svg(plan, "test <model>");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("peak 0.00 GiB at op 3"), std::string::npos);
  EXPECT_NE(svg.find("test &lt;model&gt;"), std::string::npos);
  EXPECT_NE(svg.find("other temporaries"), std::string::npos);
}

TEST(BufferAssignment, ReshapeSharesItsOperandsBuffer) {
  ir::Module m = parse(R"(
func @r(%x: f32[16,16]) -> (f32[]) {
  %t = transpose %x {permutation=[1, 0]} : f32[16,16]
  %v = reshape %t : f32[256]
  %s = reduce_sum %v {dims=[0]} : f32[]
  return %s
}
)");
  MemoryPlan plan = plan_memory(m.function(0));
  // %v is %t's buffer viewed flat: one 1 KiB buffer, live until the reduction.
  EXPECT_EQ(plan.temp_bytes, 1024);
}

TEST(BufferAssignment, MaxTextsMemoryLine) {
  MemoryPlan plan;
  plan.argument_bytes = 429496730;  // 0.4 GiB
  plan.output_bytes = 429496730;
  plan.alias_bytes = 429496730;
  plan.temp_bytes = 1181116006;  // 1.1 GiB
  EXPECT_EQ(format_memory_line(plan),
            "Total estimated memory size: 1.5 GB, estimated output size: 0.4 GB, estimated temp "
            "size: 1.1 GB, estimated argument size: 0.4 GB, Estimated host temp size: 0.0 GB.");
}

// The train step's arguments are the weights, mu, nu, count, the batch and the scalars; every
// weight and state value is donated, so alias = weights + mu + nu + count.
TEST(BufferAssignment, TrainStepArgumentsAndAliases) {
  Config config = testing::load_derived(
      testing::base_yml(),
      {"model_name=llama2-7b", "override_model_config=true", "base_emb_dim=32", "base_mlp_dim=48",
       "base_num_decoder_layers=2", "head_dim=8", "vocab_size=64", "max_target_length=16",
       "per_device_batch_size=2", "base_num_query_heads=4", "base_num_kv_heads=2"},
      1);
  Expected<ModelSpec> spec = model_spec_from_config(config);
  ASSERT_TRUE(spec.ok());
  frontend::ForwardOptions options;
  options.loss_sums = true;
  Expected<frontend::ForwardModel> forward = frontend::lower_forward(*spec, 2, 16, options);
  ASSERT_TRUE(forward.ok());
  Expected<autodiff::TrainStepLayout> layout = autodiff::add_train_step(
      forward->module, forward->module.function(0), forward->weights.size(), {});
  ASSERT_TRUE(layout.ok());
  int64_t weights = 0;
  for (const frontend::WeightInfo& w : forward->weights) {
    int64_t n = 1;
    for (int64_t d : w.dims) n *= d;
    weights += n * 4;
  }
  MemoryPlan plan = plan_memory(*layout->function);
  int64_t state = 3 * weights + 4;         // weights, mu, nu (f32) and count
  int64_t batch = 6 * 2 * 16 * 4 + 7 * 4;  // six s32[2,16] arrays, seven f32 scalars
  EXPECT_EQ(plan.argument_bytes, state + batch);
  EXPECT_EQ(plan.alias_bytes, state);
  // Outputs: the state plus seven distinct scalar metrics (lm_loss is loss).
  EXPECT_EQ(plan.output_bytes, state + 7 * 4);
  EXPECT_GT(plan.temp_bytes, 0);
  EXPECT_GE(plan.temp_bytes, plan.peak_live_bytes);
  EXPECT_EQ(plan.argument_by_category[static_cast<size_t>(MemoryCategory::kParameters)], weights);
  EXPECT_EQ(plan.argument_by_category[static_cast<size_t>(MemoryCategory::kOptimizerState)],
            2 * weights + 4);
}

// Scanned blocks (MaxText's scan of gemma3 in blocks of 6 with the L % 6 remainder unscanned, of
// olmo3 in blocks of 4): a layer's weight gradients are stacked with those of the layers at the
// same place in the other blocks only, and an unscanned remainder layer's stay its own. By hand:
// gemma3 at 13 layers is 2 blocks (layers 0-11) and layer 12, so every stack holds 2 layers and
// there are 6 stacks per gradient buffer of layer 12; olmo3 at 8 layers is 2 blocks of 4.
void expect_scan_blocks(const std::string& model, int64_t layers, int64_t per_block,
                        int64_t scanned, int64_t blocks) {
  SCOPED_TRACE(model);
  Config config = testing::load_derived(
      testing::base_yml(),
      {"model_name=" + model, "override_model_config=true", "base_emb_dim=32", "base_mlp_dim=48",
       "base_num_decoder_layers=" + std::to_string(layers), "head_dim=8", "vocab_size=64",
       "max_target_length=16", "per_device_batch_size=2", "base_num_query_heads=4",
       "base_num_kv_heads=2", "sliding_window_size=4"},
      1);
  Expected<ModelSpec> spec = model_spec_from_config(config);
  ASSERT_TRUE(spec.ok()) << spec.error().message();
  frontend::ScanLayout layout = frontend::scan_layout(*spec);
  EXPECT_EQ(layout.layers_per_block, per_block);
  EXPECT_EQ(layout.scanned_layers, scanned);
  EXPECT_EQ(layout.blocks(), blocks);
  frontend::ForwardOptions forward_options;
  forward_options.loss_sums = true;
  Expected<frontend::ForwardModel> forward = frontend::lower_forward(*spec, 2, 16, forward_options);
  ASSERT_TRUE(forward.ok()) << forward.error().message();
  Expected<autodiff::TrainStepLayout> step = autodiff::add_train_step(
      forward->module, forward->module.function(0), forward->weights.size(), {});
  ASSERT_TRUE(step.ok());
  const ir::Function& f = *step->function;
  BufferOptions options;
  options.stacked_layer_gradients = true;
  options.scan_layers_per_block = layout.layers_per_block;
  options.scanned_layers = layout.scanned_layers;
  MemoryPlan plan = plan_memory(f, options);
  std::map<int64_t, int64_t> stacks_by_layers;  // stack size -> count
  std::set<int64_t> first_places;
  int64_t remainder = 0;
  for (const Buffer& b : plan.buffers) {
    const ir::OpFacts& facts = f.facts(f.defining_op(b.value));
    if (b.category != MemoryCategory::kGradients || !facts.in_layer()) continue;
    if (facts.layer >= scanned) {
      EXPECT_EQ(b.layers, 1);
      ++remainder;
      continue;
    }
    ++stacks_by_layers[b.layers];
    first_places.insert(facts.layer % per_block);
  }
  EXPECT_EQ(stacks_by_layers.size(), 1u);
  EXPECT_EQ(stacks_by_layers.begin()->first, blocks);
  EXPECT_EQ(static_cast<int64_t>(first_places.size()), per_block);
  if (layers > scanned) {
    ASSERT_GT(remainder, 0);
    EXPECT_EQ(stacks_by_layers.begin()->second, per_block * remainder);
  }
  // One stack over all the layers instead: what a single-layer scan would give.
  options.scan_layers_per_block = 1;
  options.scanned_layers = layers;
  MemoryPlan flat = plan_memory(f, options);
  int64_t largest = 0;
  for (const Buffer& b : flat.buffers) largest = std::max<int64_t>(largest, b.layers);
  EXPECT_EQ(largest, layers);
}

TEST(BufferAssignment, ScannedBlocksStackGradientsByPlaceInTheBlock) {
  expect_scan_blocks("gemma3-4b", 13, 6, 12, 2);
  expect_scan_blocks("olmo3-7b", 8, 4, 8, 2);
}

// XLA's scan carries a layer's weight gradients in the weight's dtype: the backward loop body
// converts each bf16 gradient to f32 before accumulating it into the stacked buffer (llama2-7b's
// `wide.param.66{2}`, f32[32 x 256 x 11008], in benchmarks/xla_reference/peaks). With XLA's
// accounting each stacked 2-D gradient of the tiny llama2 (emb 32, mlp 48, 2 layers) takes the
// f32 TPU layout by hand: the (8, 128) tile over whichever orientation pads least, 4 bytes an
// element, per layer; without it (the CPU's plan) the bf16 bytes, a x b x 2 per layer.
TEST(BufferAssignment, XlaScanCarriesLayerGradientsInTheWeightsDtype) {
  std::unique_ptr<TinyTrainStep> tiny = tiny_llama2_train_step();
  ASSERT_NE(tiny, nullptr);
  const ir::Function& f = *tiny->step;
  auto round_up = [](int64_t n, int64_t m) { return (n + m - 1) / m * m; };
  for (bool xla : {false, true}) {
    SCOPED_TRACE(xla ? "xla" : "cpu");
    BufferOptions options;
    options.stacked_layer_gradients = true;
    options.xla.enabled = xla;
    MemoryPlan plan = plan_memory(f, options);
    int64_t checked = 0;
    for (const Buffer& b : plan.buffers) {
      if (!b.value.valid() || b.category != MemoryCategory::kGradients || b.layers != 2) continue;
      const ir::TensorType& t = f.type(b.value);
      if (t.dtype != ir::DType::kBF16 || t.rank() != 2) continue;
      int64_t a = t.dims[0], c = t.dims[1];
      int64_t per_layer = xla ? 4 * std::min(round_up(a, 8) * round_up(c, 128),
                                             round_up(c, 8) * round_up(a, 128))
                              : 2 * a * c;
      EXPECT_EQ(b.bytes, 2 * per_layer) << ir::to_string(t);
      ++checked;
    }
    // The MLP's three kernels at least ([32,48] or [48,32] each).
    EXPECT_GE(checked, 3);
  }
}

// XLA's preallocated-temp arena (xla.model_arena, `precast analyze --xla-arena`), as its dumps of
// MaxText's step show it (benchmarks/xla_reference/README.md), on the tiny llama2 (emb 32, mlp 48,
// 2 layers, vocab 64, batch 2 x 16 tokens, bf16 activations, f32 weights):
// * the output head's f32 chain is recomputed in the backward: the only logits-shaped forward
//   value the backward reads is the bf16 dot, bf16[2,16,64] = 2 x 16 rows x 128 lanes x 2 bytes;
// * the head's weight gradient runs after the backward layer loop, so the bf16 logits gradient
//   lives to the last backward op of a layer;
// * each weight's bf16 copy is one buffer: the 7 kernels (q, k, v, out, wi_0, wi_1, wo) and 2
//   norm scales of each of the 2 layers plus the embedding table and the unembedding kernel, 20
//   weights read through a convert, each copy made once; a layer's 18 copies live from the first
//   op of a layer to the last backward one.
// Without model_arena (the product's plan) none of this holds.
TEST(BufferAssignment, XlaArenaModelsTheHeadAndTheWeightCopies) {
  std::unique_ptr<TinyTrainStep> tiny = tiny_llama2_train_step();
  ASSERT_NE(tiny, nullptr);
  const ir::Function& f = *tiny->step;
  int32_t first_layer = -1, last_layer_backward = -1;
  for (ir::OpIndex i = 0; i < f.num_ops(); ++i) {
    if (!f.facts(i).in_layer()) continue;
    if (first_layer < 0) first_layer = static_cast<int32_t>(i);
    if (f.facts(i).phase == ir::OpPhase::kBackward) last_layer_backward = static_cast<int32_t>(i);
  }
  ASSERT_GE(first_layer, 0);
  const std::vector<int64_t> logits_shape = {2, 16, 64};
  for (bool arena : {false, true}) {
    SCOPED_TRACE(arena ? "xla arena" : "memory_analysis plan");
    BufferOptions options;
    options.stacked_layer_gradients = true;
    options.xla.enabled = true;
    options.xla.model_arena = arena;
    MemoryPlan plan = plan_memory(f, options);
    std::vector<int64_t> kept_logits;  // bytes of logits-shaped forward buffers read in backward
    int32_t gradient_end = -1;         // the bf16 logits gradient's last use
    std::map<uint32_t, int> copies;    // weight -> buffers of its converts
    std::vector<std::pair<int32_t, int32_t>> layer_copy_ranges;
    for (const Buffer& b : plan.buffers) {
      if (!b.value.valid()) continue;
      ir::OpIndex def = f.defining_op(b.value);
      const ir::Op& op = f.op(def);
      const ir::TensorType& t = f.type(b.value);
      if (t.dims == logits_shape && op.facts.region == ir::OpRegion::kLogits) {
        if (op.facts.phase == ir::OpPhase::kForward && b.end > last_layer_backward / 2) {
          kept_logits.push_back(b.bytes);
        }
        if (op.facts.phase == ir::OpPhase::kBackward && t.dtype == ir::DType::kBF16) {
          gradient_end = std::max(gradient_end, b.end);
        }
      }
      if (op.kind == ir::OpKind::kConvert && f.is_param(f.operands(op)[0]) &&
          t.dtype == ir::DType::kBF16) {
        ++copies[f.operands(op)[0].id];
        if (op.facts.in_layer()) layer_copy_ranges.push_back({b.start, b.end});
      }
    }
    if (arena) {
      EXPECT_EQ(kept_logits, std::vector<int64_t>{2 * 16 * 128 * 2});
      EXPECT_EQ(gradient_end, last_layer_backward);
      EXPECT_EQ(copies.size(), 20u);
      for (const auto& [weight, count] : copies) EXPECT_EQ(count, 1) << "weight %" << weight;
      EXPECT_EQ(layer_copy_ranges.size(), 18u);
      for (const auto& [start, end] : layer_copy_ranges) {
        EXPECT_EQ(start, first_layer);
        EXPECT_EQ(end, last_layer_backward);
      }
    } else {
      // The f32 convert and the max-shifted exp at least are kept beside the bf16 dot.
      EXPECT_GE(kept_logits.size(), 3u);
      EXPECT_LT(gradient_end, last_layer_backward);
      // A layer's copy lives from its own layer's convert to its own backward: the second
      // layer's starts after the first op of a layer, the first layer's ends before the last
      // backward op of a layer (the backward runs the layers in reverse).
      bool later_start = false, earlier_end = false;
      for (const auto& [start, end] : layer_copy_ranges) {
        later_start = later_start || start > first_layer;
        earlier_end = earlier_end || end < last_layer_backward;
      }
      EXPECT_TRUE(later_start);
      EXPECT_TRUE(earlier_end);
    }
  }
}

// The same tiny llama2 (4 heads, 16 tokens, batch 2) in a plan of XLA's arena:
// * no value of a scanned layer is fused into an op of another layer or outside the layers: it
//   leaves XLA's loop body as a carry or a stacked output, so it is stored (without model_arena
//   the residual stream's gradient adds are fused across layers);
// * with attention_scores (attention=dot_product) every attention and attention gradient holds
//   its f32 scores, [batch 2, heads 4, query 16, key 16] in TPU tiles: the key dimension padded to
//   128 lanes, 2 x 4 x 16 x 128 x 4 = 65 536 bytes, live at that op only; 2 layers' forward
//   attention and their gradients (this step recomputes nothing): 4 buffers.
TEST(BufferAssignment, XlaArenaStoresLayerOutputsAndDotProductScores) {
  std::unique_ptr<TinyTrainStep> tiny = tiny_llama2_train_step();
  ASSERT_NE(tiny, nullptr);
  const ir::Function& f = *tiny->step;
  for (bool arena : {false, true}) {
    SCOPED_TRACE(arena ? "xla arena" : "memory_analysis plan");
    BufferOptions options;
    options.stacked_layer_gradients = true;
    options.xla.enabled = true;
    options.xla.model_arena = arena;
    options.xla.attention_scores = true;
    std::vector<ir::Value> buffers = value_buffers(f, options);
    int fused_across = 0;
    for (ir::OpIndex i = 0; i < f.num_ops(); ++i) {
      const ir::Op& op = f.op(i);
      if (op.num_results != 1 || !op.facts.in_layer()) continue;
      ir::Value v = f.result(op);
      if (buffers[v.id].valid()) continue;
      for (ir::OpIndex u = i + 1; u < f.num_ops(); ++u) {
        bool reads = false;
        for (ir::Value w : f.operands(f.op(u))) reads = reads || w.id == v.id;
        if (reads && f.op(u).facts.layer != op.facts.layer) {
          ++fused_across;
          break;
        }
      }
    }
    MemoryPlan plan = plan_memory(f, options);
    std::vector<std::pair<int32_t, int32_t>> scores;
    for (const Buffer& b : plan.buffers) {
      if (!b.value.valid() && b.bytes == 2 * 4 * 16 * 128 * 4) scores.push_back({b.start, b.end});
    }
    if (arena) {
      EXPECT_EQ(fused_across, 0);
      ASSERT_EQ(scores.size(), 4u);
      for (const auto& [start, end] : scores) {
        EXPECT_EQ(start, end);
        ir::OpKind kind = f.op(static_cast<ir::OpIndex>(start)).kind;
        EXPECT_TRUE(kind == ir::OpKind::kAttention || kind == ir::OpKind::kAttentionGrad);
      }
    } else {
      EXPECT_GT(fused_across, 0);
      EXPECT_TRUE(scores.empty());
    }
  }
}

}  // namespace
}  // namespace precast
