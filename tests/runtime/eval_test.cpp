// Evaluation and greedy sampling (issue 17): the artifact's eval_step against the train step's
// loss on the same batch, MaxText's eval line and eval/ figures from the per-batch sums, the
// eval_interval schedule by hand, the held-out documents disjoint from the trained ones, the
// greedy sample against the IR interpreter running sample_step's own IR, and the refusals.
// The tiny llama2 (V 259, T 32, 4 rows, eval_interval=1, sample_tokens=6) is compiled once at
// build time.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "compiler/artifact/ArtifactIo.h"
#include "compiler/artifact/ArtifactText.h"
#include "ir/Interpreter.h"
#include "ir/Parser.h"
#include "runtime/collectives/Communicator.h"
#include "runtime/data/ByteTokenizer.h"
#include "runtime/data/Corpus.h"
#include "runtime/data/TokenFile.h"
#include "runtime/eval/Evaluator.h"
#include "runtime/kernels/ThreadPool.h"
#include "runtime/train/StateInit.h"
#include "runtime/train/StepExecutable.h"
#include "runtime/train/TensorElements.h"
#include "runtime/train/Trainer.h"
#include "tests/support/Command.h"
#include "tests/support/ConfigTestUtil.h"
#include "tests/support/MetricsLines.h"

namespace precast {
namespace {

using testing::TempDir;

artifact::Artifact eval_artifact() {
  Expected<artifact::Artifact> a = artifact::read_artifact(PRECAST_EVAL_ARTIFACT);
  EXPECT_TRUE(a.ok()) << a.error().message();
  return a.ok() ? *a : artifact::Artifact{};
}

runtime::RunSettings settings_of(const artifact::Artifact& a, const TempDir& dir,
                                 std::vector<std::string> overrides) {
  overrides.push_back("base_output_directory=" + dir.path().string());
  overrides.push_back("run_name=eval");
  overrides.push_back("enable_tensorboard=false");
  overrides.push_back("learning_rate=3e-3");
  Expected<runtime::RunSettings> s = runtime::run_settings(a, overrides);
  EXPECT_TRUE(s.ok()) << s.error().message();
  return s.ok() ? *s : runtime::RunSettings{};
}

// Document i: BOS, "d<i>:" and (i % 7) letters, EOS: 5 + i % 7 tokens for i < 10, 6 + i % 7
// after. Written as a token file.
std::vector<uint32_t> labelled_document(int i) {
  std::string text = "d" + std::to_string(i) + ":" + std::string(static_cast<size_t>(i % 7), 'x');
  return data::tokenize_bytes(text, true, true);
}

std::string write_corpus(const TempDir& dir, int documents) {
  data::TokenDocuments docs;
  docs.bos = data::kByteBos;
  docs.eos = data::kByteEos;
  docs.pad = data::kBytePad;
  for (int i = 0; i < documents; ++i) docs.add_document(labelled_document(i));
  std::string path = (dir.path() / "labelled.tokens").string();
  Status written = data::write_token_file(path, docs);
  EXPECT_TRUE(written.ok()) << written.error().message();
  return path;
}

// Eval after step s and step s + 1's training loss see the same parameters (the update of step s
// applied, that of s + 1 not yet) and, on synthetic data with eval rows = train rows, the same
// batch: the losses agree to f32 round-off, as do total_weights (4 rows x 32 targets).
TEST(EvalStep, LossEqualsTheTrainStepsLossOnTheSameBatchBeforeItsUpdate) {
  artifact::Artifact a = eval_artifact();
  TempDir dir;
  runtime::RunSettings s = settings_of(a, dir, {"steps=4", "eval_interval=1", "sample_tokens=0"});
  Expected<runtime::TrainReport> report = runtime::train(a, s);
  ASSERT_TRUE(report.ok()) << report.error().message();
  ASSERT_EQ(report->evals.size(), 4u);
  for (size_t e = 0; e + 1 < report->evals.size(); ++e) {
    const runtime::EvalMetrics& eval = report->evals[e];
    const runtime::StepMetrics& next = report->steps[e + 1];
    EXPECT_EQ(eval.step, static_cast<int64_t>(e));
    EXPECT_EQ(eval.batches, 1);
    EXPECT_EQ(eval.total_weights, 128.0);
    EXPECT_EQ(next.total_weights, 128.0);
    EXPECT_NEAR(eval.avg_loss, next.loss, 2e-6 * next.loss) << "after step " << e;
    EXPECT_DOUBLE_EQ(eval.avg_perplexity, std::exp(eval.avg_loss));
  }
  // The loss falls, so each evaluation differs from the previous one.
  EXPECT_LT(report->evals[3].avg_loss, report->evals[0].avg_loss);
}

// The eval_interval schedule, by hand: MaxText evaluates after step s when s >= eval_start_step
// and (s - eval_start_step) % eval_interval == 0; nothing else (no extra evaluation at the end).
TEST(EvalSchedule, StepsAfterWhichEvaluationRuns) {
  auto due = [](int64_t interval, int64_t start, int64_t steps) {
    runtime::EvalSettings e;
    e.interval = interval;
    e.start_step = start;
    std::vector<int64_t> out;
    for (int64_t s = 0; s < steps; ++s) {
      if (e.due(s)) out.push_back(s);
    }
    return out;
  };
  EXPECT_EQ(due(3, 0, 10), (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(due(3, 2, 10), (std::vector<int64_t>{2, 5, 8}));
  EXPECT_EQ(due(1, 0, 3), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(due(-1, 0, 10), (std::vector<int64_t>{}));

  // The trainer follows it: 7 steps, eval_interval=3, eval_start_step=1: after steps 1 and 4.
  artifact::Artifact a = eval_artifact();
  TempDir dir;
  runtime::RunSettings s = settings_of(
      a, dir, {"steps=7", "eval_interval=3", "eval_start_step=1", "sample_tokens=0"});
  Expected<runtime::TrainReport> report = runtime::train(a, s);
  ASSERT_TRUE(report.ok()) << report.error().message();
  std::vector<int64_t> steps;
  for (const runtime::EvalMetrics& e : report->evals) steps.push_back(e.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 4}));
}

// MaxText's line, character for character (total_weights as Python prints a float).
TEST(EvalLine, MaxTextsFormat) {
  runtime::EvalMetrics m;
  m.step = 4;
  m.avg_loss = 5.98412;
  m.avg_perplexity = 396.8804;
  m.total_weights = 999;
  m.avg_z_loss = 0.00049;
  EXPECT_EQ(runtime::eval_line(m),
            "Completed eval after train step 4, loss=5.984, perplexity=396.880, "
            "total_weights=999.0, avg_z_loss=0.000");
  m.total_weights = 12.5;
  EXPECT_NE(runtime::eval_line(m).find("total_weights=12.5,"), std::string::npos);
  runtime::Scalars scalars = runtime::eval_scalars(m);
  ASSERT_EQ(scalars.size(), 6u);
  EXPECT_EQ(scalars[0].first, "eval/avg_loss");
  EXPECT_EQ(scalars[1].first, "eval/avg_perplexity");
  EXPECT_EQ(scalars[2].first, "eval/total_weights");
  EXPECT_EQ(scalars[3].first, "eval/avg_z_loss");
  EXPECT_EQ(scalars[5].first, "eval/step_time_seconds");
  // With routed experts: MaxText's avg_moe_lb_loss after avg_z_loss, and two more figures.
  m.moe_lb_loss = 0.0624;
  m.avg_moe_lb_loss = 0.0208;
  EXPECT_EQ(runtime::eval_line(m),
            "Completed eval after train step 4, loss=5.984, perplexity=396.880, "
            "total_weights=12.5, avg_z_loss=0.000, avg_moe_lb_loss=0.021");
  scalars = runtime::eval_scalars(m);
  ASSERT_EQ(scalars.size(), 8u);
  EXPECT_EQ(scalars[6], (std::pair<std::string, double>{"eval/moe_lb_loss", 0.0624}));
  EXPECT_EQ(scalars[7], (std::pair<std::string, double>{"eval/avg_moe_lb_loss", 0.0208}));
}

// A tiny mixtral with MaxText's load-balancing loss: eval after step s sees the parameters step
// s + 1 trains from and, on the synthetic batch with eval rows = train rows, the same batch, so
// its avg_moe_lb_loss is step s + 1's moe_lb_loss and its loss step s + 1's lm_loss (the cross
// entropy alone: MaxText's eval loss leaves the load-balancing term out), to f32 round-off.
// Compiled here by `precast compile` (a few seconds).
TEST(EvalStep, MixtureOfExpertsReportsTheLoadBalancingLossOfTheTrainStep) {
  TempDir dir;
  const std::string pcx = (dir.path() / "moe_eval.pcx").string();
  testing::CommandResult compiled = testing::run_command(
      std::string("cd ") + PRECAST_SOURCE_DIR + " && " + PRECAST_BINARY +
      " compile configs/base.yml model_name=mixtral-8x7b override_model_config=true "
      "base_emb_dim=32 base_num_decoder_layers=2 base_num_query_heads=4 base_num_kv_heads=4 "
      "head_dim=8 base_mlp_dim=32 base_moe_mlp_dim=32 num_experts=4 num_experts_per_tok=2 "
      "vocab_size=256 max_target_length=16 per_device_batch_size=4 dtype=float32 "
      "weight_dtype=float32 load_balance_loss_weight=0.01 compile_topology=cpu-1 "
      "eval_interval=1 compiled_trainstep_file=" + pcx + " 2>&1");
  ASSERT_EQ(compiled.code, 0) << compiled.output;
  Expected<artifact::Artifact> a = artifact::read_artifact(pcx);
  ASSERT_TRUE(a.ok()) << a.error().message();
  runtime::RunSettings s = settings_of(*a, dir, {"steps=3", "eval_interval=1"});
  Expected<runtime::TrainReport> report = runtime::train(*a, s);
  ASSERT_TRUE(report.ok()) << report.error().message();
  ASSERT_EQ(report->evals.size(), 3u);
  for (size_t e = 0; e + 1 < report->evals.size(); ++e) {
    const runtime::EvalMetrics& eval = report->evals[e];
    const runtime::StepMetrics& next = report->steps[e + 1];
    ASSERT_TRUE(eval.avg_moe_lb_loss.has_value());
    ASSERT_TRUE(next.moe_lb_loss.has_value());
    EXPECT_GT(*next.moe_lb_loss, 0.0);
    EXPECT_NEAR(*eval.avg_moe_lb_loss, *next.moe_lb_loss, 1e-5 * *next.moe_lb_loss);
    EXPECT_DOUBLE_EQ(*eval.moe_lb_loss, *eval.avg_moe_lb_loss);  // one batch
    EXPECT_NEAR(eval.avg_loss, next.lm_loss, 2e-6 * next.lm_loss) << "after step " << e;
    EXPECT_NE(runtime::eval_line(eval).find(fmt::format(", avg_moe_lb_loss={:.3f}",
                                                         *eval.avg_moe_lb_loss)),
              std::string::npos);
  }
}

// MaxText's eval-loop lines (metric_logger.py): "Starting eval after train step s", then one
// running line per eval batch with the figures of the batches so far (322.5 / 60 = 5.375,
// exp(5.375) = 215.940), then the final line. On the synthetic batch (one batch of 4 x 32
// targets) the running figures are the final ones.
TEST(EvalLine, RunningLinesInMaxTextsFormat) {
  EXPECT_EQ(runtime::running_eval_line(2, 0.25, 322.5, 60.0),
            "Completed eval step: 2, seconds: 0.250, running loss=5.375, "
            "running perplexity=215.940, running total_weights=60.0");
  EXPECT_EQ(runtime::python_float_text(60.5), "60.5");

  artifact::Artifact a = eval_artifact();
  TempDir dir;
  runtime::RunSettings s = settings_of(a, dir, {"steps=3", "eval_interval=2", "sample_tokens=0"});
  std::ostringstream log;
  runtime::TrainOptions options;
  options.log = &log;
  Expected<runtime::TrainReport> report = runtime::train(a, s, options);
  ASSERT_TRUE(report.ok()) << report.error().message();
  ASSERT_EQ(report->evals.size(), 2u);
  std::vector<std::string> lines;
  std::istringstream in(log.str());
  for (std::string line; std::getline(in, line);) {
    if (line.find("eval") != std::string::npos && line.rfind("Eval data", 0) != 0) {
      lines.push_back(line);
    }
  }
  ASSERT_EQ(lines.size(), 6u) << log.str();
  for (size_t e = 0; e < 2; ++e) {
    const runtime::EvalMetrics& m = report->evals[e];
    const std::string step = std::to_string(2 * e);
    EXPECT_EQ(lines[3 * e], "Starting eval after train step " + step);
    EXPECT_TRUE(std::regex_match(
        lines[3 * e + 1],
        std::regex(fmt::format("Completed eval step: 0, seconds: [0-9]+\\.[0-9]{{3}}, running "
                               "loss={:.3f}, running perplexity={:.3f}, running "
                               "total_weights=128\\.0",
                               m.avg_loss, m.avg_perplexity))))
        << lines[3 * e + 1];
    EXPECT_EQ(lines[3 * e + 2], runtime::eval_line(m));
    EXPECT_EQ(lines[3 * e + 2].rfind("Completed eval after train step " + step + ", loss=", 0), 0u);
  }
}

// `precast dump` of eval_test's own config (eval_interval=1 sample_tokens=6) writes both entry
// points' IR and one line each: 27 inputs = 21 parameters (2 layers x 9: two norms, q, k, v, o,
// wi_0, wi_1, wo; plus the embedding, the final norm and the untied logits) and MaxText's 6
// batch arrays; eval_step's 3 sums, sample_step's 3 sums and logits; the arena and code bytes of
// the artifact `precast compile` made from the same keys.
TEST(EvalDump, ListsEveryEntryPointAsTheArtifactHoldsIt) {
  artifact::Artifact a = eval_artifact();
  ASSERT_EQ(a.entry_points.size(), 2u);
  TempDir dir;
  testing::CommandResult dump = testing::run_command(
      std::string("cd ") + PRECAST_SOURCE_DIR + " && " + PRECAST_BINARY +
      " dump configs/base.yml " + PRECAST_EVAL_KEYS + " --dump-ir " + dir.path().string() +
      " 2>&1");
  ASSERT_EQ(dump.code, 0) << dump.output;
  const char* roles[] = {"outputs 3: 3 metric", "outputs 4: 4 metric"};
  for (size_t e = 0; e < 2; ++e) {
    const artifact::EntryPoint& entry = a.entry_points[e];
    const std::string line = fmt::format(
        "entry point {}: inputs 27: 21 parameter, 6 batch; {}; arena {} bytes; object code {} "
        "bytes\n",
        entry.name, roles[e], artifact::group_digits(entry.plan.arena_bytes),
        artifact::group_digits(static_cast<int64_t>(entry.object_code.size())));
    EXPECT_NE(dump.output.find(line), std::string::npos) << line << dump.output;
    const std::string ir = testing::file_bytes(dir.path() / (entry.name + ".ir"));
    EXPECT_EQ(ir, entry.ir_text.back() == '\n' ? entry.ir_text : entry.ir_text + "\n");
  }
  EXPECT_EQ(a.entry_points[0].name, "eval_step");
  EXPECT_EQ(a.entry_points[1].name, "sample_step");
}

// The held-out split by document id: of 60 labelled documents, 19, 39 and 59 (every 20th) are
// the eval set and none of them is trained on; eval_dataset_path makes every document an eval
// document.
TEST(EvalData, HeldOutDocumentsAreDisjointFromTheTrainedOnes) {
  TempDir dir;
  std::string path = write_corpus(dir, 60);
  data::DataSettings d;
  d.type = "tokens";
  d.path = path;
  Expected<data::Corpus> corpus = data::load_corpus(d, 259);
  ASSERT_TRUE(corpus.ok()) << corpus.error().message();
  ASSERT_EQ(corpus->held_out.document_count(), 3u);
  EXPECT_EQ(corpus->held_out.document(0), labelled_document(19));
  EXPECT_EQ(corpus->held_out.document(1), labelled_document(39));
  EXPECT_EQ(corpus->held_out.document(2), labelled_document(59));
  ASSERT_EQ(corpus->train.document_count(), 57u);
  size_t t = 0;
  for (int i = 0; i < 60; ++i) {
    if (i % 20 == 19) continue;
    EXPECT_EQ(corpus->train.document(t++), labelled_document(i)) << i;
  }
  Expected<data::Corpus> all = data::load_eval_corpus(d, 259);
  ASSERT_TRUE(all.ok()) << all.error().message();
  EXPECT_EQ(all->held_out.document_count(), 60u);
  EXPECT_EQ(all->train.document_count(), 0u);
}

// One process's train step and eval_step sharing the parameters, initialised from seed 0.
struct Loaded {
  artifact::Artifact a;
  std::unique_ptr<runtime::SingleProcessCommunicator> comm;
  std::unique_ptr<runtime::StepExecutable> train;
  std::unique_ptr<ThreadPool> pool;
};

void load_initialised(Loaded& l) {
  l.a = eval_artifact();
  auto comm = runtime::SingleProcessCommunicator::create(1);
  ASSERT_TRUE(comm.ok());
  l.comm = std::move(*comm);
  auto step = runtime::StepExecutable::load(l.a, *l.comm);
  ASSERT_TRUE(step.ok()) << step.error().message();
  l.train = std::make_unique<runtime::StepExecutable>(std::move(*step));
  ASSERT_TRUE(l.train->allocate_buffers().ok());
  l.pool = std::make_unique<ThreadPool>(1);
  for (size_t i = 0; i < l.a.signature.inputs.size(); ++i) {
    if (l.a.signature.inputs[i].role != "parameter") continue;
    ASSERT_TRUE(runtime::initialise(l.train->input(i), l.a.signature.inputs[i], i, 0, *l.pool).ok());
  }
}

// eval/avg_loss over eval_steps batches = the sum of the batches' loss sums / the sum of their
// weights (+ 1e-8), perplexity its exp, avg_z_loss the mean of the batches' z_loss / weights; the
// whole set (eval_steps=-1) counts every target of the 60 documents: sum of (tokens - 1).
TEST(EvalMetrics, AveragesComeFromThePerBatchSums) {
  Loaded l;
  load_initialised(l);
  TempDir dir;
  std::string path = write_corpus(dir, 60);
  data::DataSettings d;
  d.type = "tokens";
  runtime::EvalSettings e;
  e.interval = 1;
  e.steps = 3;
  e.dataset_path = path;
  runtime::CommunicatorResolver resolve =
      [&](const artifact::Collective&) -> Expected<runtime::Communicator*> { return l.comm.get(); };
  auto evaluator = runtime::Evaluator::create(l.a, *l.train, e, d, 259, resolve, {});
  ASSERT_TRUE(evaluator.ok()) << evaluator.error().message();
  const RuntimeContext context{GemmImpl::kOpenBlas, l.pool.get(), {}};
  std::vector<runtime::EvalBatch> batches;
  auto m = (*evaluator)->evaluate(7, context, &batches);
  ASSERT_TRUE(m.ok()) << m.error().message();
  ASSERT_EQ(batches.size(), 3u);
  double xent = 0, weights = 0, z = 0;
  for (const runtime::EvalBatch& b : batches) {
    EXPECT_GT(b.total_weights, 0);
    xent += b.xent_sum;
    weights += b.total_weights;
    z += b.z_loss_sum / (b.total_weights + 1e-8);
  }
  EXPECT_EQ(m->step, 7);
  EXPECT_EQ(m->batches, 3);
  EXPECT_EQ(m->total_weights, weights);
  EXPECT_DOUBLE_EQ(m->avg_loss, xent / (weights + 1e-8));
  EXPECT_DOUBLE_EQ(m->avg_perplexity, std::exp(xent / (weights + 1e-8)));
  EXPECT_DOUBLE_EQ(m->avg_z_loss, z / 3);

  // The whole set, read from its start again: every document's targets.
  e.steps = -1;
  auto whole = runtime::Evaluator::create(l.a, *l.train, e, d, 259, resolve, {});
  ASSERT_TRUE(whole.ok()) << whole.error().message();
  auto all = (*whole)->evaluate(8, context);
  ASSERT_TRUE(all.ok()) << all.error().message();
  // Document i has 3 + digits(i) + i % 7 targets (BOS, 'd', the digits, ':', the letters, then
  // EOS): 60 x 3 + (10 x 1 + 50 x 2) + (8 x 21 + 0 + 1 + 2 + 3) = 180 + 110 + 174.
  EXPECT_EQ(all->total_weights, 464.0);
  // Twice in a row: the same figures (the set is rewound, nothing is updated).
  auto again = (*whole)->evaluate(9, context);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->avg_loss, all->avg_loss);
  EXPECT_EQ(again->batches, all->batches);
}

ir::HostTensor host_tensor(const artifact::TensorSignature& t, const void* data) {
  std::optional<ir::DType> dtype = ir::dtype_from_name(t.dtype);
  EXPECT_TRUE(dtype.has_value()) << t.dtype;
  ir::HostTensor out = ir::HostTensor::filled(ir::TensorType{*dtype, t.shape}, 0);
  for (size_t i = 0; i < out.values.size(); ++i) {
    out.values[i] = runtime::load(static_cast<const char*>(data) + i * static_cast<size_t>(
                                                                       runtime::dtype_bytes(t.dtype)),
                                  t.dtype);
  }
  return out;
}

// decode_sampling_*: topk with k = 1 draws from the largest logit alone, so it gives the greedy
// tokens; weighted draws (temperature 1) from the same seed repeat token for token, and the line
// names the strategy.
TEST(SampleStrategy, TopOneIsGreedyAndDrawsRepeat) {
  artifact::Artifact a = eval_artifact();
  auto sample = [&](std::vector<std::string> keys) {
    TempDir dir;
    keys.insert(keys.end(), {"steps=3", "eval_interval=-1", "sample_tokens=6", "sample_prompt=d1"});
    runtime::RunSettings s = settings_of(a, dir, keys);
    Expected<runtime::TrainReport> report = runtime::train(a, s);
    EXPECT_TRUE(report.ok()) << report.error().message();
    return report.ok() && report->sample ? *report->sample : runtime::SampleResult{};
  };
  runtime::SampleResult greedy = sample({});
  ASSERT_EQ(greedy.strategy, "greedy");
  EXPECT_EQ(sample({"decode_sampling_strategy=topk", "decode_sampling_top_k=1"}).tokens,
            greedy.tokens);
  runtime::SampleResult drawn = sample({"decode_sampling_strategy=weighted"});
  EXPECT_FALSE(drawn.tokens.empty());
  EXPECT_EQ(sample({"decode_sampling_strategy=weighted"}).tokens, drawn.tokens);
  EXPECT_EQ(runtime::sample_line("d1", drawn).rfind(
                fmt::format("Sample ({} tokens, weighted", drawn.tokens.size()), 0),
            0u);
}

// The greedy sample after 3 steps equals the one the IR interpreter gives running sample_step's
// own IR text on the trained weights: each next token the argmax of the last position's logits
// over BOS, the prompt's bytes and the tokens so far (the row padded with PAD, segment 0). Two
// runs give the same tokens.
TEST(GreedySample, EqualsTheInterpretersArgmaxAndIsDeterministic) {
  artifact::Artifact a = eval_artifact();
  TempDir dir;
  runtime::RunSettings s =
      settings_of(a, dir, {"steps=3", "eval_interval=-1", "sample_tokens=6", "sample_prompt=d1"});
  runtime::TrainOptions keep;
  keep.keep_final_state = true;
  Expected<runtime::TrainReport> report = runtime::train(a, s, keep);
  ASSERT_TRUE(report.ok()) << report.error().message();
  ASSERT_TRUE(report->sample.has_value());
  const runtime::SampleResult& sample = *report->sample;
  EXPECT_EQ(sample.prompt_tokens, (std::vector<uint32_t>{256, 'd', '1'}));
  EXPECT_FALSE(sample.tokens.empty());

  Expected<artifact::Artifact> view = artifact::entry_point_artifact(a, artifact::kSampleStepEntry);
  ASSERT_TRUE(view.ok());
  Expected<ir::Module> module = ir::parse_module(view->ir_text);
  ASSERT_TRUE(module.ok()) << module.error().message();
  const artifact::Signature& sig = view->signature;
  std::vector<ir::HostTensor> args;
  std::vector<size_t> batch;
  for (size_t i = 0; i < sig.inputs.size(); ++i) {
    const artifact::TensorSignature& t = sig.inputs[i];
    if (t.role == "batch") {
      batch.push_back(i);
      args.push_back(host_tensor(t, std::vector<uint8_t>(static_cast<size_t>(runtime::tensor_bytes(t))).data()));
      continue;
    }
    size_t j = 0;
    while (j < a.signature.inputs.size() && a.signature.inputs[j].name != t.name) ++j;
    ASSERT_LT(j, a.signature.inputs.size()) << t.name;
    args.push_back(host_tensor(t, report->final_state[j].data()));
  }
  ASSERT_EQ(batch.size(), 6u);
  size_t logits = 0;
  while (logits < sig.outputs.size() && sig.outputs[logits].name != "logits") ++logits;
  ASSERT_LT(logits, sig.outputs.size());
  const int64_t length = sig.outputs[logits].shape[1], vocab = sig.outputs[logits].shape[2];
  EXPECT_EQ(length, 32);
  EXPECT_EQ(vocab, 259);

  std::vector<uint32_t> sequence = sample.prompt_tokens, expected;
  while (expected.size() < 6) {
    const auto n = static_cast<int64_t>(sequence.size());
    for (int64_t t = 0; t < length; ++t) {
      bool inside = t < n;
      double row[] = {inside ? static_cast<double>(sequence[static_cast<size_t>(t)]) : 258.0,
                      static_cast<double>(t), inside ? 1.0 : 0.0,
                      t + 1 < n ? static_cast<double>(sequence[static_cast<size_t>(t + 1)]) : 258.0,
                      static_cast<double>(t), t + 1 < n ? 1.0 : 0.0};
      for (size_t k = 0; k < 6; ++k) args[batch[k]].values[static_cast<size_t>(t)] = row[k];
    }
    Expected<std::vector<ir::HostTensor>> out = ir::interpret(module->function(0), args);
    ASSERT_TRUE(out.ok()) << out.error().message();
    const std::vector<double>& values = (*out)[logits].values;
    size_t base = static_cast<size_t>((n - 1) * vocab);
    uint32_t best = 0;
    for (int64_t v = 1; v < vocab; ++v) {
      if (values[base + static_cast<size_t>(v)] > values[base + best]) best = static_cast<uint32_t>(v);
    }
    expected.push_back(best);
    sequence.push_back(best);
    if (best == data::kByteEos) break;
  }
  EXPECT_EQ(sample.tokens, expected);

  Expected<runtime::TrainReport> again = runtime::train(a, s);
  ASSERT_TRUE(again.ok()) << again.error().message();
  ASSERT_TRUE(again->sample.has_value());
  EXPECT_EQ(again->sample->tokens, sample.tokens);
}

// precast-run's refusals: a missing eval_dataset_path (exit 2, naming it), an artifact compiled
// without eval_step asked to evaluate (exit 4, naming the key to recompile with), an artifact of
// the previous format version (exit 4, naming both versions).
TEST(EvalRefusals, BadPathMissingEntryPointOldFormat) {
  TempDir dir;
  std::string out = " base_output_directory=" + dir.path().string();
  std::string missing = (dir.path() / "no_such.tokens").string();
  testing::CommandResult bad = testing::run_command(
      std::string(PRECAST_RUN_BINARY) + " " + PRECAST_EVAL_ARTIFACT +
      " steps=2 eval_interval=1 dataset_type=synthetic eval_dataset_path=" + missing + out);
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("eval_dataset_path=" + missing + ": '" + missing + "' does not exist"),
            std::string::npos)
      << bad.output;
  EXPECT_EQ(bad.output.find("completed step"), std::string::npos) << bad.output;

  testing::CommandResult no_entry = testing::run_command(
      std::string(PRECAST_RUN_BINARY) + " " + PRECAST_PLAIN_ARTIFACT + " steps=2 eval_interval=1" +
      out);
  EXPECT_EQ(no_entry.code, 4) << no_entry.output;
  EXPECT_NE(no_entry.output.find("the artifact has no entry point 'eval_step' (it has: "
                                 "train_step); recompile it with eval_interval > 0 to include it"),
            std::string::npos)
      << no_entry.output;

  std::string bytes = testing::file_bytes(PRECAST_EVAL_ARTIFACT);
  uint32_t old_version = 3;
  std::memcpy(bytes.data() + artifact::kFormatVersionOffset, &old_version, sizeof old_version);
  std::string old_path = (dir.path() / "old.pcx").string();
  std::ofstream(old_path, std::ios::binary) << bytes;
  testing::CommandResult old = testing::run_command(std::string(PRECAST_RUN_BINARY) + " " +
                                                    old_path + " steps=1" + out);
  EXPECT_EQ(old.code, 4) << old.output;
  EXPECT_NE(old.output.find("unsupported format version 3 (older than this build's); this build "
                            "reads version 4"),
            std::string::npos)
      << old.output;
}

}  // namespace
}  // namespace precast
