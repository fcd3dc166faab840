#!/usr/bin/env bash
# Installs everything chorus builds, tests and benchmarks with, from Debian 12
# packages by name. Run as root (or with sudo). Skips apt entirely when every
# package is already there, so it is cheap to run before every build.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git      # toolchain (g++ 12, CMake 3.25)
  libfmt-dev                                # log and error formatting
  libssl-dev                                # HMAC-SHA256: the job secret (libcrypto)
  libucx-dev ucx-utils                      # UCX transport, ucx_perftest baseline
  libopenmpi-dev openmpi-bin                # MPI bootstrap, PMPI library, MPI baseline
  libgtest-dev libgmock-dev                 # tests
  libbenchmark-dev                          # micro-benchmarks
  python3                                   # benchmark drivers (bench/*.py)
  python3-matplotlib                        # bench/plot_perf: busbw and latency plots
  python3-dev pybind11-dev python3-numpy    # the Python module (chorus._chorus)
  python3-torch libtorch-dev                # the torch.distributed backend (chorus._torch)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
