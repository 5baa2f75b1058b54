#!/usr/bin/env bash
# Builds the XLA reference environment (not part of the Precast build or CI).
# Creates a Python 3.12 venv OUTSIDE the repo with pinned jax[tpu] (brings libtpu) and MaxText
# from PyPI. Idempotent: re-running only installs what is missing. Prints versions at the end.
#
#   benchmarks/xla_reference/setup.sh            # venv at /opt/xla-ref-venv
#   VENV=/some/where benchmarks/xla_reference/setup.sh
set -euo pipefail

VENV="${VENV:-/opt/xla-ref-venv}"
PY312="${PY312:-}"
JAX_VERSION="${JAX_VERSION:-0.11.2}"
MAXTEXT_VERSION="${MAXTEXT_VERSION:-0.2.5}"
LIBTPU_VERSION="${LIBTPU_VERSION:-0.0.48.1}"   # jax[tpu] 0.11.2 asks for libtpu==0.0.48.*

if [[ -z "$PY312" ]]; then
  for c in "$(command -v python3.12 || true)" "$HOME"/.pyenv/versions/3.12*/bin/python3.12; do
    if [[ -n "$c" && -x "$c" ]]; then PY312="$c"; break; fi
  done
fi
[[ -x "$PY312" ]] || { echo "need Python 3.12 (set PY312=/path/to/python3.12)" >&2; exit 1; }

if [[ ! -x "$VENV/bin/python" ]]; then
  "$PY312" -m venv "$VENV"
  "$VENV/bin/pip" install -q -U pip
fi

# jax/jaxlib are pinned through a constraints file so that no other package (tokamax, flax, ...)
# can drag them to a newer release.
CONSTRAINTS="$VENV/xla-ref-constraints.txt"
cat > "$CONSTRAINTS" <<EOC
jax==$JAX_VERSION
jaxlib==$JAX_VERSION
libtpu==$LIBTPU_VERSION
maxtext==$MAXTEXT_VERSION
EOC

STAMP="$VENV/.xla-ref-installed-$JAX_VERSION-$LIBTPU_VERSION-$MAXTEXT_VERSION"
if [[ ! -f "$STAMP" ]]; then
  nice -n 19 "$VENV/bin/pip" install -c "$CONSTRAINTS" \
    "jax[tpu]==$JAX_VERSION" "maxtext[tpu]==$MAXTEXT_VERSION"
  touch "$STAMP"
fi

"$VENV/bin/python" - <<'EOP'
import importlib.metadata as md
for p in ("jax", "jaxlib", "libtpu", "maxtext", "flax", "tokamax", "optax", "orbax-checkpoint"):
    try:
        print(f"{p}=={md.version(p)}")
    except md.PackageNotFoundError:
        print(f"{p}: not installed")
EOP
