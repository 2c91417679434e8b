// Training kernels of the lookup-table layer on CUDA (math and feature-major layout in lut.h).
//
// * forward and input gradient: one thread per (row, sample), consecutive threads on consecutive samples of a row
//   (coalesced), grid-stride loops; the input gradient gathers over the input's CSR list in a fixed order,
//   recomputing du/dx_i of each (neuron, slot) entry (no atomics, no workspace); act'(z) from the saved sigmoid.
// * table gradient: one warp per neuron, lanes striding over the batch with 2^k accumulators each, then a
//   shuffle tree per entry: a fixed order, so results are deterministic.
// Data and table T in {float, double}; the noise in T (logic.h's logic_logistic).
#include <cuda_runtime.h>

#include <type_traits>

#include "../common/cuda_utils.cuh"
#include "lut.h"

namespace relaxops {

namespace {

constexpr int kThreads = 256;

template <typename T, int K>
__device__ inline void load_inputs(int64_t B, int64_t n_out, int64_t j, int64_t s, const T* __restrict__ xt,
                                   const int64_t* __restrict__ idx, T* x) {
#pragma unroll
  for (int i = 0; i < K; ++i) x[i] = xt[idx[i * n_out + j] * B + s];
}

template <typename T, int K>
__device__ inline T pre_activation(const T* q, const T* x, int64_t seed, double noise_scale, int64_t flat) {
  T z = lut_interp<T, K>(q, x);
  if (seed >= 0) z += T(noise_scale) * logic_logistic(logic_noise_bits(logic_hash32(uint32_t(seed)), flat), T(0));
  return z;
}

// d loss / d z from d loss / d y = g and the saved sigmoid sg (lut.h).
template <typename T>
__device__ inline T grad_z(int act, int64_t t, const T* __restrict__ g, const T* __restrict__ sg) {
  if (act == 0) return g[t];
  const T s = sg[t];
  return g[t] * s * (T(1) - s);
}

template <typename T, int K>
__global__ void lut_forward_kernel(int64_t B, int64_t n_out, const T* __restrict__ xt, const int64_t* __restrict__ idx,
                                   const T* __restrict__ table, int act, int64_t seed, double noise_scale,
                                   T* __restrict__ yt, T* __restrict__ st) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n_out * B;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = t / B, s = t % B;
    T x[K];
    load_inputs<T, K>(B, n_out, j, s, xt, idx, x);
    const T z = pre_activation<T, K>(table + (int64_t(1) << K) * j, x, seed, noise_scale, s * n_out + j);
    yt[t] = lut_act(act, z);
    if (act == 2) st[t] = lut_sigmoid(z);
  }
}

template <typename T, int K>
__global__ void lut_input_grad_kernel(int64_t B, int64_t n_in, int64_t n_out, const T* __restrict__ xt,
                                      const int64_t* __restrict__ idx, const T* __restrict__ table, int act,
                                      const T* __restrict__ grad_yt, const T* __restrict__ sg,
                                      const int64_t* __restrict__ csr_start, const int64_t* __restrict__ csr_entry,
                                      T* __restrict__ grad_xt) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n_in * B; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = t / B, s = t % B;
    T acc = 0;
    for (int64_t e = csr_start[c]; e < csr_start[c + 1]; ++e) {
      const int64_t j = csr_entry[e] / K;
      const int i = int(csr_entry[e] % K);
      const T* q = table + (int64_t(1) << K) * j;
      T x[K];
      load_inputs<T, K>(B, n_out, j, s, xt, idx, x);
      const T gz = grad_z(act, j * B + s, grad_yt, sg);
      acc += gz * lut_partial<T, K>(q, x, i);
    }
    grad_xt[t] = acc;
  }
}

template <typename T, int K>
__global__ void lut_table_grad_kernel(int64_t B, int64_t n_out, const T* __restrict__ xt,
                                      const int64_t* __restrict__ idx, int act, const T* __restrict__ grad_yt,
                                      const T* __restrict__ sg, T* __restrict__ grad_table) {
  constexpr int M = 1 << K;
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t j = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32; j < n_out; j += warps) {
    T acc[M], w[M], x[K];
#pragma unroll
    for (int t = 0; t < M; ++t) acc[t] = 0;
    for (int64_t s = lane; s < B; s += 32) {
      load_inputs<T, K>(B, n_out, j, s, xt, idx, x);
      const T gz = grad_z(act, j * B + s, grad_yt, sg);
      lut_basis<T, K>(x, w);
#pragma unroll
      for (int t = 0; t < M; ++t) acc[t] += gz * w[t];
    }
#pragma unroll
    for (int t = 0; t < M; ++t) {
      T v = acc[t];
      for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
      if (lane == 0) grad_table[M * j + t] = v;
    }
  }
}

int blocks_for(int64_t items) { return grid_blocks((items + kThreads - 1) / kThreads); }

// f(T{}, std::integral_constant<int, k>{}) for dtype 0 (float) / 1 (double) and k in [2, 6].
template <typename F>
void by_dtype_k(int dtype, int k, F&& f) {
  RELAXOPS_CHECK(dtype == 0 || dtype == 1, "logic_lut: dtype must be 0 (float32) or 1 (float64)");
  RELAXOPS_CHECK(k >= 2 && k <= kLutMaxK, "logic_lut: k must be in [2, 6]");
  auto with_k = [&](auto t) {
    switch (k) {
      case 2: return f(t, std::integral_constant<int, 2>{});
      case 3: return f(t, std::integral_constant<int, 3>{});
      case 4: return f(t, std::integral_constant<int, 4>{});
      case 5: return f(t, std::integral_constant<int, 5>{});
      default: return f(t, std::integral_constant<int, 6>{});
    }
  };
  if (dtype == 0)
    with_k(float{});
  else
    with_k(double{});
}

}  // namespace

void logic_lut_forward_cuda(int dtype, int64_t B, int64_t n_in, int64_t n_out, int k, const void* xt,
                            const int64_t* idx, const void* table, int act, int64_t seed, double noise_scale, void* yt,
                            void* st, std::uintptr_t stream) {
  RELAXOPS_CHECK(B >= 0 && n_in >= 1 && n_out >= 0, "logic_lut_forward: invalid sizes");
  RELAXOPS_CHECK(act >= 0 && act <= 2, "logic_lut_forward: act must be 0, 1 or 2");
  if (B == 0 || n_out == 0) return;
  DeviceGuard guard(yt);
  by_dtype_k(dtype, k, [&](auto t_tag, auto k_tag) {
    using T = decltype(t_tag);
    constexpr int K = decltype(k_tag)::value;
    lut_forward_kernel<T, K><<<blocks_for(n_out * B), kThreads, 0, as_stream(stream)>>>(
        B, n_out, static_cast<const T*>(xt), idx, static_cast<const T*>(table), act, seed, noise_scale,
        static_cast<T*>(yt), static_cast<T*>(st));
  });
  check_launch("logic_lut forward");
}

void logic_lut_backward_cuda(int dtype, int64_t B, int64_t n_in, int64_t n_out, int k, const void* xt,
                             const int64_t* idx, const void* table, int act, const void* grad_yt, const void* sg,
                             const int64_t* csr_start, const int64_t* csr_entry, void* grad_xt, void* grad_table,
                             std::uintptr_t stream) {
  RELAXOPS_CHECK(B >= 0 && n_in >= 1 && n_out >= 0, "logic_lut_backward: invalid sizes");
  RELAXOPS_CHECK(act >= 0 && act <= 2, "logic_lut_backward: act must be 0, 1 or 2");
  if (grad_xt == nullptr && grad_table == nullptr) return;
  DeviceGuard guard(grad_xt != nullptr ? grad_xt : grad_table);
  cudaStream_t s = as_stream(stream);
  by_dtype_k(dtype, k, [&](auto t_tag, auto k_tag) {
    using T = decltype(t_tag);
    constexpr int K = decltype(k_tag)::value;
    if (grad_table != nullptr && n_out > 0) {  // B == 0: the warps write zero sums
      lut_table_grad_kernel<T, K><<<grid_blocks((n_out + kThreads / 32 - 1) / (kThreads / 32)), kThreads, 0, s>>>(
          B, n_out, static_cast<const T*>(xt), idx, act, static_cast<const T*>(grad_yt), static_cast<const T*>(sg),
          static_cast<T*>(grad_table));
      check_launch("logic_lut table gradient");
    }
    if (grad_xt != nullptr && B > 0) {
      lut_input_grad_kernel<T, K><<<blocks_for(n_in * B), kThreads, 0, s>>>(
          B, n_in, n_out, static_cast<const T*>(xt), idx, static_cast<const T*>(table), act,
          static_cast<const T*>(grad_yt), static_cast<const T*>(sg), csr_start, csr_entry, static_cast<T*>(grad_xt));
      check_launch("logic_lut input gradient");
    }
  });
}

}  // namespace relaxops
