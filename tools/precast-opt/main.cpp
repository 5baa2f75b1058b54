// precast-opt: parse an IR file, optionally verify it, run a pass pipeline, print the result.
// The IR-level test driver (tests/lit) and a way to inspect what any pass does.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/Pipeline.h"
#include "compiler/config/Config.h"
#include "ir/Parser.h"
#include "ir/PassManager.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"
#include "ir/passes/IrPasses.h"
#include "tools/ConfigDir.h"

namespace {

using precast::Error;
using precast::ExitCode;
using precast::Expected;
using precast::Status;
using precast::usage_error;
namespace ir = precast::ir;

constexpr std::string_view kSplitMarker = "// -----";

struct Options {
  std::string input;
  std::string passes;
  bool verify = true;
  std::string dump_dir;
  std::string dump_after;
  bool pass_timing = false;
  bool split_input = false;
  std::string output;
  bool help = false;
  bool list_passes = false;
};

constexpr std::string_view kUsage = R"(usage: precast-opt FILE.ir [options]

Reads IR text (FILE.ir, or - for standard input), runs the passes named by --passes in order
and prints the resulting module to standard output.

options:
  --passes=NAME,...     passes to run, in order (see --list-passes); a compiler pass takes
                        options in braces: 'remat{policy=minimal},schedule{window=16}'
  --verify              verify the input and the module after every pass (the default)
  --no-verify           skip the verifier (to look at invalid IR)
  --dump-ir DIR         write DIR/00-input.ir, then DIR/NN-<pass>.ir after pass NN
  --dump-after REGEX    with --dump-ir: only dump after passes whose name matches REGEX
  --pass-timing         print the time of each pass to standard error
  --split-input-file    treat each '// -----'-separated chunk as its own module; outputs are
                        separated by '// -----' (dumps go to DIR/<chunk>/)
  -o FILE               write the module to FILE instead of standard output
  --list-passes         list the registered passes and exit
  --help                show this help and exit

exit codes: 0 success, 1 I/O failure writing dumps, 2 bad command line or bad IR (parse or
verifier error: parse errors as file:line:col: message, verifier errors as
file:line: in @function, %value = op: rule), 70 a pass produced invalid IR (a bug).
)";

// Accepts "--name=value" and "--name value".
bool take_value(std::string_view arg, std::string_view name, int& i, int argc, char** argv,
                std::string& value, Status& status) {
  if (arg == name) {
    if (i + 1 >= argc) {
      status = usage_error(fmt::format("{} needs a value", name));
      return true;
    }
    value = argv[++i];
    return true;
  }
  if (arg.size() > name.size() && arg.substr(0, name.size()) == name && arg[name.size()] == '=') {
    value = std::string(arg.substr(name.size() + 1));
    return true;
  }
  return false;
}

Expected<Options> parse_command_line(int argc, char** argv) {
  Options o;
  Status status;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (take_value(arg, "--passes", i, argc, argv, o.passes, status) ||
        take_value(arg, "--dump-ir", i, argc, argv, o.dump_dir, status) ||
        take_value(arg, "--dump-after", i, argc, argv, o.dump_after, status) ||
        take_value(arg, "-o", i, argc, argv, o.output, status)) {
      if (!status.ok()) return status.error();
    } else if (arg == "--verify") {
      o.verify = true;
    } else if (arg == "--no-verify") {
      o.verify = false;
    } else if (arg == "--pass-timing") {
      o.pass_timing = true;
    } else if (arg == "--split-input-file") {
      o.split_input = true;
    } else if (arg == "--help" || arg == "-h") {
      o.help = true;
    } else if (arg == "--list-passes") {
      o.list_passes = true;
    } else if (arg.size() > 1 && arg[0] == '-') {
      return usage_error(fmt::format("unknown option '{}' (see --help)", arg));
    } else if (o.input.empty()) {
      o.input = std::string(arg);
    } else {
      return usage_error(fmt::format("more than one input file ('{}' and '{}')", o.input, arg));
    }
  }
  if (o.input.empty() && !o.help && !o.list_passes) {
    return usage_error("no input file (see --help)");
  }
  if (!o.dump_after.empty() && o.dump_dir.empty()) {
    return usage_error("--dump-after needs --dump-ir DIR");
  }
  return o;
}

Expected<std::string> read_input(const std::string& path) {
  std::stringstream buffer;
  if (path == "-") {
    buffer << std::cin.rdbuf();
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) return usage_error(fmt::format("{}: cannot open file", path));
    buffer << in.rdbuf();
  }
  return buffer.str();
}

struct Chunk {
  std::string_view text;
  int first_line;
};

// Splits at lines consisting of the marker (surrounding blanks allowed).
std::vector<Chunk> split_chunks(std::string_view text) {
  std::vector<Chunk> chunks;
  size_t chunk_begin = 0, line_begin = 0;
  int line = 1, chunk_line = 1;
  while (line_begin <= text.size()) {
    size_t end = text.find('\n', line_begin);
    if (end == std::string_view::npos) end = text.size();
    std::string_view content = text.substr(line_begin, end - line_begin);
    size_t first = content.find_first_not_of(" \t\r");
    size_t last = content.find_last_not_of(" \t\r");
    bool marker = first != std::string_view::npos &&
                  content.substr(first, last - first + 1) == kSplitMarker;
    if (marker) {
      chunks.push_back({text.substr(chunk_begin, line_begin - chunk_begin), chunk_line});
      chunk_begin = end + 1;
      chunk_line = line + 1;
    }
    if (end == text.size()) break;
    line_begin = end + 1;
    ++line;
  }
  chunks.push_back({chunk_begin <= text.size() ? text.substr(chunk_begin) : "", chunk_line});
  return chunks;
}

// Parses, verifies, runs the pipeline; returns the printed module.
Expected<std::string> process(const Options& o, const ir::PassRegistry& registry, Chunk chunk,
                              const std::string& dump_dir) {
  ir::ParseOptions parse_options;
  parse_options.source_name = o.input == "-" ? "<stdin>" : o.input;
  parse_options.first_line = chunk.first_line;
  PRECAST_ASSIGN_OR_RETURN(ir::Module module, ir::parse_module(chunk.text, parse_options));
  ir::PassManagerOptions pm_options;
  pm_options.verify_each = o.verify;
  pm_options.dump_dir = dump_dir;
  pm_options.dump_after = o.dump_after;
  PRECAST_ASSIGN_OR_RETURN(ir::PassManager manager, ir::PassManager::create(pm_options));
  PRECAST_RETURN_IF_ERROR(manager.add_pipeline(registry, o.passes));
  PRECAST_RETURN_IF_ERROR(manager.run(module));
  if (o.pass_timing) std::cerr << manager.timing_report();
  return ir::print_module(module);
}

Status write_output(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return Status::success();
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out || !(out << text).flush()) {
    return Error(ExitCode::kFailure, fmt::format("{}: cannot write", path));
  }
  return Status::success();
}

int report(const Error& e) {
  std::cerr << e.message() << '\n';
  return e.exit_code();
}

// The IR passes and the compiler's, the latter with MaxText's default logical_axis_rules and
// mesh axes (configs/base.yml) for spmd-partition.
Status register_passes(ir::PassRegistry& registry) {
  PRECAST_RETURN_IF_ERROR(ir::register_ir_passes(registry));
  precast::ConfigRequest request;
  request.config_file = precast::config_dir() / "base.yml";
  request.read_environment = false;
  PRECAST_ASSIGN_OR_RETURN(precast::Config config, precast::load_config(request));
  precast::CompilerPassDefaults defaults;
  PRECAST_ASSIGN_OR_RETURN(defaults.rules, precast::axis_rules_from_config(config));
  defaults.mesh_axes = config.get_string_list("mesh_axes");
  return precast::register_compiler_passes(registry, defaults);
}

int run(int argc, char** argv) {
  Expected<Options> parsed = parse_command_line(argc, argv);
  if (!parsed.ok()) return report(parsed.error().with_context("precast-opt"));
  const Options& o = *parsed;
  ir::PassRegistry registry;
  if (Status s = register_passes(registry); !s.ok()) return report(s.error());
  if (o.help) {
    std::cout << kUsage;
    return 0;
  }
  if (o.list_passes) {
    for (const auto& [name, summary] : registry.list()) {
    std::cout << fmt::format("{:<22} {}\n", name, summary);
  }
    return 0;
  }
  Expected<std::string> text = read_input(o.input);
  if (!text.ok()) return report(text.error());
  std::vector<Chunk> chunks = o.split_input ? split_chunks(*text) : std::vector<Chunk>{{*text, 1}};
  std::string output;
  int exit_code = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    std::string dump_dir = o.dump_dir;
    if (!dump_dir.empty() && o.split_input) dump_dir = fmt::format("{}/{}", o.dump_dir, i);
    if (i > 0) output += fmt::format("{}\n", kSplitMarker);
    Expected<std::string> result = process(o, registry, chunks[i], dump_dir);
    if (!result.ok()) {
      int code = report(result.error());
      exit_code = std::max(exit_code, code);
      continue;
    }
    output += *result;
  }
  if (Status s = write_output(o.output, output); !s.ok()) return report(s.error());
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) { return run(argc, argv); }
