#include "ir/PassManager.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
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

bool is_option_key(std::string_view key) {
  if (key.empty()) return false;
  for (char c : key) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    if (!ok) return false;
  }
  return true;
}

size_t total_ops(const Module& module) {
  size_t n = 0;
  for (size_t i = 0; i < module.num_functions(); ++i) n += module.function(i).num_ops();
  return n;
}

}  // namespace

Expected<PassOptions> PassOptions::parse(std::string_view pass, std::string_view text) {
  PassOptions options;
  while (!text.empty()) {
    size_t comma = text.find(',');
    std::string_view item = trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    if (item.empty()) continue;
    size_t equals = item.find('=');
    if (equals == std::string_view::npos) {
      if (options.values_.empty()) {
        return usage_error(fmt::format("pass '{}': option '{}' has no value; write key=value",
                                       pass, item));
      }
      options.values_.back().second += fmt::format(",{}", item);
      continue;
    }
    std::string key(trim(item.substr(0, equals)));
    std::string value(trim(item.substr(equals + 1)));
    if (!is_option_key(key)) {
      return usage_error(fmt::format("pass '{}': bad option name '{}' (expected [a-z0-9_-]+)",
                                     pass, key));
    }
    if (options.get(key)) {
      return usage_error(fmt::format("pass '{}': option '{}' given twice", pass, key));
    }
    options.values_.emplace_back(std::move(key), std::move(value));
  }
  return options;
}

Status PassOptions::check_known(std::string_view pass,
                                const std::vector<std::string_view>& known) const {
  for (const auto& [key, value] : values_) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::vector<std::string> names(known.begin(), known.end());
    if (names.empty()) {
      return usage_error(fmt::format("pass '{}' takes no options (got '{}')", pass, key));
    }
    std::vector<std::string> close = closest_names(key, names, 1);
    std::string hint = close.empty() ? "" : fmt::format(" (did you mean {}?)", quoted_alternatives(close));
    return usage_error(fmt::format("pass '{}' has no option '{}'{}; its options: {}", pass, key,
                                   hint, fmt::join(names, ", ")));
  }
  return Status::success();
}

std::optional<std::string> PassOptions::get(std::string_view key) const {
  for (const auto& [k, v] : values_) {
    if (k == key) return v;
  }
  return std::nullopt;
}

std::string PassOptions::get_string(std::string_view key, std::string fallback) const {
  std::optional<std::string> v = get(key);
  return v ? *v : std::move(fallback);
}

Expected<int64_t> PassOptions::get_int(std::string_view pass, std::string_view key,
                                       int64_t fallback) const {
  std::optional<std::string> v = get(key);
  if (!v) return fallback;
  int64_t value = 0;
  auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), value);
  if (ec != std::errc() || end != v->data() + v->size()) {
    return usage_error(fmt::format("pass '{}': option {}='{}' is not an integer", pass, key, *v));
  }
  return value;
}

Expected<bool> PassOptions::get_bool(std::string_view pass, std::string_view key,
                                     bool fallback) const {
  std::optional<std::string> v = get(key);
  if (!v) return fallback;
  if (*v == "true" || *v == "1") return true;
  if (*v == "false" || *v == "0") return false;
  return usage_error(
      fmt::format("pass '{}': option {}='{}' must be true or false", pass, key, *v));
}

std::string PassOptions::to_string() const {
  if (values_.empty()) return "";
  std::vector<std::string> items;
  for (const auto& [k, v] : values_) items.push_back(fmt::format("{}={}", k, v));
  return fmt::format("{{{}}}", fmt::join(items, ","));
}

Expected<size_t> function_for_pass(const Module& module, std::string_view pass,
                                   std::string_view name) {
  std::vector<std::string> names;
  for (size_t i = 0; i < module.num_functions(); ++i) {
    if (module.function(i).name() == name) return i;
    names.push_back("@" + std::string(module.function(i).name()));
  }
  return usage_error(fmt::format("pass '{}' works on @{}, which the module does not have ({}); "
                                 "name another with {{func=NAME}}",
                                 pass, name, names.empty() ? "it is empty" : fmt::format("it has {}", fmt::join(names, ", "))));
}

Status PassRegistry::add(Pass pass) {
  std::string name = pass.name, summary = pass.summary;
  return add_factory(std::move(name), std::move(summary),
                     [pass = std::move(pass)](const PassOptions& options) -> Expected<Pass> {
                       PRECAST_RETURN_IF_ERROR(options.check_known(pass.name, {}));
                       return pass;
                     });
}

Status PassRegistry::add_factory(std::string name, std::string summary, PassFactory factory) {
  if (!is_pass_name(name)) {
    return internal_error(fmt::format("pass name '{}' must match [a-z0-9-]+", name));
  }
  if (find_entry(name)) return internal_error(fmt::format("pass '{}' registered twice", name));
  entries_.push_back({std::move(name), std::move(summary), std::move(factory)});
  return Status::success();
}

const PassRegistry::Entry* PassRegistry::find_entry(std::string_view name) const {
  for (const Entry& e : entries_) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

bool PassRegistry::contains(std::string_view name) const { return find_entry(name) != nullptr; }

Expected<Pass> PassRegistry::lookup(std::string_view name) const {
  return create(name, PassOptions());
}

Expected<Pass> PassRegistry::create(std::string_view name, const PassOptions& options) const {
  if (const Entry* e = find_entry(name)) return e->factory(options);
  std::vector<std::string> names;
  for (const Entry& e : entries_) names.push_back(e.name);
  std::vector<std::string> close = closest_names(name, names, 3);
  std::string hint = close.empty() ? "" : fmt::format("; did you mean {}?", quoted_alternatives(close));
  return usage_error(fmt::format("unknown pass '{}'{}", name, hint));
}

std::vector<std::pair<std::string, std::string>> PassRegistry::list() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const Entry& e : entries_) out.emplace_back(e.name, e.summary);
  return out;
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
    // The next item ends at a comma outside braces.
    size_t end = 0;
    int depth = 0;
    for (; end < names.size(); ++end) {
      if (names[end] == '{') ++depth;
      if (names[end] == '}') --depth;
      if (names[end] == ',' && depth == 0) break;
    }
    std::string_view item = trim(names.substr(0, end));
    names = end >= names.size() ? std::string_view() : names.substr(end + 1);
    if (item.empty()) continue;
    std::string_view name = item;
    PassOptions options;
    if (size_t brace = item.find('{'); brace != std::string_view::npos) {
      name = trim(item.substr(0, brace));
      if (item.back() != '}') {
        return usage_error(fmt::format("pass '{}': options must end with '}}' (got '{}')", name, item));
      }
      PRECAST_ASSIGN_OR_RETURN(options,
                               PassOptions::parse(name, item.substr(brace + 1, item.size() - brace - 2)));
    }
    PRECAST_ASSIGN_OR_RETURN(Pass pass, registry.create(name, options));
    add(std::move(pass), options.to_string());
  }
  return Status::success();
}

bool PassManager::should_dump(std::string_view pass_name) const {
  if (options_.dump_dir.empty()) return false;
  if (!dump_filter_) return true;
  return std::regex_search(pass_name.begin(), pass_name.end(), *dump_filter_);
}

Expected<std::string> PassManager::dump(const Module& module, size_t index, const Pass* pass) const {
  std::string_view name = pass ? std::string_view(pass->name) : std::string_view("input");
  std::filesystem::path dir(options_.dump_dir);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Error(ExitCode::kFailure, fmt::format("--dump-ir {}: {}", dir.string(), ec.message()));
  std::string text = pass && pass->dump_text ? pass->dump_text(module) : print_module(module);
  std::filesystem::path path = dir / fmt::format("{:02}-{}.ir", index, name);
  PRECAST_RETURN_IF_ERROR(write_file(path, text));
  return path.string();
}

Status PassManager::run(Module& module) {
  timings_.clear();
  if (options_.verify_each) PRECAST_RETURN_IF_ERROR(verify_module(module));
  if (!options_.dump_dir.empty() && module.num_functions() > 0) {
    PRECAST_RETURN_IF_ERROR(dump(module, 0, nullptr));
  }
  for (size_t i = 0; i < pipeline_.size(); ++i) {
    const Pass& pass = pipeline_[i].pass;
    PassTiming timing;
    timing.name = pass.name;
    timing.options = pipeline_[i].options_text;
    timing.ops_before = total_ops(module);
    auto start = std::chrono::steady_clock::now();
    Expected<bool> changed = pass.run(module);
    timing.seconds = seconds_since(start);
    if (!changed.ok()) return changed.error().with_context(fmt::format("pass '{}'", pass.name));
    timing.changed = *changed;
    timing.ops_after = total_ops(module);
    if (options_.verify_each) {
      auto verify_start = std::chrono::steady_clock::now();
      Status status = verify_module(module);
      timing.verify_seconds = seconds_since(verify_start);
      if (!status.ok()) {
        return internal_error(fmt::format("pass '{}' produced invalid IR: {}", pass.name,
                                          status.error().message()));
      }
    }
    if (should_dump(pass.name)) {
      PRECAST_ASSIGN_OR_RETURN(timing.dump_file, dump(module, i + 1, &pass));
    }
    timings_.push_back(timing);
    if (options_.after_each) PRECAST_RETURN_IF_ERROR(options_.after_each(timings_.back(), module));
  }
  return Status::success();
}

std::string PassManager::timing_report() const {
  std::string out = fmt::format("{:<28} {:>10} {:>10}  {:<8} {:>9} {:>9}\n", "pass", "ms",
                                "verify ms", "changed", "ops in", "ops out");
  double total = 0, total_verify = 0;
  for (const PassTiming& t : timings_) {
    out += fmt::format("{:<28} {:>10.3f} {:>10.3f}  {:<8} {:>9} {:>9}\n", t.name, t.seconds * 1e3,
                       t.verify_seconds * 1e3, t.changed ? "yes" : "no", t.ops_before,
                       t.ops_after);
    total += t.seconds;
    total_verify += t.verify_seconds;
  }
  out += fmt::format("{:<28} {:>10.3f} {:>10.3f}\n", "total", total * 1e3, total_verify * 1e3);
  return out;
}

}  // namespace precast::ir
