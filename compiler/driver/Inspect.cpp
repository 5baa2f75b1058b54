#include "compiler/driver/Inspect.h"

#include <fmt/format.h>

#include <string_view>
#include <vector>

#include "compiler/analysis/Bytes.h"
#include "compiler/driver/JsonText.h"
#include "ir/Parser.h"
#include "ir/Verifier.h"

namespace precast {
namespace {

// FLOP counts are exact integers well inside long double's 64-bit mantissa.
std::string exact(long double flops) {
  return fmt::format("{:.0f}", flops);
}

// 1234567 -> "1,234,567".
std::string grouped(long double value) {
  std::string digits = exact(value);
  std::string out;
  size_t lead = digits.size() % 3;  // digits before the first comma (0: three)
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i != 0 && i % 3 == lead) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

std::string format_text(const std::string& source, const std::vector<IrCounts>& functions,
                        const CountOptions& options) {
  std::string out = fmt::format("{}: {} function{}\n", source, functions.size(),
                                functions.size() == 1 ? "" : "s");
  for (const IrCounts& c : functions) {
    out += fmt::format("\nfunc @{}\n", c.function);
    out += fmt::format("  ops           {}\n", c.ops);
    out += fmt::format("  weights       {} tensors, {} elements, {}\n", c.weight_tensors,
                       grouped(static_cast<long double>(c.weight_elements)),
                       format_bytes(c.weight_bytes));
    out += fmt::format("  other inputs  {} tensors, {} elements (integer: batch, seeds)\n",
                       c.other_inputs, grouped(static_cast<long double>(c.other_input_elements)));
    out += fmt::format("  FLOPs         {} ({:.4g} TFLOP): dot_general {}, attention {}\n",
                       grouped(c.total_flops()), static_cast<double>(c.total_flops() / 1e12L),
                       grouped(c.dot_flops), grouped(c.attention_flops));
    out += fmt::format(
        "  hardware      {} ({:.4g} TFLOP): every attention pair, recomputation, "
        "elementwise\n",
        grouped(c.hardware_flops), static_cast<double>(c.hardware_flops / 1e12L));
    if (c.ops_by_kind.empty()) continue;
    out += "\n  ops by kind\n";
    for (const OpKindCount& k : c.ops_by_kind) {
      out += fmt::format("    {:<22}{:>10}\n", k.kind, k.ops);
    }
    if (c.total_flops() == 0) continue;
    out += fmt::format("\n  FLOPs by scope (depth {}{})\n", options.scope_depth,
                       options.merge_layers ? ", layers merged" : "");
    out += fmt::format("    {:<44}{:>8}{:>30}{:>28}{:>8}\n", "scope", "ops", "dot_general",
                       "attention", "share");
    for (const ScopeFlops& s : c.by_scope) {
      if (s.total() == 0) continue;
      out += fmt::format("    {:<44}{:>8}{:>30}{:>28}{:>7.2f}%\n",
                         s.scope.empty() ? "(no scope)" : s.scope, s.ops, grouped(s.dot),
                         grouped(s.attention),
                         static_cast<double>(100.0L * s.total() / c.total_flops()));
    }
  }
  return out;
}

std::string format_json(const std::string& source, const std::vector<IrCounts>& functions,
                        const CountOptions& options) {
  std::string out = fmt::format(
      "{{\n  \"source\": {},\n  \"scope_depth\": {},\n  "
      "\"merge_layers\": {},\n  \"functions\": [",
      json_string(source), options.scope_depth, options.merge_layers ? "true" : "false");
  for (size_t f = 0; f < functions.size(); ++f) {
    const IrCounts& c = functions[f];
    out += f == 0 ? "\n" : ",\n";
    out += fmt::format("    {{\n      \"name\": {},\n      \"ops\": {},\n", json_string(c.function),
                       c.ops);
    out += "      \"ops_by_kind\": {";
    for (size_t i = 0; i < c.ops_by_kind.size(); ++i) {
      out += fmt::format("{}{}: {}", i ? ", " : "", json_string(c.ops_by_kind[i].kind),
                         c.ops_by_kind[i].ops);
    }
    out += "},\n";
    out += fmt::format(
        "      \"weights\": {{\"tensors\": {}, \"elements\": {}, \"bytes\": {}}},\n"
        "      \"other_inputs\": {{\"tensors\": {}, \"elements\": {}}},\n"
        "      \"flops\": {{\"dot_general\": {}, \"attention\": {}, \"total\": {}, "
        "\"hardware\": {}}},\n",
        c.weight_tensors, c.weight_elements, c.weight_bytes, c.other_inputs, c.other_input_elements,
        exact(c.dot_flops), exact(c.attention_flops), exact(c.total_flops()),
        exact(c.hardware_flops));
    out += "      \"flops_by_scope\": [";
    bool first = true;
    for (const ScopeFlops& s : c.by_scope) {
      if (s.total() == 0) continue;
      out += fmt::format(
          "{}\n        {{\"scope\": {}, \"ops\": {}, \"dot_general\": {}, \"attention\": {}}}",
          first ? "" : ",", json_string(s.scope), s.ops, exact(s.dot), exact(s.attention));
      first = false;
    }
    out += first ? "]\n    }" : "\n      ]\n    }";
  }
  out += functions.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return out;
}

}  // namespace

Expected<std::string> inspect_ir(const InspectRequest& request) {
  if (request.format != "text" && request.format != "json") {
    return usage_error(fmt::format("--format must be text or json, got '{}'", request.format));
  }
  if (request.counts.scope_depth < 1) {
    return usage_error(
        fmt::format("--by-scope-depth must be at least 1, got {}", request.counts.scope_depth));
  }
  PRECAST_ASSIGN_OR_RETURN(ir::Module module, ir::parse_module_file(request.path));
  if (request.verify) PRECAST_RETURN_IF_ERROR(ir::verify_module(module));
  std::vector<IrCounts> functions;
  for (size_t i = 0; i < module.num_functions(); ++i) {
    functions.push_back(count_function(module.function(i), request.counts));
  }
  std::string source = request.path == "-" ? "<stdin>" : request.path;
  return request.format == "json" ? format_json(source, functions, request.counts)
                                  : format_text(source, functions, request.counts);
}

}  // namespace precast
