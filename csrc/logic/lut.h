// k-input lookup-table gate layers (docs/math/logic.md §11): training kernels on the neurons' tables.
//
// Neuron j reads the k inputs x_i = xt[idx[i, j], s] (i = 0..k-1, slot-major indices idx [k, n_out]) and holds a
// table q_j [M = 2^k] whose entry t is the input pattern with the FIRST input as its most significant bit. Its
// output is the multilinear interpolation of the table, then an activation with optional per-output noise:
//   u = sum_t q[t] prod_i (bit_i(t) ? x_i : 1 - x_i),   z = u + noise_scale L,   y = act(z),
// bit_i(t) = (t >> (k - 1 - i)) & 1, act 0 = identity, 1 = sigmoid, 2 = sigmoid_st (forward 1[z > 0], backward
// sigmoid'(z)). L = log(U / (1 - U)), U = (noise_bits(seed, s n_out + j) + 0.5) / 2^32 (the counter-based hash of
// python/relaxops/logic/parametrize.py), only when seed >= 0.
//
// Evaluation by successive halving: v = q, then for i = k-1 down to 0 the pairs (v[2t], v[2t+1]) differ only in
// x_i and become v[t] = v[2t] + x_i (v[2t+1] - v[2t]): 2^k - 1 lerps. The derivative du/dx_i is the same
// interpolation, over the other k-1 inputs, of the difference table q[t | bit_i] - q[t] (2^(k-1) differences and
// 2^(k-1) - 1 lerps), so all k derivatives cost O(k 2^k); du/dq[t] is the basis product, built by doubling.
//
// Memory layout: FEATURE-MAJOR as logic.h: xt [n_in, B], yt and grad_yt [n_out, B], grad_xt [n_in, B]; idx int64
// [k, n_out]; table and grad_table [n_out, M] in the data type (float or double).
// Input gradient: deterministic CSR gather without atomics: csr_start [n_in + 1], csr_entry [k n_out] list, for
// each input c, the entries e = k j + i (neuron j reads c in slot i) ascending; then
//   grad_xt[c, s] = sum_{e in list(c)} grad_yt[j, s] act'(z_j) du_j/dx_i.
// Table gradient: grad_table[j, t] = sum_s grad_yt[j, s] act'(z_j) basis_t(x), summed over the batch in a fixed
// order (per block of samples in sample order, then the blocks in order).
// act'(z) = s (1 - s) for both sigmoids, s = sigmoid(z) saved by the forward (for the sigmoid the output itself,
// for sigmoid_st the forward's second output st [n_out, B]), so the backward never recomputes z or the noise.
#pragma once

#include <cmath>
#include <cstdint>

#include "../common/common.h"
#include "logic.h"  // the counter-based noise (logic_noise_bits, logic_logistic)

namespace relaxops {

constexpr int kLutMaxK = 6;

// u = the interpolation of q [2^K] at x [K] by successive halving.
template <typename T, int K>
HOST_DEVICE inline T lut_interp(const T* q, const T* x) {
  constexpr int M = 1 << K;
  T v[M / 2];
  for (int t = 0; t < M / 2; ++t) v[t] = q[2 * t] + x[K - 1] * (q[2 * t + 1] - q[2 * t]);
  for (int i = K - 2; i >= 0; --i)
    for (int t = 0; t < (1 << i); ++t) v[t] = v[2 * t] + x[i] * (v[2 * t + 1] - v[2 * t]);
  return v[0];
}

// du/dx_i: the difference table along input i, halved over the other inputs (last first).
template <typename T, int K>
HOST_DEVICE inline T lut_partial(const T* q, const T* x, int i) {
  constexpr int M = 1 << K;
  const int p = K - 1 - i;  // the bit of input i in t
  const int low = (1 << p) - 1;
  T v[M / 2];
  for (int t = 0; t < M / 2; ++t) {
    const int t0 = ((t >> p) << (p + 1)) | (t & low);
    v[t] = q[t0 | (1 << p)] - q[t0];
  }
  int n = M / 2;
  for (int l = K - 1; l >= 0; --l) {
    if (l == i) continue;
    n >>= 1;
    for (int t = 0; t < n; ++t) v[t] = v[2 * t] + x[l] * (v[2 * t + 1] - v[2 * t]);
  }
  return v[0];
}

// w[t] = du/dq[t] = prod_i (bit_i(t) ? x_i : 1 - x_i), by doubling (first input = most significant bit).
template <typename T, int K>
HOST_DEVICE inline void lut_basis(const T* x, T* w) {
  w[0] = T(1);
  for (int i = 0; i < K; ++i)
    for (int t = (1 << i) - 1; t >= 0; --t) {
      const T b = w[t];
      w[2 * t + 1] = b * x[i];
      w[2 * t] = b * (T(1) - x[i]);
    }
}

template <typename T>
HOST_DEVICE inline T lut_exp(T z) {
#ifdef __CUDA_ARCH__
  return exp(z);
#else
  return std::exp(z);
#endif
}

template <typename T>
HOST_DEVICE inline T lut_sigmoid(T z) {
  if (z >= T(0)) return T(1) / (T(1) + lut_exp(-z));
  const T e = lut_exp(z);
  return e / (T(1) + e);
}

// z = u (+ noise); y = act(z).
template <typename T>
HOST_DEVICE inline T lut_act(int act, T z) {
  if (act == 0) return z;
  if (act == 1) return lut_sigmoid(z);
  return z > T(0) ? T(1) : T(0);
}

// CPU kernels (lut_cpu.cpp), T = float or double; k in [2, 6]; seed < 0: no noise. The forward also writes st =
// sigmoid(z) [n_out, B] for act 2 (st is not touched otherwise). The backward takes s, the saved sigmoid (act 1: the
// output yt; act 2: st; act 0: unused); grad_xt / grad_table may be null (not computed).
template <typename T>
void logic_lut_forward_cpu(int64_t B, int64_t n_in, int64_t n_out, int k, const T* xt, const int64_t* idx,
                           const T* table, int act, int64_t seed, double noise_scale, T* yt, T* st);
template <typename T>
void logic_lut_backward_cpu(int64_t B, int64_t n_in, int64_t n_out, int k, const T* xt, const int64_t* idx,
                            const T* table, int act, const T* grad_yt, const T* s, const int64_t* csr_start,
                            const int64_t* csr_entry, T* grad_xt, T* grad_table);

// CUDA kernels (lut.cu). dtype: 0 = float32, 1 = float64 (data and table). Device pointers; launched on `stream`.
void logic_lut_forward_cuda(int dtype, int64_t B, int64_t n_in, int64_t n_out, int k, const void* xt,
                            const int64_t* idx, const void* table, int act, int64_t seed, double noise_scale, void* yt,
                            void* st, std::uintptr_t stream);
void logic_lut_backward_cuda(int dtype, int64_t B, int64_t n_in, int64_t n_out, int k, const void* xt,
                             const int64_t* idx, const void* table, int act, const void* grad_yt, const void* s,
                             const int64_t* csr_start, const int64_t* csr_entry, void* grad_xt, void* grad_table,
                             std::uintptr_t stream);

}  // namespace relaxops
