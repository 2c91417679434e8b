// NeuralSort (Grover et al. 2019) and SoftSort (Prillo & Eisenschlos 2020) as fused ops that compute only
// the k requested columns of the relaxed sort matrix, on rows of varying length.
//
// Convention (that of the sortnet ops; docs/math/baselines.md §1, §7): a row x[0..n) holds L real entries
// first (lengths[b]; lengths == nullptr: L = n), then pads that are never read. The op on the row is the op on
// x[0..L) alone (L in place of n in every formula below). It gives
//   X[c, j] = weight of element c at ascending position r_j = j + shift,   j = 0..k-1,
// right-aligned (left == false): shift = L - k, kept columns j >= k - k_b, k_b = min(ks[b], L) (ks == nullptr:
// k); full rows: r_j = n - k + j, column k-1 the largest element. Left-aligned (left == true, k = n, ks ==
// nullptr; the full matrix): shift = 0, kept columns j < L. Each kept column is a softmax over the real
// elements c < L (it sums to 1); dropped columns, pad rows c >= L and the gradient of pads are 0.
//
// Memory layout (row-major, contiguous): x [B, n]; lengths, ks [B] int64 or nullptr; X [B, n, k] (X[b, c, j]);
// perm [B, n] int64: positions [0, L) the stable ascending sort permutation of the real entries (x[perm[q]] is
// the q-th smallest; NaN last, ties by index, as torch.sort(stable=True)), positions [L, n) the pads in order;
// grad_X like X, grad_x like x. Work per row: O(L log L + L k_b) plus zeroing the rest of X, no n x n buffer.
//
// 1. neuralsort_forward: with t_q = x[perm[q]], S_q = t_0 + ... + t_{q-1} and b_c = sum_i |x_c - x_i|,
//      z[c, j] = ((2 r_j + 1 - L) x_c - b_c) / tau,   X[:, j] = softmax_c z[:, j]   (c, i < L).
//    For the element at sorted position q, b = (2q + 1 - L) t_q + S_L - S_q - S_{q+1}; dropping the
//    column constant S_L (softmax is shift invariant) gives
//      z'[perm[q], j] = (2 (r_j - q) t_q + D_q) / tau,   D_q = 2 S_q + t_q.
//    The column maximum is z'[perm[r_j], j]: z'(q) - z'(r) = -(2 sum_{p in [q, r)} (t_p - t_q) + t_r - t_q)
//    <= 0 for q < r, and -(2 sum_{p in (r, q)} (t_q - t_p) + t_q - t_r) <= 0 for q > r; so each entry costs
//    one exp of the difference (a sum pass, then the normalised write), taken as
//      delta(q, r) = min(0, 2 (r - q) t_q + D_q - D_r) / tau                     (neuralsort_delta)
//    with t_q and S accumulated in double from CENTRED values t_q - c (c = the median finite value; the
//    difference is shift invariant): the terms are then O(n (max - min)) whatever the offset of x, the
//    diagonal entry is exactly exp(0) = 1 (so the column sum is >= 1, never 0/0), and the min() only
//    removes rounding (the true difference is <= 0), so no exp overflows.
// 2. neuralsort_backward: per column dot_j = sum_c X G; dz = X (G - dot_j) (softmax adjoint);
//      grad_x_c = sum_j dz[c, j] (2 r_j + 1 - L) / tau                       (direct path)
//      beta_c   = -sum_j dz[c, j] / tau                                      (adjoint of b_c)
//    then the adjoint of b (d b_c / d x_m = [c == m] sum_i sign(x_c - x_i) - sign(x_c - x_m), sign(0) = 0
//    as torch.abs' gradient) in sorted order: for the tie group [lo, hi) of position q,
//      grad_x[perm[q]] += beta (lo - (L - hi)) + sum_{p < lo} beta_perm[p] - sum_{p in [hi, L)} beta_perm[p].
// 3. softsort_forward: z[c, j] = -|t_{r_j} - x_c|^pow / tau, X[:, j] = softmax_c z[:, j]; the column maximum
//    is 0 (the element sorted at r_j).
// 4. softsort_backward: dz as in 2; with phi'(d) = pow |d|^(pow-1) sign(d) (0 at d = 0),
//      grad_x_c += sum_j dz[c, j] phi'(t_{r_j} - x_c) / tau                 (element path)
//      grad_x[perm[r_j]] -= sum_c dz[c, j] phi'(t_{r_j} - x_c) / tau        (path through the sorted value)
//    a product dz phi' with dz == 0 is 0 (phi' may be infinite where the weight X is exactly 0).
//
// Non-finite inputs (the documented behaviour of relaxops.neuralsort / softsort; every backend):
// * +-inf are the largest / smallest values and X is the limit as they go to +-inf: the infinite elements
//   take the extreme positions, equal infinities sharing theirs equally (as ties do: weight 1 / count in
//   each of their columns), and the finite elements get the NeuralSort / SoftSort of the finite ones (weight
//   0 in the infinite columns and vice versa). The gradient with respect to an infinite element is 0.
//   NeuralSort: the limit is exactly the formulas of 1 and 2 over the finite positions [lo, hi) (the terms
//   of the infinite elements in b_c shift column constants: the coefficient 2 r_j + 1 - L and the counts of
//   the b adjoint then differ from the finite sub-row's by the same hi - lo, which cancel), with beta = 0 and
//   grad_x = 0 at the infinite elements. SoftSort: t_{r_j} - x_c of equal infinities is taken as 0 (their
//   limit), of other infinite pairs it is +-inf, giving weight 0.
// * A NaN makes the kept columns of its row of X NaN (it competes in every column), and the gradient of the
//   row's finite and NaN elements NaN. Pads stay 0 (they are never read).
// * tau so small that 1 / tau overflows T is computed with 1 / tau = the largest finite T (inverse_tau).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "../common/common.h"

namespace relaxops {

#if !defined(__CUDACC__)
using std::fabs;
using std::isinf;
using std::pow;
#endif

// 1 / tau in T, clamped to the largest finite T (so that 0 / tau stays 0 in a product with it).
template <typename T>
inline T inverse_tau(double tau) {
  const double inv = 1.0 / tau, mx = double(std::numeric_limits<T>::max());
  return T(inv < mx ? inv : mx);
}

// The columns of row b (the convention above): L real entries, kept columns [j0, j1), column j at ascending
// position j + shift.
struct RowColumns {
  int64_t L, j0, j1, shift;
};

HOST_DEVICE inline RowColumns row_columns(const int64_t* lengths, const int64_t* ks, bool left, int64_t n, int64_t k,
                                          int64_t b) {
  const int64_t L = lengths ? lengths[b] : n;
  int64_t kb = ks ? ks[b] : k;
  if (kb > L) kb = L;
  const int64_t shift = left ? 0 : L - k;
  return {L, L - kb - shift, L - shift, shift};  // kept positions [L - k_b, L)
}

// NeuralSort: the logit of sorted position q relative to the column maximum (column of sorted position r),
// <= 0 (item 1 and the limits of the non-finite note): tq, tr the sorted values, cq = t_q - c, Dq, Dr the
// centred D, steps = r - q. A NaN in tq or tr gives NaN (tq + tr).
template <typename T>
HOST_DEVICE inline T neuralsort_delta(T tq, T tr, T cq, T Dq, T Dr, T steps, T inv_tau) {
  if (tq != tq || tr != tr) return tq + tr;
  const T minus_inf = -T(INFINITY);
  if (isinf(tr)) return tq == tr ? T(0) : minus_inf;
  if (isinf(tq)) return minus_inf;
  const T d = T(2) * steps * cq + (Dq - Dr);
  return (d < T(0) ? d : T(0)) * inv_tau;
}

// SoftSort: t - x with equal values (also equal infinities, whose difference is NaN) giving 0.
template <typename T>
HOST_DEVICE inline T softsort_gap(T t, T x) {
  return t == x ? T(0) : t - x;
}

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

// dz phi'(d) with the convention 0 * phi' = 0 (phi' is infinite at infinite d, where the weight X is 0).
template <int K, typename T>
HOST_DEVICE inline T softsort_slope_term(T dz, T d, T p) {
  return dz == T(0) ? T(0) : dz * softsort_dphi<K, T>(d, p);
}

// CPU kernels (baselines_cpu.cpp), parallel over rows; the forward kernels sort each row themselves and write
// perm (the backward kernels take it back). They check lengths in [0, n], ks in [0, k], left only with k = n and
// no ks, and perm in [0, n).
template <typename T>
void neuralsort_forward_cpu(int64_t B, int64_t n, int64_t k, double tau, const T* x, const int64_t* lengths,
                            const int64_t* ks, bool left, T* X, int64_t* perm);
template <typename T>
void neuralsort_backward_cpu(int64_t B, int64_t n, int64_t k, double tau, const T* grad_X, const T* X, const T* x,
                             const int64_t* perm, const int64_t* lengths, const int64_t* ks, bool left, T* grad_x);
template <typename T>
void softsort_forward_cpu(int64_t B, int64_t n, int64_t k, double tau, double pow, const T* x, const int64_t* lengths,
                          const int64_t* ks, bool left, T* X, int64_t* perm);
template <typename T>
void softsort_backward_cpu(int64_t B, int64_t n, int64_t k, double tau, double pow, const T* grad_X, const T* X,
                           const T* x, const int64_t* perm, const int64_t* lengths, const int64_t* ks, bool left,
                           T* grad_x);

// CUDA launchers (baselines.cu). All pointers are device pointers; work is queued on `stream` (a
// cudaStream_t as an integer) on the device owning the data; each launch is checked and a failure throws
// std::runtime_error naming the kernel. perm, lengths, ks are INPUTS here (the caller sorts the real entries
// stably, pads last, and checks lengths and ks).
//   Column kernels: one block per (row, tile of up to 32 columns), threads (column, element stride) over the
//     row's L real elements; dropped columns and pad rows are written 0; the per-column reductions (softmax
//     sum, dot_j) combine the element strides in shared memory.
//   Element kernels: one thread per (row, element), a loop over the kept columns of its row of X (pads: 0).
//   Row kernels (NeuralSort's sorted prefix sums and the adjoint of b): one block per row, chunked block
//     scans (cub) over the first L positions with a carry between chunks.
//   workspace: caller-allocated device buffer of T, at least
//     neuralsort_forward: B (n + 1) (D in sorted order, then the B centres c);
//     neuralsort_backward: B (n + k) (dot, beta);
//     softsort_backward: 2 B k (dot, the sorted-value adjoint);  softsort_forward: none.
template <typename T>
void neuralsort_forward_cuda(int64_t B, int64_t n, int64_t k, double tau, const T* x, const int64_t* perm,
                             const int64_t* lengths, const int64_t* ks, bool left, T* X, T* workspace,
                             std::uintptr_t stream);
template <typename T>
void neuralsort_backward_cuda(int64_t B, int64_t n, int64_t k, double tau, const T* grad_X, const T* X, const T* x,
                              const int64_t* perm, const int64_t* lengths, const int64_t* ks, bool left, T* grad_x,
                              T* workspace, std::uintptr_t stream);
template <typename T>
void softsort_forward_cuda(int64_t B, int64_t n, int64_t k, double tau, double pow, const T* x, const int64_t* perm,
                           const int64_t* lengths, const int64_t* ks, bool left, T* X, std::uintptr_t stream);
template <typename T>
void softsort_backward_cuda(int64_t B, int64_t n, int64_t k, double tau, double pow, const T* grad_X, const T* X,
                            const T* x, const int64_t* perm, const int64_t* lengths, const int64_t* ks, bool left,
                            T* grad_x, T* workspace, std::uintptr_t stream);

}  // namespace relaxops
