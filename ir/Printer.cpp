#include "ir/Printer.h"

#include <fmt/format.h>

#include <cmath>
#include <iterator>

namespace precast::ir {
namespace {

using Out = std::string;

void append_quoted(Out& out, std::string_view text) {
  out += '"';
  for (char c : text) {
    auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20 || byte == 0x7f) {
      fmt::format_to(std::back_inserter(out), "\\{:02x}", byte);
    } else {
      out += c;
    }
  }
  out += '"';
}

void append_symbol(Out& out, std::string_view text) {
  if (is_plain_identifier(text)) {
    out += text;
  } else {
    append_quoted(out, text);
  }
}

// Shortest spelling that reads back to the same value; integral reals get ".0" so the text
// shows they are reals.
void append_real(Out& out, double value, bool single_precision) {
  size_t begin = out.size();
  if (single_precision) {
    fmt::format_to(std::back_inserter(out), "{}", static_cast<float>(value));
  } else {
    fmt::format_to(std::back_inserter(out), "{}", value);
  }
  if (!std::isfinite(value)) return;
  std::string_view written(out.data() + begin, out.size() - begin);
  if (written.find_first_of(".e") == std::string_view::npos) out += ".0";
}

void append_literal_value(Out& out, double value, DType dtype) {
  switch (dtype) {
    case DType::kPred:
      out += value != 0.0 ? "true" : "false";
      return;
    case DType::kS32:
    case DType::kU32:
      fmt::format_to(std::back_inserter(out), "{}", static_cast<int64_t>(value));
      return;
    case DType::kF64:
      append_real(out, value, false);
      return;
    default:
      append_real(out, value, true);
      return;
  }
}

void append_type(Out& out, const TensorType& type) {
  out += dtype_name(type.dtype);
  out += '[';
  for (size_t i = 0; i < type.dims.size(); ++i) {
    if (i > 0) out += ',';
    fmt::format_to(std::back_inserter(out), "{}", type.dims[i]);
  }
  out += ']';
}

void append_value_type(Out& out, const Function& f, Value v) {
  append_type(out, f.type(v));
  std::span<const StringId> axes = f.axes(v);
  if (axes.empty()) return;
  out += '{';
  for (size_t i = 0; i < axes.size(); ++i) {
    if (i > 0) out += ',';
    std::string_view name = f.context().string(axes[i]);
    if (name.empty()) {
      out += '_';
    } else {
      append_symbol(out, name);
    }
  }
  out += '}';
}

// JAX's PartitionSpec as it prints: P('fsdp', None, ('tensor', 'sequence')).
void append_sharding(Out& out, const Function& f, Value v) {
  if (!f.has_sharding(v)) return;
  out += " P(";
  std::span<const std::vector<StringId>> dims = f.sharding(v);
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) out += ", ";
    if (dims[i].empty()) {
      out += "None";
      continue;
    }
    if (dims[i].size() > 1) out += '(';
    for (size_t k = 0; k < dims[i].size(); ++k) {
      if (k > 0) out += ", ";
      out += '\'';
      out += f.context().string(dims[i][k]);
      out += '\'';
    }
    if (dims[i].size() > 1) out += ')';
  }
  out += ')';
}

// A value where it is defined: type, axis names, sharding.
void append_value_definition(Out& out, const Function& f, Value v) {
  append_value_type(out, f, v);
  append_sharding(out, f, v);
}

// " backward layer=3 region=logits block=4 site=9"; the defaults (forward, no layer, no region,
// no block, no site) print nothing.
void append_facts(Out& out, const OpFacts& facts) {
  if (facts.phase != OpPhase::kForward) {
    out += ' ';
    out += phase_name(facts.phase);
  }
  if (facts.in_layer()) fmt::format_to(std::back_inserter(out), " layer={}", facts.layer);
  if (facts.region != OpRegion::kNone) {
    out += " region=";
    out += region_name(facts.region);
  }
  if (facts.block != 0) fmt::format_to(std::back_inserter(out), " block={}", facts.block);
  if (facts.site != 0) fmt::format_to(std::back_inserter(out), " site={}", facts.site);
}

void append_ints(Out& out, std::span<const int64_t> values) {
  out += '[';
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ", ";
    fmt::format_to(std::back_inserter(out), "{}", values[i]);
  }
  out += ']';
}

void append_attribute(Out& out, const Context& context, const Attribute& a) {
  const AttrKeyInfo& info = attr_key_info(a.key);
  out += info.name;
  out += '=';
  switch (info.kind) {
    case AttrKind::kInt:
      fmt::format_to(std::back_inserter(out), "{}", a.ints[0]);
      return;
    case AttrKind::kFlag:
      out += a.ints[0] != 0 ? "true" : "false";
      return;
    case AttrKind::kDirection:
      out += direction_name(static_cast<ComparisonDirection>(a.ints[0]));
      return;
    case AttrKind::kReal:
      append_real(out, a.reals[0], false);
      return;
    case AttrKind::kInts:
      append_ints(out, a.ints);
      return;
    case AttrKind::kNames:
      out += '[';
      for (size_t i = 0; i < a.ints.size(); ++i) {
        if (i > 0) out += ", ";
        append_symbol(out, context.string(static_cast<StringId>(a.ints[i])));
      }
      out += ']';
      return;
    case AttrKind::kReals:
      out += '[';
      for (size_t i = 0; i < a.reals.size(); ++i) {
        if (i > 0) out += ", ";
        append_real(out, a.reals[i], false);
      }
      out += ']';
      return;
  }
}

// The constant's literal goes where other ops have operands: `constant 0.5` or `constant [1, 2]`.
void append_literal(Out& out, const Function& f, const Op& op) {
  std::span<const double> values = f.attrs(op).reals(AttrKey::kValue);
  DType dtype = f.type(f.result(op)).dtype;
  out += ' ';
  if (values.size() == 1) {
    append_literal_value(out, values[0], dtype);
    return;
  }
  out += '[';
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ", ";
    append_literal_value(out, values[i], dtype);
  }
  out += ']';
}

void append_op(Out& out, const Function& f, const ValueNames& names, const Op& op) {
  for (uint32_t i = 0; i < op.num_results; ++i) {
    if (i > 0) out += ", ";
    names.append(out, f.result(op, i));
  }
  out += " = ";
  out += op_name(op.kind);
  if (op.kind == OpKind::kConstant) {
    append_literal(out, f, op);
  } else {
    std::span<const Value> operands = f.operands(op);
    for (size_t i = 0; i < operands.size(); ++i) {
      out += i == 0 ? " " : ", ";
      names.append(out, operands[i]);
    }
    const std::vector<Attribute>& attrs = f.attrs(op).entries();
    for (size_t i = 0; i < attrs.size(); ++i) {
      out += i == 0 ? " {" : ", ";
      append_attribute(out, f.context(), attrs[i]);
    }
    if (!attrs.empty()) out += '}';
  }
  out += " : ";
  for (uint32_t i = 0; i < op.num_results; ++i) {
    if (i > 0) out += ", ";
    append_value_definition(out, f, f.result(op, i));
  }
  if (op.scope != 0) {
    out += " @";
    append_quoted(out, f.scope(op));
  }
  if (op.checkpoint != 0) {
    out += " #";
    append_symbol(out, f.checkpoint(op));
  }
  append_facts(out, op.facts);
}

void append_function(Out& out, const Function& f) {
  ValueNames names(f);
  out += "func @";
  append_symbol(out, f.name());
  out += '(';
  std::span<const Value> params = f.params();
  for (size_t i = 0; i < params.size(); ++i) {
    if (i > 0) out += ", ";
    names.append(out, params[i]);
    out += ": ";
    append_value_definition(out, f, params[i]);
    if (f.param_role(i) != ParamRole::kNone) {
      out += " role=";
      out += param_role_name(f.param_role(i));
    }
  }
  out += ") -> (";
  std::span<const Value> results = f.results();
  for (size_t i = 0; i < results.size(); ++i) {
    if (i > 0) out += ", ";
    append_value_type(out, f, results[i]);
    int32_t alias = f.result_alias(i);
    if (alias >= 0 && static_cast<size_t>(alias) < params.size()) {
      out += " aliases ";
      names.append(out, params[static_cast<size_t>(alias)]);
    }
  }
  out += ") {\n";
  for (const Op& op : f.ops()) {
    out += "  ";
    append_op(out, f, names, op);
    out += '\n';
  }
  out += "  return";
  for (size_t i = 0; i < results.size(); ++i) {
    out += i == 0 ? " " : ", ";
    names.append(out, results[i]);
  }
  out += "\n}\n";
}

}  // namespace

std::string print_sharding(const Function& function, Value v) {
  Out out;
  append_sharding(out, function, v);
  return out.empty() ? out : out.substr(1);  // without the separating space
}

bool is_plain_identifier(std::string_view text) {
  if (text.empty()) return false;
  auto head = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  auto tail = [&](char c) { return head(c) || (c >= '0' && c <= '9') || c == '.'; };
  if (!head(text[0])) return false;
  for (char c : text.substr(1)) {
    if (!tail(c)) return false;
  }
  return true;
}

std::string print_module(const Module& module) {
  Out out;
  for (size_t i = 0; i < module.num_functions(); ++i) {
    const Function& f = module.function(i);
    out.reserve(out.size() + f.num_ops() * 96);
    if (i > 0) out += '\n';
    append_function(out, f);
  }
  return out;
}

std::string print_function(const Function& function) {
  Out out;
  append_function(out, function);
  return out;
}

std::string print_op(const Function& function, const ValueNames& names, OpIndex index) {
  Out out;
  append_op(out, function, names, function.op(index));
  return out;
}

std::string print_value_type(const Function& function, Value v) {
  Out out;
  append_value_type(out, function, v);
  return out;
}

}  // namespace precast::ir
