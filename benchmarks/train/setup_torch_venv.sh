#!/usr/bin/env bash
# Creates, or brings up to date, the virtual environment with a current PyTorch 2.x from PyPI that
# benchmarks/train/throughput.sh runs its PyTorch 2.x peers in (eager with
# scaled_dot_product_attention, and torch.compile). Benchmarks only: the build, the tests and CI
# never use it, and it lives outside the repository.
#
# Idempotent: an existing environment that already has the pinned torch is left as it is. PyPI's
# Linux x86-64 torch wheel is the CUDA build (it pulls the nvidia-* runtime wheels, a few GB);
# the peers run it on the CPU only. torch.compile (Inductor) also needs a C++ compiler (g++) and
# Python's headers (Debian: python3-dev) on the machine.
#
# Usage: benchmarks/train/setup_torch_venv.sh [VENV_DIR]   (default /opt/precast-bench-venv)
# Environment: TORCH_VERSION, NUMPY_VERSION (defaults below; numpy because
# tests/reference/torch_reference.py, which the peer imports, uses it), BASE_PYTHON (default
# /usr/bin/python3).
set -euo pipefail
venv=${1:-/opt/precast-bench-venv}
version=${TORCH_VERSION:-2.15.0}
numpy_version=${NUMPY_VERSION:-2.4.6}
base_python=${BASE_PYTHON:-/usr/bin/python3}

if [ ! -x "$venv/bin/python" ]; then
  echo "creating $venv with $("$base_python" --version)" >&2
  "$base_python" -m venv "$venv"
fi
have=$("$venv/bin/python" -c 'import torch; print(torch.__version__)' 2>/dev/null || true)
have_numpy=$("$venv/bin/python" -c 'import numpy; print(numpy.__version__)' 2>/dev/null || true)
if [ "${have%%+*}" != "$version" ] || [ "$have_numpy" != "$numpy_version" ]; then
  echo "installing torch==$version numpy==$numpy_version into $venv" \
    "(had: torch ${have:-none}, numpy ${have_numpy:-none})" >&2
  "$venv/bin/python" -m pip install --no-input "torch==$version" "numpy==$numpy_version"
fi
"$venv/bin/python" - <<'PY'
import platform
import numpy
import torch
print(f"torch {torch.__version__} (pinned), numpy {numpy.__version__}, "
      f"python {platform.python_version()}, "
      f"cpu capability {torch.backends.cpu.get_cpu_capability()}, "
      f"mkldnn {torch.backends.mkldnn.is_available()}")
PY
echo "python for throughput.sh's PyTorch 2.x peers: TORCH2_PYTHON=$venv/bin/python" >&2
