#include "ir/ValueNames.h"

#include <fmt/format.h>

namespace precast::ir {

ValueNames::ValueNames(const Function& function)
    : function_(function), numbers_(function.num_values(), kNamed) {
  uint32_t next = 0;
  auto number = [&](Value v) {
    if (function_.value_info(v).name == 0) numbers_[v.id] = next++;
  };
  for (Value p : function.params()) number(p);
  for (const Op& op : function.ops()) {
    for (uint32_t i = 0; i < op.num_results; ++i) number(function.result(op, i));
  }
}

std::string ValueNames::operator()(Value v) const {
  std::string out;
  append(out, v);
  return out;
}

void ValueNames::append(std::string& out, Value v) const {
  out += '%';
  if (!v.valid() || v.id >= numbers_.size()) {
    out += "<invalid>";
    return;
  }
  if (numbers_[v.id] == kNamed) {
    out += function_.value_name(v);
    return;
  }
  fmt::format_to(std::back_inserter(out), "{}", numbers_[v.id]);
}

}  // namespace precast::ir
