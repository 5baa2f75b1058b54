// Scope paths ("decoder/layers_3/mlp/wi/backward"): '/'-separated components that name where an
// op comes from. Passes and analyses ask two questions of them: does a path contain a component
// (the backward pass adds "backward", remat clones "remat"), and what prefix of it names the
// enclosing block (a decoder layer, "decoder/layers_3").
#pragma once

#include <string_view>

namespace precast::ir {

// Components the compiler appends to a forward op's scope: its backward ops ("backward") and
// the recomputation of it that remat inserts ("remat").
inline constexpr const char* kBackwardScope = "backward";
inline constexpr const char* kRematScope = "remat";

// True when `component` is one whole component of `scope`.
inline bool scope_has_component(std::string_view scope, std::string_view component) {
  size_t at = 0;
  while ((at = scope.find(component, at)) != std::string_view::npos) {
    bool starts = at == 0 || scope[at - 1] == '/';
    bool ends = at + component.size() == scope.size() || scope[at + component.size()] == '/';
    if (starts && ends) return true;
    at += component.size();
  }
  return false;
}

// The prefix of `scope` through the component that follows `prefix`: with prefix
// "decoder/layers_", "decoder/layers_12/mlp/wi" -> "decoder/layers_12"; "" when `scope` does
// not start with `prefix`.
inline std::string_view scope_block(std::string_view scope, std::string_view prefix) {
  if (!scope.starts_with(prefix)) return {};
  size_t end = scope.find('/', prefix.size());
  return end == std::string_view::npos ? scope : scope.substr(0, end);
}

// The decoder layer an op belongs to, "" outside the layers (the frontend's scope layout).
inline std::string_view decoder_layer_scope(std::string_view scope) {
  return scope_block(scope, "decoder/layers_");
}

}  // namespace precast::ir
