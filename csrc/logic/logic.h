// Differentiable logic gate layers (Petersen et al., difflogic): training kernels on the 4-coefficient form.
//
// A neuron j reads inputs a_j = x[a[j]] and b_j = x[b[j]] and computes, with p_j = softmax(w_j) over the 16
// gates of docs/math/logic.md §1.1 (or the one-hot argmax in eval mode),
//   y_j = sum_i p_ji f_i(a_j, b_j) = A0_j + A1_j a_j + A2_j b_j + A3_j a_j b_j,      [A0..A3]_j = p_j^T M,
// M the 16x4 table kLogicGateCoef. The kernels take the per-neuron coefficients coef [n_out, 4] (computed by
// the caller from the logits, so autograd maps their gradient back to the logits) and never evaluate the 16
// gates.
//
// Memory layout: FEATURE-MAJOR, contiguous. xt [n_in, B] (xt[c * B + s] = sample s of input feature c), yt and
// grad_yt [n_out, B], grad_xt [n_in, B]; consecutive samples of one feature are adjacent, so a neuron's
// inputs are two contiguous rows (SIMD on CPU, coalesced on GPU). The Python op presents [B, n] tensors as
// transposed views of these buffers, so chained layers pass activations without copies.
// a, b: int64 [n_out] in [0, n_in) (a[j] == b[j] allowed). coef, grad_coef: [n_out, 4] in the accumulation
// type A (float for float32/float16/bfloat16 data, double for float64 data).
//
// 1. forward:   yt[j, s] = A0 + A1 xa + A2 xb + A3 xa xb,   xa = xt[a[j], s], xb = xt[b[j], s].
// 2. backward, coefficient gradient (batch reductions, accumulated in A):
//      grad_coef[j] = sum_s g[j, s] * [1, xa, xb, xa xb],   g = grad_yt.
// 3. backward, input gradient (deterministic CSR gather, no atomics): csr_start [n_in + 1], csr_entry [2 n_out]
//    int64 list, for each input c, the entries e = 2 j + role of the neurons reading c, role 0 = as a, 1 = as b,
//    ascending in e (a self-connected neuron appears twice, once per role). Then
//      grad_xt[c, s] = sum_{e in list(c)} g[j, s] * (role == 0 ? A1_j + A3_j xb : A2_j + A3_j xa),
//    which is autograd's A1 + A2 + 2 A3 x for a self-connected neuron (the reference CUDA kernel's factor-2
//    bug is not reproduced, docs/math/logic.md §7). Inputs read by no neuron get exactly 0.
//    Either output pointer of the backward may be null (not computed).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../common/common.h"

namespace relaxops {

// Row i = [c0, c1, c2, c3] of gate i: f_i(a, b) = c0 + c1 a + c2 b + c3 a b (docs/math/logic.md §1.2).
HOST_DEVICE constexpr int kLogicGateCoef[16][4] = {{0, 0, 0, 0},   {0, 0, 0, 1},   {0, 1, 0, -1}, {0, 1, 0, 0},
                                                   {0, 0, 1, -1},  {0, 0, 1, 0},   {0, 1, 1, -2}, {0, 1, 1, -1},
                                                   {1, -1, -1, 1}, {1, -1, -1, 2}, {1, 0, -1, 0}, {1, 0, -1, 1},
                                                   {1, -1, 0, 0},  {1, -1, 0, 1},  {1, 0, 0, -1}, {1, 0, 0, 0}};

// Output activation and counter-based noise of the parametrized layers (docs/math/logic.md §10): the kernels
// with an `act` argument compute y = act(u + noise_scale * L(seed, i)) instead of y = u, for the flat output index
// i (dense layer: sample-major i = s n_out + j; conv: ((((b C_out + k) Ho + oy) Wo + ox) (L - 1) + node)).
// act: 0 none, 1 sigmoid, 2 sigmoid_st (forward 1[z > 0], backward sigmoid'(z)). seed < 0: no noise. The backward
// takes act'(z) = s (1 - s) from the saved sigmoid s = sigmoid(z) (the output for the sigmoid; for sigmoid_st the
// forward writes it to a second output st), so it never recomputes z or the noise.
enum LogicAct : int { kLogicActNone = 0, kLogicActSigmoid = 1, kLogicActSigmoidST = 2 };

// lowbias32 (xor-shift-multiply on uint32): python/relaxops/logic/parametrize.py hash32.
HOST_DEVICE inline uint32_t logic_hash32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  return x ^ (x >> 16);
}

// parametrize.noise_bits: hash32(lo(i) ^ hash32(hi(i) ^ seed_hash)), seed_hash = hash32(uint32(seed)).
HOST_DEVICE inline uint32_t logic_noise_bits(uint32_t seed_hash, int64_t i) {
  const uint64_t u = uint64_t(i);
  return logic_hash32(uint32_t(u) ^ logic_hash32(uint32_t(u >> 32) ^ seed_hash));
}

// Logistic noise log(U / (1 - U)), U = (bits + 0.5) / 2^32, as log(bits + 0.5) - log(~bits + 0.5): 1 - U is
// formed exactly in integers (~bits = 2^32 - 1 - bits), so no rounding of U to 1 gives an infinity in float.
HOST_DEVICE inline float logic_logistic(uint32_t bits, float) {
  return logf(float(bits) + 0.5f) - logf(float(~bits) + 0.5f);
}
HOST_DEVICE inline double logic_logistic(uint32_t bits, double) {
  return log(double(bits) + 0.5) - log(double(~bits) + 0.5);
}

HOST_DEVICE inline float logic_sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }
HOST_DEVICE inline double logic_sigmoid(double z) { return 1.0 / (1.0 + exp(-z)); }

// z = u (+ noise); the activation of z and the derivative d act / d z the backward multiplies by.
template <bool kNoise, typename A>
HOST_DEVICE inline A logic_preact(A u, uint32_t seed_hash, A noise_scale, int64_t i) {
  if constexpr (kNoise) return u + noise_scale * logic_logistic(logic_noise_bits(seed_hash, i), A(0));
  return u;
}
template <int kAct, typename A>
HOST_DEVICE inline A logic_act(A z) {
  if constexpr (kAct == kLogicActSigmoid) return logic_sigmoid(z);
  if constexpr (kAct == kLogicActSigmoidST) return z > A(0) ? A(1) : A(0);
  return z;
}
// d act / d z recomputed from z: the tree convolution's nodes (their values are not stored).
template <int kAct, typename A>
HOST_DEVICE inline A logic_act_grad(A z) {
  if constexpr (kAct == kLogicActNone) return A(1);
  const A s = logic_sigmoid(z);
  return s * (A(1) - s);
}

// f(integral_constant<int, act>, bool_constant<noise>) for runtime (act, noise): the six kernel instantiations.
template <typename F>
inline void logic_with_act(int act, bool noise, F&& f) {
  RELAXOPS_CHECK(act >= 0 && act <= 2, "logic: act must be 0 (none), 1 (sigmoid) or 2 (sigmoid_st)");
  auto g = [&](auto k) {
    if (noise)
      f(k, std::true_type{});
    else
      f(k, std::false_type{});
  };
  if (act == kLogicActNone) g(std::integral_constant<int, kLogicActNone>{});
  if (act == kLogicActSigmoid) g(std::integral_constant<int, kLogicActSigmoid>{});
  if (act == kLogicActSigmoidST) g(std::integral_constant<int, kLogicActSigmoidST>{});
}

// CPU kernels (logic_cpu.cpp), T = A = float or double; parallel over neurons (forward, grad_coef) and inputs
// (grad_x), SIMD over the batch.
template <typename T>
void logic_forward_cpu(int64_t B, int64_t n_in, int64_t n_out, const T* xt, const int64_t* a, const int64_t* b,
                       const T* coef, T* yt);
template <typename T>
void logic_backward_cpu(int64_t B, int64_t n_in, int64_t n_out, const T* xt, const int64_t* a, const int64_t* b,
                        const T* coef, const T* grad_yt, const int64_t* csr_start, const int64_t* csr_entry, T* grad_xt,
                        T* grad_coef);

// With an output activation and noise (above): yt[j, s] = act(z), z = u + noise_scale L(seed, s n_out + j), and
// for sigmoid_st st[j, s] = sigmoid(z) (st untouched otherwise); grad_u[i] = grad_yt[i] sig[i] (1 - sig[i]) over n
// elements, the gradient of the pre-activation u from the saved sigmoid, which logic_backward_cpu then takes as its
// grad_yt (so the backward is the plain one on grad_u).
template <typename T>
void logic_forward_act_cpu(int64_t B, int64_t n_in, int64_t n_out, const T* xt, const int64_t* a, const int64_t* b,
                           const T* coef, int act, int64_t seed, T noise_scale, T* yt, T* st);
template <typename T>
void logic_act_grad_cpu(int64_t n, const T* grad_yt, const T* sig, T* grad_u);

// The coefficients of the neurons from their gate logits w [n_out, 16]: coef[j] = p_j^T M with p_j = softmax(w_j)
// (training) or the one-hot of argmax(w_j) (eval; ties and NaN as torch.argmax: the first maximum, NaN counts as
// the maximum). Backward (training only): grad_w[j, i] = p_ji (u_i - sum_k p_jk u_k), u = M grad_coef[j].
template <typename T>
void logic_coef_cpu(int64_t n_out, const T* w, bool training, T* coef);
template <typename T>
void logic_coef_backward_cpu(int64_t n_out, const T* w, const T* grad_coef, T* grad_w);

// dst [cols, rows] = src [rows, cols]^T (both contiguous): the layout change at a network's input and for
// sample-major gradients, in cache-sized tiles, parallel over tiles.
template <typename T>
void logic_transpose_cpu(int64_t rows, int64_t cols, const T* src, T* dst);

// CUDA kernels (logic.cu). dtype: 0 = float32, 1 = float64, 2 = float16, 3 = bfloat16 (data xt, yt, grad_yt,
// grad_xt); coef / grad_coef are float (double for float64). Device pointers; launched on `stream`, no sync.
void logic_forward_cuda(int dtype, int64_t B, int64_t n_in, int64_t n_out, const void* xt, const int64_t* a,
                        const int64_t* b, const void* coef, void* yt, std::uintptr_t stream);
void logic_backward_cuda(int dtype, int64_t B, int64_t n_in, int64_t n_out, const void* xt, const int64_t* a,
                         const int64_t* b, const void* coef, const void* grad_yt, const int64_t* csr_start,
                         const int64_t* csr_entry, void* grad_xt, void* grad_coef, std::uintptr_t stream);
// The activation kernels as on the CPU (grad_u in the data dtype, then logic_backward_cuda on it).
void logic_forward_act_cuda(int dtype, int64_t B, int64_t n_in, int64_t n_out, const void* xt, const int64_t* a,
                            const int64_t* b, const void* coef, int act, int64_t seed, double noise_scale, void* yt,
                            void* st, std::uintptr_t stream);
void logic_act_grad_cuda(int dtype, int64_t n, const void* grad_yt, const void* sig, void* grad_u,
                         std::uintptr_t stream);

}  // namespace relaxops
