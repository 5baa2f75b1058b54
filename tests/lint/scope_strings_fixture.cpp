// Input for the lint_scope_strings_catches test (tests/CMakeLists.txt): tools/lint_scope_strings.sh
// must flag each line marked FLAG and none marked OK. Never compiled.
bool f(const Function& f, const Op& op, std::string_view scope, std::string_view name) {
  if (scope_has_component(scope, kBackwardScope)) return true;             // FLAG helper
  if (!decoder_layer_scope(scope).empty()) return true;                    // FLAG helper
  if (part == kRematScope) return true;                                    // FLAG constant
  if (scope.starts_with("decoder/layers_")) return true;                   // FLAG layer
  if (component == "backward") return true;                                // FLAG phase
  bool remat = scope.ends_with("/remat");                                  // FLAG phase
  if (name.starts_with("mu.") || name.starts_with("nu.")) return true;     // FLAG role
  if (name == "count") return true;                                        // FLAG role
  if (scope.starts_with("decoder/logits")) return true;                    // FLAG region
  if (scope.starts_with("loss") || scope.starts_with("optimizer")) return true;  // FLAG region
  size_t last = scope.rfind('/');                                          // FLAG block
  size_t end = op_scope.find('/', begin);                                  // FLAG place
  size_t dot = key.find('.');                                              // OK not a scope
  b.set_scope(scope + "/" + kBackwardScope);                               // OK naming
  b.set_scope("decoder/logits");                                           // OK naming
  registry.register_pass("remat", "apply the remat policy", run_remat);    // OK pass name
  // A comment may say "backward", "decoder/layers_" or scope_has_component.  OK
  if (op.facts.block == other.facts.block) return true;                    // OK fact
  return op.facts.phase == OpPhase::kBackward;                             // OK fact
}
