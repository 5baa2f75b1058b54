// precast compile -> precast-run, end to end on a tiny llama2: MaxText's log lines; the runtime
// allocates exactly the compiler's plan; two runs give bitwise-identical losses; every kind of
// bad artifact is refused with exit 4 and a message naming what is wrong; a cross-compiled
// AArch64 artifact holds AArch64 code and is refused here, naming the triple.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compiler/artifact/ArtifactIo.h"
#include "compiler/driver/Compile.h"
#include "ir/Interpreter.h"
#include "ir/Parser.h"
#include "ir/Random.h"
#include "runtime/train/StateInit.h"
#include "runtime/train/Trainer.h"
#include "tests/support/Command.h"

namespace precast {
namespace {

namespace fs = std::filesystem;

const fs::path kSource = PRECAST_SOURCE_DIR;

using Result = testing::CommandResult;
Result run(const std::string& command) { return testing::run_command(command); }

// A 2-layer llama2 (E 64, H 4, D 16, M 128, V 256, T 32, batch 4) in f32.
std::vector<std::string> tiny_overrides() {
  return {"base_emb_dim=64",         "base_num_decoder_layers=2", "base_num_query_heads=4",
          "base_num_kv_heads=4",     "head_dim=16",               "base_mlp_dim=128",
          "vocab_size=256",          "per_device_batch_size=4",   "max_target_length=32",
          "dtype=float32",           "compile_topology=cpu-1"};
}

// A model config and the keys that make it small.
struct Family {
  std::string model;
  std::vector<std::string> extra;
};

class PrecastRun : public ::testing::Test {
 protected:
  // Compiles each family small (32 wide, 2 layers) and compares one step with the interpreter.
  static void compile_and_compare(const std::vector<Family>& families);
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("precast_run_test_" + std::to_string(getpid())));
    fs::create_directories(*dir_);
    Expected<CompileResult> result = compile_tiny("tiny.pcx");
    ASSERT_TRUE(result.ok()) << result.error().message();
    plan_ = new artifact::BufferPlan(result->artifact.plan);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete plan_;
  }

  static std::string artifact() { return (*dir_ / "tiny.pcx").string(); }
  // The tiny config with `extra` keys, compiled to `name` in the test directory.
  static Expected<CompileResult> compile_tiny(const std::string& name,
                                              const std::vector<std::string>& extra = {}) {
    CompileRequest request;
    request.config.config_file = kSource / "configs" / "base.yml";
    request.config.overrides = tiny_overrides();
    request.config.overrides.insert(request.config.overrides.end(), extra.begin(), extra.end());
    request.output = (*dir_ / name).string();
    return compile_step(request, kSource / "configs" / "topologies.yml");
  }
  static std::string runtime() { return PRECAST_RUN_BINARY; }

  // Writes a copy of the artifact changed by `edit` (re-framed, so only the change is wrong).
  template <class Edit>
  static std::string edited(const std::string& name, Edit edit) {
    Expected<artifact::Artifact> a = artifact::read_artifact(artifact());
    EXPECT_TRUE(a.ok());
    edit(*a);
    std::string path = (*dir_ / name).string();
    EXPECT_TRUE(artifact::write_artifact(*a, path).ok());
    return path;
  }
  static std::string bytes_changed(const std::string& name, size_t keep, std::ptrdiff_t flip) {
    std::ifstream in(artifact(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    bytes.resize(std::min(bytes.size(), keep));
    if (flip >= 0) bytes[static_cast<size_t>(flip)] ^= 0x40;
    std::string path = (*dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  static fs::path* dir_;
  static artifact::BufferPlan* plan_;
};

fs::path* PrecastRun::dir_ = nullptr;
artifact::BufferPlan* PrecastRun::plan_ = nullptr;

TEST_F(PrecastRun, LogsMaxTextLinesAndAllocatesExactlyThePlan) {
  Result r = run(runtime() + " " + artifact() + " steps=3 num_threads=1");
  ASSERT_EQ(r.code, 0) << r.output;
  std::regex step(
      "completed step: 2, seconds: [0-9]+\\.[0-9]{3}, TFLOP/s/device: [0-9]+\\.[0-9]{3}, "
      "Tokens/s/device: [0-9]+\\.[0-9]{3}, total_weights: 128, loss: [0-9]+\\.[0-9]{3}, "
      "lm_loss: [0-9]+\\.[0-9]{3}, perplexity: [0-9]+\\.[0-9]{3}\n");
  EXPECT_TRUE(std::regex_search(r.output, step)) << r.output;
  EXPECT_NE(r.output.find("Num_devices: 1, shape (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)"),
            std::string::npos);
  EXPECT_NE(r.output.find("number parameters: 0.000 billion"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Memstats: After params initialized:"), std::string::npos);
  // The runtime's own count of what it allocated and bound, against the compiler's plan.
  std::string memory = fmt::format(
      "Runtime memory: arena {} bytes (planned {}), arguments {} bytes (planned {}), outputs {} "
      "bytes (planned {})",
      plan_->arena_bytes, plan_->arena_bytes, plan_->argument_bytes, plan_->argument_bytes,
      plan_->output_bytes, plan_->output_bytes);
  EXPECT_NE(r.output.find(memory), std::string::npos) << r.output;
}

// The runtime links LLVM's JIT linker only: no optimiser pipeline, no code generator.
// The step program lists what the compiled step runs, in order, each step a function of the
// object code that precast-run calls (every other test here runs through it).
TEST_F(PrecastRun, TheStepProgramListsEveryKernelGemmAndAttentionInOrder) {
  Expected<artifact::Artifact> a = artifact::read_artifact(artifact());
  ASSERT_TRUE(a.ok()) << a.error().message();
  Expected<ir::Module> module = ir::parse_module(a->ir_text);
  ASSERT_TRUE(module.ok()) << module.error().message();
  const ir::Function& f = module->function(0);
  int64_t dots = 0, attentions = 0;
  for (const ir::Op& op : f.ops()) {
    dots += op.kind == ir::OpKind::kDotGeneral;
    attentions += op.kind == ir::OpKind::kAttention || op.kind == ir::OpKind::kAttentionGrad;
  }
  // 2 layers x (forward, its recomputation under remat full, the gradient).
  EXPECT_EQ(attentions, 6);
  std::map<artifact::StepKind, int64_t> kinds;
  int64_t previous_op = -1;
  std::set<std::string> symbols;
  for (size_t i = 0; i < a->program.size(); ++i) {
    const artifact::Step& step = a->program[i];
    ++kinds[step.kind];
    EXPECT_TRUE(symbols.insert(step.symbol).second) << step.symbol;
    ASSERT_EQ(step.int_params.size(), 2u) << i;
    int64_t op = step.int_params[0], reads = step.int_params[1];
    if (step.kind == artifact::StepKind::kCopy) {
      EXPECT_EQ(i, a->program.size() - 1);  // the copies into outputs come last
    } else {
      EXPECT_GT(op, previous_op) << i;  // the IR's order
      ASSERT_LT(op, static_cast<int64_t>(f.num_ops()));
      EXPECT_NE(step.symbol.find(std::string(ir::op_name(f.op(static_cast<uint32_t>(op)).kind))),
                std::string::npos)
          << step.symbol;
      previous_op = op;
    }
    EXPECT_LE(reads, static_cast<int64_t>(step.buffers.size()));
    EXPECT_LT(reads, static_cast<int64_t>(step.buffers.size())) << "step " << i << " writes nothing";
    for (const artifact::BufferRef& ref : step.buffers) {
      switch (ref.space) {
        case artifact::BufferSpace::kTemp:
          EXPECT_LE(ref.index_or_offset + ref.bytes, a->plan.arena_bytes) << i;
          break;
        case artifact::BufferSpace::kArgument:
          EXPECT_LT(ref.index_or_offset, static_cast<int64_t>(a->signature.inputs.size()));
          break;
        case artifact::BufferSpace::kOutput:
          EXPECT_LT(ref.index_or_offset, static_cast<int64_t>(a->signature.outputs.size()));
          break;
        case artifact::BufferSpace::kConstant:
          ADD_FAILURE() << "step " << i << " reads a constant pool this backend does not write";
      }
    }
  }
  // Every f32 dot of this step has a GEMM layout; every attention op its own kernel.
  EXPECT_EQ(kinds[artifact::StepKind::kGemm], dots);
  EXPECT_EQ(kinds[artifact::StepKind::kAttention], attentions);
  EXPECT_GT(kinds[artifact::StepKind::kKernelCall], 0);
  EXPECT_EQ(kinds[artifact::StepKind::kCollective], 0);
}

TEST_F(PrecastRun, TheRuntimeHoldsNoLlvmOptimiserOrCodeGenerator) {
  Result symbols = run(std::string(PRECAST_LLVM_TOOLS_DIR) + "/llvm-nm -C " + runtime());
  ASSERT_EQ(symbols.code, 0) << symbols.output.substr(0, 2000);
  EXPECT_NE(symbols.output.find("llvm::jitlink::"), std::string::npos);
  for (const char* absent : {"llvm::PassBuilder::", "llvm::TargetMachine::", "llvm::SelectionDAG",
                             "llvm::LoopVectorizePass", "llvm::InstCombinePass"}) {
    EXPECT_EQ(symbols.output.find(absent), std::string::npos) << absent;
  }
}

// precast-run links the runtime, the artifact schema, config and topology: no compiler driver,
// frontend, autodiff or passes, by CMake's link closure and by the symbols in the binary.
TEST_F(PrecastRun, TheRuntimeLinksNoCompilerDriverFrontendAutodiffOrPasses) {
  std::ifstream in(PRECAST_RUN_LINKED_LIBRARIES);
  ASSERT_TRUE(in) << PRECAST_RUN_LINKED_LIBRARIES;
  std::set<std::string> linked;
  for (std::string line; std::getline(in, line);) linked.insert(line);
  EXPECT_TRUE(linked.count("precast_runtime_train")) << "the closure file is stale";
  EXPECT_TRUE(linked.count("precast_config_resolve"));
  for (const char* absent : {"precast_driver", "precast_compile", "precast_frontend",
                             "precast_autodiff", "precast_passes", "precast_analysis",
                             "precast_backend_cpu", "precast_ir"}) {
    EXPECT_EQ(linked.count(absent), 0u) << absent;
  }
  Result symbols = run(std::string(PRECAST_LLVM_TOOLS_DIR) + "/llvm-nm -C " + runtime());
  ASSERT_EQ(symbols.code, 0) << symbols.output.substr(0, 2000);
  EXPECT_NE(symbols.output.find("precast::resolve_config("), std::string::npos);
  for (const char* absent :
       {"precast::frontend::", "precast::autodiff::", "precast::analyze(",
        "precast::lower_train_program(", "precast::prepare_device_step(",
        "precast::partition_spmd(", "precast::ir::Module::", "precast::compile_step("}) {
    EXPECT_EQ(symbols.output.find(absent), std::string::npos) << absent;
  }
}

// learning_rate_schedule_steps=-1 (base.yml) follows the run-time steps, as in MaxText.
TEST_F(PrecastRun, TheScheduleFollowsRunTimeSteps) {
  Expected<artifact::Artifact> a = artifact::read_artifact(artifact());
  ASSERT_TRUE(a.ok());
  Expected<runtime::RunSettings> settings = runtime::run_settings(*a, {"steps=60"});
  ASSERT_TRUE(settings.ok()) << settings.error().message();
  EXPECT_EQ(settings->steps, 60);
  EXPECT_EQ(settings->schedule.schedule_steps, 60);
  // Warmup is int(60 * 0.1) = 6 steps: step 3 runs at half the peak.
  EXPECT_DOUBLE_EQ(learning_rate_at(settings->schedule, 3), 0.5 * settings->schedule.learning_rate);
}

TEST_F(PrecastRun, ADivergingRunAbortsLikeMaxText) {
  Result r = run(runtime() + " " + artifact() + " steps=6 learning_rate=1e30 warmup_steps_fraction=0.0");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("Aborting training due to"), std::string::npos) << r.output;
  // With the check off the run goes on.
  Result on = run(runtime() + " " + artifact() +
                  " steps=6 learning_rate=1e30 warmup_steps_fraction=0.0 abort_on_nan_loss=false "
                  "abort_on_inf_loss=false");
  EXPECT_EQ(on.code, 0) << on.output;
}

TEST_F(PrecastRun, TrainCompilesOnceThenHitsTheCache) {
  std::string cache = (*dir_ / "cache").string();
  std::string command = "XDG_CACHE_HOME=" + cache + " " + std::string(PRECAST_BINARY) + " train " +
                        (kSource / "configs" / "base.yml").string();
  for (const std::string& o : tiny_overrides()) command += " " + o;
  Result first = run(command + " steps=2");
  EXPECT_EQ(first.code, 0) << first.output;
  EXPECT_NE(first.output.find("Compilation cache miss"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("completed step: 1,"), std::string::npos) << first.output;
  // Run-time keys differ: still a hit.
  Result second = run(command + " steps=3 learning_rate=1e-3");
  EXPECT_EQ(second.code, 0) << second.output;
  EXPECT_NE(second.output.find("Compilation cache hit"), std::string::npos) << second.output;
  EXPECT_NE(second.output.find("completed step: 2,"), std::string::npos) << second.output;
}

TEST_F(PrecastRun, TwoRunsGiveBitwiseIdenticalLosses) {
  std::string a = (*dir_ / "a.jsonl").string(), b = (*dir_ / "b.jsonl").string();
  ASSERT_EQ(run(runtime() + " " + artifact() + " steps=4 learning_rate=1e-2 metrics_file=" + a).code, 0);
  ASSERT_EQ(run(runtime() + " " + artifact() + " steps=4 learning_rate=1e-2 metrics_file=" + b).code, 0);
  auto losses = [](const std::string& path) {
    std::ifstream in(path);
    std::vector<std::string> out;
    std::string line;
    std::regex loss("\"learning/loss\": ([^,]+),");
    while (std::getline(in, line)) {
      std::smatch m;
      if (std::regex_search(line, m, loss)) out.push_back(m[1]);
    }
    return out;
  };
  std::vector<std::string> first = losses(a);
  ASSERT_EQ(first.size(), 4u);
  EXPECT_EQ(first, losses(b));
  // The run-time learning rate is used without a recompile: the loss moves after warmup.
  EXPECT_NE(first[0], first[3]);
}

// The initial state (weights drawn over the thread pool, zero moments, the synthetic batch) is
// the same bits for every thread count, and each "normal <stddev>" or "truncated_normal <stddev>
// <bound>" weight (attention kernels and embeddings; MLP and logits kernels) holds ir/Random.h's
// draw rounded to f32 times the f32 stddev, as the IR's @init computes it.
TEST_F(PrecastRun, InitialStateIsTheSameForEveryThreadCount) {
  Expected<artifact::Artifact> a = artifact::read_artifact(artifact());
  ASSERT_TRUE(a.ok()) << a.error().message();
  runtime::TrainOptions keep;
  keep.keep_final_state = true;
  std::vector<std::vector<std::vector<uint8_t>>> states;
  for (int threads : {1, 2, 3}) {
    Expected<runtime::RunSettings> settings =
        runtime::run_settings(*a, {"steps=0", "num_threads=" + std::to_string(threads)});
    ASSERT_TRUE(settings.ok()) << settings.error().message();
    Expected<runtime::TrainReport> report = runtime::train(*a, *settings, keep);
    ASSERT_TRUE(report.ok()) << report.error().message();
    states.push_back(report->final_state);
  }
  EXPECT_EQ(states[0], states[1]);
  EXPECT_EQ(states[0], states[2]);

  Expected<runtime::RunSettings> settings = runtime::run_settings(*a, {});
  ASSERT_TRUE(settings.ok()) << settings.error().message();
  int normal = 0, truncated = 0, zeros = 0;
  for (size_t i = 0; i < a->signature.inputs.size(); ++i) {
    const artifact::TensorSignature& t = a->signature.inputs[i];
    if (t.role != "parameter") continue;
    ASSERT_EQ(t.dtype, "f32") << t.name;
    std::vector<float> got(states[0][i].size() / 4);
    std::memcpy(got.data(), states[0][i].data(), states[0][i].size());
    if (t.init.rfind("normal ", 0) == 0) {
      ++normal;
      auto stddev = static_cast<float>(std::strtod(t.init.c_str() + 7, nullptr));
      for (size_t e = 0; e < got.size(); ++e) {
        float draw = static_cast<float>(
            ir::random_normal(settings->init_weights_seed, static_cast<uint32_t>(i), e));
        ASSERT_EQ(got[e], draw * stddev) << t.name << " element " << e;
      }
    } else if (t.init.rfind("truncated_normal ", 0) == 0) {
      ++truncated;
      char* end = nullptr;
      auto stddev = static_cast<float>(std::strtod(t.init.c_str() + 17, &end));
      double bound = std::strtod(end, nullptr);
      EXPECT_EQ(bound, 2.0) << t.name;
      for (size_t e = 0; e < got.size(); ++e) {
        float draw = static_cast<float>(ir::random_truncated_normal(
            settings->init_weights_seed, static_cast<uint32_t>(i), e, bound));
        ASSERT_EQ(got[e], draw * stddev) << t.name << " element " << e;
        ASSERT_LE(std::fabs(got[e]), 2.0f * stddev) << t.name << " element " << e;
      }
    } else if (t.init == "zeros" || t.init.empty()) {
      ++zeros;
      for (float v : got) ASSERT_EQ(v, 0.0f) << t.name;
    }
  }
  EXPECT_GT(normal, 0);
  EXPECT_GT(truncated, 0);
  // The optimizer's moments are inputs too: zeros, from memory nobody wrote.
  for (size_t i = 0; i < a->signature.inputs.size(); ++i) {
    const artifact::TensorSignature& t = a->signature.inputs[i];
    if (t.role == "optimizer_state") {
      ++zeros;
      for (uint8_t byte : states[0][i]) ASSERT_EQ(byte, 0) << t.name;
    }
  }
  EXPECT_GT(zeros, 0);
}

// The initialiser's block loop is built for the baseline, x86-64-v3 and x86-64-v4; each version
// this CPU runs gives ir/Random.h's scalar draw bit for bit (indices in order, scattered, and
// past 2^40, where a truncated draw's later attempts live), so the weights do not depend on the
// machine's vector width.
TEST(StateInit, EveryInstructionSetVersionDrawsTheScalarBits) {
  std::vector<uint64_t> index;
  for (uint64_t i = 0; i < 20000; ++i) index.push_back(i);
  for (uint64_t i = 0; i < 3000; ++i) index.push_back(i * 7919 + (uint64_t{1} << 40) * (i % 8));
  int n = static_cast<int>(index.size());
  int versions = 0;
  for (int version = 0; version < 3; ++version) {
    std::vector<double> z(index.size());
    if (!runtime::normal_block_version(version, 1234, 17, index.data(), n, z.data())) continue;
    ++versions;
    for (int j = 0; j < n; ++j) {
      ASSERT_EQ(std::bit_cast<uint64_t>(z[j]),
                std::bit_cast<uint64_t>(ir::random_normal(1234, 17, index[j])))
          << "version " << version << " index " << index[j];
    }
  }
  EXPECT_GE(versions, 1);  // the baseline always exists
}

// Under mpirun (Open MPI's OMPI_COMM_WORLD_SIZE) one rank is one device: a world of another
// size than the artifact's device count is refused with exit 4 naming both counts.
TEST_F(PrecastRun, UnderMpirunAWorldOfAnotherSizeIsRefusedWithExit4) {
  const std::string env = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ";
  const std::string two_ranks = env + PRECAST_MPIEXEC + " --oversubscribe -np 2 " + runtime();
  Result two = run(two_ranks + " " + artifact() + " steps=1");
  EXPECT_EQ(two.code, 4) << two.output;
  EXPECT_NE(two.output.find("precast-run: error: " + artifact() +
                            " is compiled for 1 device (topology cpu-1) but mpirun started 2 "
                            "ranks (OMPI_COMM_WORLD_SIZE); one rank runs one device: start it "
                            "with `mpirun -np 1 precast-run " +
                            artifact() + "` or without mpirun, or compile it for 2 devices"),
            std::string::npos)
      << two.output;
  EXPECT_EQ(two.output.find("completed step"), std::string::npos) << two.output;

  std::string four = edited("four-devices.pcx", [](artifact::Artifact& a) {
    a.key.num_devices = 4;
    a.key.topology_name = "cpu-4";
  });
  Result refused = run(two_ranks + " " + four);
  EXPECT_EQ(refused.code, 4) << refused.output;
  EXPECT_NE(refused.output.find("is compiled for 4 devices (topology cpu-4) but mpirun started 2 "
                                "ranks"),
            std::string::npos)
      << refused.output;
  EXPECT_NE(refused.output.find("`mpirun -np 4 precast-run"), std::string::npos) << refused.output;

  // The right size passes the check, but a key whose device count is not its mesh's is
  // refused before MPI starts (exit 4), naming both.
  std::string pair = edited("two-devices.pcx", [](artifact::Artifact& a) {
    a.key.num_devices = 2;
    a.key.topology_name = "cpu-2";
  });
  Result matching = run(two_ranks + " " + pair);
  EXPECT_EQ(matching.code, 4) << matching.output;
  EXPECT_NE(matching.output.find("has 1 devices but it is compiled for 2"), std::string::npos)
      << matching.output;

  // One rank for the one-device artifact trains as it does without mpirun.
  Result one = run(env + PRECAST_MPIEXEC + " -np 1 " + runtime() + " " + artifact() + " steps=1");
  EXPECT_EQ(one.code, 0) << one.output;
  EXPECT_NE(one.output.find("completed step: 0"), std::string::npos) << one.output;
}

TEST_F(PrecastRun, DamagedOrForeignArtifactsAreRefusedWithExit4) {
  struct Case {
    std::string path, message;
  };
  std::vector<Case> cases = {
      {bytes_changed("truncated.pcx", 1000, -1), "truncated"},
      {bytes_changed("flipped.pcx", SIZE_MAX, 4000), "checksum"},
      {bytes_changed("version.pcx", SIZE_MAX, artifact::kFormatVersionOffset + 1),
       "format version"},
      {edited("feature.pcx",
              [](artifact::Artifact& a) { a.key.cpu_features.push_back("precast-test-feature"); }),
       "cpu feature precast-test-feature"},
      {edited("devices.pcx", [](artifact::Artifact& a) { a.key.num_devices = 4; }),
       "device count"},
      // The runtime binds by signature name: a renamed or a missing one is refused, named.
      {edited("renamed.pcx",
              [](artifact::Artifact& a) {
                for (artifact::TensorSignature& t : a.signature.inputs) {
                  if (t.name == "targets") t.name = "labels";
                }
              }),
       "batch input 'labels'"},
      {edited("missing.pcx",
              [](artifact::Artifact& a) {
                ASSERT_EQ(a.signature.outputs.back().name, "param_norm");
                a.signature.outputs.pop_back();
              }),
       "no metric output named 'param_norm'"},
  };
  {
    // An artifact of the previous format version (1): refused naming both versions.
    std::ifstream in(artifact(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    uint32_t old_version = artifact::kFormatVersion - 1;
    std::memcpy(&bytes[artifact::kFormatVersionOffset], &old_version, sizeof old_version);
    std::string path = (*dir_ / "old-version.pcx").string();
    std::ofstream(path, std::ios::binary) << bytes;
    cases.push_back({path, fmt::format("unsupported format version {} (older than this build's); "
                                       "this build reads version {}",
                                       old_version, artifact::kFormatVersion)});
  }
  for (const Case& c : cases) {
    Result r = run(runtime() + " " + c.path + " steps=1");
    EXPECT_EQ(r.code, 4) << c.path << "\n" << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.path << "\n" << r.output;
    EXPECT_EQ(r.output.find("terminate called"), std::string::npos);
  }
}

TEST_F(PrecastRun, AChangedCompileTimeKeyIsRefusedNamingBothValues) {
  std::string command = runtime() + " " + (kSource / "configs" / "base.yml").string();
  for (const std::string& o : tiny_overrides()) {
    command += " " + (o == "per_device_batch_size=4" ? std::string("per_device_batch_size=8") : o);
  }
  Result r = run(command + " compiled_trainstep_file=" + artifact() + " steps=1");
  EXPECT_EQ(r.code, 4) << r.output;
  EXPECT_NE(r.output.find("per_device_batch_size"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("4.0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("8.0"), std::string::npos) << r.output;
  // The same config with only run-time keys changed runs.
  std::string same = runtime() + " " + (kSource / "configs" / "base.yml").string();
  for (const std::string& o : tiny_overrides()) same += " " + o;
  Result ok = run(same + " compiled_trainstep_file=" + artifact() + " steps=1 learning_rate=1e-3");
  EXPECT_EQ(ok.code, 0) << ok.output;
  // A compile-time key given to the artifact alone is refused too.
  Result key = run(runtime() + " " + artifact() + " steps=1 base_emb_dim=128");
  EXPECT_EQ(key.code, 4) << key.output;
  EXPECT_NE(key.output.find("base_emb_dim is a compile-time key"), std::string::npos) << key.output;
}

TEST_F(PrecastRun, RunTimeKeysOfMissingFeaturesAreRefusedNotIgnored) {
  // LoRA adapters are not implemented: lora_input_adapters_path is refused by name (exit 2),
  // given to the artifact alone or through a config.
  Result bare = run(runtime() + " " + artifact() + " steps=1 lora_input_adapters_path=/tmp/x");
  EXPECT_EQ(bare.code, 2) << bare.output;
  EXPECT_NE(bare.output.find("lora_input_adapters_path is not supported yet"), std::string::npos)
      << bare.output;
  std::string with_config = runtime() + " " + (kSource / "configs" / "base.yml").string();
  for (const std::string& o : tiny_overrides()) with_config += " " + o;
  Result config = run(with_config + " compiled_trainstep_file=" + artifact() +
                      " steps=1 lora_input_adapters_path=/tmp/x");
  EXPECT_EQ(config.code, 2) << config.output;
  EXPECT_NE(config.output.find("lora_input_adapters_path is not supported yet"), std::string::npos)
      << config.output;
}

TEST_F(PrecastRun, ALoadPathThatHoldsNothingIsRefusedBeforeTheFirstStep) {
  // load_full_state_path is implemented (runtime/train/LoadState.h): a path with no checkpoint
  // is exit 4 naming it, and no step runs.
  Result bare = run(runtime() + " " + artifact() + " steps=1 load_full_state_path=/tmp/x");
  EXPECT_EQ(bare.code, 4) << bare.output;
  EXPECT_NE(bare.output.find("load_full_state_path: /tmp/x "), std::string::npos) << bare.output;
  EXPECT_EQ(bare.output.find("completed step"), std::string::npos) << bare.output;
}

TEST_F(PrecastRun, CrossCompiledAArch64ArtifactHoldsAArch64CodeAndIsRefused) {
  Expected<CompileResult> result = compile_tiny("arm.pcx", {"target_triple=aarch64-linux-gnu"});
  ASSERT_TRUE(result.ok()) << result.error().message();
  const std::vector<uint8_t>& object = result->artifact.object_code;
  ASSERT_GT(object.size(), 20u);
  EXPECT_EQ(object[18] | (object[19] << 8), 183);  // e_machine: EM_AARCH64
  std::string elf = (*dir_ / "arm.o").string();
  std::ofstream(elf, std::ios::binary).write(reinterpret_cast<const char*>(object.data()),
                                             static_cast<std::streamsize>(object.size()));
  Result objdump = run(std::string(PRECAST_LLVM_TOOLS_DIR) + "/llvm-objdump -f " + elf);
  EXPECT_NE(objdump.output.find("aarch64"), std::string::npos) << objdump.output;
  Result r = run(runtime() + " " + (*dir_ / "arm.pcx").string() + " steps=1");
  EXPECT_EQ(r.code, 4) << r.output;
  EXPECT_NE(r.output.find("aarch64-unknown-linux-gnu"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace precast

namespace precast {
namespace {

ir::HostTensor tensor_from_bytes(const artifact::TensorSignature& t, const std::vector<uint8_t>& bytes) {
  std::optional<ir::DType> dtype = ir::dtype_from_name(t.dtype);
  ir::TensorType type{*dtype, t.shape};
  ir::HostTensor out = ir::HostTensor::filled(type, 0);
  for (size_t i = 0; i < out.values.size(); ++i) {
    const uint8_t* p = bytes.data() + i * static_cast<size_t>(ir::bytes_per_element(*dtype));
    switch (*dtype) {
      case ir::DType::kF32: { float v; std::memcpy(&v, p, 4); out.values[i] = v; break; }
      case ir::DType::kF64: { double v; std::memcpy(&v, p, 8); out.values[i] = v; break; }
      case ir::DType::kS32: { int32_t v; std::memcpy(&v, p, 4); out.values[i] = v; break; }
      case ir::DType::kU32: { uint32_t v; std::memcpy(&v, p, 4); out.values[i] = v; break; }
      default: ADD_FAILURE() << "dtype " << t.dtype << " not handled by the test"; break;
    }
  }
  return out;
}

struct StepComparison {
  double loss = 0, interpreter_loss = 0, worst = 0;
  int64_t bad = 0, total = 0;
  // Tolerances: metrics relative (to max(1, |value|)); a state element is bad beyond
  // element_tolerance relative, and at most bad_fraction of them may be.
  double metric_tolerance = 1e-5, element_tolerance = 1e-4, bad_fraction = 1e-4;
  double worst_metric = 0;
};

// One step of the compiled code against the IR interpreter running the artifact's own IR text
// on the runtime's initial state (its initialised weights, zero moments, synthetic batch).
void compare_one_step(const std::string& path, StepComparison& c) {
  Expected<artifact::Artifact> a = artifact::read_artifact(path);
  ASSERT_TRUE(a.ok()) << a.error().message();
  Expected<runtime::RunSettings> settings = runtime::run_settings(
      *a, {"learning_rate=1e-2", "warmup_steps_fraction=0.0", "steps=1",
           "learning_rate_schedule_steps=1000"});
  ASSERT_TRUE(settings.ok()) << settings.error().message();
  runtime::TrainOptions keep;
  keep.keep_final_state = true;
  runtime::RunSettings zero = *settings;
  zero.steps = 0;
  Expected<runtime::TrainReport> before = runtime::train(*a, zero, keep);
  ASSERT_TRUE(before.ok()) << before.error().message();
  Expected<runtime::TrainReport> after = runtime::train(*a, *settings, keep);
  ASSERT_TRUE(after.ok()) << after.error().message();

  Expected<ir::Module> module = ir::parse_module(a->ir_text);
  ASSERT_TRUE(module.ok()) << module.error().message();
  std::vector<ir::HostTensor> args;
  for (size_t i = 0; i < a->signature.inputs.size(); ++i) {
    args.push_back(tensor_from_bytes(a->signature.inputs[i], before->final_state[i]));
  }
  size_t first_scalar = 0;
  while (a->signature.inputs[first_scalar].role != "scalar") ++first_scalar;
  double lr = learning_rate_at(settings->schedule, 0);  // what the runtime fed step 0
  args[first_scalar].values = {static_cast<double>(static_cast<float>(lr))};
  Expected<std::vector<ir::HostTensor>> expected = ir::interpret(module->function(0), args);
  ASSERT_TRUE(expected.ok()) << expected.error().message();
  for (size_t k = 0; k < a->signature.outputs.size(); ++k) {
    const artifact::TensorSignature& out = a->signature.outputs[k];
    if (out.aliased_input < 0) continue;  // the new state; metrics below
    // gpt3's key bias (qkv_proj.bias[1]) adds the same q.b to every score of a query, which
    // softmax ignores: its gradient is exactly zero in exact arithmetic, so both sides hold
    // rounding noise, which Adam's first step turns into +-lr (reference.train exempts it too).
    bool qkv_bias = out.name.find("qkv_proj.bias") != std::string::npos;
    ir::HostTensor got =
        tensor_from_bytes(out, after->final_state[static_cast<size_t>(out.aliased_input)]);
    size_t third = got.values.size() / 3;
    for (size_t e = 0; e < got.values.size(); ++e) {
      if (qkv_bias && e / third == 1) continue;
      double want = (*expected)[k].values[e];
      double err = std::abs(got.values[e] - want) / std::max(1e-3, std::abs(want));
      c.worst = std::max(c.worst, err);
      if (err > c.element_tolerance) ++c.bad;
      ++c.total;
    }
  }
  // Adam's first update is lr * g / (|g| + eps): for a gradient within a few eps of zero it turns
  // rounding differences in g (summation order) into visible differences of the new weight. A
  // handful of such elements is expected; any systematic error would touch far more.
  EXPECT_LE(static_cast<double>(c.bad), c.bad_fraction * static_cast<double>(c.total))
      << c.bad << " of " << c.total << " state elements differ by more than "
      << c.element_tolerance << " (worst " << c.worst << ")";
  ASSERT_EQ(after->steps.size(), 1u);
  size_t first_metric = 0;
  while (a->signature.outputs[first_metric].role != "metric") ++first_metric;
  const runtime::StepMetrics& m = after->steps[0];
  double metrics[] = {m.loss, m.lm_loss, m.perplexity, m.z_loss, m.total_weights, m.grad_norm,
                      m.raw_grad_norm, m.param_norm};
  for (size_t i = 0; i < std::size(metrics); ++i) {
    double want = (*expected)[first_metric + i].values[0];
    EXPECT_NEAR(metrics[i], want, c.metric_tolerance * std::max(1.0, std::abs(want)))
        << "metric " << i;
    c.worst_metric = std::max(c.worst_metric, std::abs(metrics[i] - want) / std::max(1.0, std::abs(want)));
  }
  // The load-balancing loss, the ninth metric when the step has it, as the runtime read it.
  bool has_lb = a->signature.outputs.size() > first_metric + std::size(metrics);
  EXPECT_EQ(m.moe_lb_loss.has_value(), has_lb);
  if (has_lb && m.moe_lb_loss) {
    double want = (*expected)[first_metric + std::size(metrics)].values[0];
    EXPECT_NEAR(*m.moe_lb_loss, want, c.metric_tolerance * std::max(1.0, std::abs(want)));
    EXPECT_GT(want, 0.0);
  }
  c.loss = m.loss;
  c.interpreter_loss = (*expected)[first_metric].values[0];
}

TEST_F(PrecastRun, CompiledStepMatchesTheInterpreterOnTheArtifactsIr) {
  StepComparison c;
  compare_one_step(artifact(), c);
  std::printf("loss %.9g (interpreter %.9g); %lld of %lld state elements beyond 1e-4 (worst %.3g)\n",
              c.loss, c.interpreter_loss, static_cast<long long>(c.bad),
              static_cast<long long>(c.total), c.worst);
}

// MaxText's default dtype=bfloat16 on the CPU: the step's bf16 dots and attention run in f32
// (through the GEMM and the f32 attention kernels) and are rounded back to bf16; the artifact's
// IR says so, and one compiled step agrees with the interpreter running that IR within bf16
// rounding (one bf16 ulp is 2^-8 relative: a value on either side of a rounding boundary in the
// two executions differs by that much, and the loss by a fraction of it).
TEST_F(PrecastRun, Bfloat16StepRunsItsContractionsInF32) {
  Expected<CompileResult> result = compile_tiny("tiny_bf16.pcx", {"dtype=bfloat16"});
  ASSERT_TRUE(result.ok()) << result.error().message();
  Expected<ir::Module> module = ir::parse_module(result->artifact.ir_text);
  ASSERT_TRUE(module.ok()) << module.error().message();
  const ir::Function& f = module->function(0);
  int64_t dots = 0, gemms = 0;
  for (const ir::Op& op : f.ops()) {
    if (op.kind != ir::OpKind::kDotGeneral && op.kind != ir::OpKind::kAttention &&
        op.kind != ir::OpKind::kAttentionGrad) {
      continue;
    }
    EXPECT_EQ(f.type(f.result(op)).dtype, ir::DType::kF32) << ir::op_name(op.kind);
    dots += op.kind == ir::OpKind::kDotGeneral;
  }
  for (const artifact::Step& step : result->artifact.program) {
    gemms += step.kind == artifact::StepKind::kGemm;
  }
  EXPECT_GT(dots, 0);
  EXPECT_EQ(gemms, dots);
  StepComparison c;
  // Measured: metrics within 1.5e-4, 0.03% of the state beyond 1e-2 (Adam's first step on
  // gradients near zero, as in the f32 comparison, now with bf16's larger rounding).
  c.metric_tolerance = 1e-3;
  c.element_tolerance = 1e-2;
  c.bad_fraction = 2e-3;
  compare_one_step((*dir_ / "tiny_bf16.pcx").string(), c);
  std::printf("bf16: loss %.9g (interpreter %.9g), worst metric %.3g; %lld of %lld state elements "
              "beyond 1e-2 (worst %.3g)\n",
              c.loss, c.interpreter_loss, c.worst_metric, static_cast<long long>(c.bad),
              static_cast<long long>(c.total), c.worst);
}

// Every supported decoder family, compiled small: one step against the interpreter.
TEST_F(PrecastRun, EveryDecoderFamilyMatchesTheInterpreter) {
  std::vector<Family> families = {
      {"llama2-7b", {"base_num_kv_heads=2"}},
      {"mistral-7b", {"base_num_kv_heads=2", "sliding_window_size=5"}},
      {"gemma-2b", {"base_num_kv_heads=2"}},
      {"gemma2-2b",
       {"base_num_kv_heads=2", "sliding_window_size=4", "attn_logits_soft_cap=2.0",
        "final_logits_soft_cap=2.0"}},
      {"gpt3-52k", {"base_num_kv_heads=4", "trainable_position_size=16"}},
      {"qwen3-8b", {"base_num_kv_heads=2"}},
      {"qwen2.5-7b", {"base_num_kv_heads=2"}},
      {"gemma3-4b", {"base_num_kv_heads=2", "base_num_decoder_layers=7", "sliding_window_size=4"}},
      // YaRN (rope_factor 8, attention scaling), qk-norm over all heads, 3 local + 1 global.
      {"olmo3-7b", {"base_num_kv_heads=2", "base_num_decoder_layers=4", "sliding_window_size=4"}},
  };
  compile_and_compare(families);
}

// The mixture-of-experts families, compiled small: deepseek (MLA with a query LoRA, a dense
// layer, then sigmoid routing with a bias, top-2 of 4 experts and a shared expert) and mixtral
// (top-2 of 4, softmax over the chosen), also with the load-balancing loss and token dropping: the
// top_k kernel and the dense expert combine, one step against the interpreter.
TEST_F(PrecastRun, MixtureOfExpertsFamiliesMatchTheInterpreter) {
  compile_and_compare({
      {"deepseek3-tiny",
       {"base_num_kv_heads=4", "q_lora_rank=8", "kv_lora_rank=8", "qk_nope_head_dim=8",
        "qk_rope_head_dim=4", "v_head_dim=8", "num_experts=4", "num_experts_per_tok=2",
        "base_moe_mlp_dim=16", "first_num_dense_layers=1"}},
      {"mixtral-8x7b",
       {"base_num_kv_heads=2", "num_experts=4", "num_experts_per_tok=2", "base_moe_mlp_dim=64"}},
      // The load-balancing loss and token dropping (capacity 4 a row per expert): the running
      // count along the sequence and the lb loss's reductions in the generated code.
      {"mixtral-8x7b",
       {"base_num_kv_heads=2", "num_experts=4", "num_experts_per_tok=2", "base_moe_mlp_dim=64",
        "load_balance_loss_weight=0.1", "capacity_factor=0.5", "sparse_matmul=false"}},
      // deepseek's loss-free balancing: the expert loads' sum and sign in the generated code, the
      // routing bias moved after the optimizer.
      {"deepseek3-tiny",
       {"base_num_kv_heads=4", "q_lora_rank=8", "kv_lora_rank=8", "qk_nope_head_dim=8",
        "qk_rope_head_dim=4", "v_head_dim=8", "num_experts=4", "num_experts_per_tok=2",
        "base_moe_mlp_dim=16", "first_num_dense_layers=1", "routed_bias_update_rate=0.01"}},
  });
}

// gpt_oss compiled small: the sinks (attention_stats forward, attention_grad over the values
// with one extra column backward), q/k/v/out and expert biases (take of the expert rows), the
// clamped activation (min/max), a window of 4 in layer 0; one step against the interpreter.
TEST_F(PrecastRun, GptOssMatchesTheInterpreter) {
  compile_and_compare(
      {{"gpt-oss-20b",
        {"base_num_kv_heads=2", "num_experts=4", "num_experts_per_tok=2", "base_moe_mlp_dim=64",
         "sliding_window_size=4", "mlp_activations_limit=0.5"}}});
}

// llama4 compiled small (4 layers): chunked attention (chunks of 4 of 16 rows, the segment ids
// computed with iota and an integer division), the NoPE layer 3, the L2 qk-norm, MoE layers 1
// and 3 with the top-1 sigmoid router scaling the experts' input and a shared expert, dense
// layers 0 and 2; one step against the interpreter.
TEST_F(PrecastRun, Llama4MatchesTheInterpreter) {
  compile_and_compare(
      {{"llama4-17b-16e",
        {"base_num_kv_heads=2", "base_num_decoder_layers=4", "num_experts=4", "base_moe_mlp_dim=16",
         "chunk_attn_window_size=4", "interleave_moe_layer_step=2"}}});
}

void PrecastRun::compile_and_compare(const std::vector<Family>& families) {
  for (const Family& family : families) {
    SCOPED_TRACE(family.model);
    CompileRequest request;
    request.config.config_file = kSource / "configs" / "base.yml";
    request.config.overrides = {"model_name=" + family.model, "override_model_config=true",
                                "base_emb_dim=32",           "base_num_decoder_layers=2",
                                "base_num_query_heads=4",    "head_dim=8",
                                "base_mlp_dim=64",           "vocab_size=64",
                                "per_device_batch_size=2",   "max_target_length=16",
                                "dtype=float32",             "weight_dtype=float32",
                                "compile_topology=cpu-1"};
    request.config.overrides.insert(request.config.overrides.end(), family.extra.begin(),
                                    family.extra.end());
    request.output = (*dir_ / (family.model + ".pcx")).string();
    Expected<CompileResult> result = compile_step(request, kSource / "configs" / "topologies.yml");
    ASSERT_TRUE(result.ok()) << result.error().message();
    StepComparison c;
    compare_one_step(request.output, c);
    std::printf("%-10s loss %.9g (interpreter %.9g); %lld of %lld state elements beyond 1e-4\n",
                family.model.c_str(), c.loss, c.interpreter_loss, static_cast<long long>(c.bad),
                static_cast<long long>(c.total));
  }
}

}  // namespace
}  // namespace precast
