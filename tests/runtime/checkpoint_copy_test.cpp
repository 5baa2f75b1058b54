// An asynchronous save's snapshot copy on the writer thread (issue 17): the step program's hook
// before its first state-writing kernel runs once per step, while every state buffer still holds
// the previous step's values (so a writer may still be copying them), and the program's steps
// before it write no state; a run whose saves copy on the writer (the training loop's default)
// commits every checkpoint byte for byte as a run of synchronous saves does, and so does one with
// the copy kept in save() (PRECAST_CHECKPOINT_COPY=caller). eval_test's tiny llama2 (2 layers, E
// 64), compiled at build time.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "compiler/artifact/ArtifactIo.h"
#include "runtime/collectives/Communicator.h"
#include "runtime/kernels/RuntimeContext.h"
#include "runtime/kernels/ThreadPool.h"
#include "runtime/train/RunSettings.h"
#include "runtime/train/StateInit.h"
#include "runtime/train/StepExecutable.h"
#include "runtime/train/StepSignature.h"
#include "runtime/train/TensorElements.h"
#include "runtime/train/Trainer.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "tests/support/ConfigTestUtil.h"

namespace precast {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

artifact::Artifact tiny_artifact() {
  Expected<artifact::Artifact> a = artifact::read_artifact(PRECAST_EVAL_ARTIFACT);
  EXPECT_TRUE(a.ok()) << a.error().message();
  return a.ok() ? *a : artifact::Artifact{};
}

bool is_state(const artifact::TensorSignature& t) {
  return t.role == "parameter" || t.role == "optimizer_state";
}

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The hook runs once per run(), before a state-writing step, with the state as run() found it;
// the whole step then changes the state (a learning rate of 1e-2 on a real batch).
TEST(CheckpointCopy, TheHookRunsBeforeTheFirstStateWriteWithTheStateUnchanged) {
  artifact::Artifact a = tiny_artifact();
  auto comm = runtime::SingleProcessCommunicator::create(1);
  ASSERT_TRUE(comm.ok());
  Expected<runtime::StepExecutable> loaded = runtime::StepExecutable::load(a, **comm);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message();
  runtime::StepExecutable& step = *loaded;
  ASSERT_TRUE(step.allocate_buffers().ok());
  Expected<runtime::StepBinding> binding = runtime::bind_signature(a.signature);
  ASSERT_TRUE(binding.ok()) << binding.error().message();
  const std::vector<artifact::TensorSignature>& inputs = a.signature.inputs;
  ThreadPool pool(1);
  for (size_t i : binding->parameters) {
    ASSERT_TRUE(runtime::initialise(step.input(i), inputs[i], i, 0, pool).ok());
  }
  // A batch of 4 rows of 32 tokens, one document a row; the optimizer's scalars.
  for (size_t k = 0; k < binding->batch.size(); ++k) {
    const size_t i = binding->batch[k];
    const int64_t n = runtime::tensor_bytes(inputs[i]) / 4;
    for (int64_t e = 0; e < n; ++e) {
      double v = k == 1 || k == 4 ? static_cast<double>(e % 32)           // positions
                 : k == 2 || k == 5 ? 1.0                                   // segmentation
                                    : static_cast<double>((e * 7 + k) % 250 + 3);  // token ids
      runtime::store(step.input(i), e, inputs[i].dtype, v);
    }
  }
  const double scalars[] = {1e-2, 0.9, 0.95, 1e-8, 0.0, 0.0, 1.0};
  for (size_t k = 0; k < std::size(scalars); ++k) {
    const size_t i = binding->scalars[k];
    runtime::store(step.input(i), 0, inputs[i].dtype, scalars[k]);
  }

  // The program's steps before the hook's write no state; its own does (Step::buffers: the
  // reads, then the writes), checked here on the artifact's program directly.
  const size_t first = step.first_state_write();
  ASSERT_GT(first, 0u);
  ASSERT_LT(first, a.program.size());
  // It is the optimizer's: the forward and backward passes (every step of another scope) run
  // before it, beside a writer's copy.
  EXPECT_EQ(a.program[first].scope.rfind("optimizer", 0), 0u) << a.program[first].scope;
  size_t model_steps[2] = {0, 0};  // steps of the model's own scopes before and after it
  for (size_t i = 0; i < a.program.size(); ++i) {
    const std::string& scope = a.program[i].scope;
    if (scope.rfind("decoder", 0) == 0 || scope.rfind("token_embedder", 0) == 0) {
      ++model_steps[i < first ? 0 : 1];
    }
  }
  EXPECT_GT(model_steps[0], 0u);
  EXPECT_EQ(model_steps[1], 0u);

  auto state_bytes = [&] {
    std::vector<std::string> out;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!is_state(inputs[i])) continue;
      const char* p = static_cast<const char*>(step.input(i));
      out.emplace_back(p, static_cast<size_t>(runtime::tensor_bytes(inputs[i])));
    }
    return out;
  };
  int calls = 0;
  bool unchanged_at_hook = true;
  std::vector<std::string> before;
  step.set_before_state_write([&] {
    ++calls;
    unchanged_at_hook = unchanged_at_hook && state_bytes() == before;
  });
  const RuntimeContext context{GemmImpl::kOpenBlas, &pool, {}};
  for (int run = 1; run <= 2; ++run) {
    before = state_bytes();
    ASSERT_TRUE(step.run(context).ok());
    EXPECT_EQ(calls, run);
    EXPECT_TRUE(unchanged_at_hook) << "run " << run;
    std::vector<std::string> after = state_bytes();
    size_t changed = 0;
    for (size_t t = 0; t < after.size(); ++t) changed += after[t] != before[t] ? 1 : 0;
    EXPECT_EQ(changed, after.size()) << "every parameter and moment moves in a step";
  }
  step.set_before_state_write({});
  before = state_bytes();
  ASSERT_TRUE(step.run(context).ok());
  EXPECT_EQ(calls, 2);  // an empty hook: no call
}

// Saves after steps 0..4 of a 5-step run: asynchronous with the copy on the writer (the default),
// asynchronous with the copy in save(), and synchronous: the same checkpoint files, byte for
// byte, for every step (each holds the state after its step, though the next step ran beside the
// writer's copy).
TEST(CheckpointCopy, ARunWhoseWriterCopiesSavesWhatSynchronousSavesDo) {
  artifact::Artifact a = tiny_artifact();
  TempDir dir;
  auto run = [&](const std::string& name, const std::string& async) {
    Expected<runtime::RunSettings> s = runtime::run_settings(
        a, {"base_output_directory=" + dir.path().string(), "run_name=" + name,
            "enable_tensorboard=false", "steps=5", "enable_checkpointing=true",
            "checkpoint_period=1", "max_num_checkpoints_to_keep=10",
            "async_checkpointing=" + async, "eval_interval=-1", "sample_tokens=0"});
    EXPECT_TRUE(s.ok()) << s.error().message();
    if (!s.ok()) return;
    Expected<runtime::TrainReport> report = runtime::train(a, *s);
    EXPECT_TRUE(report.ok()) << report.error().message();
  };
  run("writer", "true");
  ::setenv("PRECAST_CHECKPOINT_COPY", "caller", 1);
  run("caller", "true");
  ::unsetenv("PRECAST_CHECKPOINT_COPY");
  run("sync", "false");
  for (int step = 0; step < 5; ++step) {
    const fs::path sync = dir.path() / "sync" / "checkpoints" / std::to_string(step);
    ASSERT_TRUE(fs::is_directory(sync)) << sync.string();
    int files = 0;
    for (const fs::directory_entry& e : fs::directory_iterator(sync)) {
      ++files;
      const std::string expected = file_bytes(e.path());
      for (const char* other : {"writer", "caller"}) {
        const fs::path p =
            dir.path() / other / "checkpoints" / std::to_string(step) / e.path().filename();
        EXPECT_TRUE(file_bytes(p) == expected) << p.string();
      }
    }
    EXPECT_GE(files, 2) << sync.string();  // the state file and metadata.json at least
  }
}

}  // namespace
}  // namespace precast
