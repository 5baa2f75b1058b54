#!/usr/bin/env bash
# Fails when compiler logic decides something from scope strings or value names instead of the
# IR's facts (ir/Module.h: OpFacts phase / layer / region, ParamRole, value shardings). Scope
# strings are names for people; see ir/README.md §2 "Facts".
#
# Usage: tools/lint_scope_strings.sh [DIR_OR_FILE ...]   (default: compiler ir runtime)
# Exit 0 when clean, 1 with one line per finding (FILE:LINE: why: code).
#
# Flagged in code (text after // is ignored):
#   the scope helpers that used to carry the logic: scope_has_component, scope_block,
#     decoder_layer_scope;
#   the literals "decoder/layers_", "backward", "remat", "mu.", "nu.", "decoder/logits";
#   comparisons with "count", and starts_with/ends_with/find on scope prefixes ("loss",
#     "gradients/", "optimizer", "decoder/");
#   kBackwardScope / kRematScope anywhere but where a scope *name* is built (set_scope, format)
#     or the constants are declared;
#   a scope path split at '/' (scope.find('/'), scope.rfind('/')): which module or which place
#     in a layer an op belongs to is OpFacts::block / site, named once by the builder.
# Allowed explicitly (not logic on scopes): "remat" as the pass's name (kRematPass, Remat.h), as a config key's default (KeyRegistry.cpp, MaxTextCompatibilityKeys.cpp) and as a remat_policy=custom
# placement value (Remat.cpp); "decoder/logits" given to set_scope (naming ops); "backward" as
# the IR text's keyword for the phase fact (ir/Module.cpp's table of phase names).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
if [ $# -eq 0 ]; then set -- compiler ir runtime; fi

found=0
report() {  # file line why code
  printf '%s:%s: %s: %s\n' "$1" "$2" "$3" "$4"
  found=1
}

# Lines allowed although they match: FILE-SUFFIX|REGEX on the code.
allowed() {
  local file=$1 code=$2
  case "$file" in
    *compiler/config/KeyRegistry.cpp) [[ $code =~ compile_key\(.*\"remat\" ]] && return 0 ;;
    *compiler/config/MaxTextCompatibilityKeys.cpp) [[ $code =~ no_effect_run\(.*\"remat\" ]] && return 0 ;;
    *compiler/autodiff/Remat.h) [[ $code =~ kRematPass\ =\ \"remat\" ]] && return 0 ;;
    *compiler/autodiff/Remat.cpp) [[ $code =~ value\ ==\ \"remat\" ]] && return 0 ;;
    *ir/ScopePath.h) [[ $code =~ inline\ constexpr ]] && return 0 ;;
    # The text format's own keywords for the phase facts.
    *ir/Module.cpp) [[ $code =~ kPhaseNames\[\]\ = ]] && return 0 ;;
    # `precast inspect --merge-layers`: a report's rows grouped by scope, for people.
    *compiler/analysis/IrCounts.cpp) [[ $code =~ scope\.find\(\'/\' ]] && return 0 ;;
  esac
  [[ $code =~ register(_pass)?\(\"remat\" ]] && return 0
  [[ $code =~ set_scope\(\"decoder/logits ]] && return 0
  return 1
}

check_line() {  # file line code
  local file=$1 line=$2 code=$3
  if [[ $code =~ scope_has_component|scope_block|decoder_layer_scope ]]; then
    report "$file" "$line" "scope helper used as logic" "$code"; return
  fi
  if [[ $code =~ k(Backward|Remat)Scope ]] &&
     ! [[ $code =~ set_scope\(|format\(|inline\ constexpr|using\ ir:: ]]; then
    report "$file" "$line" "phase scope constant used as logic (read OpFacts::phase)" "$code"; return
  fi
  allowed "$file" "$code" && return
  if [[ $code =~ \"decoder/layers_\" ]]; then
    report "$file" "$line" "decoder layer read from a scope (read OpFacts::layer)" "$code"; return
  fi
  if [[ $code =~ \"/?(backward|remat)\" ]]; then
    report "$file" "$line" "phase read from a scope (read OpFacts::phase)" "$code"; return
  fi
  if [[ $code =~ \"(mu|nu)\. ]] || [[ $code =~ (==|!=)[[:space:]]*\"count\" ]] ||
     [[ $code =~ \"count\"[[:space:]]*(==|!=) ]]; then
    report "$file" "$line" "optimizer state read from a name (read Function::param_role)" "$code"
    return
  fi
  if [[ $code =~ $scope_split ]]; then
    report "$file" "$line" "scope path split into components (read OpFacts::block / site)" "$code"
    return
  fi
  if [[ $code =~ \"decoder/logits ]] ||
     [[ $code =~ (starts_with|ends_with|find)\(\"(loss|gradients/|optimizer|decoder/) ]]; then
    report "$file" "$line" "region read from a scope (read OpFacts::region)" "$code"; return
  fi
}

# A scope's components found by its separator: scope.find('/'), scope.rfind('/', ...).
scope_split="scope[a-z_]*(\\(\\))?\\.r?find\\('/'"
# grep finds the candidate lines (any of the words); check_line decides on the code part.
candidates='r?find\(./.|scope_has_component|scope_block|decoder_layer_scope|k(Backward|Remat)Scope|"(decoder/|/?backward"|/?remat"|mu\.|nu\.|count"|loss|gradients/|optimizer)'
while IFS= read -r -d '' file; do
  while IFS= read -r hit; do
    line=${hit%%:*}
    text=${hit#*:}
    code=${text%%//*}
    check_line "$file" "$line" "$code"
  done < <(grep -nE "$candidates" "$file")
done < <(find "$@" -type f \( -name '*.cpp' -o -name '*.h' \) -print0 | sort -z)

if [ "$found" -ne 0 ]; then
  echo "lint_scope_strings: compiler logic reads scope strings or names; use the IR's facts" >&2
  exit 1
fi
exit 0
