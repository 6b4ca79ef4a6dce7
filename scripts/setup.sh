#!/usr/bin/env bash
# Install the Debian packages that dtrain's build, tests and benchmarks need.
# Idempotent and silent when everything is present; `make demo` and
# `make test` run it first.  Debian/apt only.
#
#   scripts/setup.sh           what build, tests and demo need
#   scripts/setup.sh --bench   also the peers and tools of bench/comm (OpenMPI,
#                              iptables and libnetfilter-queue for --delay)
set -euo pipefail

PACKAGES=(
    build-essential cmake pkg-config   # compiler and build
    libssl-dev                         # HMAC-SHA256 for the job-token handshake (libcrypto)
    libcjson-dev                       # dtbench --json
    libopenblas-dev                    # GEMM (cblas_sgemm)
    zlib1g-dev                         # .gz datasets
    dataset-fashion-mnist              # the MLP/CNN data (idx .gz files)
    fortunes                           # the default text for the byte-level GPT
    python3-torch                      # the PyTorch cross-check test and training benchmarks
    iproute2                           # ip netns / tc for the multi-host tests
    python3                            # small helpers in the test scripts
    procps                             # ps/kill used by the tests
)

case ${1:-} in
    --bench) PACKAGES+=(openmpi-bin libopenmpi-dev iptables libnetfilter-queue-dev) ;;
    "") ;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup: unknown option '$1' (use --bench or nothing)" >&2; exit 2 ;;
esac

missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
