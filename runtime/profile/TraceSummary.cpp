#include "runtime/profile/TraceSummary.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "runtime/checkpoint/JsonValue.h"

namespace precast::runtime {
namespace {

using checkpoint::JsonValue;

// A non-negative decimal number of microseconds ("12", "12.5", "1.234567") as nanoseconds,
// rounded to the nearest; false when the text is not such a number.
bool micros_to_ns(const std::string& text, int64_t& ns) {
  size_t dot = text.find('.');
  std::string whole = text.substr(0, dot);
  std::string frac = dot == std::string::npos ? "" : text.substr(dot + 1);
  if (whole.empty() || whole.size() > 12) return false;
  for (char c : whole + frac) {
    if (c < '0' || c > '9') return false;
  }
  if (dot != std::string::npos && frac.empty()) return false;
  int64_t value = std::stoll(whole) * 1000;
  int64_t sub = 0;
  for (size_t i = 0; i < 3; ++i) sub = sub * 10 + (i < frac.size() ? frac[i] - '0' : 0);
  if (frac.size() > 3 && frac[3] >= '5') ++sub;
  ns = value + sub;
  return true;
}

std::string text_member(const JsonValue& object, const char* key) {
  const JsonValue* v = object.find(key);
  return v != nullptr && v->kind == JsonValue::Kind::kString ? v->text : "";
}

void add(std::map<std::string, TraceTotal>& totals, const std::string& name, int64_t ns) {
  TraceTotal& t = totals[name];
  t.name = name;
  ++t.events;
  t.nanoseconds += ns;
}

std::vector<TraceTotal> sorted(const std::map<std::string, TraceTotal>& totals) {
  std::vector<TraceTotal> out;
  for (const auto& [name, total] : totals) out.push_back(total);
  std::stable_sort(out.begin(), out.end(), [](const TraceTotal& a, const TraceTotal& b) {
    return a.nanoseconds > b.nanoseconds;
  });
  return out;
}

std::string ms(int64_t ns) {
  return fmt::format("{:.3f}", static_cast<double>(ns) / 1e6);
}
std::string us(int64_t ns) {
  return fmt::format("{}.{:03}", ns / 1000, ns % 1000);
}

std::string table(const std::string& title, const std::string& column,
                  const std::vector<TraceTotal>& rows, int64_t total_ns, size_t limit) {
  size_t width = column.size();
  size_t shown = std::min(limit, rows.size());
  for (size_t i = 0; i < shown; ++i) width = std::max(width, rows[i].name.size());
  std::string out = fmt::format("\n{}\n  {:<{}}  {:>8}  {:>14}  {:>12}  {:>6}\n", title, column,
                                width, "events", "total (us)", "mean (us)", "share");
  for (size_t i = 0; i < shown; ++i) {
    const TraceTotal& r = rows[i];
    double share = total_ns > 0
                       ? 100.0 * static_cast<double>(r.nanoseconds) / static_cast<double>(total_ns)
                       : 0.0;
    out += fmt::format("  {:<{}}  {:>8}  {:>14}  {:>12.3f}  {:>5.1f}%\n", r.name, width, r.events,
                       us(r.nanoseconds),
                       static_cast<double>(r.nanoseconds) / 1e3 / static_cast<double>(r.events),
                       share);
  }
  if (rows.size() > shown) out += fmt::format("  ... {} more\n", rows.size() - shown);
  return out;
}

}  // namespace

Expected<TraceSummary> summarize_trace(const std::string& text, const std::string& file_name) {
  auto bad = [&](const std::string& why) {
    return usage_error(
        fmt::format("{}: not a Chrome trace precast can summarise: {}; give the "
                    "profile/trace-rank<r>.json that precast-run profiler=trace writes",
                    file_name, why));
  };
  Expected<JsonValue> parsed = checkpoint::parse_json(text);
  if (!parsed.ok()) return bad(parsed.error().message());
  const JsonValue* events = &*parsed;
  if (parsed->is_object()) {
    events = parsed->find("traceEvents");
    if (events == nullptr) return bad("the JSON object has no \"traceEvents\" member");
  }
  if (events->kind != JsonValue::Kind::kArray) {
    return bad("its events are not a JSON array");
  }
  TraceSummary s;
  std::map<std::string, TraceTotal> kinds, ops, scopes, names;
  for (size_t i = 0; i < events->items.size(); ++i) {
    const JsonValue& e = events->items[i];
    if (!e.is_object()) return bad(fmt::format("event {} is not a JSON object", i));
    if (text_member(e, "ph") != "X") continue;  // metadata, instant and other events
    const JsonValue* dur = e.find("dur");
    int64_t ns = 0;
    if (dur == nullptr || dur->kind != JsonValue::Kind::kNumber || !micros_to_ns(dur->text, ns)) {
      return bad(fmt::format("complete event {} (\"{}\") has no non-negative \"dur\" number", i,
                             text_member(e, "name")));
    }
    std::string name = text_member(e, "name"), kind = text_member(e, "cat");
    if (kind == "step") {
      ++s.step_events;
      s.step_nanoseconds += ns;
      continue;
    }
    ++s.entry_events;
    s.entry_nanoseconds += ns;
    std::string op, scope;
    if (const JsonValue* args = e.find("args"); args != nullptr && args->is_object()) {
      op = text_member(*args, "op");
      scope = text_member(*args, "scope");
    }
    add(kinds, kind.empty() ? "(none)" : kind, ns);
    add(ops, op.empty() ? name : op, ns);
    add(scopes, scope.empty() ? "(none)" : scope, ns);
    add(names, name, ns);
  }
  s.by_kind = sorted(kinds);
  s.by_op = sorted(ops);
  s.by_scope = sorted(scopes);
  s.by_name = sorted(names);
  return s;
}

Expected<TraceSummary> summarize_trace_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return usage_error(
        fmt::format("{}: cannot read the trace: {}; give the path of a "
                    "profile/trace-rank<r>.json",
                    path, std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return summarize_trace(text.str(), path);
}

std::string format_trace_summary(const TraceSummary& s, const std::string& file_name, size_t top) {
  std::string out = fmt::format(
      "Trace {}\n  steps: {} events, {} us ({} ms)\n  program entries: {} events, {} us ({} "
      "ms), {:.1f}% of the steps\n",
      file_name, s.step_events, us(s.step_nanoseconds), ms(s.step_nanoseconds), s.entry_events,
      us(s.entry_nanoseconds), ms(s.entry_nanoseconds),
      s.step_nanoseconds > 0 ? 100.0 * static_cast<double>(s.entry_nanoseconds) /
                                   static_cast<double>(s.step_nanoseconds)
                             : 0.0);
  out += table("Time by op kind", "kind", s.by_kind, s.entry_nanoseconds, s.by_kind.size());
  out += table("Time by op", "op", s.by_op, s.entry_nanoseconds, s.by_op.size());
  out += table("Time by scope", "scope", s.by_scope, s.entry_nanoseconds, s.by_scope.size());
  out += table(fmt::format("Top {} ops (op and scope)", top), "op and scope", s.by_name,
               s.entry_nanoseconds, top);
  return out;
}

}  // namespace precast::runtime
