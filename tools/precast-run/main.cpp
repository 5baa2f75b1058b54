// precast-run: loads a compiled step (.pcx), checks it was built for this machine (and, given a
// config, for that config), and trains with it, logging MaxText's lines. No LLVM optimiser or
// code generator is linked in: the object code is linked in process with JITLink.
//
//   precast-run step.pcx [run-time key=value ...] [--gemm=auto|packed|openblas|eigen]
//   precast-run CONFIG.yml compiled_trainstep_file=step.pcx [key=value ...]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>
#include <optional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "compiler/artifact/ArtifactIo.h"
#include "compiler/artifact/Compatibility.h"
#include "compiler/config/ArtifactConfig.h"
#include "runtime/collectives/DeviceMesh.h"
#include "runtime/collectives/MpiCommunicator.h"
#include "runtime/collectives/MpiLaunch.h"
#include "runtime/kernels/ThreadPool.h"
#include "runtime/loader/ObjectLoader.h"
#include "runtime/profile/RunDiagnostics.h"
#include "runtime/train/StatePiece.h"
#include "runtime/metrics/StartupLines.h"
#include "runtime/train/Trainer.h"
#include "tools/ConfigDir.h"
#include "tools/Progress.h"

namespace fs = std::filesystem;

namespace precast {
namespace {

constexpr const char* kVersion = "0.1.0";

int fail(const Error& error) {
  std::cerr << "precast-run: error: " << error.message() << "\n";
  return error.exit_code();
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// num_threads=0 under mpirun: the host's cores shared among the ranks on this host (Open MPI's
// OMPI_COMM_WORLD_LOCAL_SIZE), at least one each.
int runtime_threads_per_rank() {
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  long local = 1;
  if (const char* text = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) local = std::strtol(text, nullptr, 10);
  return std::max(1, static_cast<int>(cores / static_cast<unsigned>(std::max(1L, local))));
}

// MaxText's first lines (its legacy pyconfig's): the keys set on the command line, the model,
// the keys its model file sets (in file order), then with log_config every resolved key as
// `Config param <key>: <value>`, sorted, the output directories as this run resolved them.
void print_config_lines(std::ostream& out, const std::vector<std::string>& overrides,
                        const runtime::RunSettings& settings) {
  std::vector<std::string> keys;
  for (const std::string& o : overrides) keys.push_back(o.substr(0, o.find('=')));
  out << "Updating keys from env and command line: " << runtime::python_string_list(keys) << "\n";
  auto value = [&](const std::string& key) {
    auto it = settings.config.find(key);
    return it == settings.config.end() ? std::string() : it->second;
  };
  const std::string model = value("model_name");
  out << "Running Model: " << model << "\n";
  if (!model.empty() && model != "default") {
    std::vector<std::string> model_keys;
    try {
      YAML::Node file = YAML::LoadFile((config_dir() / "models" / (model + ".yml")).string());
      for (const auto& entry : file) model_keys.push_back(entry.first.as<std::string>());
    } catch (const YAML::Exception&) {
      // The artifact carries the resolved values; a missing model file only empties this list.
    }
    out << "Updating keys from model: " << runtime::python_string_list(model_keys) << "\n";
  }
  if (value("log_config") != "True" && value("log_config") != "true") return;
  for (const auto& [key, v] : settings.config) {
    if (key != "hf_access_token") out << "Config param " << key << ": " << v << "\n";
  }
}

void print_help() {
  std::cout
      << "Usage: precast-run step.pcx [key=value ...] [--gemm=auto|packed|openblas|eigen]\n"
         "                  [--save-final-state=DIR]\n"
         "       precast-run CONFIG.yml compiled_trainstep_file=step.pcx [key=value ...]\n\n"
         "Loads a step compiled by `precast compile`, refuses it when it was built for another\n"
         "CPU, triple, device count or (given a config) another value of a compile-time key,\n"
         "and trains, one `completed step: ...` line per step.\n"
         "Run-time keys (steps, learning_rate and the schedule, adam_*, gradient_clipping_threshold,\n"
         "init_weights_seed, data_shuffle_seed, num_threads, metrics_file, abort_on_*) are set\n"
         "with key=value without recompiling.\n\n"
         "Outputs go to {base_output_directory}/{run_name}/ (MaxText's layout): metrics/metrics.jsonl\n"
         "(one JSON line per step unless metrics_file= names another file), tensorboard/ (the same\n"
         "scalars as TensorBoard event files; enable_tensorboard=false turns them off),\n"
         "checkpoints/, logs/, and config.yml (the resolved config) with save_config_to_gcs=true.\n"
         "A step's seconds run from the previous step's loss to its own, so a checkpoint save or a\n"
         "metrics write counts in the step during which it ran; the metrics file splits them into\n"
         "perf/compute_seconds, perf/checkpoint_seconds, perf/eval_seconds and perf/other_seconds.\n"
         "perf/mfu divides TFLOP/s by cpu_peak_tflops, or (0, the default) by the peak an FMA probe\n"
         "measures on the run's threads at start-up.\n\n"
         "Data: dataset_type=synthetic (the default: MaxText's synthetic batch), tokens (token\n"
         "files made by `precast tokenize`) or text (files as bytes, vocab_size >= 259), read from\n"
         "dataset_path (files, directories or globs, comma-separated). packing=true puts several\n"
         "documents in a row (segment ids and positions per document), false one per row;\n"
         "enable_data_shuffling and data_shuffle_seed order the documents each epoch; the run\n"
         "ends after num_epoch passes. Every 20th document is held out (runtime/data/README.md).\n"
         "Bad data (wrong magic, truncated file, a token id >= vocab_size, an empty dataset, a\n"
         "glob matching nothing) exits 2 naming the file and offset before the first step.\n\n"
         "Evaluation (an artifact compiled with eval_interval > 0 holds an eval_step): after step\n"
         "s with s >= eval_start_step and (s - eval_start_step) % eval_interval == 0, eval_steps\n"
         "batches (-1: the whole eval set) of the held-out documents, or of eval_dataset_path,\n"
         "give MaxText's `Completed eval after train step ...` line and eval/avg_loss,\n"
         "eval/avg_perplexity, eval/total_weights, eval/avg_z_loss (with routed experts also\n"
         "avg_moe_lb_loss) in the metrics file;\n"
         "target_eval_loss > 0 ends the run once reached. Sampling (compiled with sample_tokens\n"
         "> 0, any mesh): after training, sample_tokens tokens greedily after sample_prompt (byte\n"
         "tokens after BOS; stops at EOS), logged as `Sample (...): \"prompt\" -> \"text\"`\n"
         "(runtime/eval/README.md); decode_sampling_strategy=weighted|topk|nucleus|composite\n"
         "with decode_sampling_top_k, _nucleus_p and _temperature draws instead (seed 1234).\n\n"
         "Checkpoints: enable_checkpointing=true saves the state (parameters, optimizer state,\n"
         "count) after every step s with s % checkpoint_period == 0 and after the last step\n"
         "(save_checkpoint_on_completion) into checkpoint_dir =\n"
         "{base_output_directory}/{run_name}/checkpoints/<step>/ (state.safetensors, or from\n"
         "256 MiB of state up to 16 shards state-00001-of-00016.safetensors ...,\n"
         "metadata.json with the data position, commit_success.txt written last), keeps the newest\n"
         "max_num_checkpoints_to_keep, and at start-up resumes from the latest committed one,\n"
         "skipping damaged or uncommitted ones with a warning naming the file.\n"
         "async_checkpointing=true (the default) copies the state after the step and writes it\n"
         "on a background thread, one save in flight; false writes it inside the step.\n"
         "A run with no checkpoint of its own starts from load_parameters_path (parameters by\n"
         "name from a checkpoint step directory, a checkpoint_dir or any safetensors file; other\n"
         "floating precisions are converted; fresh optimizer state, step 0) or\n"
         "load_full_state_path (parameters and optimizer state of a Precast checkpoint; the run\n"
         "goes on after its step). Each rank takes its piece of the global tensors.\n\n"
         "Profiling: profiler=trace writes a Chrome trace (opens in Perfetto) of steps\n"
         "skip_first_n_steps_for_profiler .. + profiler_steps - 1 to\n"
         "{base_output_directory}/{run_name}/profile/trace-rank<r>.json: one event per kernel,\n"
         "GEMM, attention kernel and collective, named by IR op and scope, and one per step;\n"
         "`precast profile summary FILE` totals it. collect_stack_trace=true writes every\n"
         "thread's stack to the log when no step completes within stack_trace_interval_seconds\n"
         "(default 600) and on SIGSEGV, SIGABRT, SIGBUS, SIGFPE or SIGILL.\n\n"
         "Under mpirun (OMPI_COMM_WORLD_SIZE set) each rank is one device of the artifact's mesh\n"
         "(rank r = device r in MaxText's order: slices outermost, numbered row-major over the\n"
         "axes' DCN sizes, and inside a slice row-major over their ICI sizes), e.g. `mpirun -np 2\n"
         "precast-run step.pcx` for an artifact compiled for cpu-2, -np 4 for cpu-2 with\n"
         "compile_topology_num_slices=2: a world size other than the artifact's device count\n"
         "is refused (exit 4). Each rank initialises and trains on its piece of the\n"
         "global parameters and batch; the metrics are global. Rank 0 writes the log lines and\n"
         "metrics_file; rank r > 0 logs to {base_output_directory}/{run_name}/logs/rank-<r>.log.\n"
         "num_threads=0 gives each rank the host's cores divided by the ranks on the host.\n"
         "collective_timeout_seconds (default 600) is how long a collective may wait for the\n"
         "other ranks: past it the job is aborted (exit 1) naming the rank, step and op.\n"
         "With several ranks each rank saves its piece of the state (per-device shapes) as\n"
         "state.rank-<r>.safetensors in the step's directory; after a barrier rank 0 writes\n"
         "metadata.json (every piece's size, SHA-256, rank and mesh coordinates) and the marker;\n"
         "a resume verifies every piece on every rank and loads its own.\n\n"
         "--save-final-state=DIR writes, after the last step, the parameters and optimizer state\n"
         "this rank holds (its per-device pieces, by signature name) as\n"
         "DIR/state.rank-<r>.safetensors (rank 0 on one process); the artifact's signature gives\n"
         "each tensor's global sharding.\n\n"
         "Exit codes: 0 success, 1 training aborted (NaN/Inf loss) or I/O failure, 2 usage or\n"
         "configuration error, 4 incompatible or damaged artifact (another format version,\n"
         "another machine or compile-time config, or a step signature whose batch, scalar,\n"
         "metric or state names this runtime does not bind), or a checkpoint in checkpoint_dir\n"
         "saved by another artifact (IR hash, world size or tensor shapes differ), or a\n"
         "load_parameters_path / load_full_state_path source that is missing, damaged or does\n"
         "not fit (each missing or misshapen tensor named).\n";
}

struct Invocation {
  std::string artifact_path;
  std::string config_file;              // empty: the artifact's recorded config
  std::vector<std::string> overrides;   // key=value, in order
  std::string gemm = "auto";
  std::string save_final_state;  // a directory: each rank's piece of the state after the last step
};

Expected<Invocation> parse(int argc, char** argv) {
  Invocation inv;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--gemm=", 0) == 0) {
      inv.gemm = arg.substr(7);
    } else if (arg.rfind("--save-final-state=", 0) == 0) {
      inv.save_final_state = arg.substr(std::string("--save-final-state=").size());
      if (inv.save_final_state.empty()) {
        return usage_error("--save-final-state= needs a directory, e.g. --save-final-state=final");
      }
    } else if (arg.rfind("--", 0) == 0) {
      return usage_error(fmt::format("unknown option '{}'; see precast-run --help", arg));
    } else if (i == 1 && (ends_with(arg, ".yml") || ends_with(arg, ".yaml"))) {
      inv.config_file = arg;
    } else if (i == 1 && arg.find('=') == std::string::npos) {
      inv.artifact_path = arg;
    } else if (arg.rfind("compiled_trainstep_file=", 0) == 0) {
      inv.artifact_path = arg.substr(std::string("compiled_trainstep_file=").size());
    } else if (arg.find('=') != std::string::npos) {
      inv.overrides.push_back(arg);
    } else {
      return usage_error(fmt::format("unexpected argument '{}'; see precast-run --help", arg));
    }
  }
  if (inv.artifact_path.empty()) {
    return usage_error(
        "no artifact given: run `precast-run step.pcx` or `precast-run CONFIG.yml "
        "compiled_trainstep_file=step.pcx`");
  }
  return inv;
}

int run(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      print_help();
      return 0;
    }
    if (arg == "--version") {
      std::cout << "precast-run " << kVersion << "\n";
      return 0;
    }
  }
  Expected<Invocation> inv = parse(argc, argv);
  if (!inv.ok()) return fail(inv.error());
  auto start = std::chrono::steady_clock::now();
  Expected<artifact::Artifact> a = artifact::read_artifact(inv->artifact_path);
  if (!a.ok()) return fail(a.error());
  artifact::HostInfo host = artifact::host_info();
  // Under mpirun one rank is one device of the artifact's mesh: the world must be its size.
  if (std::optional<int64_t> world = runtime::launched_world_size()) {
    Status fits = runtime::check_world_size(inv->artifact_path, a->key, *world);
    if (!fits.ok()) return fail(fits.error());
    host.device_count = *world;
  }
  Status compatible = artifact::require_compatible_host(inv->artifact_path, a->key, host);
  if (!compatible.ok()) return fail(compatible.error());

  std::vector<std::string> run_overrides = inv->overrides;
  if (!inv->config_file.empty()) {
    // Every compile-time key of the config must equal the artifact's.
    ConfigRequest request;
    request.config_file = inv->config_file;
    request.overrides = inv->overrides;
    request.overrides.push_back("compiled_trainstep_file=" + inv->artifact_path);
    request.first_override_position = 2;
    Expected<std::vector<artifact::ConfigEntry>> given = require_config_matches_artifact(
        request, config_dir() / "topologies.yml", inv->artifact_path, *a);
    if (!given.ok()) return fail(given.error());
    run_overrides = runtime::run_time_overrides(*given);  // the config's run-time values apply
  } else {
    // e.g. enable_checkpointing=true: refused by name rather than accepted and ignored.
    Status supported = check_overrides_supported(inv->overrides, 2);
    if (!supported.ok()) return fail(supported.error());
  }
  Expected<runtime::RunSettings> settings = runtime::run_settings(*a, run_overrides);
  if (!settings.ok()) return fail(settings.error());
  settings->gemm = inv->gemm;

  // Several devices: this process is rank r = device r of the artifact's mesh, its
  // collectives run on the groups made here once, before the first step, on every rank.
  std::unique_ptr<runtime::MpiWorld> world;
  std::optional<runtime::DeviceMesh> mesh;
  runtime::TrainOptions options;
  std::ofstream rank_log;
  std::ostream* out = &std::cout;
  if (host.device_count > 1) {
    Expected<runtime::DeviceMesh> made_mesh = runtime::DeviceMesh::of_artifact(*a);
    if (!made_mesh.ok()) return fail(made_mesh.error());
    mesh.emplace(std::move(*made_mesh));
    if (mesh->num_devices() != host.device_count) {
      return fail(Error(ExitCode::kIncompatible,
                        fmt::format("{}: its mesh ({}) has {} devices but it is compiled for {}; "
                                    "recompile it with this build's precast compile",
                                    inv->artifact_path, mesh->describe(), mesh->num_devices(),
                                    host.device_count)));
    }
    Expected<std::unique_ptr<runtime::MpiWorld>> made = runtime::MpiWorld::initialize();
    if (!made.ok()) return fail(made.error());
    world = std::move(*made);
    world->set_collective_timeout(settings->collective_timeout_seconds);
    Status prepared = world->prepare(*mesh, a->program);
    if (!prepared.ok()) world->abort(prepared.error().exit_code(), prepared.error().message());
    int rank = world->rank();
    options.mesh_coordinates = mesh->coordinates(rank);
    options.communicator = [&world, &mesh](const artifact::Collective& c) {
      return world->group(*mesh, c);
    };
    options.step_started = [&world](int64_t step) { world->set_step(step); };
    // Checkpoints: each rank saves its piece, rank 0 commits them between two barriers.
    options.rank = rank;
    for (int64_t device = 0; device < mesh->num_devices(); ++device) {
      options.all_mesh_coordinates.push_back(mesh->coordinates(device));
    }
    options.barrier = [&world] { return world->world().barrier(); };
    if (settings->num_threads == 0) settings->num_threads = runtime_threads_per_rank();
    options.device = rank;
    if (rank != 0) {
      // Rank 0 alone writes the log lines, metrics_file and TensorBoard events; the others keep
      // their lines in a file.
      settings->metrics_file.clear();
      fs::path logs = settings->outputs.logs_dir;
      std::error_code ignored;
      fs::create_directories(logs, ignored);
      // Appended to (O_APPEND), as this rank's stack traces are (collect_stack_trace).
      std::error_code stale;
      fs::remove(logs / fmt::format("rank-{}.log", rank), stale);
      rank_log.open(logs / fmt::format("rank-{}.log", rank), std::ios::app);
      if (!rank_log) {
        // The whole job ends with this rank's message, rather than leave rank 0 waiting in its
        // first collective until the timeout.
        world->abort(static_cast<int>(ExitCode::kFailure),
                     fmt::format("rank {}: cannot open {} for its log", rank,
                                 (logs / fmt::format("rank-{}.log", rank)).string()));
      }
      out = &rank_log;
    }
  }
  double read_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  print_config_lines(*out, inv->overrides, *settings);
  std::string features;
  for (const std::string& f : a->key.cpu_features) features += (features.empty() ? "" : ",") + f;
  *out << fmt::format("Precast {} (JITLink from LLVM {}), backend cpu, artifact by precast {}\n",
                           kVersion, runtime::loader_llvm_version(), a->compiler_version);
  *out << fmt::format("Target CPU features: {}\n", features.empty() ? "(none)" : features);
  *out << runtime::cpu_line(settings->num_threads > 0 ? settings->num_threads
                                                      : default_thread_count())
       << "\n";
  std::string shape;
  for (size_t i = 0; i < a->key.mesh.size(); ++i) {
    shape += (i ? ", " : "") + std::to_string(a->key.mesh[i].size);
  }
  if (a->key.mesh.size() == 1) shape += ",";
  *out << fmt::format("Num_devices: {}, shape ({})\n", a->key.num_devices, shape);
  *out << a->setup_text << "\n";
  *out << fmt::format(
      "Total estimated memory size: {:.1f} GB, estimated output size: {:.1f} GB, estimated temp "
      "size: {:.1f} GB, estimated argument size: {:.1f} GB, Estimated host temp size: 0.0 GB.\n",
      static_cast<double>(a->plan.argument_bytes + a->plan.output_bytes - a->plan.alias_bytes +
                          a->plan.temp_bytes) / (1 << 30),
      static_cast<double>(a->plan.output_bytes) / (1 << 30),
      static_cast<double>(a->plan.temp_bytes) / (1 << 30),
      static_cast<double>(a->plan.argument_bytes) / (1 << 30));
  *out << fmt::format("Loaded {} ({} bytes of object code) in {:.1f} ms\n",
                           inv->artifact_path, a->object_code.size(), read_seconds * 1e3);

  options.log = out;
  // profiler=trace and collect_stack_trace (runtime/profile/RunDiagnostics.h).
  int rank = world != nullptr ? world->rank() : 0;
  Expected<std::unique_ptr<runtime::RunDiagnostics>> diagnostics = runtime::start_run_diagnostics(
      *a, settings->profile, settings->steps, rank, settings->base_output_directory,
      settings->run_name);
  if (!diagnostics.ok()) return fail(diagnostics.error());
  options.observers = (*diagnostics)->observers();
  Progress progress("precast-run");  // standard error: in place on a terminal, else plain lines
  options.progress = [&progress](std::string_view stage, int64_t done, int64_t total) {
    progress.report(stage, done, total);
  };
  options.keep_final_state = !inv->save_final_state.empty();
  Expected<runtime::TrainReport> report = runtime::train(*a, *settings, options);
  progress.finish();
  if (report.ok()) {
    Status finished = (*diagnostics)->finish(*out);
    if (!finished.ok()) report = finished.error();
  }
  if (!report.ok()) {
    // One rank's error ends the whole job with its message, rather than leave the others
    // waiting in a collective.
    if (world != nullptr) world->abort(report.error().exit_code(), report.error().message());
    return fail(report.error());
  }
  // What this rank's collectives moved, named as `precast analyze` predicts them per step.
  if (world != nullptr) *out << world->counters().format();
  if (!inv->save_final_state.empty()) {
    Status saved = runtime::save_state_piece(inv->save_final_state, world ? world->rank() : 0,
                                             a->signature, report->final_state);
    if (!saved.ok()) {
      if (world != nullptr) world->abort(saved.error().exit_code(), saved.error().message());
      return fail(saved.error());
    }
  }
  *out << fmt::format(
      "Linked the object code in {:.2f} ms; parameters initialised in {:.3f} s; logging took "
      "{:.3f} s (counted in the steps' seconds)\n"
      "Runtime memory: arena {} bytes (planned {}), arguments {} bytes (planned {}), outputs {} "
      "bytes (planned {})\n",
      report->load_seconds * 1e3, report->init_seconds, report->logging_seconds,
      report->arena_bytes, a->plan.arena_bytes, report->argument_bytes, a->plan.argument_bytes,
      report->output_bytes, a->plan.output_bytes);
  return report->aborted ? static_cast<int>(ExitCode::kFailure) : 0;
}

}  // namespace
}  // namespace precast

int main(int argc, char** argv) { return precast::run(argc, argv); }
