// `precast`: the compiler's command line. Each command is one function; errors print one
// paragraph to stderr and exit with the documented code (README.md, "Exit codes").
#include <fmt/format.h>
#include <boost/program_options.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compiler/analysis/MemoryTimeline.h"
#include "compiler/config/Config.h"
#include "compiler/config/KeyRegistry.h"
#include "compiler/artifact/ArtifactIo.h"
#include "compiler/artifact/ArtifactText.h"
#include "compiler/artifact/Compatibility.h"
#include "compiler/artifact/Sha256.h"
#include "compiler/backend/cpu/ObjectEmitter.h"
#include "compiler/driver/Analyze.h"
#include "compiler/config/ArtifactConfig.h"
#include "compiler/driver/Compare.h"
#include "compiler/driver/CompareHtml.h"
#include "compiler/driver/Compile.h"
#include "compiler/driver/Dump.h"
#include "compiler/driver/EntryPoints.h"
#include "compiler/driver/Inspect.h"
#include "compiler/topology/Topology.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/profile/TraceSummary.h"
#include "tools/precast/TokenizeCommand.h"
#include "runtime/train/Trainer.h"
#include "tools/precast/MpiTrainLaunch.h"
#include "tools/ConfigDir.h"
#include "tools/Progress.h"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace precast {
namespace {

constexpr const char* kVersion = "0.1.0";

fs::path topologies_file() {
  return config_dir() / "topologies.yml";
}

// Writes through a temporary name, fsync and rename, so a reader never sees half a file.
Status write_file_atomically(const std::string& path, const std::string& text) {
  std::string temporary = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    return Error(ExitCode::kFailure,
                 fmt::format("cannot write '{}': {}", path, std::strerror(errno)));
  }
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) {
      std::string reason = std::strerror(errno);
      ::close(fd);
      ::unlink(temporary.c_str());
      return Error(ExitCode::kFailure, fmt::format("cannot write '{}': {}", path, reason));
    }
    done += static_cast<size_t>(n);
  }
  bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced || ::rename(temporary.c_str(), path.c_str()) != 0) {
    std::string reason = std::strerror(errno);
    ::unlink(temporary.c_str());
    return Error(ExitCode::kFailure, fmt::format("cannot write '{}': {}", path, reason));
  }
  return Status::success();
}

int fail(const Error& error) {
  std::cerr << "precast: error: " << error.message() << "\n";
  return error.exit_code();
}

int usage_failure(const std::string& message, const std::string& command) {
  std::cerr << "precast: error: " << message << "\nRun `precast " << command
            << " --help` for usage.\n";
  return static_cast<int>(ExitCode::kUsage);
}

bool is_yaml_path(const std::string& arg) {
  auto ends_with = [&](std::string_view s) {
    return arg.size() >= s.size() && arg.compare(arg.size() - s.size(), s.size(), s) == 0;
  };
  return ends_with(".yml") || ends_with(".yaml");
}

// MaxText's invocation: an optional CONFIG.yml first, then key=value overrides.
ConfigRequest config_request(const std::vector<std::string>& positional) {
  ConfigRequest request;
  size_t first = 0;
  if (!positional.empty() && is_yaml_path(positional[0])) {
    request.config_file = positional[0];
    first = 1;
  } else {
    request.config_file = config_dir() / "base.yml";
  }
  request.overrides.assign(positional.begin() + static_cast<std::ptrdiff_t>(first),
                           positional.end());
  request.first_override_position = static_cast<int>(first) + 1;
  return request;
}

struct ParsedCommand {
  po::variables_map options;
  std::vector<std::string> positional;
};

// Parses a command's flags; everything else is positional (CONFIG and key=value).
Expected<ParsedCommand> parse_command(const std::vector<std::string>& args,
                                      const po::options_description& flags) {
  po::options_description all;
  all.add(flags);
  all.add_options()("args", po::value<std::vector<std::string>>(), "");
  po::positional_options_description positional;
  positional.add("args", -1);
  ParsedCommand parsed;
  try {
    po::store(po::command_line_parser(args).options(all).positional(positional).run(),
              parsed.options);
    po::notify(parsed.options);
  } catch (const po::error& e) {
    return usage_error(e.what());
  }
  if (parsed.options.count("args")) {
    parsed.positional = parsed.options["args"].as<std::vector<std::string>>();
  }
  return parsed;
}

void print_command_help(const std::string& usage, const std::string& about,
                        const po::options_description& flags) {
  std::cout << "Usage: " << usage << "\n\n" << about << "\n\n" << flags << "\n";
}

// Parses a command's arguments. Returns an exit code when the command is finished already
// (--help printed, or a usage error reported); otherwise fills `parsed`.
std::optional<int> parse_or_finish(const std::vector<std::string>& args,
                                   const po::options_description& flags, const std::string& name,
                                   const std::string& usage, const std::string& about,
                                   ParsedCommand& parsed) {
  Expected<ParsedCommand> result = parse_command(args, flags);
  if (!result.ok()) return usage_failure(result.error().message(), name);
  if (result->options.count("help")) {
    print_command_help(usage, about, flags);
    return 0;
  }
  parsed = std::move(*result);
  return std::nullopt;
}

const char* kConfigHelp =
    "CONFIG is a MaxText-style YAML file (default: configs/base.yml); key=value arguments\n"
    "override it, after configs/models/<model_name>.yml, exactly as MaxText layers them.\n"
    "`precast keys` lists every key.";

// The pipeline flags every config command takes: where to dump the stages, which, and timing.
void add_pipeline_flags(po::options_description& flags) {
  flags.add_options()("dump-ir", po::value<std::string>(),
                      "write the module after every pipeline stage to DIR/NN-<stage>.ir (the "
                      "assign-buffers stage annotated with the buffer plan)")(
      "dump-after", po::value<std::string>()->default_value(""),
      "with --dump-ir: only write the stages whose name matches this regex")(
      "pass-timing",
      "print each pipeline stage's time and op counts to standard error (analyze: and the "
      "stages outside the pipeline, the suggestions' re-analyses among them)");
}

PipelineOptions pipeline_options(const ParsedCommand& parsed) {
  PipelineOptions options;
  if (parsed.options.count("dump-ir")) {
    options.dump_dir = parsed.options["dump-ir"].as<std::string>();
    options.dump_after = parsed.options["dump-after"].as<std::string>();
  }
  options.xla_arena = parsed.options.count("xla-arena") > 0;
  return options;
}

void print_pass_timing(const ParsedCommand& parsed, const TrainProgram& program) {
  if (parsed.options.count("pass-timing")) std::cerr << program.timing_report;
}

int run_analyze(const std::vector<std::string>& args) {
  po::options_description flags("Options");
  flags.add_options()("help,h", "show this help")(
      "format", po::value<std::string>()->default_value("text"), "output format: text or json")(
      "print-config", "also print every resolved key (MaxText's `Config param` lines)")(
      "show-sources", "with --print-config: say where each value came from")(
      "timing", "print the wall time of the analysis")(
      "memory-timeline", po::value<std::string>(),
      "write live memory over the schedule, stacked by category, as an SVG file")(
      "xla-arena",
      "on a TPU: temp is XLA's preallocated-temp arena alone (memory colour 0 of its buffer "
      "assignment) as Precast models it, without the on-chip arenas and the estimated extra "
      "that memory_analysis()'s temp adds (benchmarks/xla_reference)");
  add_pipeline_flags(flags);
  ParsedCommand parsed;
  if (auto done = parse_or_finish(
          args, flags, "analyze",
          "precast analyze [CONFIG.yml] [key=value ...] [--format=text|json]",
          std::string("Resolves the config for the target topology (compile_topology=..., default\n"
                      "this host as cpu-1) and prints the mesh, the parameter count, MaxText's\n"
                      "per-device TFLOPs per step and the batch.\n\n") +
              kConfigHelp,
          parsed))
    return *done;
  std::string format = parsed.options["format"].as<std::string>();
  if (format != "text" && format != "json") {
    return usage_failure("--format must be text or json, got '" + format + "'", "analyze");
  }
  auto start = std::chrono::steady_clock::now();
  tune_allocator_for_analysis();
  ConfigRequest request = config_request(parsed.positional);
  Expected<AnalysisReport> report = analyze(request, topologies_file(), pipeline_options(parsed));
  if (!report.ok()) return fail(report.error());
  print_pass_timing(parsed, *report->program);
  auto suggestions_start = std::chrono::steady_clock::now();
  int suggestion_analyses = 0;
  if (!report->fits()) {
    report->suggestions =
        suggest_fits(request, topologies_file(), *report, &suggestion_analyses);
  }
  auto suggestions_end = std::chrono::steady_clock::now();
  if (parsed.options.count("memory-timeline")) {
    std::string path = parsed.options["memory-timeline"].as<std::string>();
    std::string title = fmt::format("{} on {}: per-device memory over the train step",
                                    report->model.model_name, report->resolved.topology.name);
    Status written = write_file_atomically(path, memory_timeline_svg(report->memory.plan, title));
    if (!written.ok()) return fail(written.error());
  }
  if (parsed.options.count("print-config")) {
    std::cout << format_config(report->resolved.config, parsed.options.count("show-sources") > 0);
  }
  std::cout << (format == "json" ? format_analysis_json(*report) : format_analysis_text(*report));
  if (parsed.options.count("pass-timing")) {
    using Ms = std::chrono::duration<double, std::milli>;
    std::cerr << format_outside_pipeline_timing(
        *report, Ms(suggestions_end - suggestions_start).count(), suggestion_analyses,
        Ms(std::chrono::steady_clock::now() - suggestions_end).count());
  }
  if (parsed.options.count("timing")) {
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::cerr << fmt::format("analysis took {:.1f} ms\n", ms);
  }
  return report->fits() ? 0 : static_cast<int>(ExitCode::kOutOfMemory);
}

int run_fit(const std::vector<std::string>& args) {
  po::options_description flags("Options");
  flags.add_options()("help,h", "show this help")(
      "search-mesh",
      "also try ICI meshes of the slice's devices over data, fsdp and tensor (fsdp only, "
      "fsdp x tensor 2/4/8, data 2 x fsdp, data only); other ici_* axes set to 1");
  add_pipeline_flags(flags);
  ParsedCommand parsed;
  if (auto done = parse_or_finish(
          args, flags, "fit", "precast fit [CONFIG.yml] [key=value ...] [--search-mesh]",
          std::string(
              "Searches, for each remat policy, the largest per_device_batch_size (powers of\n"
              "two around the configured one) whose train step fits the target's device\n"
              "memory, and ranks them by estimated tokens per second per device.\n\n") +
              kConfigHelp,
          parsed))
    return *done;
  tune_allocator_for_analysis();
  ConfigRequest request = config_request(parsed.positional);
  // --dump-ir writes the configured run's stages; the search's candidates are not dumped.
  Expected<AnalysisReport> base = analyze(request, topologies_file(), pipeline_options(parsed));
  if (!base.ok()) return fail(base.error());
  print_pass_timing(parsed, *base->program);
  Expected<std::vector<FitCandidate>> fits =
      search_fits(request, topologies_file(), *base, parsed.options.count("search-mesh") > 0);
  if (!fits.ok()) return fail(fits.error());
  std::cout << format_fits(*fits, *base);
  return fits->empty() ? static_cast<int>(ExitCode::kOutOfMemory) : 0;
}

// The value of key=value among the positional arguments (the last one wins), or "".
std::string override_value(const std::vector<std::string>& positional, const std::string& key) {
  std::string value;
  for (const std::string& arg : positional) {
    if (arg.rfind(key + "=", 0) == 0) value = arg.substr(key.size() + 1);
  }
  return value;
}

int run_compile(const std::vector<std::string>& args) {
  po::options_description flags("Options");
  flags.add_options()("help,h", "show this help");
  add_pipeline_flags(flags);
  ParsedCommand parsed;
  if (auto done = parse_or_finish(
          args, flags, "compile",
          "precast compile [CONFIG.yml] [key=value ...] compiled_trainstep_file=step.pcx",
          std::string("Compiles the train step for this CPU (or target_triple=/target_cpu=) and\n"
                      "writes one artifact that `precast-run step.pcx` loads and trains with.\n"
                      "Prints the analysis first, as MaxText's train_compile.py does. Progress\n"
                      "(the stages, the ops whose LLVM kernels are generated, counted) goes to\n"
                      "standard error: one line updated in place on a terminal, else a line per\n"
                      "stage.\n\n") +
              kConfigHelp,
          parsed))
    return *done;
  CompileRequest request;
  request.config = config_request(parsed.positional);
  request.output = override_value(parsed.positional, "compiled_trainstep_file");
  request.pipeline = pipeline_options(parsed);
  if (request.output.empty()) {
    return usage_failure("compiled_trainstep_file=PATH is required: where the artifact is written",
                         "compile");
  }
  std::cout << "Jitting and compiling train step...\n" << std::flush;
  Progress progress("precast compile");
  request.progress = [&progress](std::string_view stage, int64_t done, int64_t total) {
    progress.report(stage, done, total);
  };
  Expected<CompileResult> result = compile_step(request, topologies_file());
  progress.finish();
  if (!result.ok()) return fail(result.error());
  if (parsed.options.count("pass-timing")) std::cerr << result->timing_report;
  std::cout << result->analysis_text << "Jitting and compilation complete!\n" << result->summary;
  return 0;
}

// ~/.cache/precast (or $XDG_CACHE_HOME/precast); created on first use.
fs::path cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return fs::path(xdg) / "precast";
  }
  const char* home = std::getenv("HOME");
  return fs::path(home != nullptr ? home : ".") / ".cache" / "precast";
}

int run_train(const std::vector<std::string>& args) {
  po::options_description flags("Options");
  flags.add_options()("help,h", "show this help")(
      "gemm", po::value<std::string>()->default_value("auto"),
      "GEMM: auto (packed), packed (Precast's own f32 product), openblas or eigen")(
      "mpirun-args", po::value<std::string>()->default_value(""),
      "several devices: arguments for mpirun, e.g. \"--oversubscribe --mca btl tcp,self\"");
  add_pipeline_flags(flags);
  ParsedCommand parsed;
  if (auto done = parse_or_finish(
          args, flags, "train", "precast train [CONFIG.yml] [key=value ...] [--mpirun-args=\"...\"]",
          std::string("MaxText's train.py habit: compiles the step (or takes it from the\n"
                      "compilation cache, ~/.cache/precast, keyed by the compiler version, every\n"
                      "compile-time key and this CPU) and trains with it in this process.\n"
                      "A topology of several devices (compile_topology=cpu-N) trains on N MPI\n"
                      "ranks: precast train runs `mpirun [--mpirun-args] -np N precast-run CONFIG\n"
                      "compiled_trainstep_file=<cached step> key=value ...` and exits with its\n"
                      "status ($PRECAST_MPIRUN names another mpirun, $PRECAST_RUN another\n"
                      "precast-run). It adds --allow-run-as-root when run as root without\n"
                      "OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1, and\n"
                      "--oversubscribe when N exceeds this host's cores, and prints the command.\n\n") +
              kConfigHelp,
          parsed))
    return *done;
  ConfigRequest request = config_request(parsed.positional);
  Expected<ResolvedConfig> resolved = resolve_config(request, topologies_file());
  if (!resolved.ok()) return fail(resolved.error());
  std::vector<artifact::ConfigEntry> entries = artifact_config(resolved->config);
  backend::TargetSpec target_spec;
  target_spec.triple = resolved->config.get_string("target_triple");
  target_spec.cpu = resolved->config.get_string("target_cpu");
  Expected<backend::ResolvedTarget> target = backend::resolve_target(target_spec);
  if (!target.ok()) return fail(target.error());
  std::string key_text = fmt::format("precast {}\n{}\n{}\n{}\n", kVersion, target->triple,
                                     target->cpu, target->features);
  for (const artifact::ConfigEntry& e : entries) {
    if (e.phase == artifact::ConfigPhase::kCompile) key_text += e.key + "=" + e.value + "\n";
  }
  fs::path path = cache_dir() / (artifact::to_hex(artifact::sha256(key_text)).substr(0, 32) + ".pcx");
  std::optional<artifact::Artifact> cached;
  if (fs::exists(path)) {
    Expected<artifact::Artifact> a = artifact::read_artifact(path);
    if (a.ok()) cached = std::move(*a);
  }
  if (cached) {
    std::cout << "Compilation cache hit: " << path.string() << "\n";
    if (parsed.options.count("dump-ir")) {
      std::cout << "--dump-ir: nothing was compiled, so nothing is dumped (`precast dump` with "
                   "the same config writes the stages of this step)\n";
    }
  } else {
    std::error_code ec;
    fs::create_directories(path.parent_path(), ec);
    if (ec) {
      return fail(Error(ExitCode::kFailure, fmt::format("cannot create the compilation cache {}: {}",
                                                        path.parent_path().string(), ec.message())));
    }
    std::cout << "Compilation cache miss: compiling the train step into " << path.string() << "\n";
    CompileRequest compile;
    compile.config = request;
    compile.output = path.string();
    compile.pipeline = pipeline_options(parsed);
    Expected<CompileResult> result = compile_step(compile, *resolved);
    if (!result.ok()) return fail(result.error());
    if (parsed.options.count("pass-timing")) std::cerr << result->timing_report;
    std::cout << result->summary;
    cached = std::move(result->artifact);
  }
  if (resolved->mesh.num_devices > 1) {
    MpiTrainLaunch launch;
    if (const char* mpirun = std::getenv("PRECAST_MPIRUN"); mpirun != nullptr && *mpirun != '\0') {
      launch.mpirun = mpirun;
    }
    launch.mpirun_args = parsed.options["mpirun-args"].as<std::string>();
    launch.ranks = resolved->mesh.num_devices;
    launch.precast_run = find_precast_run(PRECAST_RUN_BINARY);
    launch.config_file = request.config_file.string();
    launch.overrides = request.overrides;
    launch.artifact = path.string();
    launch.gemm = parsed.options["gemm"].as<std::string>();
    Expected<int> code = run_mpirun(launch, std::cout);
    if (!code.ok()) return fail(code.error());
    return *code;
  }
  Status compatible = artifact::require_compatible_host(path, cached->key, artifact::host_info());
  if (!compatible.ok()) return fail(compatible.error());
  Expected<runtime::RunSettings> settings =
      runtime::run_settings(*cached, runtime::run_time_overrides(entries));
  if (!settings.ok()) return fail(settings.error());
  settings->gemm = parsed.options["gemm"].as<std::string>();
  std::cout << resolved->mesh.num_devices_line() << "\n" << cached->setup_text << "\n";
  runtime::TrainOptions options;
  options.log = &std::cout;
  Expected<runtime::TrainReport> report = runtime::train(*cached, *settings, options);
  if (!report.ok()) return fail(report.error());
  return report->aborted ? static_cast<int>(ExitCode::kFailure) : 0;
}

int run_config(const std::vector<std::string>& args) {
  po::options_description flags("Options");
  flags.add_options()("help,h", "show this help")(
      "show-sources",
      "end each line with the value's source (base, model, command line, "
      "environment, derived, default) and its file:line or argument");
  ParsedCommand parsed;
  if (auto done = parse_or_finish(
          args, flags, "config", "precast config [CONFIG.yml] [key=value ...] [--show-sources]",
          std::string("Prints the resolved config as MaxText does ('Config param "
                      "<key>: <value>', sorted), derived keys included.\n\n") +
              kConfigHelp,
          parsed))
    return *done;
  Expected<ResolvedConfig> resolved =
      resolve_config(config_request(parsed.positional), topologies_file());
  if (!resolved.ok()) return fail(resolved.error());
  std::cout << format_config(resolved->config, parsed.options.count("show-sources") > 0);
  return 0;
}

int run_keys(const std::vector<std::string>& args) {
  po::options_description flags("Options");
  flags.add_options()("help,h", "show this help")(
      "format", po::value<std::string>()->default_value("table"),
      "table, or yaml (a complete base config: `precast keys --format=yaml > configs/base.yml`)");
  ParsedCommand parsed;
  if (auto done =
          parse_or_finish(args, flags, "keys", "precast keys [--format=table|yaml]",
                          "Lists every config key (every key of MaxText's base.yml and Precast's "
                          "own): phase\n(compile: baked into an artifact; run: a run-time input), "
                          "status, type, default and\nwhat it does. Status: yes = implemented; "
                          "no effect = accepted for MaxText compatibility,\nchanges nothing "
                          "Precast computes or reports (e.g. TPU kernel choices); not yet = not\n"
                          "supported yet, refused with \"<key> is not supported yet\" unless left "
                          "at its default.",
                          parsed))
    return *done;
  std::string format = parsed.options["format"].as<std::string>();
  if (format == "yaml") {
    std::cout << registry_as_yaml();
  } else if (format == "table") {
    std::cout << registry_as_table();
  } else {
    return usage_failure("--format must be table or yaml, got '" + format + "'", "keys");
  }
  return 0;
}

int run_topologies(const std::vector<std::string>& args) {
  po::options_description flags("Options");
  flags.add_options()("help,h", "show this help");
  ParsedCommand parsed;
  if (auto done =
          parse_or_finish(args, flags, "topologies", "precast topologies",
                          "Lists the target topologies (configs/topologies.yml): TPU slices, GPU "
                          "hosts and cpu-N.\nName one with compile_topology=NAME.",
                          parsed))
    return *done;
  Expected<TopologyTable> table = TopologyTable::load(topologies_file());
  if (!table.ok()) return fail(table.error());
  std::cout << format_topology_table(*table);
  return 0;
}

int run_models(const std::vector<std::string>& args) {
  po::options_description flags("Options");
  flags.add_options()("help,h", "show this help");
  ParsedCommand parsed;
  if (auto done =
          parse_or_finish(args, flags, "models", "precast models",
                          "Lists the model configs (configs/models/) by decoder family, and the "
                          "MaxText models\nwhose family is not supported yet.",
                          parsed))
    return *done;
  std::map<std::string, std::vector<std::string>> by_family;
  for (const auto& entry : fs::directory_iterator(config_dir() / "models")) {
    if (entry.path().extension() != ".yml" || entry.path().stem() == "unsupported") continue;
    ConfigRequest request;
    request.config_file = config_dir() / "base.yml";
    request.overrides = {"model_name=" + entry.path().stem().string()};
    request.read_environment = false;
    Expected<Config> config = load_config(request);
    if (!config.ok()) return fail(config.error());
    by_family[config->get_string("decoder_block")].push_back(entry.path().stem().string());
  }
  for (auto& [family, names] : by_family) {
    std::sort(names.begin(), names.end());
    std::cout << fmt::format("{:<8} {}\n", family, fmt::join(names, " "));
  }
  std::map<std::string, std::string> unsupported = read_unsupported_models(config_dir() / "models");
  std::cout << fmt::format("\nNot supported yet ({} MaxText models): ", unsupported.size());
  std::map<std::string, int> families;
  for (const auto& [name, family] : unsupported) families[family]++;
  std::vector<std::string> parts;
  for (const auto& [family, count] : families)
    parts.push_back(fmt::format("{} ({})", family, count));
  std::cout << fmt::format("{}\n", fmt::join(parts, ", "));
  return 0;
}

int run_dump(const std::vector<std::string>& args) {
  po::options_description flags("Options");
  flags.add_options()("help,h", "show this help")("dump-ir", po::value<std::string>(),
                                                  "directory for the IR stages (required)")(
      "dump-after", po::value<std::string>()->default_value(""),
      "only write the stages whose name matches this regex")(
      "stop-after", po::value<std::string>()->default_value(""),
      "the last stage to run (default: every stage, to assign-buffers)")(
      "passes", po::value<std::string>(), "replaced by --stop-after (see below)")(
      "pass-timing", "print each stage's time and op counts to standard error")(
      "no-verify", "do not run the verifier after every stage");
  ParsedCommand parsed;
  if (auto done = parse_or_finish(
          args, flags, "dump",
          "precast dump [CONFIG.yml] [key=value ...] --dump-ir DIR [--stop-after=STAGE] "
          "[--dump-after=REGEX] [--pass-timing]",
          std::string(
              "Runs the compilation pipeline for the config and its target — the one `analyze`,\n"
              "`compile` and `train` run — and writes the module after every stage:\n"
              "DIR/01-lower-forward.ir, 02-add-init.ir, 03-train-step.ir, 04-remat.ir,\n"
              "05-simplify.ir, 06-cse.ir, 07-dce.ir, 08-propagate-sharding.ir,\n"
              "09-spmd-partition.ir, then on CPU targets 10-widen-contractions.ir, and the\n"
              "schedule and assign-buffers stages (the last annotated with the buffer plan:\n"
              "arena offset, bytes, live range and category per op). `precast inspect FILE.ir` summarises any of them; `precast-opt FILE.ir\n"
              "--passes=...` runs chosen passes on one. With eval_interval > 0 or\n"
              "sample_tokens > 0 (and no --stop-after) it also writes DIR/eval_step.ir and\n"
              "DIR/sample_step.ir (the planned entry points `precast compile` adds) and prints a\n"
              "line for each: inputs and outputs by role, arena bytes, object code bytes (CPU\n"
              "targets).\n\n") +
              kConfigHelp,
          parsed))
    return *done;
  if (parsed.options.count("passes")) {
    return usage_failure(
        "--passes is gone: `precast dump` runs the config's whole pipeline (--stop-after=STAGE "
        "ends it early); to run chosen passes on an IR file use `precast-opt FILE.ir "
        "--passes=...`",
        "dump");
  }
  if (!parsed.options.count("dump-ir")) {
    return usage_failure("--dump-ir DIR is required", "dump");
  }
  DumpRequest request;
  request.config = config_request(parsed.positional);
  request.dump_dir = parsed.options["dump-ir"].as<std::string>();
  request.dump_after = parsed.options["dump-after"].as<std::string>();
  request.stop_after = parsed.options["stop-after"].as<std::string>();
  request.verify_each = parsed.options.count("no-verify") == 0;
  Expected<DumpResult> result = dump_ir(request, topologies_file());
  if (!result.ok()) return fail(result.error());
  for (const fs::path& file : result->files) std::cout << "wrote " << file.string() << "\n";
  if (parsed.options.count("pass-timing")) std::cerr << result->timing_report;
  if (request.stop_after.empty()) {
    // eval_step and sample_step when the config asks for them (compiler/driver/EntryPoints.h).
    Expected<ResolvedConfig> resolved = resolve_config(request.config, topologies_file());
    if (!resolved.ok()) return fail(resolved.error());
    Expected<std::vector<DumpedEntryPoint>> entries =
        dump_entry_points(*resolved, request.dump_dir);
    if (!entries.ok()) return fail(entries.error());
    for (const DumpedEntryPoint& entry : *entries) {
      std::cout << "wrote " << entry.file.string() << "\n" << entry.line << "\n";
    }
  }
  return 0;
}

int run_inspect(const std::vector<std::string>& args) {
  po::options_description flags("Options");
  flags.add_options()("help,h", "show this help")(
      "format", po::value<std::string>()->default_value("text"), "output format: text or json")(
      "by-scope-depth", po::value<int>()->default_value(2),
      "scope components kept when grouping FLOPs (2: decoder/layers_3)")(
      "merge-layers", "group decoder/layers_0, layers_1, ... as decoder/layers_*")(
      "no-verify", "summarise without running the verifier first")(
      "ir", "for an artifact (.pcx): print its IR text instead of the listing");
  ParsedCommand parsed;
  if (auto done = parse_or_finish(
          args, flags, "inspect",
          "precast inspect FILE.ir [--format=text|json] [--by-scope-depth=N] [--merge-layers]\n"
          "       precast inspect step.pcx [--ir]",
          "Summarises an IR file (a `precast dump` stage, or any module; - reads standard\n"
          "input): per function, ops by kind, the weights it takes (its floating-point\n"
          "parameters) and FLOPs by MaxText's conventions (dot_general: 2 x result x\n"
          "contraction; attention: q.k and p.v over the causal half), in total and by scope.\n"
          "Given an artifact (.pcx, from `precast compile`), prints its header, compatibility\n"
          "key, signature, buffer plan, step program, report and config (--ir: its IR).",
          parsed))
    return *done;
  if (parsed.positional.size() == 1 && parsed.positional[0].size() > 4 &&
      parsed.positional[0].compare(parsed.positional[0].size() - 4, 4, ".pcx") == 0) {
    const std::string& path = parsed.positional[0];
    Expected<artifact::ArtifactFile> file = artifact::read_artifact_file(path);
    if (!file.ok()) return fail(file.error());
    std::cout << (parsed.options.count("ir") ? artifact::format_artifact_ir(file->artifact)
                                              : artifact::format_artifact(*file, path));
    return 0;
  }
  if (parsed.positional.size() != 1) {
    return usage_failure(parsed.positional.empty()
                             ? std::string("no IR file given")
                             : "expected one IR file, got " +
                                   std::to_string(parsed.positional.size()) + " arguments",
                         "inspect");
  }
  InspectRequest request;
  request.path = parsed.positional[0];
  request.format = parsed.options["format"].as<std::string>();
  request.counts.scope_depth = parsed.options["by-scope-depth"].as<int>();
  request.counts.merge_layers = parsed.options.count("merge-layers") > 0;
  request.verify = parsed.options.count("no-verify") == 0;
  Expected<std::string> report = inspect_ir(request);
  if (!report.ok()) return fail(report.error());
  std::cout << *report;
  return 0;
}

int run_checkpoint(const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    std::cout << "Usage: precast checkpoint inspect DIR\n\n"
                 "DIR is a checkpoint step directory (<checkpoint_dir>/<step>, as precast-run\n"
                 "writes with enable_checkpointing=true): verifies its commit marker and every\n"
                 "file's SHA-256, then prints the step, world size, config hash and each tensor's\n"
                 "name, dtype, shape and bytes. Given a checkpoint_dir, prints one line per step\n"
                 "directory: verified, or what is damaged.\n"
                 "Exit codes: 0 verified, 2 usage, 4 damaged (the message names the file).\n";
    return 0;
  }
  if (args.size() != 2 || args[0] != "inspect") {
    return usage_failure("expected `precast checkpoint inspect DIR`", "checkpoint");
  }
  Expected<std::string> report = checkpoint::inspect_checkpoint(args[1]);
  if (!report.ok()) return fail(report.error());
  std::cout << *report;
  return 0;
}

int run_compare(const std::vector<std::string>& args) {
  po::options_description flags("Options");
  flags.add_options()("help,h", "show this help")(
      "steps", po::value<std::string>(),
      "compare steps FROM:TO only (both included; FROM: or :TO)")(
      "html", po::value<std::string>(),
      "also write one self-contained page: the table and both runs' loss and step-time curves");
  ParsedCommand parsed;
  if (auto done = parse_or_finish(
          args, flags, "compare", "precast compare A B [--steps=FROM:TO] [--html report.html]",
          "A and B are Precast run directories ({base_output_directory}/{run_name}/: metrics/,\n"
          "config.yml, a *.log), metrics files (MaxText's metrics_file JSON lines) or MaxText\n"
          "logs. Prints parameters, final loss, mean TFLOP/s and tokens/s per device, average\n"
          "seconds per step (each run's first step left out), memory and versions side by side,\n"
          "B - A per row marked improvement or regression, then the config keys that differ.\n"
          "Exit codes: 0 compared, 2 usage or an unreadable input (the message names the file),\n"
          "1 the --html page could not be written.",
          parsed))
    return *done;
  if (parsed.positional.size() != 2) {
    return usage_failure(
        fmt::format("expected two runs A B, got {} argument(s)", parsed.positional.size()),
        "compare");
  }
  StepWindow window;
  if (parsed.options.count("steps")) {
    Expected<StepWindow> parsed_window =
        parse_step_window(parsed.options["steps"].as<std::string>());
    if (!parsed_window.ok()) return fail(parsed_window.error());
    window = *parsed_window;
  }
  Expected<RunRecord> a = read_run(parsed.positional[0]);
  if (!a.ok()) return fail(a.error());
  Expected<RunRecord> b = read_run(parsed.positional[1]);
  if (!b.ok()) return fail(b.error());
  Expected<Comparison> comparison = compare_runs(*a, *b, window);
  if (!comparison.ok()) return fail(comparison.error());
  std::cout << format_comparison_text(*comparison, ::isatty(STDOUT_FILENO) == 1);
  if (parsed.options.count("html")) {
    std::string path = parsed.options["html"].as<std::string>();
    Status written = write_file_atomically(path, comparison_html(*comparison));
    if (!written.ok()) return fail(written.error());
    std::cout << "wrote " << path << "\n";
  }
  return 0;
}

int run_profile(const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    std::cout << "Usage: precast profile summary TRACE\n\n"
                 "TRACE is a Chrome trace, as precast-run writes with profiler=trace into\n"
                 "{base_output_directory}/{run_name}/profile/trace-rank<r>.json (one complete\n"
                 "event per kernel, GEMM, attention kernel, collective and step). Prints the\n"
                 "steps' and the program entries' total time (the sums of their events'\n"
                 "durations, exact to the nanosecond), then time by op kind, by IR op and by\n"
                 "scope, and the top 20 ops (op and scope) by time.\n"
                 "Exit codes: 0 success, 2 usage or a file that is not such a trace (the message\n"
                 "names the file and what is wrong).\n";
    return 0;
  }
  if (args.size() != 2 || args[0] != "summary") {
    return usage_failure("expected `precast profile summary TRACE`", "profile");
  }
  Expected<runtime::TraceSummary> summary = runtime::summarize_trace_file(args[1]);
  if (!summary.ok()) return fail(summary.error());
  std::cout << runtime::format_trace_summary(*summary, args[1]);
  return 0;
}

struct Command {
  const char* name;
  int (*run)(const std::vector<std::string>&);
  const char* summary;
};

const Command kCommands[] = {
    {"analyze", run_analyze,
     "mesh, parameters, TFLOPs per step and batch for a config and topology"},
    {"fit", run_fit, "the largest batch per remat policy that fits, fastest first"},
    {"compile", run_compile, "compile the train step for this CPU into an artifact (.pcx)"},
    {"train", run_train, "compile (cached) and train on this CPU, logging MaxText's lines"},
    {"dump", run_dump, "run the compilation pipeline, writing every stage's IR (--dump-ir DIR)"},
    {"inspect", run_inspect, "summarise an IR file: ops by kind, weights, FLOPs by scope"},
    {"config", run_config, "print the resolved config (MaxText's Config param lines)"},
    {"compare", run_compare, "two runs (run dirs, metrics files, MaxText logs) side by side"},
    {"checkpoint", run_checkpoint, "inspect DIR: verify a checkpoint and list its tensors"},
    {"profile", run_profile, "summary TRACE: time by op kind, op and scope of a profiler=trace file"},
    {"tokenize", run_tokenize_command, "text files to a token file (byte-level) for dataset_type=tokens"},
    {"keys", run_keys, "list every config key with phase, status, type, default and doc"},
    {"topologies", run_topologies, "list target topologies (TPU slices, GPU hosts, cpu-N)"},
    {"models", run_models, "list model configs by decoder family"},
};

void print_main_help() {
  std::cout << "Usage: precast <command> [CONFIG.yml] [key=value ...] [options]\n\n"
               "Precast compiles LLM training steps ahead of time from MaxText-style configs.\n\n"
               "Commands:\n";
  for (const Command& c : kCommands) std::cout << fmt::format("  {:<12}{}\n", c.name, c.summary);
  std::cout << "\n`precast <command> --help` documents each command's options.\n"
               "Exit codes: 0 success, 2 usage or configuration error, 3 does not fit in device\n"
               "memory, 4 incompatible or damaged artifact, 70 internal error.\n";
}

int run_main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    print_main_help();
    return args.empty() ? static_cast<int>(ExitCode::kUsage) : 0;
  }
  if (args[0] == "--version") {
    std::cout << "precast " << kVersion << "\n";
    return 0;
  }
  for (const Command& c : kCommands) {
    if (args[0] == c.name) return c.run({args.begin() + 1, args.end()});
  }
  std::vector<std::string> names;
  for (const Command& c : kCommands) names.push_back(c.name);
  return usage_failure(
      "unknown command '" + args[0] + "'. Commands: " + fmt::format("{}", fmt::join(names, ", ")),
      "");
}

}  // namespace
}  // namespace precast

int main(int argc, char** argv) {
  try {
    return precast::run_main(argc, argv);
  } catch (const std::exception& e) {
    // Reaching here is a bug: user input must produce an Error value, not an exception.
    std::cerr << "precast: internal error: " << e.what()
              << "\nThis is a bug in Precast; please report it with the command line.\n";
    return static_cast<int>(precast::ExitCode::kInternal);
  }
}
