// CUDA kernels of fastsort.h: one thread per row running the same row functions as the CPU kernels (sequential
// PAV, as torchsort's CUDA kernel); the rows are sorted by the caller (torch.sort(stable=True) of sgn x, a
// segmented radix sort on the GPU) and read through perm, so no sorted copy is stored. Statistics in a
// caller-allocated workspace of B n doubles (per row, indexed by block start).
//
// Not yet verified on a GPU (auto does not pick it before `python -m relaxops selftest` passes). A parallel PAV
// for long rows (each thread pools a chunk, then adjacent chunks' boundary blocks are merged pairwise in a tree:
// only the blocks at a boundary can violate the order) is the next step where B is small and n large.
#include "../common/cuda_utils.cuh"
#include "fastsort.h"

namespace relaxops {
namespace {

constexpr int kThreads = 128;

// y_j = sgn x[perm[j]], read through the permutation.
template <typename T>
struct SortedRow {
  const T* x;
  const int64_t* perm;
  double sgn;
  __device__ double operator[](int64_t j) const { return sgn * double(x[perm[j]]); }
};

template <typename T>
__global__ void forward_kernel(FastSortParams P, int64_t B, int64_t n, const T* x, const int64_t* perm, T* out,
                               int32_t* block, double* workspace) {
  for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < B; b += int64_t(gridDim.x) * blockDim.x) {
    const T* xb = x + b * n;
    bool nan = false;
    for (int64_t c = 0; c < n; ++c) nan |= xb[c] != xb[c];
    const SortedRow<T> y{xb, perm + b * n, P.descending ? -1.0 : 1.0};
    fastsort_forward_row(P, n, nan, y, perm + b * n, out + b * n, block + b * n, workspace + b * n);
  }
}

// A row whose perm or block is malformed gets a NaN gradient (the Python op checks the index ranges first; a
// partition check here would need a host synchronisation to throw).
template <typename T>
__global__ void backward_kernel(FastSortParams P, int64_t B, int64_t n, const T* grad_out, const T* out, const T* x,
                                const int64_t* perm, const int32_t* block, T* grad_x) {
  for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < B; b += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = b * n;
    if (fastsort_valid_row(n, perm + o, block + o))
      fastsort_backward_row(P, n, grad_out + o, out + o, x + o, perm + o, block + o, grad_x + o);
    else
      for (int64_t c = 0; c < n; ++c) grad_x[o + c] = T(NAN);
  }
}

}  // namespace

template <typename T>
void fastsort_forward_cuda(const FastSortParams& P, int64_t B, int64_t n, const T* x, const int64_t* perm, T* out,
                           int32_t* block, double* workspace, std::uintptr_t stream) {
  fastsort_check_params(P, B, n);
  if (B == 0) return;
  DeviceGuard guard(x);
  forward_kernel<T><<<grid_blocks((B + kThreads - 1) / kThreads), kThreads, 0, as_stream(stream)>>>(
      P, B, n, x, perm, out, block, workspace);
  check_launch("fastsort_forward");
}

template <typename T>
void fastsort_backward_cuda(const FastSortParams& P, int64_t B, int64_t n, const T* grad_out, const T* out,
                            const T* x, const int64_t* perm, const int32_t* block, T* grad_x, std::uintptr_t stream) {
  fastsort_check_params(P, B, n);
  if (B == 0) return;
  DeviceGuard guard(x);
  backward_kernel<T><<<grid_blocks((B + kThreads - 1) / kThreads), kThreads, 0, as_stream(stream)>>>(
      P, B, n, grad_out, out, x, perm, block, grad_x);
  check_launch("fastsort_backward");
}

#define RELAXOPS_INSTANTIATE_FASTSORT_CUDA(T)                                                                   \
  template void fastsort_forward_cuda<T>(const FastSortParams&, int64_t, int64_t, const T*, const int64_t*, T*, \
                                         int32_t*, double*, std::uintptr_t);                                    \
  template void fastsort_backward_cuda<T>(const FastSortParams&, int64_t, int64_t, const T*, const T*, const T*, \
                                          const int64_t*, const int32_t*, T*, std::uintptr_t);

RELAXOPS_INSTANTIATE_FASTSORT_CUDA(float)
RELAXOPS_INSTANTIATE_FASTSORT_CUDA(double)

}  // namespace relaxops
