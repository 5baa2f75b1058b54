// Rebuilding a function into a new one: the part every rebuilding pass shares (remat, SPMD
// partitioning, widening, the schedule). The Rewriter makes the new function — the source's name
// and, unless the pass makes its own, its parameters copied with their names, axis names,
// shardings and roles — keeps the map from each source value to what it became, and finishes the
// rebuild: the results (each source result's mapping, or the pass's own), their donation
// aliases, the builder's first error, the verifier, and the swap into the module. The pass
// decides what each op becomes.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "ir/Builder.h"
#include "ir/Module.h"

namespace precast::ir {

class Rewriter {
 public:
  enum class Params {
    kCopy,  // the target's parameters are the source's, mapped
    kOwn,   // the pass adds the target's parameters itself (and maps them)
  };

  // Rebuilds function `index` of `module`; commit() swaps the rebuilt function in.
  Rewriter(Module& module, size_t index, Params params = Params::kCopy);
  // Builds into `target` (an empty function, on any context); finish() completes it there.
  Rewriter(const Function& source, Function& target, Params params = Params::kCopy);
  Rewriter(const Rewriter&) = delete;
  Rewriter& operator=(const Rewriter&) = delete;

  const Function& source() const { return *source_; }
  Function& target() { return *target_; }
  Builder& builder() { return builder_; }

  // What source value `v` became (an invalid Value until mapped).
  Value operator[](Value v) const { return map_[v.id]; }
  void map(Value source_value, Value replacement) { map_[source_value.id] = replacement; }
  // Source op i's operands, mapped (the span is valid until the next call).
  std::span<const Value> mapped_operands(OpIndex i);
  // Copies source op i (kind, attributes, scope, checkpoint name, facts, value annotations) onto
  // its mapped operands, maps its results to the copies and returns them.
  std::vector<Value> clone(OpIndex i);
  // Source value id -> its replacement.
  const std::vector<Value>& value_map() const { return map_; }

  // Completes the target: the results (each source result's mapping, or `results`) with the
  // source's donation aliases, then the builder's status and the verifier; a failure is an
  // internal error naming `pass`.
  Status finish(std::string_view pass, std::optional<std::span<const Value>> results = {});
  // finish(), then the rebuilt function replaces the source in the module (module form only).
  // The source, and Value handles into it, are invalid afterwards.
  Status commit(std::string_view pass);
  // finish(), then hands the rebuilt function over without swapping it in (module form only):
  // for a pass that compares several rebuilds before keeping one.
  Expected<std::unique_ptr<Function>> release(std::string_view pass);

 private:
  void copy_params(Params params);

  Module* module_ = nullptr;
  size_t index_ = 0;
  const Function* source_;
  std::unique_ptr<Function> owned_;  // module form: the function being built
  Function* target_;
  Builder builder_;
  std::vector<Value> map_;
  std::vector<Value> operands_;
};

}  // namespace precast::ir
