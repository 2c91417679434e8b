// CUDA kernels of fastsort.h. The rows are sorted by the caller (torch.sort(stable=True) of sgn x, a segmented
// radix sort on the GPU) and read through perm, so no sorted copy is stored. Statistics in a caller-allocated
// workspace of B n doubles (per row, indexed by block start).
//
// Short rows (n < kLongRow): one thread per row running the same row functions as the CPU kernels (sequential
// PAV, as torchsort's CUDA kernel). Long rows: one block per row of long_threads(n) threads (a power of two from 32
// to kLongThreads, chunks of >= 4 positions), the chunked PAV of fastsort.h (each thread pools a chunk of the
// sorted row, then the chunks' boundary blocks are merged pairwise in log2(threads) rounds; outputs and block[]
// written per chunk in parallel), and the chunked backward (block sums per chunk, crossing blocks combined in
// chunk order: deterministic). A thread per row reads its row serially and uncoalesced: on an H200 it took 3x the
// time of the block-per-row kernels on 5x longer rows (docs/gpu.md), so rows take blocks from n = 128.
//
// Padded rows (lengths): every kernel runs on the row's first L_b positions (perm's real part, fastsort.h), and
// the same threads write the pads [L_b, n).
//
// Not yet verified on a GPU (auto does not pick it before `python -m relaxops selftest` passes).
#include "../common/cuda_utils.cuh"
#include "fastsort.h"

namespace relaxops {
namespace {

constexpr int kThreads = 128;
constexpr int64_t kLongRow = 128;
constexpr int kLongThreads = 256;

// Threads (chunks) per block for a long row of n: the largest power of two in [32, kLongThreads] whose chunks keep
// >= 4 positions each (n >= 128 = 4 * 32 from kLongRow on).
int long_threads(int64_t n) {
  int c = 32;
  while (c < kLongThreads && 8 * int64_t(c) <= n) c *= 2;
  return c;
}

// y_j = sgn x[perm[j]], read through the permutation.
template <typename T>
struct SortedRow {
  const T* x;
  const int64_t* perm;
  double sgn;
  __device__ double operator[](int64_t j) const { return sgn * double(x[perm[j]]); }
};

template <typename T>
__global__ void forward_kernel(FastSortParams P, int64_t B, int64_t n, const int64_t* lengths, const T* x,
                               const int64_t* perm, T* out, int32_t* block, double* workspace) {
  for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < B; b += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = b * n, L = fastsort_row_length(lengths, b, n);
    bool nan = false;
    for (int64_t c = 0; c < L; ++c) nan |= x[o + c] != x[o + c];
    const SortedRow<T> y{x + o, perm + o, P.descending ? -1.0 : 1.0};
    fastsort_forward_row(P, L, nan, y, perm + o, out + o, block + o, workspace + o);
    for (int64_t j = L; j < n; ++j) fastsort_write_pad(j, out + o, block + o);
  }
}

// A row whose perm or block is malformed gets a NaN gradient (the Python op checks the index ranges first; a
// partition check here would need a host synchronisation to throw).
template <typename T>
__global__ void backward_kernel(FastSortParams P, int64_t B, int64_t n, const int64_t* lengths, const T* grad_out,
                                const T* out, const T* x, const int64_t* perm, const int32_t* block, T* grad_x) {
  for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < B; b += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = b * n, L = fastsort_row_length(lengths, b, n);
    if (fastsort_valid_row(L, perm + o, block + o))
      fastsort_backward_row(P, L, grad_out + o, out + o, x + o, perm + o, block + o, grad_x + o);
    else
      for (int64_t c = 0; c < L; ++c) grad_x[o + c] = T(NAN);
    for (int64_t c = L; c < n; ++c) grad_x[o + c] = T(0);
  }
}

// One block per row: counts of -inf, of +inf or NaN, and of NaN give [lo, hi) and the NaN rule; then the chunked
// PAV's phases with a barrier between them (bad is the same for every thread of the block).
template <typename T>
__global__ void __launch_bounds__(kLongThreads)
    forward_long_kernel(FastSortParams P, int64_t B, int64_t n, const int64_t* lengths, const T* x, const int64_t* perm,
                        T* out, int32_t* block, double* workspace) {
  __shared__ int64_t cross[2 * kLongThreads];
  __shared__ unsigned long long counts[3];
  const int k = threadIdx.x, C = blockDim.x;
  for (int64_t b = blockIdx.x; b < B; b += gridDim.x) {
    const int64_t o = b * n, L = fastsort_row_length(lengths, b, n);
    const SortedRow<T> y{x + o, perm + o, P.descending ? -1.0 : 1.0};
    if (k < 3) counts[k] = 0;
    __syncthreads();
    unsigned long long neg = 0, pos = 0, nan = 0;
    for (int64_t j = k; j < L; j += C) {
      const double v = y[j];
      neg += v == -INFINITY;
      pos += !(v < INFINITY);
      nan += v != v;
    }
    atomicAdd(&counts[0], neg);
    atomicAdd(&counts[1], pos);
    atomicAdd(&counts[2], nan);
    __syncthreads();
    const int64_t lo = int64_t(counts[0]), hi = L - int64_t(counts[1]) > lo ? L - int64_t(counts[1]) : lo;
    const bool bad = fastsort_bad_row(P, L, counts[2] > 0, lo, hi);
    if (!bad) {
      fastsort_chunk_pav(P, lo, hi, C, k, y, block + o, workspace + o, cross);
      for (int w = 1; w < C; w *= 2) {
        __syncthreads();
        fastsort_chunk_merge(P, lo, hi, C, k, w, y, block + o, workspace + o, cross);
      }
      __syncthreads();
      fastsort_chunk_outputs(P, lo, hi, C, k, y, perm + o, out + o, block + o, workspace + o, cross);
    }
    for (int64_t j = k; j < L; j += C)
      if (bad || j < lo || j >= hi) fastsort_write_nonfinite(L, lo, hi, bad, j, perm + o, out + o, block + o);
    for (int64_t j = L + k; j < n; j += C) fastsort_write_pad(j, out + o, block + o);
    __syncthreads();  // the next row resets counts and cross
  }
}

// One block per row: the chunked backward of fastsort.h (a malformed perm or block gives the row a NaN gradient).
template <typename T>
__global__ void __launch_bounds__(kLongThreads)
    backward_long_kernel(FastSortParams P, int64_t B, int64_t n, const int64_t* lengths, const T* grad_out,
                         const T* out, const T* x, const int64_t* perm, const int32_t* block, T* grad_x) {
  __shared__ FastSortSums head[kLongThreads], tail[kLongThreads];
  const int k = threadIdx.x, C = blockDim.x;
  for (int64_t b = blockIdx.x; b < B; b += gridDim.x) {
    const int64_t o = b * n, L = fastsort_row_length(lengths, b, n);
    for (int64_t j = L + k; j < n; j += C) grad_x[o + j] = T(0);
    const int flags = fastsort_chunk_check(P, L, C, k, x + o, perm + o, block + o);
    if (__syncthreads_or(flags)) {  // a barrier too: the previous row's last phase has read head and tail
      for (int64_t j = k; j < L; j += C) grad_x[o + j] = T(NAN);
      continue;
    }
    fastsort_chunk_sums(P, L, C, k, grad_out + o, out + o, x + o, perm + o, block + o, grad_x + o, head, tail);
    __syncthreads();
    fastsort_chunk_totals(L, C, k, block + o, head, tail);
    __syncthreads();
    fastsort_chunk_crossing_grads(P, L, C, k, grad_out + o, out + o, x + o, perm + o, block + o, grad_x + o, head,
                                  tail);
  }
}

}  // namespace

template <typename T>
void fastsort_forward_cuda(const FastSortParams& P, int64_t B, int64_t n, const int64_t* lengths, const T* x,
                           const int64_t* perm, T* out, int32_t* block, double* workspace, std::uintptr_t stream) {
  fastsort_check_params(P, B, n);
  if (B == 0) return;
  DeviceGuard guard(x);
  if (n >= kLongRow)
    forward_long_kernel<T>
        <<<grid_blocks(B), long_threads(n), 0, as_stream(stream)>>>(P, B, n, lengths, x, perm, out, block, workspace);
  else
    forward_kernel<T><<<grid_blocks((B + kThreads - 1) / kThreads), kThreads, 0, as_stream(stream)>>>(
        P, B, n, lengths, x, perm, out, block, workspace);
  check_launch("fastsort_forward");
}

template <typename T>
void fastsort_backward_cuda(const FastSortParams& P, int64_t B, int64_t n, const int64_t* lengths, const T* grad_out,
                            const T* out, const T* x, const int64_t* perm, const int32_t* block, T* grad_x,
                            std::uintptr_t stream) {
  fastsort_check_params(P, B, n);
  if (B == 0) return;
  DeviceGuard guard(x);
  if (n >= kLongRow)
    backward_long_kernel<T><<<grid_blocks(B), long_threads(n), 0, as_stream(stream)>>>(P, B, n, lengths, grad_out, out,
                                                                                       x, perm, block, grad_x);
  else
    backward_kernel<T><<<grid_blocks((B + kThreads - 1) / kThreads), kThreads, 0, as_stream(stream)>>>(
        P, B, n, lengths, grad_out, out, x, perm, block, grad_x);
  check_launch("fastsort_backward");
}

#define RELAXOPS_INSTANTIATE_FASTSORT_CUDA(T)                                                                          \
  template void fastsort_forward_cuda<T>(const FastSortParams&, int64_t, int64_t, const int64_t*, const T*,            \
                                         const int64_t*, T*, int32_t*, double*, std::uintptr_t);                       \
  template void fastsort_backward_cuda<T>(const FastSortParams&, int64_t, int64_t, const int64_t*, const T*, const T*, \
                                          const T*, const int64_t*, const int32_t*, T*, std::uintptr_t);

RELAXOPS_INSTANTIATE_FASTSORT_CUDA(float)
RELAXOPS_INSTANTIATE_FASTSORT_CUDA(double)

}  // namespace relaxops
