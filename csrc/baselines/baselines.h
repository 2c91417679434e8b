// NeuralSort (Grover et al. 2019) and SoftSort (Prillo & Eisenschlos 2020) as fused ops that compute only
// the k requested columns of the relaxed sort matrix.
//
// Convention (that of the sortnet ops, code convention of the spec): a row x[0..n) gives
//   X[c, j] = weight of element c at ascending position r_j = n - k + j,   j = 0..k-1,
// each column a softmax over the elements c (columns sum to 1); column k-1 is the largest element.
//
// Memory layout (row-major, contiguous): x [B, n]; X [B, n, k] (X[b, c, j]); perm [B, n] int64, the stable
// ascending sort permutation (x[perm[q]] is the q-th smallest; NaN last, ties by index, as
// torch.sort(stable=True)); grad_X like X, grad_x like x. Work per row: O(n log n + n k), no n x n buffer.
//
// 1. neuralsort_forward: with t_q = x[perm[q]], S_q = t_0 + ... + t_{q-1} and b_c = sum_i |x_c - x_i|,
//      z[c, j] = ((2 r_j + 1 - n) x_c - b_c) / tau,   X[:, j] = softmax_c z[:, j].
//    For the element at sorted position q, b = (2q + 1 - n) t_q + S_n - S_q - S_{q+1}; dropping the
//    column constant S_n (softmax is shift invariant) gives
//      z'[perm[q], j] = (2 (r_j - q) t_q + D_q) / tau,   D_q = 2 S_q + t_q,
//    whose terms are small for the elements that carry weight (q near r_j). S is accumulated in double.
//    The column maximum is z'[perm[r_j], j] = D_{r_j} / tau: z'(q) - z'(r) = -(2 sum_{p in [q, r)} (t_p - t_q)
//    + t_r - t_q) <= 0 for q < r, and -(2 sum_{p in (r, q)} (t_q - t_p) + t_q - t_r) <= 0 for q > r; so each
//    entry costs one exp (a sum pass, then the normalised write).
// 2. neuralsort_backward: per column dot_j = sum_c X G; dz = X (G - dot_j) (softmax adjoint);
//      grad_x_c = sum_j dz[c, j] (2 r_j + 1 - n) / tau                       (direct path)
//      beta_c   = -sum_j dz[c, j] / tau                                      (adjoint of b_c)
//    then the adjoint of b (d b_c / d x_m = [c == m] sum_i sign(x_c - x_i) - sign(x_c - x_m), sign(0) = 0
//    as torch.abs' gradient) in sorted order: for the tie group [lo, hi) of position q,
//      grad_x[perm[q]] += beta (lo - (n - hi)) + sum_{p < lo} beta_perm[p] - sum_{p >= hi} beta_perm[p].
// 3. softsort_forward: z[c, j] = -|t_{r_j} - x_c|^pow / tau, X[:, j] = softmax_c z[:, j]; the column maximum
//    is 0 (the element sorted at r_j).
// 4. softsort_backward: dz as in 2; with phi'(d) = pow |d|^(pow-1) sign(d) (0 at d = 0),
//      grad_x_c += sum_j dz[c, j] phi'(t_{r_j} - x_c) / tau                 (element path)
//      grad_x[perm[r_j]] -= sum_c dz[c, j] phi'(t_{r_j} - x_c) / tau        (path through the sorted value)
// NaN inputs give NaN columns (every column's softmax sees every element); no crash.
#pragma once

#include <cmath>
#include <cstdint>

#include "../common/common.h"

namespace relaxops {

#if !defined(__CUDACC__)
using std::fabs;
using std::pow;
#endif

// SoftSort exponents with an exact fast path: pow == 1 (|d|), pow == 2 (d^2), anything else.
enum SoftSortPow : int { kPowOne = 0, kPowTwo = 1, kPowGeneral = 2 };

inline int softsort_pow_kind(double p) { return p == 1.0 ? kPowOne : (p == 2.0 ? kPowTwo : kPowGeneral); }

// |d|^p; 0 at d = 0 for every p > 0.
template <int K, typename T>
HOST_DEVICE inline T softsort_phi(T d, T p) {
  if (K == kPowOne) return fabs(d);
  if (K == kPowTwo) return d * d;
  const T a = fabs(d);
  return a == T(0) ? T(0) : pow(a, p);
}

// d/dd |d|^p = p |d|^(p-1) sign(d), defined as 0 at d = 0 (also for p < 1, where the one-sided slopes are
// infinite: the entry of the element at position r itself has d = 0 identically, so its true slope is 0).
template <int K, typename T>
HOST_DEVICE inline T softsort_dphi(T d, T p) {
  if (K == kPowOne) return d > T(0) ? T(1) : (d < T(0) ? T(-1) : T(0));
  if (K == kPowTwo) return T(2) * d;
  const T a = fabs(d);
  if (a == T(0)) return T(0);
  const T g = p * pow(a, p - T(1));
  return d > T(0) ? g : -g;
}

// CPU kernels (baselines_cpu.cpp), OpenMP over rows; the forward kernels sort each row themselves and write
// perm (the backward kernels take it back).
template <typename T>
void neuralsort_forward_cpu(int64_t B, int64_t n, int64_t k, double tau, const T* x, T* X, int64_t* perm);
template <typename T>
void neuralsort_backward_cpu(int64_t B, int64_t n, int64_t k, double tau, const T* grad_X, const T* X,
                             const T* x, const int64_t* perm, T* grad_x);
template <typename T>
void softsort_forward_cpu(int64_t B, int64_t n, int64_t k, double tau, double pow, const T* x, T* X,
                          int64_t* perm);
template <typename T>
void softsort_backward_cpu(int64_t B, int64_t n, int64_t k, double tau, double pow, const T* grad_X, const T* X,
                           const T* x, const int64_t* perm, T* grad_x);

// CUDA launchers (baselines.cu). All pointers are device pointers; work is queued on `stream` (a
// cudaStream_t as an integer) on the device owning the data; each launch is checked and a failure throws
// std::runtime_error naming the kernel. perm is an INPUT here (the caller sorts, torch.sort(stable=True)).
//   Column kernels: one block per (row, tile of up to 32 columns), threads (column, element stride); the
//     per-column reductions (softmax max/sum, dot_j) combine the element strides in shared memory.
//   Element kernels: one thread per (row, element), a loop over the k columns of its row of X.
//   Row kernels (NeuralSort's sorted prefix sums and the adjoint of b): one block per row, chunked block
//     scans (cub) with a carry between chunks.
//   workspace: caller-allocated device buffer of T, at least
//     neuralsort_forward: B n (D in sorted order);  neuralsort_backward: B (n + k) (dot, beta);
//     softsort_backward: 2 B k (dot, the sorted-value adjoint);  softsort_forward: none.
template <typename T>
void neuralsort_forward_cuda(int64_t B, int64_t n, int64_t k, double tau, const T* x, const int64_t* perm, T* X,
                             T* workspace, std::uintptr_t stream);
template <typename T>
void neuralsort_backward_cuda(int64_t B, int64_t n, int64_t k, double tau, const T* grad_X, const T* X,
                              const T* x, const int64_t* perm, T* grad_x, T* workspace, std::uintptr_t stream);
template <typename T>
void softsort_forward_cuda(int64_t B, int64_t n, int64_t k, double tau, double pow, const T* x,
                           const int64_t* perm, T* X, std::uintptr_t stream);
template <typename T>
void softsort_backward_cuda(int64_t B, int64_t n, int64_t k, double tau, double pow, const T* grad_X,
                            const T* X, const T* x, const int64_t* perm, T* grad_x, T* workspace,
                            std::uintptr_t stream);

}  // namespace relaxops
