// Training kernels of the logic layer on CUDA (math and feature-major layout in logic.h).
//
// * forward and input gradient: one thread per (row, sample), consecutive threads on consecutive samples of a
//   row (coalesced), grid-stride loops; the input gradient gathers over the input's CSR list in a fixed order.
// * coefficient gradient: one warp per neuron, lanes striding over the batch, then a shuffle tree: a fixed
//   order, so results are deterministic.
// Data T in {float, double, __half, __nv_bfloat16}; arithmetic in A = double for double, else float.
#include <cuda_runtime.h>

#include "../common/cuda_half.cuh"
#include "../common/cuda_utils.cuh"
#include "logic.h"

namespace relaxops {

namespace {

constexpr int kThreads = 256;

template <typename T, typename A>
__global__ void forward_kernel(int64_t B, int64_t n_out, const T* __restrict__ xt, const int64_t* __restrict__ a,
                               const int64_t* __restrict__ b, const A* __restrict__ coef, T* __restrict__ yt) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n_out * B;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = t / B, s = t % B;
    const A xa = load_as<A>(xt + a[j] * B + s), xb = load_as<A>(xt + b[j] * B + s);
    const A* c = coef + 4 * j;
    yt[t] = store_as<T>(c[0] + c[1] * xa + (c[2] + c[3] * xa) * xb);
  }
}

template <typename T, typename A>
__global__ void coef_grad_kernel(int64_t B, int64_t n_out, const T* __restrict__ xt, const int64_t* __restrict__ a,
                                 const int64_t* __restrict__ b, const T* __restrict__ grad_yt,
                                 A* __restrict__ grad_coef) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t j = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32; j < n_out; j += warps) {
    const T* xa = xt + a[j] * B;
    const T* xb = xt + b[j] * B;
    const T* g = grad_yt + j * B;
    A s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int64_t s = lane; s < B; s += 32) {
      const A gv = load_as<A>(g + s), va = load_as<A>(xa + s), vb = load_as<A>(xb + s);
      s0 += gv;
      s1 += gv * va;
      s2 += gv * vb;
      s3 += gv * va * vb;
    }
    for (int off = 16; off > 0; off /= 2) {
      s0 += __shfl_down_sync(0xffffffffu, s0, off);
      s1 += __shfl_down_sync(0xffffffffu, s1, off);
      s2 += __shfl_down_sync(0xffffffffu, s2, off);
      s3 += __shfl_down_sync(0xffffffffu, s3, off);
    }
    if (lane == 0) {
      grad_coef[4 * j] = s0;
      grad_coef[4 * j + 1] = s1;
      grad_coef[4 * j + 2] = s2;
      grad_coef[4 * j + 3] = s3;
    }
  }
}

template <typename T, typename A>
__global__ void input_grad_kernel(int64_t B, int64_t n_in, const T* __restrict__ xt, const int64_t* __restrict__ a,
                                  const int64_t* __restrict__ b, const A* __restrict__ coef,
                                  const T* __restrict__ grad_yt, const int64_t* __restrict__ csr_start,
                                  const int64_t* __restrict__ csr_entry, T* __restrict__ grad_xt) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n_in * B; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = t / B, s = t % B;
    A acc = 0;
    for (int64_t e = csr_start[c]; e < csr_start[c + 1]; ++e) {
      const int64_t j = csr_entry[e] >> 1;
      const bool as_b = csr_entry[e] & 1;
      const A k1 = as_b ? coef[4 * j + 2] : coef[4 * j + 1];
      const A other = load_as<A>(xt + (as_b ? a[j] : b[j]) * B + s);
      acc += load_as<A>(grad_yt + j * B + s) * (k1 + coef[4 * j + 3] * other);
    }
    grad_xt[t] = store_as<T>(acc);
  }
}

// forward_kernel with the activation and noise of logic.h: yt = act(z), z = u + noise_scale L(seed, s n_out + j),
// and for sigmoid_st st = sigmoid(z), saved for the backward.
template <typename T, typename A, int kAct, bool kNoise>
__global__ void act_kernel(int64_t B, int64_t n_out, const T* __restrict__ xt, const int64_t* __restrict__ a,
                           const int64_t* __restrict__ b, const A* __restrict__ coef, uint32_t seed_hash, A noise_scale,
                           T* __restrict__ yt, T* __restrict__ st) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n_out * B;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = t / B, s = t % B;
    const A xa = load_as<A>(xt + a[j] * B + s), xb = load_as<A>(xt + b[j] * B + s);
    const A* c = coef + 4 * j;
    const A z = logic_preact<kNoise>(c[0] + c[1] * xa + (c[2] + c[3] * xa) * xb, seed_hash, noise_scale, s * n_out + j);
    yt[t] = store_as<T>(logic_act<kAct>(z));
    if constexpr (kAct == kLogicActSigmoidST) st[t] = store_as<T>(logic_sigmoid(z));
  }
}

// grad_u = grad_yt sig (1 - sig) elementwise, in the accumulation type A.
template <typename T, typename A>
__global__ void sigmoid_grad_kernel(int64_t n, const T* __restrict__ grad_yt, const T* __restrict__ sig,
                                    T* __restrict__ grad_u) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n; t += int64_t(gridDim.x) * blockDim.x) {
    const A sg = load_as<A>(sig + t);
    grad_u[t] = store_as<T>(load_as<A>(grad_yt + t) * sg * (A(1) - sg));
  }
}

int blocks_for(int64_t items) { return grid_blocks((items + kThreads - 1) / kThreads); }

}  // namespace

void logic_forward_act_cuda(int dtype, int64_t B, int64_t n_in, int64_t n_out, const void* xt, const int64_t* a,
                            const int64_t* b, const void* coef, int act, int64_t seed, double noise_scale, void* yt,
                            void* st, std::uintptr_t stream) {
  RELAXOPS_CHECK(B >= 0 && n_in >= 1 && n_out >= 0, "logic_forward_act: invalid sizes");
  if (B == 0 || n_out == 0) return;
  DeviceGuard guard(yt);
  const uint32_t seed_hash = logic_hash32(uint32_t(seed));
  by_dtype(dtype, [&](auto t_tag, auto a_tag) {
    using T = decltype(t_tag);
    using A = decltype(a_tag);
    logic_with_act(act, seed >= 0, [&](auto kact, auto knoise) {
      act_kernel<T, A, decltype(kact)::value, decltype(knoise)::value>
          <<<blocks_for(n_out * B), kThreads, 0, as_stream(stream)>>>(
              B, n_out, static_cast<const T*>(xt), a, b, static_cast<const A*>(coef), seed_hash, A(noise_scale),
              static_cast<T*>(yt), static_cast<T*>(st));
    });
  });
  check_launch("logic forward (activation)");
}

void logic_act_grad_cuda(int dtype, int64_t n, const void* grad_yt, const void* sig, void* grad_u,
                         std::uintptr_t stream) {
  RELAXOPS_CHECK(n >= 0, "logic_act_grad: invalid size");
  if (n == 0) return;
  DeviceGuard guard(grad_u);
  by_dtype(dtype, [&](auto t_tag, auto a_tag) {
    using T = decltype(t_tag);
    using A = decltype(a_tag);
    sigmoid_grad_kernel<T, A><<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(
        n, static_cast<const T*>(grad_yt), static_cast<const T*>(sig), static_cast<T*>(grad_u));
  });
  check_launch("logic activation gradient");
}

void logic_forward_cuda(int dtype, int64_t B, int64_t n_in, int64_t n_out, const void* xt, const int64_t* a,
                        const int64_t* b, const void* coef, void* yt, std::uintptr_t stream) {
  RELAXOPS_CHECK(B >= 0 && n_in >= 1 && n_out >= 0, "logic_forward: invalid sizes");
  if (B == 0 || n_out == 0) return;
  DeviceGuard guard(yt);
  by_dtype(dtype, [&](auto t_tag, auto a_tag) {
    using T = decltype(t_tag);
    using A = decltype(a_tag);
    forward_kernel<T, A><<<blocks_for(n_out * B), kThreads, 0, as_stream(stream)>>>(
        B, n_out, static_cast<const T*>(xt), a, b, static_cast<const A*>(coef), static_cast<T*>(yt));
  });
  check_launch("logic forward");
}

void logic_backward_cuda(int dtype, int64_t B, int64_t n_in, int64_t n_out, const void* xt, const int64_t* a,
                         const int64_t* b, const void* coef, const void* grad_yt, const int64_t* csr_start,
                         const int64_t* csr_entry, void* grad_xt, void* grad_coef, std::uintptr_t stream) {
  RELAXOPS_CHECK(B >= 0 && n_in >= 1 && n_out >= 0, "logic_backward: invalid sizes");
  DeviceGuard guard(grad_xt != nullptr ? grad_xt : grad_coef);
  cudaStream_t s = as_stream(stream);
  by_dtype(dtype, [&](auto t_tag, auto a_tag) {
    using T = decltype(t_tag);
    using A = decltype(a_tag);
    if (grad_coef != nullptr && n_out > 0) {
      coef_grad_kernel<T, A><<<grid_blocks((n_out + kThreads / 32 - 1) / (kThreads / 32)), kThreads, 0, s>>>(
          B, n_out, static_cast<const T*>(xt), a, b, static_cast<const T*>(grad_yt), static_cast<A*>(grad_coef));
      check_launch("logic coefficient gradient");
    }
    if (grad_xt != nullptr && B > 0) {
      input_grad_kernel<T, A><<<blocks_for(n_in * B), kThreads, 0, s>>>(
          B, n_in, static_cast<const T*>(xt), a, b, static_cast<const A*>(coef), static_cast<const T*>(grad_yt),
          csr_start, csr_entry, static_cast<T*>(grad_xt));
      check_launch("logic input gradient");
    }
  });
}

}  // namespace relaxops
