#!/usr/bin/env bash
# Installs the Debian packages Precast builds and tests with. Idempotent: only missing
# packages are installed, so a second run changes nothing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  llvm-19-dev llvm-19-tools lld-19 libzstd-dev
  libyaml-cpp-dev libeigen3-dev libfmt-dev libssl-dev
  libboost-program-options-dev libboost-serialization-dev
  libopenmpi-dev openmpi-bin libopenblas-dev
  libgtest-dev libbenchmark-dev
  python3 python3-numpy python3-torch
  libprotobuf-dev protobuf-compiler python3-protobuf
  chromium
  fortunes
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
