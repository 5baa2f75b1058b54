// Passes by name and the pipeline that runs them. A pass is a function Module& -> Expected<bool>
// (an error, or whether it changed anything), registered under a name; a pipeline is a list
// of names. The manager can verify after every pass, dump the module as text after every pass
// (NN-<pass>.ir, 00-input.ir first) and time each pass.
#pragma once

#include <functional>
#include <memory>
#include <regex>
#include <string>
#include <string_view>
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

class PassRegistry {
 public:
  // Fails when the name is taken or not of the form [a-z0-9-]+.
  Status add(Pass pass);
  const Pass* find(std::string_view name) const;
  // Usage error naming the closest registered passes when absent.
  Expected<Pass> lookup(std::string_view name) const;
  const std::vector<Pass>& passes() const { return passes_; }

 private:
  std::vector<Pass> passes_;
};

struct PassManagerOptions {
  bool verify_each = false;  // verify the input and the module after every pass
  std::string dump_dir;      // non-empty: write 00-input.ir, then NN-<pass>.ir after pass NN
  std::string dump_after;    // ECMAScript regex searched in pass names; empty = dump every pass
};

struct PassTiming {
  std::string name;
  double seconds = 0;         // the pass itself
  double verify_seconds = 0;  // the verifier run after it, when verify_each
  bool changed = false;
};

class PassManager {
 public:
  // Fails on a malformed dump_after regex.
  static Expected<PassManager> create(PassManagerOptions options);

  void add(Pass pass) { pipeline_.push_back(std::move(pass)); }
  // Appends the passes of a comma-separated list ("simplify,cse,dce"); blanks are ignored.
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
  Status dump(const Module& module, size_t index, const Pass* pass) const;

  PassManagerOptions options_;
  std::shared_ptr<std::regex> dump_filter_;  // shared_ptr keeps PassManager movable cheaply
  std::vector<Pass> pipeline_;
  std::vector<PassTiming> timings_;
};

}  // namespace precast::ir
