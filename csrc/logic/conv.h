// Convolutional logic gate layer (logic gate tree kernels, Petersen et al. 2024): training kernels.
//
// Output channel k is a complete binary tree of logic gates with L = 2^d leaves and L - 1 gate nodes, shared
// over output positions. Leaf l of tree k reads input channel c_kl at offset (dy_kl, dx_kl) of the receptive
// field: at output position (oy, ox) its value is
//   v_l = x[b, c_kl, oy sh - ph + dy_kl, ox sw - pw + dx_kl]          (0 outside the input: zero padding).
// Node order (one array of 2L - 1 values per position, v[0..L) the leaves): node n (0 <= n < L - 1) reads
// v[2n] (its A input) and v[2n + 1] (B) and writes v[L + n]. So nodes [0, L/2) form the level above the leaves,
// the next L/4 nodes the level above that, ..., node L - 2 is the root, y = v[2L - 2]. Each node evaluates the
// 4-coefficient form of docs/math/logic.md §1.4, v[L + n] = c0 + c1 a + (c2 + c3 a) b, coef [C_out, L - 1, 4] computed
// from the gate logits by logic_coef_cpu (softmax in training, argmax in eval).
//
// Layouts (contiguous): x, grad_x [B, C_in, H, W]; y, grad_y [B, C_out, Ho, Wo]; leaves int64 [C_out, L, 3] =
// (c, dy, dx) with c < C_in, dy < kh, dx < kw; coef, grad_coef [C_out, L - 1, 4] (same type as the data).
//
// Backward: the forward saves nothing but x (and coef); the backward recomputes the tree per position (3 FMAs
// a node: cheaper than storing (L - 1) node values per output element, which would multiply the saved memory
// by 2L - 1). Per position, the node gradients go from the root down:
//   gv[2L - 2] = grad_y;  node n: grad_coef[k, n] += gv[L + n] [1, a, b, a b],
//   gv[2n] = gv[L + n] (c1 + c3 b),  gv[2n + 1] = gv[L + n] (c2 + c3 a).
// The coefficient sums run over positions in a fixed order per (batch item, channel) and over the batch items
// in order afterwards (deterministic, independent of the thread count). The input gradient is a GATHER, no
// atomics: csr_start [C_in + 1], csr_entry [C_out L] list, per input channel c, the entries e = k L + l of the
// leaves reading c, ascending; then
//   grad_x[b, c, iy, ix] = sum_{e in list(c)} gv_leaf[b, k, l, (iy + ph - dy) / sh, (ix + pw - dx) / sw]
// over the entries whose output position is integral and inside [0, Ho) x [0, Wo) (at most one per entry).
// Every element of grad_x is written by the task of its batch item only.
#pragma once

#include <cstdint>

#include "../common/common.h"

namespace relaxops {

struct LogicConvParams {
  int64_t B, C_in, H, W;  // input
  int64_t C_out, L;       // output channels, leaves per tree (a power of two >= 2)
  int64_t kh, kw, sh, sw, ph, pw;
  int64_t Ho, Wo;  // (H + 2 ph - kh) / sh + 1, (W + 2 pw - kw) / sw + 1
};

inline LogicConvParams make_logic_conv_params(int64_t B, int64_t C_in, int64_t H, int64_t W, int64_t C_out, int64_t L,
                                              int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw) {
  LogicConvParams p{B, C_in, H, W, C_out, L, kh, kw, sh, sw, ph, pw, 0, 0};
  RELAXOPS_CHECK(B >= 0 && C_in >= 1 && H >= 1 && W >= 1 && C_out >= 0, "logic_conv: invalid input sizes");
  RELAXOPS_CHECK(L >= 2 && (L & (L - 1)) == 0 && L <= (int64_t(1) << 16),
                 "logic_conv: leaves per tree must be a power of two in [2, 65536]");
  RELAXOPS_CHECK(kh >= 1 && kw >= 1 && sh >= 1 && sw >= 1 && ph >= 0 && pw >= 0,
                 "logic_conv: invalid kernel size, stride or padding");
  RELAXOPS_CHECK(H + 2 * ph >= kh && W + 2 * pw >= kw, "logic_conv: kernel larger than the padded input");
  p.Ho = (H + 2 * ph - kh) / sh + 1;
  p.Wo = (W + 2 * pw - kw) / sw + 1;
  return p;
}

// CPU kernels (conv_cpu.cpp), T = float or double. Forward: parallel over (batch item, output channel). Backward:
// parallel over batch items (each owns its grad_x slice and its coefficient partial sums); grad_x or grad_coef
// may be null (not computed).
template <typename T>
void logic_conv_forward_cpu(const LogicConvParams& p, const T* x, const int64_t* leaves, const T* coef, T* y);
template <typename T>
void logic_conv_backward_cpu(const LogicConvParams& p, const T* x, const int64_t* leaves, const T* coef,
                             const T* grad_y, const int64_t* csr_start, const int64_t* csr_entry, T* grad_x,
                             T* grad_coef);

// With an output activation and noise at every node (logic.h; noise index of node n at (b, k, oy, ox):
// ((((b C_out + k) Ho + oy) Wo + ox) (L - 1) + n)): v[L + n] = act(z), z = c0 + c1 a + (c2 + c3 a) b + noise.
// The backward recomputes z and multiplies each node's gradient by act'(z) before the rule above.
template <typename T>
void logic_conv_forward_act_cpu(const LogicConvParams& p, const T* x, const int64_t* leaves, const T* coef, int act,
                                int64_t seed, T noise_scale, T* y);
template <typename T>
void logic_conv_backward_act_cpu(const LogicConvParams& p, const T* x, const int64_t* leaves, const T* coef, int act,
                                 int64_t seed, T noise_scale, const T* grad_y, const int64_t* csr_start,
                                 const int64_t* csr_entry, T* grad_x, T* grad_coef);

// CUDA kernels (conv.cu). dtype: 0 = float32, 1 = float64, 2 = float16, 3 = bfloat16 (data x, y, grad_y, grad_x);
// coef / grad_coef and the workspace in float32 (float64 for dtype 1). The backward needs a device workspace of
// logic_conv_backward_cuda_workspace(...) bytes (leaf gradients [B, C_out, L, Ho Wo] when grad_x is wanted, then
// per-block coefficient sums when grad_coef is); grad_x or grad_coef may be null. The leaves and the CSR index
// must be valid (the Python wrapper checks them; the kernels do not).
int64_t logic_conv_backward_cuda_workspace(int dtype, const LogicConvParams& p, bool need_x, bool need_w);
void logic_conv_forward_cuda(int dtype, const LogicConvParams& p, const void* x, const int64_t* leaves,
                             const void* coef, void* y, std::uintptr_t stream);
void logic_conv_backward_cuda(int dtype, const LogicConvParams& p, const void* x, const int64_t* leaves,
                              const void* coef, const void* grad_y, const int64_t* csr_start, const int64_t* csr_entry,
                              void* grad_x, void* grad_coef, void* workspace, std::uintptr_t stream);
// With an activation and noise at every node (as the CPU kernels; same workspace).
void logic_conv_forward_act_cuda(int dtype, const LogicConvParams& p, const void* x, const int64_t* leaves,
                                 const void* coef, int act, int64_t seed, double noise_scale, void* y,
                                 std::uintptr_t stream);
void logic_conv_backward_act_cuda(int dtype, const LogicConvParams& p, const void* x, const int64_t* leaves,
                                  const void* coef, int act, int64_t seed, double noise_scale, const void* grad_y,
                                  const int64_t* csr_start, const int64_t* csr_entry, void* grad_x, void* grad_coef,
                                  void* workspace, std::uintptr_t stream);

}  // namespace relaxops
