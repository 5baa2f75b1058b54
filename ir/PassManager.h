// Passes by name and the pipeline that runs them. A pass is a function Module& -> Expected<bool>
// (an error, or whether it changed anything), registered under a name; a pipeline is a list
// of names, each optionally with options in braces ("schedule{window=16}"). The manager can
// verify after every pass, dump the module as text after every pass (NN-<pass>.ir, 00-input.ir
// first) and time each pass; what each run did is kept in a per-run record (PassTiming).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ir/Module.h"

namespace precast::ir {

using PassEntry = std::function<Expected<bool>(Module&)>;

struct Pass {
  Pass(std::string name, std::string summary, PassEntry run,
       std::function<std::string(const Module&)> dump_text = nullptr)
      : name(std::move(name)),
        summary(std::move(summary)),
        run(std::move(run)),
        dump_text(std::move(dump_text)) {}

  std::string name;     // as written in pipelines: "dce", "simplify", ...
  std::string summary;  // one line for --help
  PassEntry run;
  // Optional: the text dumped after this pass instead of the plain module (an analysis pass
  // annotating the module with comments, which parse back as the same module).
  std::function<std::string(const Module&)> dump_text;
};

// The options written after a pass's name in a pipeline: "spmd-partition{mesh=fsdp:2,tensor:2}"
// gives mesh = "fsdp:2,tensor:2" (an item without '=' continues the previous value, so a value
// may itself be a comma-separated list). Keys are [a-z0-9_-]+; each may appear once.
class PassOptions {
 public:
  PassOptions() = default;
  // `text` is what stands between the braces. Errors name the pass and the item.
  static Expected<PassOptions> parse(std::string_view pass, std::string_view text);

  bool empty() const { return values_.empty(); }
  const std::vector<std::pair<std::string, std::string>>& values() const { return values_; }
  // A usage error naming the first key not in `known`, and the keys the pass takes.
  Status check_known(std::string_view pass, const std::vector<std::string_view>& known) const;
  std::optional<std::string> get(std::string_view key) const;
  std::string get_string(std::string_view key, std::string fallback) const;
  Expected<int64_t> get_int(std::string_view pass, std::string_view key, int64_t fallback) const;
  Expected<bool> get_bool(std::string_view pass, std::string_view key, bool fallback) const;
  // "{key=value, ...}" as written, or "" when empty.
  std::string to_string() const;

 private:
  std::vector<std::pair<std::string, std::string>> values_;
};

// The index of function `name` in `module`, or a usage error naming the pass and the functions
// the module has (a pass that works on one function, e.g. @train_step).
Expected<size_t> function_for_pass(const Module& module, std::string_view pass,
                                   std::string_view name);

// Makes a pass from its options (checking them: an unknown key or a bad value is a usage error).
using PassFactory = std::function<Expected<Pass>(const PassOptions&)>;

class PassRegistry {
 public:
  // Fails when the name is taken or not of the form [a-z0-9-]+. A pass added this way takes no
  // options.
  Status add(Pass pass);
  // A pass that takes options; `summary` documents them for --list-passes.
  Status add_factory(std::string name, std::string summary, PassFactory factory);
  bool contains(std::string_view name) const;
  // The pass with no options. Usage error naming the closest registered passes when absent.
  Expected<Pass> lookup(std::string_view name) const;
  Expected<Pass> create(std::string_view name, const PassOptions& options) const;
  // (name, summary) of every registered pass, in registration order.
  std::vector<std::pair<std::string, std::string>> list() const;

 private:
  struct Entry {
    std::string name, summary;
    PassFactory factory;
  };
  const Entry* find_entry(std::string_view name) const;
  std::vector<Entry> entries_;
};

struct PassTiming;

struct PassManagerOptions {
  bool verify_each = false;  // verify the input and the module after every pass
  // Non-empty: write 00-input.ir (unless the module starts empty), then NN-<pass>.ir after
  // pass NN.
  std::string dump_dir;
  std::string dump_after;  // ECMAScript regex searched in pass names; empty = dump every pass
  // Called after each pass (after verification) with the pass's record: instrumentation that
  // reads the module between passes (an analysis of an intermediate stage), never changes it.
  std::function<Status(const PassTiming&, const Module&)> after_each;
};

// What one run of one pass did.
struct PassTiming {
  std::string name;
  std::string options;        // as written after the name ("{window=16}"), "" for none
  double seconds = 0;         // the pass itself
  double verify_seconds = 0;  // the verifier run after it, when verify_each
  bool changed = false;
  size_t ops_before = 0, ops_after = 0;  // over every function of the module
  std::string dump_file;                 // the stage written after it, "" when none
};

class PassManager {
 public:
  // Fails on a malformed dump_after regex.
  static Expected<PassManager> create(PassManagerOptions options);

  void add(Pass pass, std::string options_text = "") {
    pipeline_.push_back({std::move(pass), std::move(options_text)});
  }
  // Appends the passes of a comma-separated list ("simplify,cse,schedule{window=16},dce");
  // blanks are ignored; commas inside braces belong to the options.
  Status add_pipeline(const PassRegistry& registry, std::string_view names);
  size_t size() const { return pipeline_.size(); }

  // Runs the pipeline. A verifier failure after a pass is an internal error naming the pass.
  Status run(Module& module);

  const std::vector<PassTiming>& timings() const { return timings_; }
  // A table with one line per pass and a total, for --pass-timing.
  std::string timing_report() const;

 private:
  explicit PassManager(PassManagerOptions options) : options_(std::move(options)) {}
  bool should_dump(std::string_view pass_name) const;
  Expected<std::string> dump(const Module& module, size_t index, const Pass* pass) const;

  struct Scheduled {
    Pass pass;
    std::string options_text;
  };
  PassManagerOptions options_;
  std::shared_ptr<std::regex> dump_filter_;  // shared_ptr keeps PassManager movable cheaply
  std::vector<Scheduled> pipeline_;
  std::vector<PassTiming> timings_;
};

}  // namespace precast::ir
