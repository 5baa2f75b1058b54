#include "ir/PassManager.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "ir/Printer.h"
#include "ir/Verifier.h"
#include "ir/support/ClosestNames.h"

namespace precast::ir {
namespace {

bool is_pass_name(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Written to a temporary name and renamed, so a reader never sees half a dump.
Status write_file(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::path temporary = path;
  temporary += ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) return Error(ExitCode::kFailure, fmt::format("{}: cannot write", temporary.string()));
    out << text;
    if (!out.flush()) return Error(ExitCode::kFailure, fmt::format("{}: write failed", temporary.string()));
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) return Error(ExitCode::kFailure, fmt::format("{}: {}", path.string(), ec.message()));
  return Status::success();
}

}  // namespace

Status PassRegistry::add(Pass pass) {
  if (!is_pass_name(pass.name)) {
    return internal_error(fmt::format("pass name '{}' must match [a-z0-9-]+", pass.name));
  }
  if (find(pass.name)) return internal_error(fmt::format("pass '{}' registered twice", pass.name));
  passes_.push_back(std::move(pass));
  return Status::success();
}

const Pass* PassRegistry::find(std::string_view name) const {
  for (const Pass& p : passes_) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

Expected<Pass> PassRegistry::lookup(std::string_view name) const {
  if (const Pass* p = find(name)) return *p;
  std::vector<std::string> names;
  for (const Pass& p : passes_) names.push_back(p.name);
  std::vector<std::string> close = closest_names(name, names, 3);
  std::string hint = close.empty() ? "" : fmt::format("; did you mean {}?", quoted_alternatives(close));
  return usage_error(fmt::format("unknown pass '{}'{}", name, hint));
}

Expected<PassManager> PassManager::create(PassManagerOptions options) {
  PassManager manager(std::move(options));
  if (!manager.options_.dump_after.empty()) {
    try {
      manager.dump_filter_ = std::make_shared<std::regex>(manager.options_.dump_after,
                                                          std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      return usage_error(
          fmt::format("--dump-after: bad regular expression '{}': {}", manager.options_.dump_after, e.what()));
    }
  }
  return manager;
}

Status PassManager::add_pipeline(const PassRegistry& registry, std::string_view names) {
  while (!names.empty()) {
    size_t comma = names.find(',');
    std::string_view name = trim(names.substr(0, comma));
    names = comma == std::string_view::npos ? std::string_view() : names.substr(comma + 1);
    if (name.empty()) continue;
    PRECAST_ASSIGN_OR_RETURN(Pass pass, registry.lookup(name));
    add(std::move(pass));
  }
  return Status::success();
}

bool PassManager::should_dump(std::string_view pass_name) const {
  if (options_.dump_dir.empty()) return false;
  if (!dump_filter_) return true;
  return std::regex_search(pass_name.begin(), pass_name.end(), *dump_filter_);
}

Status PassManager::dump(const Module& module, size_t index, const Pass* pass) const {
  std::string_view name = pass ? std::string_view(pass->name) : std::string_view("input");
  std::filesystem::path dir(options_.dump_dir);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Error(ExitCode::kFailure, fmt::format("--dump-ir {}: {}", dir.string(), ec.message()));
  std::string text = pass && pass->dump_text ? pass->dump_text(module) : print_module(module);
  return write_file(dir / fmt::format("{:02}-{}.ir", index, name), text);
}

Status PassManager::run(Module& module) {
  timings_.clear();
  if (options_.verify_each) PRECAST_RETURN_IF_ERROR(verify_module(module));
  if (!options_.dump_dir.empty()) PRECAST_RETURN_IF_ERROR(dump(module, 0, nullptr));
  for (size_t i = 0; i < pipeline_.size(); ++i) {
    const Pass& pass = pipeline_[i];
    PassTiming timing{pass.name};
    auto start = std::chrono::steady_clock::now();
    Expected<bool> changed = pass.run(module);
    timing.seconds = seconds_since(start);
    if (!changed.ok()) return changed.error().with_context(fmt::format("pass '{}'", pass.name));
    timing.changed = *changed;
    if (options_.verify_each) {
      auto verify_start = std::chrono::steady_clock::now();
      Status status = verify_module(module);
      timing.verify_seconds = seconds_since(verify_start);
      if (!status.ok()) {
        return internal_error(fmt::format("pass '{}' produced invalid IR: {}", pass.name,
                                          status.error().message()));
      }
    }
    timings_.push_back(timing);
    if (should_dump(pass.name)) PRECAST_RETURN_IF_ERROR(dump(module, i + 1, &pass));
  }
  return Status::success();
}

std::string PassManager::timing_report() const {
  std::string out = fmt::format("{:<28} {:>10} {:>10}  {}\n", "pass", "ms", "verify ms", "changed");
  double total = 0, total_verify = 0;
  for (const PassTiming& t : timings_) {
    out += fmt::format("{:<28} {:>10.3f} {:>10.3f}  {}\n", t.name, t.seconds * 1e3,
                       t.verify_seconds * 1e3, t.changed ? "yes" : "no");
    total += t.seconds;
    total_verify += t.verify_seconds;
  }
  out += fmt::format("{:<28} {:>10.3f} {:>10.3f}\n", "total", total * 1e3, total_verify * 1e3);
  return out;
}

}  // namespace precast::ir
