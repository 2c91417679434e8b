// CUDA kernels of bubble_sort.h: one thread per row running the row functions of the header (the comparators of a
// row form one dependency chain through the carry and the swapped / swaps / any_swap scalars). The batch's trip
// count is reduced on the device: the first kernel runs each row until its own P <= epsilon and takes the maximum
// into trips[0] with atomicMax; the second reads it, runs the rows that stopped earlier on to it and forms the
// mixture. No host synchronisation.
//
// Workspace (elements of T, per row): state 0 [n + 3]; backward also the tape [kBubbleTape n], the recomputed
// state, two gradient states [3 (n + 3)] and P_i, e_i [2 (passes + 1)].
//
// Not yet verified on a GPU (auto does not pick it before `python -m relaxops selftest` passes).
#include "../common/cuda_utils.cuh"
#include "bubble_sort.h"

namespace relaxops {
namespace {

constexpr int kThreads = 64;

template <typename T>
__global__ void passes_kernel(BubbleParams P, const T* x, T* states, int32_t* trips, int32_t* row_trips, T* workspace) {
  const int64_t n = P.n, L = n + 3;
  for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < P.B; b += int64_t(gridDim.x) * blockDim.x) {
    if (!bubble_row_finite(n, x + b * n)) {
      row_trips[b] = -1;
      continue;
    }
    T* init = workspace + b * L;
    bubble_initial_state(n, x + b * n, init);
    const T* inits[1] = {init};
    T* st[1] = {states + b * P.passes * L};
    T prob = T(1);
    const int64_t t = bubble_run_passes<1>(P, inits, st, 0, P.passes, true, &prob);
    row_trips[b] = int32_t(t);
    atomicMax(trips, int32_t(t));
  }
}

template <typename T>
__global__ void mixture_kernel(BubbleParams P, T* sorted, T* swaps, T* any_swap, T* states, const int32_t* trips,
                               const int32_t* row_trips, const T* workspace) {
  const int64_t n = P.n, L = n + 3, S = P.passes * L;
  const int64_t T_ = trips[0];
  for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < P.B; b += int64_t(gridDim.x) * blockDim.x) {
    if (row_trips[b] < 0) {
      for (int64_t j = 0; j < n; ++j) sorted[b * n + j] = T(NAN);
      swaps[b] = any_swap[b] = T(NAN);
      for (int64_t j = 0; j < S; ++j) states[b * S + j] = T(NAN);
      continue;
    }
    const T* init[1] = {workspace + b * L};
    T* st[1] = {states + b * S};
    T prob = T(1);
    bubble_run_passes<1>(P, init, st, row_trips[b], T_, false, &prob);
    bubble_mixture(P, T_, init[0], st[0], sorted + b * n, swaps + b, any_swap + b);
  }
}

template <typename T>
__global__ void backward_kernel(BubbleParams P, const T* grad_sorted, const T* grad_swaps, const T* grad_any,
                                const T* x, const T* states, const int32_t* trips, T* grad_x, T* workspace,
                                int64_t per) {
  const int64_t n = P.n, L = n + 3, S = P.passes * L;
  const int64_t T_ = trips[0];
  for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < P.B; b += int64_t(gridDim.x) * blockDim.x) {
    if (T_ < 0 || T_ > P.passes || !bubble_row_finite(n, x + b * n)) {  // bad trips: NaN, never out of bounds
      for (int64_t j = 0; j < n; ++j) grad_x[b * n + j] = T(NAN);
      continue;
    }
    T* init = workspace + b * per;
    T *next = init + L, *ga = next + L, *gb = ga + L, *tape = gb + L, *prob = tape + kBubbleTape * n;
    T* e = prob + P.passes + 1;
    bubble_initial_state(n, x + b * n, init);
    const T *gv[1] = {grad_sorted + b * n}, *inits[1] = {init}, *st[1] = {states + b * S};
    T* gx[1] = {grad_x + b * n};
    bubble_backward_rows<1>(P, T_, gv, grad_swaps + b, grad_any + b, inits, st, &next, &ga, &gb, &tape, &prob, &e, gx);
  }
}

inline int rows_grid(int64_t B) { return grid_blocks((B + kThreads - 1) / kThreads); }

}  // namespace

template <typename T>
void bubble_sort_forward_cuda(const BubbleParams& P, const T* x, T* sorted, T* swaps, T* any_swap, T* states,
                              int32_t* trips, int32_t* row_trips, T* workspace, std::uintptr_t stream) {
  bubble_check_params(P);
  if (P.B == 0) return;
  DeviceGuard guard(x);
  const cudaStream_t st = as_stream(stream);
  check_call(cudaMemsetAsync(trips, 0, sizeof(int32_t), st), "bubble_sort: clearing the trip count");
  passes_kernel<T><<<rows_grid(P.B), kThreads, 0, st>>>(P, x, states, trips, row_trips, workspace);
  check_launch("bubble_sort passes");
  mixture_kernel<T>
      <<<rows_grid(P.B), kThreads, 0, st>>>(P, sorted, swaps, any_swap, states, trips, row_trips, workspace);
  check_launch("bubble_sort mixture");
}

template <typename T>
void bubble_sort_backward_cuda(const BubbleParams& P, const T* grad_sorted, const T* grad_swaps, const T* grad_any,
                               const T* x, const T* states, const int32_t* trips, T* grad_x, T* workspace,
                               std::uintptr_t stream) {
  bubble_check_params(P);
  if (P.B == 0) return;
  DeviceGuard guard(x);
  const int64_t per = bubble_cuda_workspace(P, true) / P.B;  // per row
  backward_kernel<T><<<rows_grid(P.B), kThreads, 0, as_stream(stream)>>>(P, grad_sorted, grad_swaps, grad_any, x,
                                                                         states, trips, grad_x, workspace, per);
  check_launch("bubble_sort backward");
}

#define RELAXOPS_INSTANTIATE_BUBBLE_CUDA(T)                                                                         \
  template void bubble_sort_forward_cuda<T>(const BubbleParams&, const T*, T*, T*, T*, T*, int32_t*, int32_t*, T*,  \
                                            std::uintptr_t);                                                        \
  template void bubble_sort_backward_cuda<T>(const BubbleParams&, const T*, const T*, const T*, const T*, const T*, \
                                             const int32_t*, T*, T*, std::uintptr_t);

RELAXOPS_INSTANTIATE_BUBBLE_CUDA(float)
RELAXOPS_INSTANTIATE_BUBBLE_CUDA(double)

}  // namespace relaxops
