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

#include <cstdint>

#include "../common/common.h"

namespace relaxops {

// Row i = [c0, c1, c2, c3] of gate i: f_i(a, b) = c0 + c1 a + c2 b + c3 a b (docs/math/logic.md §1.2).
HOST_DEVICE constexpr int kLogicGateCoef[16][4] = {{0, 0, 0, 0},   {0, 0, 0, 1},   {0, 1, 0, -1}, {0, 1, 0, 0},
                                                   {0, 0, 1, -1},  {0, 0, 1, 0},   {0, 1, 1, -2}, {0, 1, 1, -1},
                                                   {1, -1, -1, 1}, {1, -1, -1, 2}, {1, 0, -1, 0}, {1, 0, -1, 1},
                                                   {1, -1, 0, 0},  {1, -1, 0, 1},  {1, 0, 0, -1}, {1, 0, 0, 0}};

// CPU kernels (logic_cpu.cpp), T = A = float or double; parallel over neurons (forward, grad_coef) and inputs
// (grad_x), SIMD over the batch.
template <typename T>
void logic_forward_cpu(int64_t B, int64_t n_in, int64_t n_out, const T* xt, const int64_t* a, const int64_t* b,
                       const T* coef, T* yt);
template <typename T>
void logic_backward_cpu(int64_t B, int64_t n_in, int64_t n_out, const T* xt, const int64_t* a, const int64_t* b,
                        const T* coef, const T* grad_yt, const int64_t* csr_start, const int64_t* csr_entry, T* grad_xt,
                        T* grad_coef);

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

}  // namespace relaxops
