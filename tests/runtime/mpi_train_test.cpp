// precast-run on MPI ranks, end to end: a tiny llama2 (f32, AdamW, clipping on) and a tiny
// gemma2 compiled for cpu-1 and for cpu-N on every mesh of one table (MpiMesh: each mesh on
// both models) — and a tiny MoE model (mixtral) on the expert meshes (ExpertMeshes) — the same
// seed and global batch;
// `mpirun -np N precast-run` trains 5 steps and its losses (read from rank 0's metrics file)
// equal the single-device run's to 1e-5 relative, and the parameters and optimizer state after
// the 5 steps (each rank's piece, --save-final-state, put together by the artifact's shardings)
// equal the single-device ones to 1e-4; a second run on the same mesh repeats the losses bit for
// bit; rank 0 alone writes the metrics file, rank r logs to logs/rank-r.log. Also: TCP instead of
// shared memory gives the same bits, each rank's collective counters equal the compiler's
// per-step prediction times the steps, and collective_timeout_seconds is obeyed.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "compiler/artifact/ArtifactIo.h"
#include "compiler/driver/Analyze.h"
#include "compiler/driver/Compile.h"
#include "runtime/checkpoint/DurableFile.h"
#include "runtime/checkpoint/Safetensors.h"
#include "runtime/collectives/DeviceMesh.h"
#include "runtime/train/StatePiece.h"
#include "runtime/train/TensorShard.h"
#include "tests/support/Command.h"
#include "tests/support/CompileArtifact.h"
#include "tests/support/MetricsLines.h"

namespace precast {
namespace {

namespace fs = std::filesystem;

const fs::path kSource = PRECAST_SOURCE_DIR;
const std::string kEnv = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ";

using Result = testing::CommandResult;
Result run(const std::string& command) {
  return testing::run_command(command);
}

// The words of a space-separated list of key=value.
std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string word; in >> word;) out.push_back(word);
  return out;
}

// A model's keys (tests/runtime/CMakeLists.txt holds them, and compiles each model's cpu-1
// baseline with them) for a topology and rows per device; the global batch is 4 rows on every
// mesh (per_device_batch_size x devices).
//   llama:  a 2-layer llama2 (E 64, H 4, D 16, M 128, V 256, T 16) in f32;
//   moe:    a 2-layer mixtral (E 64, top 2 of 4 experts of width 64) in f32, with the
//           load-balancing loss (0.01) and token dropping (capacity_factor 1, sparse_matmul=false);
//   llama4: 4 layers of llama4-17b-128e's pattern (E 64, dense layers 0 and 2, MoE layers 1 and
//           3 with top 1 of 4 experts and a shared expert, chunked attention (8 of 16 positions)
//           with qk-norm in layers 0-2, layer 3 NoPE and global) in f32;
//   gemma2: 2 layers, so one local (sliding window 4) and one global attention layer, soft caps
//           on the attention logits and the final logits (2.0), GQA (4 query heads, 2 kv), f32.
std::vector<std::string> model_keys(const std::string& model, const std::string& topology,
                                    int64_t per_device_batch) {
  std::vector<std::string> keys = words(model == "gemma2"   ? PRECAST_MPI_GEMMA2_KEYS
                                        : model == "moe"    ? PRECAST_MPI_MOE_KEYS
                                        : model == "llama4" ? PRECAST_MPI_LLAMA4_KEYS
                                                            : PRECAST_MPI_LLAMA_KEYS);
  keys.push_back("per_device_batch_size=" + std::to_string(per_device_batch));
  keys.push_back("compile_topology=" + topology);
  return keys;
}

std::vector<std::string> tiny_llama(const std::string& topology, int64_t per_device_batch) {
  return model_keys("llama", topology, per_device_batch);
}

using testing::metric_values;

std::string text_of(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The global state (every parameter and optimizer-state tensor, as doubles by name) put together
// from the pieces `ranks` ranks saved with --save-final-state=dir: each rank's piece goes where
// the artifact's sharding and the rank's mesh coordinates place it. Pieces that overlap
// (replicated values) must agree bit for bit; every element must be covered.
std::map<std::string, std::vector<double>> global_state(const fs::path& artifact_file,
                                                        const fs::path& dir, int ranks) {
  std::map<std::string, std::vector<double>> state;
  Expected<artifact::Artifact> a = artifact::read_artifact(artifact_file);
  EXPECT_TRUE(a.ok()) << a.error().message();
  if (!a.ok()) return state;
  // Rank r is device r in MaxText's order (slices outermost), as DeviceMesh numbers them.
  Expected<runtime::DeviceMesh> mesh = runtime::DeviceMesh::of_artifact(*a);
  EXPECT_TRUE(mesh.ok()) << mesh.error().message();
  if (!mesh.ok()) return state;
  std::map<std::string, std::vector<bool>> covered;
  for (int rank = 0; rank < ranks; ++rank) {
    fs::path file = dir / runtime::state_piece_name(rank);
    Expected<std::string> bytes = checkpoint::read_whole_file(file.string());
    EXPECT_TRUE(bytes.ok()) << bytes.error().message();
    if (!bytes.ok()) continue;
    Expected<std::vector<checkpoint::Tensor>> tensors =
        checkpoint::decode_safetensors(*bytes, file.string());
    EXPECT_TRUE(tensors.ok()) << tensors.error().message();
    if (!tensors.ok()) continue;
    std::vector<int64_t> coordinates = mesh->coordinates(rank);
    for (const checkpoint::Tensor& t : *tensors) {
      const artifact::TensorSignature* signature = nullptr;
      for (const artifact::TensorSignature& input : a->signature.inputs) {
        if (input.name == t.name) signature = &input;
      }
      EXPECT_NE(signature, nullptr) << t.name << " of " << file;
      if (signature == nullptr) continue;
      Expected<runtime::TensorShard> shard =
          runtime::tensor_shard(*signature, a->key.mesh, coordinates);
      EXPECT_TRUE(shard.ok()) << shard.error().message();
      if (!shard.ok()) continue;
      int64_t global = 1, local = 1;
      for (int64_t d : shard->global_dims) global *= d;
      for (int64_t d : shard->local_dims) local *= d;
      std::vector<double>& values = state[t.name];
      std::vector<bool>& seen = covered[t.name];
      values.resize(static_cast<size_t>(global));
      seen.resize(static_cast<size_t>(global));
      EXPECT_TRUE(t.dtype == "f32" || t.dtype == "s32") << t.name << ": " << t.dtype;
      EXPECT_EQ(static_cast<int64_t>(t.bytes.size()), local * 4) << t.name;
      for (int64_t i = 0; i < local && (i + 1) * 4 <= static_cast<int64_t>(t.bytes.size()); ++i) {
        double value;
        if (t.dtype == "s32") {
          int32_t v;
          std::memcpy(&v, t.bytes.data() + i * 4, 4);
          value = v;
        } else {
          float v;
          std::memcpy(&v, t.bytes.data() + i * 4, 4);
          value = v;
        }
        auto at = static_cast<size_t>(shard->global_index(i));
        if (seen[at]) {
          EXPECT_EQ(std::memcmp(&values[at], &value, sizeof value), 0)
              << t.name << " element " << at << ": rank " << rank << " holds " << value
              << ", another rank " << values[at];
        }
        values[at] = value;
        seen[at] = true;
      }
    }
  }
  for (const auto& [name, seen] : covered) {
    EXPECT_EQ(std::count(seen.begin(), seen.end(), false), 0) << name << " not fully covered";
  }
  return state;
}

// Each rank's collective counters, from its log's "Collectives run by this rank:" table:
// kind -> {calls, bytes, bytes sent}.
std::map<std::string, std::array<int64_t, 3>> rank_counters(const std::string& log) {
  std::map<std::string, std::array<int64_t, 3>> counters;
  size_t at = log.find("Collectives run by this rank:");
  if (at == std::string::npos) return counters;
  std::istringstream in(log.substr(at));
  std::string line;
  std::getline(in, line);
  std::getline(in, line);  // the column names
  while (std::getline(in, line) && line.rfind("  ", 0) == 0) {
    std::istringstream fields(line);
    std::string kind, network;
    std::array<int64_t, 3> numbers{};
    fields >> kind;
    if (kind == "total") break;
    fields >> network >> numbers[0] >> numbers[1] >> numbers[2];
    counters[kind + " " + network] = numbers;
  }
  return counters;
}

struct Baseline {
  std::vector<double> loss, total_weights;
  std::map<std::string, std::vector<double>> state;
};

class MpiTrain : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("mpi_train_test_" + std::to_string(getpid())));
    fs::create_directories(*dir_);
    baselines_ = new std::map<std::string, Baseline>();
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete baselines_;
  }

  static void compile(const std::string& name, const std::vector<std::string>& overrides) {
    Status compiled = testing::compile_artifact(kSource, overrides, *dir_ / name);
    ASSERT_TRUE(compiled.ok()) << compiled.error().message();
  }

  // The single-device run of a model (compiled for cpu-1 with 4 rows at build time), once per
  // suite: its losses, total weights and final state.
  static const Baseline& baseline(const std::string& model) {
    auto found = baselines_->find(model);
    if (found != baselines_->end()) return found->second;
    Baseline& b = (*baselines_)[model];
    std::string name = model + "_cpu1";
    fs::copy_file(fs::path(PRECAST_MPI_BASELINE_DIR) / ("mpi_train_" + name + ".pcx"),
                  *dir_ / (name + ".pcx"));
    Result r = run(std::string(PRECAST_RUN_BINARY) + " " + (*dir_ / (name + ".pcx")).string() +
                   " steps=5 num_threads=1 metrics_file=" + (*dir_ / (name + ".jsonl")).string() +
                   " --save-final-state=" + (*dir_ / (name + "-state")).string());
    EXPECT_EQ(r.code, 0) << r.output;
    b.loss = metric_values(*dir_ / (name + ".jsonl"), "loss");
    b.total_weights = metric_values(*dir_ / (name + ".jsonl"), "total_weights");
    b.state = global_state(*dir_ / (name + ".pcx"), *dir_ / (name + "-state"), 1);
    EXPECT_FALSE(b.state.empty());
    return b;
  }

  // `mpirun -np ranks precast-run name` for 5 steps; rank 0's losses. `run_name` names the
  // metrics file, the other ranks' log folder and the final state's folder (run_name-state).
  static std::vector<double> train(const std::string& name, int ranks, const std::string& run_name,
                                   const Baseline& single, const std::string& mpirun_options = "") {
    fs::path metrics = *dir_ / (run_name + ".jsonl");
    Result r =
        run(kEnv + PRECAST_MPIEXEC + " --oversubscribe " + mpirun_options + " -np " +
            std::to_string(ranks) + " " + PRECAST_RUN_BINARY + " " + (*dir_ / name).string() +
            " steps=5 num_threads=1 metrics_file=" + metrics.string() +
            " base_output_directory=" + dir_->string() + " run_name=" + run_name +
            " --save-final-state=" + (*dir_ / (run_name + "-state")).string());
    EXPECT_EQ(r.code, 0) << r.output;
    // Rank 0 prints the log lines; each other rank writes them to its own file.
    EXPECT_NE(r.output.find("completed step: 4"), std::string::npos) << r.output;
    logs_->clear();
    (*logs_)[0] = r.output;
    for (int rank = 1; rank < ranks; ++rank) {
      std::string text =
          text_of(*dir_ / run_name / "logs" / ("rank-" + std::to_string(rank) + ".log"));
      EXPECT_NE(text.find("completed step: 4"), std::string::npos)
          << "rank " << rank << " of " << run_name << ": " << text;
      // Each rank's Memstats line names its own device (MaxText's per-device line).
      EXPECT_NE(text.find(") on cpu:" + std::to_string(rank) + "\n"), std::string::npos)
          << "rank " << rank << " of " << run_name << ": " << text;
      (*logs_)[rank] = text;
    }
    EXPECT_NE(r.output.find(") on cpu:0\n"), std::string::npos) << r.output;
    EXPECT_EQ(metric_values(metrics, "total_weights"), single.total_weights) << run_name;
    return metric_values(metrics, "loss");
  }

  // The parameters and optimizer state after 5 steps of `run_name` against the single-device
  // ones: every element within 1e-4 of the tensor's largest magnitude (relative in the max norm:
  // an element near zero, where Adam's update mu / sqrt(nu) follows round-off in the gradient,
  // is judged on the tensor's scale). Returns the worst of the parameters and of Adam's moments.
  static std::pair<double, double> check_state(const std::string& name, int ranks,
                                               const std::string& run_name,
                                               const Baseline& single) {
    std::map<std::string, std::vector<double>> state =
        global_state(*dir_ / name, *dir_ / (run_name + "-state"), ranks);
    EXPECT_EQ(state.size(), single.state.size()) << run_name;
    double worst_parameter = 0, worst_moment = 0;
    for (const auto& [tensor, expected] : single.state) {
      bool moment = tensor.rfind("mu.", 0) == 0 || tensor.rfind("nu.", 0) == 0;
      double& worst = moment ? worst_moment : worst_parameter;
      auto found = state.find(tensor);
      EXPECT_NE(found, state.end()) << run_name << " lacks " << tensor;
      if (found == state.end()) continue;
      const std::vector<double>& got = found->second;
      EXPECT_EQ(got.size(), expected.size()) << run_name << " " << tensor;
      if (got.size() != expected.size()) continue;
      double largest = 0;
      for (double v : expected) largest = std::max(largest, std::abs(v));
      int bad = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        double relative =
            largest == 0 ? std::abs(got[i]) : std::abs(got[i] - expected[i]) / largest;
        worst = std::max(worst, relative);
        if (relative > 1e-4 && bad++ < 3) {
          ADD_FAILURE() << run_name << " " << tensor << "[" << i << "] = " << got[i]
                        << ", one device " << expected[i];
        }
      }
    }
    return {worst_parameter, worst_moment};
  }

  // Each rank's collective counters (from `logs`, one per rank) against the compiler's
  // prediction for the config (count_collectives, what `precast analyze` reports) times the 5
  // steps, kind by kind and network by network (ICI, DCN): calls and bytes exactly; bytes sent
  // exactly (the ring formulas' wire bytes) when `even` (every count splits evenly over its
  // group), else within 8 bytes a call (a group of 2 whose odd count gives one rank one more f32
  // element to send in each of an all-reduce's two phases).
  static void check_counters(const std::vector<std::string>& overrides,
                             const std::map<int, std::string>& logs, bool even) {
    ConfigRequest request;
    request.config_file = kSource / "configs" / "base.yml";
    request.overrides = overrides;
    Expected<AnalysisReport> report = analyze(request, kSource / "configs" / "topologies.yml");
    ASSERT_TRUE(report.ok()) << report.error().message();
    const auto& predicted = report->memory.collectives;
    ASSERT_FALSE(predicted.empty());
    for (const auto& [rank, log] : logs) {
      std::map<std::string, std::array<int64_t, 3>> counted = rank_counters(log);
      EXPECT_EQ(counted.size(), predicted.size()) << "rank " << rank << ": " << log;
      for (const auto& [kind, totals] : predicted) {
        auto found = counted.find(kind);
        ASSERT_NE(found, counted.end()) << "rank " << rank << " ran no " << kind;
        EXPECT_EQ(found->second[0], 5 * totals.count) << "rank " << rank << " " << kind;
        EXPECT_EQ(found->second[1], 5 * totals.bytes) << "rank " << rank << " " << kind;
        if (even) {
          EXPECT_EQ(found->second[2], 5 * totals.wire_bytes) << "rank " << rank << " " << kind;
        } else {
          EXPECT_LE(std::abs(found->second[2] - 5 * totals.wire_bytes), 8 * found->second[0])
              << "rank " << rank << " " << kind;
        }
        std::printf(
            "rank %d %s: %lld calls, %lld bytes, %lld sent (predicted per step %lld, "
            "%lld, %lld)\n",
            rank, kind.c_str(), static_cast<long long>(found->second[0]),
            static_cast<long long>(found->second[1]), static_cast<long long>(found->second[2]),
            static_cast<long long>(totals.count), static_cast<long long>(totals.bytes),
            static_cast<long long>(totals.wire_bytes));
      }
    }
  }

  // The losses of `name` on `ranks` ranks against the single-device run of `model`: to 1e-5
  // relative, the state after 5 steps to 1e-4, and a second run repeats the losses bit for bit.
  // Returns the worst relative difference of the losses.
  static double check_mesh(const std::string& name, const std::vector<std::string>& overrides,
                           int ranks, const std::string& model = "llama") {
    const Baseline& single = baseline(model);
    compile(name + ".pcx", overrides);
    std::vector<double> first = train(name + ".pcx", ranks, name + "-a", single);
    std::vector<double> second = train(name + ".pcx", ranks, name + "-b", single);
    EXPECT_EQ(first.size(), 5u) << name;
    EXPECT_EQ(first.size(), single.loss.size()) << name;
    double worst = 0;
    for (size_t s = 0; s < std::min(first.size(), single.loss.size()); ++s) {
      double relative = std::abs(first[s] - single.loss[s]) / std::abs(single.loss[s]);
      worst = std::max(worst, relative);
      EXPECT_LE(relative, 1e-5) << name << " step " << s << ": " << first[s] << " vs one device "
                                << single.loss[s];
    }
    EXPECT_EQ(first, second) << name << ": two runs on the same mesh differ";
    auto [parameters, moments] = check_state(name + ".pcx", ranks, name + "-a", single);
    std::printf("%s on %d ranks: losses", name.c_str(), ranks);
    for (double loss : first) std::printf(" %.9g", loss);
    std::printf(
        "; worst relative difference to one device %.3g; after 5 steps parameters %.3g, "
        "Adam moments %.3g\n",
        worst, parameters, moments);
    return worst;
  }

  static fs::path* dir_;
  static std::map<std::string, Baseline>* baselines_;
  static std::map<int, std::string>* logs_;  // the last train()'s log of each rank
};

fs::path* MpiTrain::dir_ = nullptr;
std::map<std::string, Baseline>* MpiTrain::baselines_ = nullptr;
std::map<int, std::string>* MpiTrain::logs_ = new std::map<int, std::string>();

// Checkpoints with several ranks: fsdp 2 on 2 ranks saves after steps 0, 3 and 4
// (checkpoint_period=3, and on completion), each step's directory holding both ranks' pieces and a
// metadata.json listing each with its rank and mesh coordinates. With step 4's checkpoint removed
// (a crash after step 3's), the same command resumes at step 4 and ends with the same step-4 loss
// and final state files, bit for bit; with rank 1's piece of step 4 damaged, every rank skips
// that checkpoint (the warning names the piece) and resumes from step 3 to the same bits.
TEST_F(MpiTrain, CheckpointPiecesOfSeveralRanksResumeBitForBit) {
  std::vector<std::string> overrides = tiny_llama("cpu-2", 2);
  overrides.push_back("ici_fsdp_parallelism=2");
  compile("ckpt.pcx", overrides);
  auto job = [&](const std::string& label) {
    return run(kEnv + PRECAST_MPIEXEC + " --oversubscribe -np 2 " + PRECAST_RUN_BINARY + " " +
               (*dir_ / "ckpt.pcx").string() +
               " steps=5 num_threads=1 enable_checkpointing=true checkpoint_period=3" +
               " base_output_directory=" + dir_->string() +
               " run_name=ckpt metrics_file=" + (*dir_ / (label + ".jsonl")).string() +
               " --save-final-state=" + (*dir_ / (label + "-state")).string());
  };
  Result whole = job("ckpt_whole");
  ASSERT_EQ(whole.code, 0) << whole.output;
  const fs::path checkpoints = *dir_ / "ckpt" / "checkpoints";
  for (int step : {0, 3, 4}) {
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_TRUE(fs::exists(checkpoints / std::to_string(step) /
                             ("state.rank-" + std::to_string(rank) + ".safetensors")))
          << "step " << step << " rank " << rank;
    }
  }
  EXPECT_FALSE(fs::exists(checkpoints / "1"));
  EXPECT_FALSE(fs::exists(checkpoints / "4" / "state.safetensors"));
  Expected<artifact::Artifact> a = artifact::read_artifact(*dir_ / "ckpt.pcx");
  ASSERT_TRUE(a.ok()) << a.error().message();
  Expected<runtime::DeviceMesh> mesh = runtime::DeviceMesh::of_artifact(*a);
  ASSERT_TRUE(mesh.ok()) << mesh.error().message();
  std::string coordinates;
  for (int64_t c : mesh->coordinates(1)) {
    coordinates += (coordinates.empty() ? "" : ", ") + std::to_string(c);
  }
  std::string metadata = text_of(checkpoints / "4" / "metadata.json");
  EXPECT_NE(metadata.find("\"world_size\": 2"), std::string::npos) << metadata;
  EXPECT_NE(metadata.find("\"rank\": 1, \"mesh_coordinates\": [" + coordinates + "]"),
            std::string::npos)
      << metadata;
  std::vector<double> losses = metric_values(*dir_ / "ckpt_whole.jsonl", "loss");
  ASSERT_EQ(losses.size(), 5u);

  fs::remove_all(checkpoints / "4");
  Result resumed = job("ckpt_resumed");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("Restored the checkpoint of step 3"), std::string::npos)
      << resumed.output;
  EXPECT_EQ(metric_values(*dir_ / "ckpt_resumed.jsonl", "loss"), std::vector<double>{losses[4]});
  for (int rank = 0; rank < 2; ++rank) {
    fs::path piece = runtime::state_piece_name(rank);
    EXPECT_EQ(text_of(*dir_ / "ckpt_resumed-state" / piece),
              text_of(*dir_ / "ckpt_whole-state" / piece))
        << "rank " << rank;
  }

  {
    std::fstream damage(checkpoints / "4" / "state.rank-1.safetensors",
                        std::ios::in | std::ios::out | std::ios::binary);
    damage.seekp(-1, std::ios::end);
    damage.put('\x7f');
  }
  Result skipped = job("ckpt_skipped");
  ASSERT_EQ(skipped.code, 0) << skipped.output;
  EXPECT_NE(skipped.output.find("Warning: skipping checkpoint"), std::string::npos)
      << skipped.output;
  EXPECT_NE(skipped.output.find("state.rank-1.safetensors: SHA-256"), std::string::npos)
      << skipped.output;
  EXPECT_NE(skipped.output.find("Restored the checkpoint of step 3"), std::string::npos)
      << skipped.output;
  for (int rank = 0; rank < 2; ++rank) {
    fs::path piece = runtime::state_piece_name(rank);
    EXPECT_EQ(text_of(*dir_ / "ckpt_skipped-state" / piece),
              text_of(*dir_ / "ckpt_whole-state" / piece))
        << "rank " << rank;
  }
}

// The meshes of issue 16's equality check, each trained on both models (one test per pair):
// the topology it is compiled for, the rows per device (a global batch of 4 rows everywhere),
// the ranks mpirun starts and the mesh keys.
struct MeshCase {
  std::string name;
  std::string topology;
  int64_t per_device_batch = 1;
  int ranks = 2;
  std::vector<std::string> keys;
  // The 2-slice meshes: each rank's collective counters equal the compiler's prediction, ICI
  // and DCN apart (the runtime classifies a group by the slices of its members).
  bool check_counters = false;
  // A job of devices-per-slice ranks instead of all of them is refused (exit 4).
  bool refuse_one_slice_of_ranks = false;
};

void PrintTo(const MeshCase& mesh, std::ostream* out) {
  *out << mesh.name;
}

// Two slices (compile_topology_num_slices=2 on cpu-2: 4 devices, mpirun -np 4): data across the
// slices and fsdp inside them puts the DCN axis first, where plain row-major numbering and
// MaxText's hybrid order agree; fsdp across the slices and data inside makes them differ (device
// 1 is data 1, fsdp 0), and the state put together from the ranks' pieces by the hybrid order
// must still be the single-device one.
const std::vector<MeshCase>& mesh_cases() {
  static const std::vector<MeshCase> cases = {
      {"data2", "cpu-2", 2, 2, {"ici_data_parallelism=2"}},
      {"fsdp2", "cpu-2", 2, 2, {"ici_fsdp_parallelism=2"}},
      {"tensor2", "cpu-2", 2, 2, {"ici_tensor_parallelism=2"}},
      {"fsdp4", "cpu-4", 1, 4, {"ici_fsdp_parallelism=4"}},
      {"fsdp2_tensor2", "cpu-4", 1, 4, {"ici_fsdp_parallelism=2", "ici_tensor_parallelism=2"}},
      {"data2_fsdp2", "cpu-4", 1, 4, {"ici_data_parallelism=2", "ici_fsdp_parallelism=2"}},
      {"context2_ring",
       "cpu-2",
       2,
       2,
       {"ici_context_parallelism=2", "context_parallel_strategy=ring"}},
      {"context2_all_gather",
       "cpu-2",
       2,
       2,
       {"ici_context_parallelism=2", "context_parallel_strategy=all_gather"}},
      {"tensor_sequence2", "cpu-2", 2, 2, {"ici_tensor_sequence_parallelism=2"}},
      {"slices2_dcn_data2_ici_fsdp2",
       "cpu-2",
       1,
       4,
       {"compile_topology_num_slices=2", "dcn_data_parallelism=2", "ici_fsdp_parallelism=2"},
       true,
       true},
      {"slices2_dcn_fsdp2_ici_data2",
       "cpu-2",
       1,
       4,
       {"compile_topology_num_slices=2", "dcn_fsdp_parallelism=2", "ici_data_parallelism=2"},
       true},
  };
  return cases;
}

class MpiMesh : public MpiTrain,
                public ::testing::WithParamInterface<std::tuple<std::string, MeshCase>> {};

// The losses and final state of a mesh against the single-device run of the same global batch
// (check_mesh: 5 steps, 1e-5 and 1e-4, a second run bit for bit).
TEST_P(MpiMesh, GivesTheSingleDeviceRun) {
  const auto& [model, mesh] = GetParam();
  std::vector<std::string> overrides = model_keys(model, mesh.topology, mesh.per_device_batch);
  overrides.insert(overrides.end(), mesh.keys.begin(), mesh.keys.end());
  std::string name = model + "_" + mesh.name;
  check_mesh(name, overrides, mesh.ranks, model);
  if (mesh.check_counters) check_counters(overrides, *logs_, false);
  if (mesh.refuse_one_slice_of_ranks) {
    Result fewer = run(kEnv + PRECAST_MPIEXEC + " --oversubscribe -np 2 " + PRECAST_RUN_BINARY +
                       " " + (*dir_ / (name + ".pcx")).string() + " steps=1");
    EXPECT_EQ(fewer.code, 4) << fewer.output;
    EXPECT_NE(fewer.output.find("is compiled for 4 devices (topology cpu-2) but mpirun started 2 "
                                "ranks (OMPI_COMM_WORLD_SIZE)"),
              std::string::npos)
        << fewer.output;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Meshes, MpiMesh,
    ::testing::Combine(::testing::Values(std::string("llama"), std::string("gemma2")),
                       ::testing::ValuesIn(mesh_cases())),
    [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param).name; });

// Expert parallelism (issue 20): the expert mesh axis alone and with fsdp, on the tiny MoE model.
// MaxText's rules put the MoE weights' `exp` dimension on `expert` and the activations' batch on
// data, fsdp and expert (with moe_dispatch_no_expert_sharding the dispatched tokens on `expert`
// by expert instead); the losses, the final state and each rank's collective counters (against
// the compiler's prediction) as for every other mesh.
const std::vector<MeshCase>& expert_mesh_cases() {
  static const std::vector<MeshCase> cases = {
      {"expert2", "cpu-2", 2, 2, {"ici_expert_parallelism=2"}, true},
      {"expert2_fsdp2",
       "cpu-4",
       1,
       4,
       {"ici_expert_parallelism=2", "ici_fsdp_parallelism=2"},
       true},
      // MaxText's peeled dispatch: each rank keeps its 2 experts; dispatch and combine are
      // all-to-alls over `expert` (compiler/frontend/README.md, expert parallelism).
      {"expert2_fsdp2_dispatch",
       "cpu-4",
       1,
       4,
       {"ici_expert_parallelism=2", "ici_fsdp_parallelism=2",
        "moe_dispatch_no_expert_sharding=true"},
       true},
  };
  return cases;
}

INSTANTIATE_TEST_SUITE_P(
    ExpertMeshes, MpiMesh,
    ::testing::Combine(::testing::Values(std::string("moe")),
                       ::testing::ValuesIn(expert_mesh_cases())),
    [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param).name; });

// llama4 (issue 20) on expert 2 (the grouped experts' stacks gathered over `expert`, each rank
// its own rows) and on context 2 (the chunk ids follow the global positions across the ranks).
const std::vector<MeshCase>& llama4_mesh_cases() {
  static const std::vector<MeshCase> cases = {
      {"expert2", "cpu-2", 2, 2, {"ici_expert_parallelism=2"}, true},
      {"context2_all_gather",
       "cpu-2",
       2,
       2,
       {"ici_context_parallelism=2", "context_parallel_strategy=all_gather"}},
  };
  return cases;
}

INSTANTIATE_TEST_SUITE_P(
    Llama4Meshes, MpiMesh,
    ::testing::Combine(::testing::Values(std::string("llama4")),
                       ::testing::ValuesIn(llama4_mesh_cases())),
    [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param).name; });

// The same job over TCP (`--mca btl tcp,self`) as over shared memory: the reductions combine
// pieces in rank order whatever the transport, so the losses and the final state are the same
// bits. Each rank's collective counters equal the compiler's per-step prediction
// (count_collectives, what `precast analyze` reports) times the 5 steps: calls, bytes, and bytes
// sent (its wire bytes; every count splits evenly over the groups of this mesh).
TEST_F(MpiTrain, TcpGivesTheSharedMemoryBitsAndCountersMatchThePrediction) {
  const Baseline& single = baseline("llama");
  std::vector<std::string> overrides = tiny_llama("cpu-2", 2);
  overrides.push_back("ici_fsdp_parallelism=2");
  compile("fsdp2_tcp.pcx", overrides);
  std::vector<double> shared =
      train("fsdp2_tcp.pcx", 2, "shm", single, "--mca pml ob1 --mca btl self,vader");
  std::map<int, std::string> shared_logs = *logs_;
  std::vector<double> tcp =
      train("fsdp2_tcp.pcx", 2, "tcp", single, "--mca pml ob1 --mca btl tcp,self");
  ASSERT_EQ(shared.size(), 5u);
  EXPECT_EQ(tcp, shared);
  for (int rank = 0; rank < 2; ++rank) {
    fs::path piece = runtime::state_piece_name(rank);
    EXPECT_EQ(text_of(*dir_ / "tcp-state" / piece), text_of(*dir_ / "shm-state" / piece))
        << "rank " << rank << "'s final state differs between TCP and shared memory";
  }

  check_counters(overrides, shared_logs, true);
}

// `precast train` with compile_topology=cpu-2 compiles the step (into its cache) and launches
// `mpirun -np 2 precast-run CONFIG compiled_trainstep_file=... key=value ...` itself, passing
// --mpirun-args through: the losses are the single-device run's; a --mpirun-args with an open
// quote is refused (exit 2) before mpirun is started. Run without Open MPI's root-allowing
// environment pair, the printed command has --allow-run-as-root exactly when this test runs as
// root, and --oversubscribe exactly when this host has fewer than 2 cores.
TEST_F(MpiTrain, PrecastTrainLaunchesMpirunForSeveralDevices) {
  const Baseline& single = baseline("llama");
  std::string overrides;
  for (const std::string& o : tiny_llama("cpu-2", 2)) overrides += " " + o;
  fs::path metrics = *dir_ / "precast_train.jsonl";
  std::string command =
      "env -u OMPI_ALLOW_RUN_AS_ROOT -u OMPI_ALLOW_RUN_AS_ROOT_CONFIRM XDG_CACHE_HOME=" +
      (*dir_ / "cache").string() + " " + PRECAST_BINARY + " train" + overrides +
      " ici_data_parallelism=2 steps=5 num_threads=1 metrics_file=" + metrics.string() +
      " base_output_directory=" + dir_->string() + " run_name=precast_train";
  Result r = run(command + " --mpirun-args=\"--mca pml ob1\"");
  ASSERT_EQ(r.code, 0) << r.output;
  std::string flags = std::string(geteuid() == 0 ? " --allow-run-as-root" : "") +
                      (std::thread::hardware_concurrency() < 2 ? " --oversubscribe" : "");
  EXPECT_NE(r.output.find("Launching 2 ranks: mpirun" + flags + " --mca pml ob1 -np 2 " +
                          PRECAST_RUN_BINARY + " "),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("completed step: 4"), std::string::npos) << r.output;
  std::vector<double> losses = metric_values(metrics, "loss");
  ASSERT_EQ(losses.size(), single.loss.size());
  for (size_t s = 0; s < losses.size(); ++s) {
    EXPECT_LE(std::abs(losses[s] - single.loss[s]) / std::abs(single.loss[s]), 1e-5)
        << "step " << s << ": " << losses[s] << " vs one device " << single.loss[s];
  }
  EXPECT_NE(text_of(*dir_ / "precast_train" / "logs" / "rank-1.log").find("completed step: 4"),
            std::string::npos);

  Result open_quote = run(command + " --mpirun-args=\"--host 'a\"");
  EXPECT_EQ(open_quote.code, 2) << open_quote.output;
  EXPECT_NE(open_quote.output.find("a single quote is not closed"), std::string::npos)
      << open_quote.output;
}

// collective_timeout_seconds is a run-time key: a timeout no collective can meet (a nanosecond:
// the first rank to arrive waits for the other longer than that) ends the job with exit 1 and
// the message naming the key; 0 is refused before MPI starts (exit 2).
TEST_F(MpiTrain, CollectiveTimeoutSecondsIsObeyed) {
  std::vector<std::string> overrides = tiny_llama("cpu-2", 2);
  overrides.push_back("ici_data_parallelism=2");
  compile("timeout.pcx", overrides);
  std::string job = kEnv + PRECAST_MPIEXEC + " --oversubscribe -np 2 " + PRECAST_RUN_BINARY + " " +
                    (*dir_ / "timeout.pcx").string() + " steps=2 num_threads=1" +
                    " base_output_directory=" + dir_->string() + " run_name=timeout";
  Result r = run(job + " collective_timeout_seconds=1e-9");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("did not complete within 1e-09 seconds (collective_timeout_seconds)"),
            std::string::npos)
      << r.output;
  Result zero = run(job + " collective_timeout_seconds=0");
  EXPECT_EQ(zero.code, 2) << zero.output;
  EXPECT_NE(zero.output.find("collective_timeout_seconds=0: must be a number of seconds > 0"),
            std::string::npos)
      << zero.output;
}

// An error on a rank other than 0 before the first collective (its log file cannot be opened:
// a directory stands where the file goes) ends the whole job at once with that rank's message;
// rank 0 is not left waiting in a collective until the timeout.
TEST_F(MpiTrain, ARankThatCannotOpenItsLogEndsTheJob) {
  std::vector<std::string> overrides = tiny_llama("cpu-2", 2);
  overrides.push_back("ici_data_parallelism=2");
  compile("nolog.pcx", overrides);
  fs::create_directories(*dir_ / "nolog" / "logs" / "rank-1.log" / "in-the-way");
  auto start = std::chrono::steady_clock::now();
  Result r = run(kEnv + PRECAST_MPIEXEC + " --oversubscribe -np 2 " + PRECAST_RUN_BINARY + " " +
                 (*dir_ / "nolog.pcx").string() + " steps=2 num_threads=1" +
                 " collective_timeout_seconds=120 base_output_directory=" + dir_->string() +
                 " run_name=nolog");
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("rank 1: cannot open " +
                          (*dir_ / "nolog" / "logs" / "rank-1.log").string() + " for its log"),
            std::string::npos)
      << r.output;
  EXPECT_LT(seconds, 60.0) << "the job waited for the collective timeout: " << r.output;
}

}  // namespace
}  // namespace precast
