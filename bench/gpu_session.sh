#!/usr/bin/env bash
# A GPU window of 15 minutes (the machine's start included) in two commands on a copy of the repository with no
# network; everything lands in one folder of at most 8 files.
#
#   bash bench/gpu_session.sh --part 1|2 [--out DIR] [--dry-run]
#
#   --part 1  (about 6 minutes) relaxops' compiled modules for this GPU, the originals' CUDA builds in the
#             background, `selftest` of every (family, backend) pair in parallel children (each child compiles
#             its own Triton kernels: 16 cores compile what takes many minutes serially; a child stopped at its
#             timeout names its case), then the headline benchmarks against the originals (a timeout each).
#   --part 2  (about 4 minutes, optional) the GPU tests (`pytest -m gpu`, parallel, a timeout per test, the
#             CUDA tests first; each outcome lands in tests.log as it happens) and compute-sanitizer's memcheck
#             on the kernels with raw indexing (render, render_buffers, fastsort, sortnet).
#   --out DIR output folder (default: $OUT if set, else gpu-session-out)
#   --dry-run on a machine without a GPU: the same steps on CPU tensors (Triton through its interpreter, a few
#             families, short benchmarks), to know the script works before a GPU window is spent on it.
#
# Prepare here: `python bench/fetch_gpu_deps.py` fills .whl/ (git-ignored; the device call carries it) with the
# originals, and `python bench/fetch_gpu_deps.py --relaxops PYTHON3.12` adds .whl/relaxops/, a wheel of relaxops
# for that interpreter with the CUDA module for sm_90 (the GPU machine's Python is 3.12; nvcc here, no GPU).
# Without a wheel for its Python the modules are built there (about 2 minutes).
set -uo pipefail
cd "$(dirname "$0")/.."

out="${OUT:-gpu-session-out}"
part=""
dry=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --part) part="$2"; shift 2 ;;
    --dry-run) dry=1; shift ;;
    *) echo "gpu_session.sh: unknown option $1 (see the header of this script)" >&2; exit 2 ;;
  esac
done
case "$part" in 1|2) ;; *) echo "gpu_session.sh: --part must be 1 or 2" >&2; exit 2 ;; esac
mkdir -p "$out"
out="$(cd "$out" && pwd)"
exec > >(tee -a "$out/session.log") 2>&1

py="${PYTHON:-python3}"
SITE="${SITE:-/tmp/relaxops-site}"
export PYTHONPATH="$PWD/python:$SITE${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 RELAXOPS_CACHE_DIR="$out" TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-/tmp/relaxops-triton}"
t0=$(date +%s)
failed=()

step() { echo; echo "== +$(( $(date +%s) - t0 ))s $*"; }
# run NAME CMD...: run a step, record its exit status, go on either way (one failure must not hide the rest).
run() {
  local name="$1"; shift
  step "$name: $*"
  "$@"
  local rc=$?
  echo "-- $name: exit $rc (+$(( $(date +%s) - t0 ))s)"
  [ $rc -eq 0 ] || failed+=("$name ($rc)")
  return 0
}

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>/dev/null || echo "(no nvidia-smi)"
"$py" -c "import sys, torch, importlib.util as u; print(sys.version.split()[0], 'torch', torch.__version__, \
'cuda', torch.version.cuda, 'triton', u.find_spec('triton') and __import__('triton').__version__, \
'gpu', torch.cuda.is_available() and torch.cuda.get_device_name(0))"
if [ $dry -eq 0 ] && ! "$py" -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
  echo "gpu_session.sh: torch sees no CUDA GPU here; use --dry-run on a machine without one" >&2
  exit 2
fi
if [ $dry -eq 1 ]; then
  export TRITON_INTERPRET=1
  device=cpu
else
  export CUDA_HOME="${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")}"
  device=cuda
fi

# relaxops' compiled modules: a wheel for this Python from .whl/ (its .so files go beside the sources, which
# stay those of this checkout), else a build for this GPU
tag="$("$py" -c "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')")"
so_ok() { "$py" -c "import relaxops._C${1:+, relaxops._cuda}" 2>/dev/null; }
if ! so_ok "$([ $dry -eq 0 ] && echo cuda)"; then
  wheel="$(ls .whl/relaxops/relaxops-*-"$tag"-*.whl 2>/dev/null | head -1)"
  if [ -n "$wheel" ]; then
    run unpack "$py" -c "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); \
[z.extract(n, 'python') for n in z.namelist() if n.endswith('.so') or n.endswith('_build_info.py')]" "$wheel"
  fi
  if ! so_ok "$([ $dry -eq 0 ] && echo cuda)"; then
    arch="$("$py" -c "import torch; a, b = torch.cuda.get_device_capability(); print(f'{a}{b}')" 2>/dev/null)"
    run build env RELAXOPS_CUDA="$([ $dry -eq 0 ] && echo ON || echo OFF)" \
      CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES=${arch:-90}" "$py" -m pip install -q --no-build-isolation --no-deps \
      --no-compile --target "$SITE" -C build-dir=build/session .
  fi
fi
run info "$py" -m relaxops info

if [ "$part" = 1 ]; then
  # The originals' CUDA builds, beside the selftest (difflogic, gendr, torchsort need CUDA_HOME and a CUDA torch)
  if [ $dry -eq 0 ] && [ -d .whl/sdist ]; then
    (
      "$py" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" .whl/*.whl 2>&1
      # at the lowest priority: the selftest comes first; they take the cores its children leave idle
      for sdist in .whl/sdist/*.tar.gz; do
        (
          MAX_JOBS=4 nice -n 19 timeout 400 "$py" -m pip install -q --no-index --no-deps --no-build-isolation \
            --no-compile --target "$SITE" "$sdist" >"/tmp/original-$(basename "$sdist").log" 2>&1
          echo "$(basename "$sdist"): exit $? (+$(( $(date +%s) - t0 ))s)"
        ) &
      done
      wait
      for f in /tmp/original-*.log; do echo "$f:"; grep -m8 -iE "error|warning: .*deprecat" "$f"; tail -c 300 "$f"; done
    ) >"$out/originals.log" 2>&1 &
    originals=$!
    mkdir -p /tmp/src && tar -xzf .whl/sdist/difflogic-0.1.0.tar.gz -C /tmp/src
    export DIFFLOGIC_SRC=/tmp/src/difflogic-0.1.0  # difflogic's Python formulation, for the harness
  fi
  if [ $dry -eq 1 ]; then
    run selftest "$py" -m relaxops selftest --device cpu --family logic --family fastsort --backend triton \
      --jobs 4 --shards 2 --deadline 120
  else
    # the selftest's cases (--full adds the benchmark sizes, whose float64 references on the CPU take minutes);
    # CUDA pairs first, then the Triton ones, which compile their kernels; nothing runs past the deadline
    run selftest env CUDA_LAUNCH_BLOCKING=1 "$py" -m relaxops selftest ${SELFTEST_FULL:+--full} --jobs 16 \
      --shards 2 --timeout 170 --deadline "${SELFTEST_DEADLINE:-180}"
    [ -n "${originals:-}" ] && { wait "$originals"; cat "$out/originals.log"; }
  fi
  # the headline cases, each bounded, into one results file (HEADLINES: ';'-separated filters replace them)
  if [ $dry -eq 1 ]; then
    IFS=';' read -ra headlines <<< "${HEADLINES:-sortnet.sort odd_even n=128 B=16 P}"
  else
    IFS=';' read -ra headlines <<< "${HEADLINES:-sortnet.sort bitonic n=1024 B=128 P;topk.loss;logic.layer N=8000;\
logic.packed mnist_small B=65536;ico81920 256^2 B=8 uniform/probabilistic fwd+bwd;fastsort.soft_rank}"
  fi
  results=""
  for h in "${headlines[@]}"; do
    where=(--out "$out")
    [ -n "$results" ] && where=(--resume "$results")
    run "bench $h" timeout "${BENCH_TIMEOUT:-40}" "$py" bench/run.py --device "$device" --full --filter "$h" \
      --budget 0.25 "${where[@]}"
    results="$(ls "$out"/2*.json 2>/dev/null | head -1)"
  done
else
  if [ $dry -eq 1 ]; then
    run tests timeout 150 "$py" -m pytest -q -p no:cacheprovider tests/test_selftest.py --junitxml="$out/tests.xml"
  else
    # every outcome lands in tests.log as it happens; SIGINT at the limit lets pytest write its summary and XML;
    # one CPU thread per worker (12 workers with a thread per core each made the CPU references crawl); the CUDA
    # tests first, then the Triton ones, which compile kernels
    export OMP_NUM_THREADS=1 RELAXOPS_TEST_LOG="$out/tests.log"
    run tests-cuda timeout -s INT -k 15 "${TESTS_CUDA_S:-90}" "$py" -m pytest -q -p no:cacheprovider -m gpu \
      -k "not triton" -n 14 --timeout 60 -rf --tb=line tests --junitxml="$out/tests-cuda.xml"
    run tests-triton timeout -s INT -k 15 "${TESTS_TRITON_S:-90}" "$py" -m pytest -q -p no:cacheprovider -m gpu \
      -k triton -n 14 --timeout 60 -rf --tb=line tests --junitxml="$out/tests-triton.xml"
    unset OMP_NUM_THREADS
    # memcheck: out-of-bounds and misaligned accesses of the raw-indexing CUDA kernels, on small shapes
    run memcheck timeout 60 compute-sanitizer --tool memcheck --error-exitcode 1 "$py" -c "
import torch, relaxops
from relaxops.render import icosphere, rasterize
v, f = icosphere(1); fv = (v[f] * 0.6).unsqueeze(0).cuda().requires_grad_(); fv.data[..., 2] += 3
tex = torch.rand(1, f.shape[0], 1, 3, device='cuda', requires_grad=True)
rasterize(fv, tex, image_size=33, backend='cuda').sum().backward()
from relaxops.render import render_buffers
uv = torch.rand(1, f.shape[0], 3, 2, device='cuda', requires_grad=True)
img = torch.rand(1, 40, 24, 3, device='cuda', requires_grad=True)
for aggr in ('softmax', 'hard'):
    bf = render_buffers(fv, fv.detach().view(1, -1, 3, 3), face_uvs=uv, texture=img, image_size=33,
                        aggr_func=aggr, perspective_correct=True, backend='cuda')
    (bf.depth.sum() + bf.attributes.sum() + bf.texture.sum()).backward()
x = torch.randn(3, 1001, device='cuda', dtype=torch.float64, requires_grad=True)
relaxops.soft_rank(x, backend='cuda').sum().backward(); relaxops.sort(x, backend='cuda')[0].sum().backward()
torch.cuda.synchronize(); print('memcheck cases ran')"
  fi
fi

step "summary"
ls -la "$out"
if [ ${#failed[@]} -gt 0 ]; then
  printf 'failed: %s\n' "${failed[@]}"
  exit 1
fi
echo "all steps passed"
