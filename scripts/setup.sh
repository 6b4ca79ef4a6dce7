#!/usr/bin/env bash
# Install the Debian packages that dtrain needs, by purpose.  Idempotent and
# silent when everything is present: apt (and root) only when something is
# missing.  Debian/apt only (elsewhere `--build` still recognises the build
# tools and libraries, see below).
#
#   scripts/setup.sh --build   what `make` and `make install` need: compiler,
#                              cmake, pkg-config and the libraries libdtrain
#                              links (libssl, libcjson, OpenBLAS, zlib,
#                              oneDNN, and ISA-L for fast checkpoint CRCs)
#   scripts/setup.sh --test    (the default) also what `make test` and
#                              `make demo` need: the Fashion-MNIST and
#                              fortunes data, PyTorch for the cross-check
#                              (python3-torch, about 180 MB), python3,
#                              iproute2, procps, OpenMPI (the MPI backend's
#                              tests; also the peer of bench/comm)
#   scripts/setup.sh --bench   also the tools of bench/comm (iptables and
#                              libnetfilter-queue for --delay)
#   scripts/setup.sh --browser only a headless browser (Debian's chromium and
#                              a font) for observability/dashboard-browser,
#                              the test that renders dtrun --monitor's page
#   scripts/setup.sh --slurm   only Slurm (slurm-wlm: slurmctld, slurmd,
#                              sbatch, srun) and munge, for
#                              scripts/slurm-cluster.sh and the test
#                              netns/slurm-cluster-4-nodes
#   --check                    with any of them: only say what is missing
#                              (exit 1 when something is), never call apt
#
# A package counts as present when dpkg says it is installed or, for the build
# packages, when what it provides is found (the command on PATH, or the
# library through pkg-config), so `make` also works where the compiler and
# libraries came from elsewhere.
set -euo pipefail

# package:probe, probe = cmd:NAME (a command on PATH), pc:NAME (a pkg-config
# module), h:NAME (a header in /usr/include or /usr/local/include) or nothing
# (dpkg only).
BUILD_PACKAGES=(
    build-essential:cmd:cc            # compiler and make
    cmake:cmd:cmake
    pkg-config:cmd:pkg-config
    libssl-dev:pc:libcrypto           # HMAC-SHA256 for the job-token handshake
    libcjson-dev:pc:libcjson          # dtbench --json, configs, manifests
    libopenblas-dev:pc:openblas       # GEMM (cblas_sgemm)
    zlib1g-dev:pc:zlib                # .gz datasets, checkpoint CRC-32
    libisal-dev:pc:libisal            # ISA-L: fast checkpoint CRC-32 (optional: without it zlib computes them)
    libdnnl-dev:h:dnnl.h              # oneDNN: conv2d's kernels (optional: without it conv2d uses im2col + OpenBLAS)
)
TEST_PACKAGES=(
    dataset-fashion-mnist             # the MLP/CNN data (idx .gz files)
    fortunes                          # the byte-level GPT's default text (make demo); textclf's categories
    python3-torch                     # the PyTorch cross-check test and training benchmarks
    python3                           # small helpers in the test scripts
    iproute2                          # ip netns / tc / ss for the multi-host tests
    procps                            # ps/kill used by the tests
    openmpi-bin:cmd:mpirun            # the MPI backend's tests (DT_BACKEND=mpi under mpirun) and launch under mpirun
    libopenmpi-dev:cmd:mpicc          # builds the MPI backend (without it DT_BACKEND=mpi is refused, its tests skip)
)
BROWSER_PACKAGES=(chromium:cmd:chromium fonts-dejavu-core)
SLURM_PACKAGES=(slurm-wlm:cmd:slurmd munge:cmd:munged)
BENCH_PACKAGES=(iptables libnetfilter-queue-dev)

mode=test check=0
for arg in "$@"; do
    case $arg in
        --build|--test|--bench|--browser|--slurm) mode=${arg#--} ;;
        --check) check=1 ;;
        -h|--help) sed -n '2,/^set -e/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "setup: unknown option '$arg' (--build, --test, --bench, --browser, --slurm, --check)" >&2; exit 2 ;;
    esac
done

wanted=("${BUILD_PACKAGES[@]}")
[ "$mode" != build ] && wanted+=("${TEST_PACKAGES[@]}")
[ "$mode" = bench ] && wanted+=("${BENCH_PACKAGES[@]}")
[ "$mode" = browser ] && wanted=("${BROWSER_PACKAGES[@]}")
[ "$mode" = slurm ] && wanted=("${SLURM_PACKAGES[@]}")

installed() { # PACKAGE [KIND NAME]
    if command -v dpkg-query >/dev/null &&
        dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; then
        return 0
    fi
    case ${2:-} in
        cmd) command -v "$3" >/dev/null ;;
        pc) command -v pkg-config >/dev/null && pkg-config --exists "$3" ;;
        h) [ -e "/usr/include/$3" ] || [ -e "/usr/local/include/$3" ] ;;
        *) return 1 ;;
    esac
}

missing=()
for entry in "${wanted[@]}"; do
    IFS=: read -r pkg kind name <<<"$entry"
    installed "$pkg" "$kind" "$name" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ $check = 1 ]; then
    echo "setup: missing for --$mode: ${missing[*]} (scripts/setup.sh --$mode installs them)" >&2
    exit 1
fi
echo "setup: installing ${missing[*]} (for --$mode)"
command -v apt-get >/dev/null || { echo "setup: no apt-get here; install these yourself: ${missing[*]}" >&2; exit 1; }
SUDO=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
