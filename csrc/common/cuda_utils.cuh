// CUDA launch helpers shared by the families' .cu files: error checks, device guard, stream and grid.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace relaxops {

constexpr int64_t kMaxGrid = 1 << 20;  // kernels loop over work items beyond this many blocks

// The sum of `v` over the block (a power-of-two blockDim; `sh` holds blockDim values); every thread gets it.
template <typename T>
__device__ T block_sum(T v, T* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  const T out = sh[0];
  __syncthreads();
  return out;
}

inline void check_launch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("relaxops: CUDA kernel ") + kernel + " failed: " + cudaGetErrorString(e));
}

inline void check_call(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    cudaGetLastError();  // reset the (non-sticky) error so later calls do not report it
    throw std::runtime_error(std::string("relaxops: ") + what + " failed: " + cudaGetErrorString(e));
  }
}

// Makes the device owning `p` current for the launch (torch's current device may differ) and restores.
class DeviceGuard {
 public:
  explicit DeviceGuard(const void* p) {
    if (p == nullptr) return;
    cudaPointerAttributes attr;
    if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
      cudaGetLastError();
      return;
    }
    if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) return;
    int cur = 0;
    check_call(cudaGetDevice(&cur), "cudaGetDevice");
    if (cur != attr.device) {
      check_call(cudaSetDevice(attr.device), "cudaSetDevice");
      prev_ = cur;
    }
  }
  ~DeviceGuard() {
    if (prev_ >= 0) cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
};

inline cudaStream_t as_stream(std::uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }

inline int grid_blocks(int64_t items) { return int(std::max<int64_t>(1, std::min<int64_t>(items, kMaxGrid))); }

}  // namespace relaxops
