#!/usr/bin/env bash
# Installs the CUDA compiler and static runtime into a manylinux_2_28 (AlmaLinux 8) container for the CUDA
# wheels (tools/build_wheel.sh --cibuildwheel --variant cu12 runs it as cibuildwheel's before-all step).
#   bash tools/install_cuda_manylinux.sh 12    # CUDA 12.8: sm_70-sm_90 and PTX; drivers >= 525.60.13 (SASS)
#   bash tools/install_cuda_manylinux.sh 13    # CUDA 13.0: sm_75 and newer
set -euo pipefail
case "${1:-}" in
  12) version=12-8 ;;
  13) version=13-0 ;;
  *) echo "install_cuda_manylinux.sh: the CUDA major version must be 12 or 13, got '${1:-}'" >&2; exit 2 ;;
esac
arch="$(uname -m)"
[ "$arch" = aarch64 ] && arch=sbsa  # NVIDIA's repository name for 64-bit ARM servers
dnf install -y -q dnf-plugins-core
dnf config-manager --add-repo "https://developer.download.nvidia.com/compute/cuda/repos/rhel8/$arch/cuda-rhel8.repo"
dnf install -y -q "cuda-nvcc-$version" "cuda-cudart-devel-$version"
ln -sfn "/usr/local/cuda-${version/-/.}" /usr/local/cuda
/usr/local/cuda/bin/nvcc --version
