// Relaxed edit distance (Levenshtein), fused: AlgoVision's program of docs/math/algorithms.md §4.4 in one forward and
// one backward kernel per direction.
//
// Inputs s [B, n, K] and t [B, m, K] (letter distributions, or any vectors), n, m >= 0, K >= 1. Per row:
//
//   cos_ij = <s_i / N(s_i), t_j / N(t_j)>,   N(x) = max(|x|_2, 1e-8)              (torch.cosine_similarity)
//   D[i][0] = i,  D[0][j] = j
//   D[i+1][j+1] = Min_beta(X),  X = (D[i][j+1] + 1, D[i+1][j] + 1, D[i][j] + 1 - cos_ij)
//   Min_beta(X) = sum_k w_k X_k,  w = softmin(beta X)
//
// The cosine is torch's (2.x): each norm is clamped to eps = 1e-8 separately (not the product), and the clamp is
// taken under no_grad, so the derivative of N(x) is that of |x|_2, x / |x|_2 (0 at x = 0):
//
//   d cos / d x = y / (N(x) N(y)) - cos / N(x) * x / |x|_2
//
// AlgoVision's If(CosineSimilarity) gives cost = cos * 0 + (1 - cos) * 1, without its branch skip
// (docs/math/algorithms.md §2.7): the fused op is the program at epsilon = 0.
//
// Backward: with G = dl/dD (initialised to grad_D, or 0 where only the distance has a gradient, plus grad_distance at
// D[n][m]), reverse DP over the cells,
//   dMin/dX_k = w_k (1 - beta (X_k - Min)),
//   G[i][j+1] += G[i+1][j+1] dMin/dX_0,  G[i+1][j] += ... dMin/dX_1,  G[i][j] += ... dMin/dX_2,
//   gcos_ij = -G[i+1][j+1] dMin/dX_2,
// then grad_s_i = sum_j gcos_ij d cos_ij / d s_i (and t likewise): O(n m K) per row. Boundary cells are constants.
//
// Memory layout (row-major, contiguous, T = float or double): s [B, n, K], t [B, m, K], D and grad_D
// [B, n + 1, m + 1] (grad_D may be null), grad_distance [B], cos [B, n, m] (written by the forward, read by the
// backward), grad_s [B, n, K], grad_t [B, m, K]. Non-finite letters give NaN cosines; NaN spreads through every
// later cell of the row (its distance) and into the whole row's gradient.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "../common/common.h"
#include "../common/relax.h"

namespace relaxops {

#if !defined(__CUDACC__)
using std::fabs;
using std::sqrt;
#endif

constexpr double kEditDistanceCosEps = 1e-8;  // torch.nn.functional.cosine_similarity's default eps

struct EditDistanceParams {
  int64_t B, n, m, K;
  double beta;  // inverse temperature of Min, finite and > 0
};

inline void edit_distance_check_params(const EditDistanceParams& P) {
  RELAXOPS_CHECK(P.B >= 0 && P.n >= 0 && P.m >= 0 && P.K >= 1, "edit_distance: need B, n, m >= 0 and K >= 1");
  RELAXOPS_CHECK(P.n < (int64_t(1) << 31) && P.m < (int64_t(1) << 31) && P.K < (int64_t(1) << 31),
                 "edit_distance: n, m and K must be below 2^31");
  RELAXOPS_CHECK(P.beta > 0 && std::isfinite(P.beta), "edit_distance: beta must be finite and > 0");
}

// |x|_2 as torch.linalg.vector_norm computes it: the square root of the sum of squares (which overflows for |x| >
// sqrt(max): then cos = 0), except for K = 1, a reduction over one element, which it returns as |x_0|.
template <typename T>
HOST_DEVICE inline T edit_distance_norm(const T* x, int64_t K) {
  if (K == 1) return fabs(x[0]);
  T acc = 0;
  for (int64_t k = 0; k < K; ++k) acc += x[k] * x[k];
  return sqrt(acc);
}

// N(x) from |x|_2: clamped to eps, NaN kept (as torch's clamp_min).
template <typename T>
HOST_DEVICE inline T edit_distance_clamped_norm(T r) {
  return r < T(kEditDistanceCosEps) ? T(kEditDistanceCosEps) : r;
}

// Min_beta of the three candidates of a cell, the softmin computed relative to min X (every exponent <= 0; equal
// candidates give exactly their value; exp is relax_exp, fast_exp for float on the CPU); if dv != nullptr,
// dMin/dX_k = w_k (1 - beta (X_k - Min)), 0 where w_k = 0 (beta (X_k - Min) is then unbounded). NaN in any
// candidate gives NaN.
template <typename T>
HOST_DEVICE inline T edit_distance_cell(T beta, T up, T left, T diag, T cost, T* dv) {
  const T x0 = up + T(1), x1 = left + T(1), x2 = diag + cost;
  T mn = x0 < x1 ? x0 : x1;
  mn = x2 < mn ? x2 : mn;
  const T e0 = relax_exp(-beta * (x0 - mn)), e1 = relax_exp(-beta * (x1 - mn)), e2 = relax_exp(-beta * (x2 - mn));
  const T inv = T(1) / (e0 + e1 + e2);
  const T v = mn + (e0 * (x0 - mn) + e1 * (x1 - mn) + e2 * (x2 - mn)) * inv;
  if (dv) {
    const T w0 = e0 * inv, w1 = e1 * inv, w2 = e2 * inv;
    dv[0] = w0 == T(0) ? T(0) : w0 * (T(1) - beta * (x0 - v));
    dv[1] = w1 == T(0) ? T(0) : w1 * (T(1) - beta * (x1 - v));
    dv[2] = w2 == T(0) ? T(0) : w2 * (T(1) - beta * (x2 - v));
  }
  return v;
}

// CPU kernels (edit_distance_cpu.cpp), OpenMP over rows.
template <typename T>
void edit_distance_forward_cpu(const EditDistanceParams& P, const T* s, const T* t, T* D, T* cos);
template <typename T>
void edit_distance_backward_cpu(const EditDistanceParams& P, const T* grad_distance, const T* grad_D, const T* s,
                                const T* t, const T* D, const T* cos, T* grad_s, T* grad_t);

// CUDA launchers (edit_distance.cu): device pointers, queued on `stream`. The norms and cosines run over all
// (row, pair) items, the DP as an anti-diagonal wavefront with one block per row. `workspace`: at least
// edit_distance_cuda_workspace(P, backward) elements of T.
inline int64_t edit_distance_cuda_workspace(const EditDistanceParams& P, bool backward) {
  // forward: the norms |s_i|, |t_j|; backward also G [(n + 1)(m + 1)], the partials [n m 3] and gcos [n m]
  return P.B * ((P.n + P.m) + (backward ? (P.n + 1) * (P.m + 1) + 4 * P.n * P.m : 0));
}
template <typename T>
void edit_distance_forward_cuda(const EditDistanceParams& P, const T* s, const T* t, T* D, T* cos, T* workspace,
                                std::uintptr_t stream);
template <typename T>
void edit_distance_backward_cuda(const EditDistanceParams& P, const T* grad_distance, const T* grad_D, const T* s,
                                 const T* t, const T* D, const T* cos, T* grad_s, T* grad_t, T* workspace,
                                 std::uintptr_t stream);

}  // namespace relaxops
