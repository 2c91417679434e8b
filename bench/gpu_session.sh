#!/usr/bin/env bash
# One command for a session on a GPU machine (a copy of the repository, no network): build relaxops with
# relaxops._cuda for this GPU, run the GPU tests and the whole suite with CUDA tensors, verify every GPU kernel
# (`python -m relaxops selftest --full`), and run the GPU benchmark cases against the originals. The log, the
# JUnit XML files, the selftest results and the benchmark JSON all land in one folder.
#
#   bash bench/gpu_session.sh [--out DIR] [--phase all|test|bench] [--dry-run]
#
#   --out DIR   output folder (default: $OUT if set, else gpu-session-out)
#   --phase     test: build, tests, selftest; bench: build, originals, benchmarks; all (default): both. A lease
#               of 30 minutes fits one call per phase (the build is incremental when build/ is carried).
#   --dry-run   on a machine without a GPU: every step but the GPU ones (CPU-only build, the CPU tests of the
#               selftest mechanism, the selftest through the Triton interpreter, a quick CPU benchmark), to know
#               the script works before a lease is spent on it.
#
# Packages the GPU machine lacks: run `python bench/fetch_gpu_deps.py` here first; it fills .whl/ (git-ignored),
# which the device call carries (`carry: [".whl"]`). Wheels are installed into $SITE, sdists of the originals
# that build CUDA kernels (difflogic, gendr, torchsort) are built there with the machine's nvcc.
set -uo pipefail
cd "$(dirname "$0")/.."

out="${OUT:-gpu-session-out}"
phase=all
dry=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --phase) phase="$2"; shift 2 ;;
    --dry-run) dry=1; shift ;;
    *) echo "gpu_session.sh: unknown option $1 (see the header of this script)" >&2; exit 2 ;;
  esac
done
case "$phase" in all|test|bench) ;; *) echo "gpu_session.sh: --phase must be all, test or bench" >&2; exit 2 ;; esac
mkdir -p "$out"
out="$(cd "$out" && pwd)"
exec > >(tee -a "$out/session.log") 2>&1

py="${PYTHON:-python3}"
SITE="${SITE:-/tmp/relaxops-site}"
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 RELAXOPS_CACHE_DIR="$out"
failed=()

step() { echo; echo "== $(date +%T) $*"; }
# run NAME CMD...: run a step, record its exit status, go on either way (one failure must not hide the rest).
run() {
  local name="$1"; shift
  step "$name: $*"
  "$@"
  local rc=$?
  echo "-- $name: exit $rc"
  [ $rc -eq 0 ] || failed+=("$name ($rc)")
  return 0
}

step "machine"
nvidia-smi 2>/dev/null || echo "(no nvidia-smi)"
"$py" -c "import sys, torch; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, \
'gpu', torch.cuda.is_available() and torch.cuda.get_device_name(0))"
if [ $dry -eq 0 ] && ! "$py" -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
  echo "gpu_session.sh: torch sees no CUDA GPU here; use --dry-run on a machine without one" >&2
  exit 2
fi

if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  run wheels "$py" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" .whl/*.whl
fi

# Build relaxops itself (no build isolation: the machine has scikit-build-core, pybind11, cmake and ninja but no
# network). On the GPU, _cuda is built for this device's architecture only.
if [ $dry -eq 1 ]; then
  build_env=(env RELAXOPS_CUDA=OFF)
  export TRITON_INTERPRET=1
else
  arch="$("$py" -c "import torch; a, b = torch.cuda.get_device_capability(); print(f'{a}{b}')")"
  build_env=(env RELAXOPS_CUDA=ON "CMAKE_ARGS=-DCMAKE_CUDA_ARCHITECTURES=$arch")
fi
run build "${build_env[@]}" "$py" -m pip install -q --no-build-isolation --no-deps --no-compile --upgrade \
  --target "$SITE" .
run info "$py" -m relaxops info

if [ "$phase" != bench ]; then
  # The suite covers CUDA tensors wherever torch sees a GPU (the backend/device fixtures); -m gpu first, for a
  # first signal, then everything.
  if [ $dry -eq 1 ]; then
    run tests-mechanism "$py" -m pytest -q -p no:cacheprovider tests/test_selftest.py --junitxml="$out/tests.xml"
    run selftest "$py" -m relaxops selftest --device cpu --family logic --backend triton
  else
    run tests-gpu "$py" -m pytest -q -p no:cacheprovider -m gpu tests --junitxml="$out/tests-gpu.xml"
    run tests-all "$py" -m pytest -q -p no:cacheprovider tests --junitxml="$out/tests.xml"
    run selftest "$py" -m relaxops selftest --full
  fi
fi

if [ "$phase" != test ]; then
  if [ $dry -eq 0 ] && [ -d .whl/sdist ]; then
    # The originals' CUDA builds (torchsort and difflogic need CUDA_HOME; each failure is recorded, not fatal).
    export CUDA_HOME="${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")}"
    for sdist in .whl/sdist/*.tar.gz; do
      run "original $(basename "$sdist" .tar.gz)" "$py" -m pip install -q --no-index --no-deps --no-build-isolation \
        --no-compile --target "$SITE" "$sdist"
    done
    # difflogic's Python formulation, for the harness (DIFFLOGIC_SRC; the machine cannot download the sdist)
    mkdir -p "$out/src" && tar -xzf .whl/sdist/difflogic-0.1.0.tar.gz -C "$out/src"
    export DIFFLOGIC_SRC="$out/src/difflogic-0.1.0"
  fi
  if [ $dry -eq 1 ]; then
    run bench "$py" bench/run.py --device cpu --family sortnet --filter odd_even --budget 0.05 --out "$out"
  else
    run bench "$py" bench/run.py --device cuda --out "$out"
  fi
fi

step "summary"
ls -la "$out"
if [ ${#failed[@]} -gt 0 ]; then
  printf 'failed: %s\n' "${failed[@]}"
  exit 1
fi
echo "all steps passed"
