#include "runtime/profile/ProfileSettings.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

namespace precast::runtime {
namespace {

std::string unquoted(std::string v) {
  if (v.size() >= 2 && (v.front() == '\'' || v.front() == '"') && v.back() == v.front()) {
    return v.substr(1, v.size() - 2);
  }
  return v;
}

}  // namespace

Expected<ProfileSettings> profile_settings(const std::map<std::string, std::string>& config) {
  ProfileSettings s;
  auto value = [&](const char* key) -> const std::string* {
    auto it = config.find(key);
    return it == config.end() ? nullptr : &it->second;
  };
  auto whole = [&](const char* key, int64_t minimum, int64_t& out) -> Status {
    const std::string* v = value(key);
    if (v == nullptr) return Status::success();
    char* end = nullptr;
    long long n = std::strtoll(v->c_str(), &end, 10);
    if (v->empty() || *end != '\0' || n < minimum) {
      return usage_error(fmt::format("{}={}: expected a whole number >= {}", key, *v, minimum));
    }
    out = n;
    return Status::success();
  };
  if (const std::string* v = value("profiler")) {
    std::string p = unquoted(*v);
    if (p == "trace") {
      s.trace = true;
    } else if (!p.empty() && p != "None" && p != "null") {
      return usage_error(fmt::format(
          "profiler={}: not supported yet; set profiler=trace for a Chrome trace JSON per rank "
          "(opens in Perfetto), or profiler='' for none",
          p));
    }
  }
  PRECAST_RETURN_IF_ERROR(
      whole("skip_first_n_steps_for_profiler", 0, s.skip_first_n_steps_for_profiler));
  PRECAST_RETURN_IF_ERROR(whole("profiler_steps", 1, s.profiler_steps));
  if (const std::string* v = value("collect_stack_trace")) {
    if (*v == "True" || *v == "true" || *v == "1") {
      s.collect_stack_trace = true;
    } else if (*v != "False" && *v != "false" && *v != "0") {
      return usage_error(fmt::format("collect_stack_trace={}: expected true or false", *v));
    }
  }
  PRECAST_RETURN_IF_ERROR(whole("stack_trace_interval_seconds", 1, s.stack_trace_interval_seconds));
  return s;
}

ProfileWindow profile_window(const ProfileSettings& settings, int64_t first_step, int64_t steps) {
  ProfileWindow w;
  w.begin = first_step + settings.skip_first_n_steps_for_profiler;
  w.end = std::max(w.begin, std::min(steps, w.begin + settings.profiler_steps));
  return w;
}

}  // namespace precast::runtime
