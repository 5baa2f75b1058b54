#include "ir/Rewriter.h"

#include <fmt/format.h>

#include "ir/Verifier.h"

namespace precast::ir {

Rewriter::Rewriter(Module& module, size_t index, Params params)
    : module_(&module),
      index_(index),
      source_(&module.function(index)),
      owned_(module.new_function(module.function(index).name())),
      target_(owned_.get()),
      builder_(*target_),
      map_(source_->num_values()) {
  copy_params(params);
}

Rewriter::Rewriter(const Function& source, Function& target, Params params)
    : source_(&source), target_(&target), builder_(target), map_(source.num_values()) {
  copy_params(params);
}

void Rewriter::copy_params(Params params) {
  if (params != Params::kCopy) return;
  for (Value p : source_->params()) map_[p.id] = target_->add_param_like(*source_, p);
}

std::span<const Value> Rewriter::mapped_operands(OpIndex i) {
  operands_.clear();
  for (Value u : source_->operands(source_->op(i))) operands_.push_back(map_[u.id]);
  return operands_;
}

std::vector<Value> Rewriter::clone(OpIndex i) {
  std::vector<Value> results = builder_.clone(*source_, i, mapped_operands(i));
  const Op& op = source_->op(i);
  for (uint32_t r = 0; r < op.num_results && r < results.size(); ++r) {
    map_[source_->result(op, r).id] = results[r];
  }
  return results;
}

Status Rewriter::finish(std::string_view pass, std::optional<std::span<const Value>> results) {
  std::vector<Value> mapped;
  if (!results) {
    for (Value v : source_->results()) mapped.push_back(map_[v.id]);
    results = mapped;
  }
  target_->set_results(*results);
  for (size_t k = 0; k < results->size(); ++k) {
    if (source_->result_alias(k) >= 0) target_->set_result_alias(k, source_->result_alias(k));
  }
  if (!builder_.ok()) {
    return internal_error(fmt::format("{}: rebuilding @{}: {}", pass, source_->name(),
                                      builder_.status().error().message()));
  }
  Status verified = verify_function(*target_);
  if (!verified.ok()) {
    return internal_error(fmt::format("{} produced an invalid @{}: {}", pass, source_->name(),
                                      verified.error().message()));
  }
  return Status::success();
}

Status Rewriter::commit(std::string_view pass) {
  PRECAST_ASSIGN_OR_RETURN(std::unique_ptr<Function> rebuilt, release(pass));
  module_->replace_function(index_, std::move(rebuilt));
  source_ = nullptr;
  return Status::success();
}

Expected<std::unique_ptr<Function>> Rewriter::release(std::string_view pass) {
  if (module_ == nullptr || !owned_) {
    return internal_error(fmt::format("{}: a Rewriter building into a given function has "
                                      "nothing to release",
                                      pass));
  }
  PRECAST_RETURN_IF_ERROR(finish(pass));
  target_ = nullptr;
  return std::move(owned_);
}

}  // namespace precast::ir
