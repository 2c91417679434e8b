// Fast soft sort and soft rank (Blondel et al. 2020, "Fast Differentiable Sorting and Ranking"): projections onto
// the permutahedron through isotonic regression solved by PAV (pool adjacent violators), O(n log n) per row (a
// sort, then a linear PAV), forward and backward. Conventions of torchsort 0.1.10 (ascending, ranks 1-based);
// spec sorting.md section 6.4.
//
// Every kernel works on one sorted row: y = sgn x sorted ASCENDING (sgn = -1 for descending=True, else +1; ties by
// index, as torch.sort(stable=True)), perm[j] = the element at sorted position j. The isotonic problems of the
// spec, rewritten in y (divided through by eps where that avoids forming x / eps or rho / eps, which overflow or
// lose precision: torchsort's float32 soft_sort at eps = 1e-4 adds and subtracts rho / eps ~ 1e7), become
// conditions on adjacent blocks P = [p, t) and T = [t, e] of sorted positions (cP = t - p, cT = e - t + 1):
//
//   rank L2  merge iff mean_T(y) - mean_P(y) <= eps (cP + cT) / 2
//   sort L2  merge iff mean_T(y) - mean_P(y) >= (cP + cT) / (2 eps)
//   rank KL  merge iff (y_e - y_{t-1}) / eps + log(S_T / S_P) <= log(W_T / W_P),
//            S_B = sum_{j in B} exp((y_j - max_B y) / eps), W_B = sum_{j in B} (j + 1)
//   sort KL  merge iff cP / eps + G(cP) - G(cT) <= (y_t - y_p) + log(S_P / S_T),
//            S_B = sum_{j in B} exp(min_B y - y_j), G(c) = log sum_{k < c} exp(-k / eps)
//
// (rank: theta = y / eps, w = rho, v = iso(theta - rho) / iso_KL(theta, log rho); sort: w = rho / eps, s = -y,
// v = iso(w - s) / iso_KL(w, s); "merge" is the PAV violation value(P) <= value(T) of the non-increasing
// constraint, ties pooled). The outputs at sorted position j of the block B = [s, e] (c = e - s + 1,
// mid = (s + e) / 2), exact for singletons (rank j + 1, sorted value y_j):
//
//   rank L2  r_j = (y_j - mean_B y) / eps + mid + 1             out[perm[j]] = r_j
//   rank KL  r_j = exp((y_j - y_e) / eps) / S_B * c (mid + 1)   out[perm[j]] = r_j
//   sort L2  o_j = mean_B y + (j - mid) / eps                   out[j] = sgn o_j
//   sort KL  o_j = y_s - log S_B + (j - s) / eps + G(c)         out[j] = sgn o_j
//
// Backward (vector-Jacobian products, block by block; g_j = grad_out at the output of position j):
//   rank L2  grad_x[perm[j]] = sgn (g_j - mean_B g) / eps
//   rank KL  grad_x[perm[j]] = sgn (r_j g_j - (r_j / W_B) sum_{i in B} r_i g_i) / eps
//   sort L2  grad_x[perm[j]] = mean_B g
//   sort KL  grad_x[perm[j]] = q_j sum_{i in B} g_i,  q_j = exp(y_s - y_j) / S_B   (softmax_B(-y))
//
// The block structure is RECORDED by the forward: block[j] = the first sorted position of j's block (int32).
// torchsort instead recovers it in the backward by comparing consecutive outputs with an absolute tolerance of
// 1e-9, which merges adjacent blocks whose values are close and splits nothing; ours is exact.
//
// Arithmetic: block statistics (means, relative sums of exponentials) and outputs in double for every input
// dtype; L2 means merge as convex combinations (no overflow for finite inputs); KL sums are relative to the
// block's extreme element (every term <= 1).
//
// Non-finite inputs (documented in relaxops.soft_rank / soft_sort; every backend):
// * a NaN makes every output and gradient of its row NaN;
// * soft_rank: +-inf are the limits as they go to +-inf: they take the extreme ranks (equal infinities are ties:
//   they share their positions' mean rank), the finite elements get the soft ranks over the finite positions
//   [lo, hi) (PAV runs there only: an infinite gap never pools), and infinite elements get gradient 0;
// * soft_sort: an infinity makes every output and gradient of its row NaN (the L2 limit pools the whole row).
//
// Memory layout (row-major, contiguous): x, out, grad_out, grad_x [B, n] of T; perm [B, n] int64; block [B, n]
// int32. The CPU forward sorts the rows itself and writes perm; the CUDA forward takes perm from the caller.
#pragma once

#include <cmath>
#include <cstdint>

#include "../common/common.h"

namespace relaxops {

enum FastSortOp : int { kSoftRank = 0, kSoftSort = 1 };
enum FastSortReg : int { kRegL2 = 0, kRegKL = 1 };

struct FastSortParams {
  int op;          // kSoftRank or kSoftSort
  int reg;         // kRegL2 or kRegKL
  double eps;      // regularization strength, finite and > 0
  int descending;  // 0: ascending (torchsort's convention), 1: descending (soft_rank(-x), -soft_sort(-x))
  double inv_eps;  // 1 / eps (the kernels multiply: a division per element costs as much as the rest of the PAV)
};

inline FastSortParams make_fastsort_params(int op, int reg, double eps, int descending) {
  return {op, reg, eps, descending, 1.0 / eps};
}

#if !defined(__CUDACC__)
using std::exp;
using std::expm1;
using std::log;
#endif

// G(c) = log sum_{k < c} exp(-k / eps) = log(expm1(-c / eps) / expm1(-1 / eps)): log c for large eps, 0 for small.
HOST_DEVICE inline double fastsort_log_geometric(double c, double eps) {
  return c <= 1.0 ? 0.0 : log(expm1(-c / eps) / expm1(-1.0 / eps));
}

// If the adjacent blocks P = [p, t) and T = [t, e] violate the isotonic order (the merge conditions of the header
// note), their merged statistic (block [p, e]) in *merged and true; else false. The statistics acc:
//   rank L2  sum_{j in B} (y_j - y_s), s = the block's start (merges and comparisons without a division, on
//            differences that stay small inside a block: exact for ties and large offsets)
//   sort L2  mean_B y (merged as a convex combination: no overflow for finite y)
//   rank KL  S_B relative to the block's max y_e (every term <= 1; the condition exponentiated: one exp)
//   sort KL  S_B relative to the block's min y_s
template <typename Y>
HOST_DEVICE inline bool fastsort_merge_if_violated(const FastSortParams& P, int64_t p, int64_t t, int64_t e,
                                                   double accP, double accT, const Y& y, double* merged) {
  const double cP = double(t - p), cT = double(e - t + 1);
  if (P.reg == kRegL2 && P.op == kSoftRank) {  // mean_T - mean_P <= eps (cP + cT) / 2, times cP cT
    const double d = double(y[t]) - double(y[p]);
    if (!(d * cP * cT + accT * cP - accP * cT <= P.eps * (cP + cT) * cP * cT * 0.5)) return false;
    *merged = accP + accT + cT * d;
    return true;
  }
  if (P.reg == kRegL2) {
    if (!(accT - accP >= (cP + cT) * 0.5 * P.inv_eps)) return false;
    const double inv_c = 1.0 / (cP + cT);
    *merged = accP * (cP * inv_c) + accT * (cT * inv_c);
    return true;
  }
  if (P.op == kSoftRank) {  // the gap is >= 0; E capped at e^700 never merges (W_T S_P < n^3)
    const double WP = cP * (double(p + t - 1) * 0.5 + 1.0), WT = cT * (double(t + e) * 0.5 + 1.0);
    const double z = (double(y[e]) - double(y[t - 1])) * P.inv_eps;
    const double E = exp(z < 700.0 ? z : 700.0);
    if (!(E * accT * WP <= WT * accP)) return false;
    *merged = accT + accP / E;
    return true;
  }
  const double d = double(y[t]) - double(y[p]);
  if (!(cP * P.inv_eps + fastsort_log_geometric(cP, P.eps) - fastsort_log_geometric(cT, P.eps) <=
        d + log(accP / accT)))
    return false;
  *merged = accP + exp(-d) * accT;
  return true;
}

// The statistic of the singleton block [j, j].
HOST_DEVICE inline double fastsort_single(const FastSortParams& P, double yj) {
  return P.reg == kRegKL ? 1.0 : (P.op == kSoftRank ? 0.0 : yj);
}

// PAV over the sorted positions [lo, hi) of y, one pass with a stack of blocks kept in place: first[e] is the
// start of the block ending at e, acc[s] the statistic of the block starting at s (entries of interior positions
// are stale). Each position is pushed once and merged at most once: O(hi - lo).
template <typename Y, typename I>
HOST_DEVICE inline void fastsort_pav(const FastSortParams& P, int64_t lo, int64_t hi, const Y& y, I* first,
                                     double* acc) {
  for (int64_t e = lo; e < hi; ++e) {
    int64_t t = e;
    double a = fastsort_single(P, double(y[e]));
    while (t > lo) {
      const int64_t p = first[t - 1];
      if (!fastsort_merge_if_violated(P, p, t, e, acc[p], a, y, &a)) break;
      t = p;
    }
    acc[t] = a;
    first[e] = I(t);
  }
}

// The outputs of the block [s, e] with statistic acc (before the sign and scatter of the header note): constants
// per block (fastsort_block), then one value per position (fastsort_value).
struct FastSortBlock {
  double k0, k1;
};

template <typename Y>
HOST_DEVICE inline FastSortBlock fastsort_block(const FastSortParams& P, int64_t s, int64_t e, double acc,
                                                const Y& y) {
  const double c = double(e - s + 1), mid = double(s + e) * 0.5;
  if (P.op == kSoftRank) {
    if (P.reg == kRegL2) return {acc / c, mid + 1.0};    // mean_B (y - y_s), rank offset
    return {c * (mid + 1.0) / acc, double(y[e])};        // W_B / S_B, the block's max
  }
  if (P.reg == kRegL2) return {acc, mid};                 // mean_B y, mid
  return {double(y[s]) - log(acc) + fastsort_log_geometric(c, P.eps), double(s)};
}

template <typename Y>
HOST_DEVICE inline double fastsort_value(const FastSortParams& P, int64_t j, int64_t s, int64_t e,
                                         const FastSortBlock& K, const Y& y) {
  if (P.op == kSoftRank) {
    if (P.reg == kRegL2) return ((double(y[j]) - double(y[s])) - K.k0) * P.inv_eps + K.k1;
    return s == e ? double(j + 1) : exp((double(y[j]) - K.k1) * P.inv_eps) * K.k0;
  }
  if (P.reg == kRegKL && s == e) return double(y[j]);
  return K.k0 + (double(j) - K.k1) * P.inv_eps;
}

// One row after its sort (y: the sorted values sgn x[perm[j]], ascending, NaN last; nan: the row holds a NaN): the
// non-finite rules, PAV over the finite positions, then one pass over the blocks from the end writing the outputs
// and block (which holds PAV's block ends until then). acc: n doubles of scratch.
template <typename T, typename Y>
HOST_DEVICE inline void fastsort_forward_row(const FastSortParams& P, int64_t n, bool nan, const Y& y,
                                             const int64_t* perm, T* out, int32_t* block, double* acc) {
  int64_t lo = 0, hi = n;  // the finite positions (NaN sorts last: the row is NaN anyway)
  while (lo < n && y[lo] == -INFINITY) ++lo;
  while (hi > lo && !(double(y[hi - 1]) < INFINITY)) --hi;
  if (nan || (P.op == kSoftSort && (lo > 0 || hi < n))) {
    for (int64_t j = 0; j < n; ++j) {
      out[j] = T(NAN);
      block[j] = int32_t(j);
    }
    return;
  }
  const double sgn = P.descending ? -1.0 : 1.0;
  fastsort_pav(P, lo, hi, y, block, acc);
  for (int64_t e = hi - 1; e >= lo;) {
    const int64_t s = block[e];
    const FastSortBlock K = fastsort_block(P, s, e, acc[s], y);
    for (int64_t j = s; j <= e; ++j) {
      block[j] = int32_t(s);
      const double v = fastsort_value(P, j, s, e, K, y);
      if (P.op == kSoftRank)
        out[perm[j]] = T(v);
      else
        out[j] = T(sgn * v);
    }
    e = s - 1;
  }
  // soft_rank's infinite groups [0, lo) and [hi, n): equal infinities share their positions' mean rank
  for (int g = 0; g < 2; ++g) {
    const int64_t s = g == 0 ? 0 : hi, e = g == 0 ? lo : n;
    for (int64_t j = s; j < e; ++j) {
      block[j] = int32_t(s);
      out[perm[j]] = T(double(s + e - 1) * 0.5 + 1.0);
    }
  }
}

// The backward of one row (g = grad_out), block by block (the header note's vector-Jacobian products).
template <typename T>
HOST_DEVICE inline void fastsort_backward_row(const FastSortParams& P, int64_t n, const T* g, const T* out,
                                              const T* x, const int64_t* perm, const int32_t* block, T* gx) {
  const double sgn = P.descending ? -1.0 : 1.0;
  bool nan_row = false;  // NaN, or an infinity in soft_sort: the row's gradient is NaN
  for (int64_t c = 0; c < n; ++c) {
    const double v = double(x[c]);
    nan_row |= v != v || (P.op == kSoftSort && (v == INFINITY || v == -INFINITY));
  }
  if (nan_row) {
    for (int64_t c = 0; c < n; ++c) gx[c] = T(NAN);
    return;
  }
  for (int64_t s = 0; s < n;) {
    int64_t e = s;
    while (e + 1 < n && block[e + 1] == s) ++e;
    const double c = double(e - s + 1);
    if (P.op == kSoftRank && P.reg == kRegL2) {
      double sum = 0.0;
      for (int64_t j = s; j <= e; ++j) sum += double(g[perm[j]]);
      const double mean = sum / c;
      for (int64_t j = s; j <= e; ++j) gx[perm[j]] = T(sgn * (double(g[perm[j]]) - mean) * P.inv_eps);
    } else if (P.op == kSoftRank) {
      double dot = 0.0;
      for (int64_t j = s; j <= e; ++j) dot += double(out[perm[j]]) * double(g[perm[j]]);
      const double W = c * (double(s + e) * 0.5 + 1.0);
      for (int64_t j = s; j <= e; ++j) {
        const double r = double(out[perm[j]]);
        gx[perm[j]] = T(sgn * (r * double(g[perm[j]]) - r / W * dot) * P.inv_eps);
      }
    } else if (P.reg == kRegL2) {
      double sum = 0.0;
      for (int64_t j = s; j <= e; ++j) sum += double(g[j]);
      for (int64_t j = s; j <= e; ++j) gx[perm[j]] = T(sum / c);
    } else {
      const double ys = sgn * double(x[perm[s]]);
      double S = 0.0, sum = 0.0;
      for (int64_t j = s; j <= e; ++j) {
        S += exp(ys - sgn * double(x[perm[j]]));
        sum += double(g[j]);
      }
      for (int64_t j = s; j <= e; ++j) gx[perm[j]] = T(exp(ys - sgn * double(x[perm[j]])) / S * sum);
    }
    s = e + 1;
  }
  if (P.op == kSoftRank)  // the limit does not depend on an infinite element
    for (int64_t c = 0; c < n; ++c)
      if (double(x[c]) == INFINITY || double(x[c]) == -INFINITY) gx[c] = T(0);
}

// perm holds indices in [0, n) and block is a partition into runs (block[0] = 0, block[j] in {j, block[j - 1]}).
HOST_DEVICE inline bool fastsort_valid_row(int64_t n, const int64_t* perm, const int32_t* block) {
  bool ok = block[0] == 0;
  for (int64_t j = 0; j < n; ++j) {
    ok &= static_cast<uint64_t>(perm[j]) < static_cast<uint64_t>(n);
    if (j > 0) ok &= block[j] == j || block[j] == block[j - 1];
  }
  return ok;
}

// CPU kernels (fastsort_cpu.cpp), OpenMP over rows. The forward sorts each row and writes out, perm and block; the
// backward takes them back (out is read by rank KL, x by sort KL and for the non-finite rules) and checks that
// perm holds indices in [0, n) and block a partition into runs (block[0] = 0, block[j] in {j, block[j - 1]}).
template <typename T>
void fastsort_forward_cpu(const FastSortParams& P, int64_t B, int64_t n, const T* x, T* out, int64_t* perm,
                          int32_t* block);
template <typename T>
void fastsort_backward_cpu(const FastSortParams& P, int64_t B, int64_t n, const T* grad_out, const T* out,
                           const T* x, const int64_t* perm, const int32_t* block, T* grad_x);

// CUDA launchers (fastsort.cu): one thread per row (sequential PAV, as torchsort's CUDA kernel); perm is an INPUT
// of the forward (the caller sorts sgn x with torch.sort(stable=True)); work is queued on `stream`. workspace: a
// device buffer of B * n doubles (the block statistics, indexed by block start) for the forward, none for the
// backward, which gives a row with a malformed perm or block a NaN gradient instead of throwing (no host sync).
template <typename T>
void fastsort_forward_cuda(const FastSortParams& P, int64_t B, int64_t n, const T* x, const int64_t* perm, T* out,
                           int32_t* block, double* workspace, std::uintptr_t stream);
template <typename T>
void fastsort_backward_cuda(const FastSortParams& P, int64_t B, int64_t n, const T* grad_out, const T* out,
                            const T* x, const int64_t* perm, const int32_t* block, T* grad_x, std::uintptr_t stream);

// Checks of the scalar parameters shared by the bindings (C++ checks its own invariants).
inline void fastsort_check_params(const FastSortParams& P, int64_t B, int64_t n) {
  RELAXOPS_CHECK(P.op == kSoftRank || P.op == kSoftSort, "fastsort: op must be 0 (rank) or 1 (sort)");
  RELAXOPS_CHECK(P.reg == kRegL2 || P.reg == kRegKL, "fastsort: regularization must be 0 (l2) or 1 (kl)");
  RELAXOPS_CHECK(P.eps >= 2.2250738585072014e-308 && P.eps < INFINITY,
                 "fastsort: regularization_strength must be finite and >= 2.2250738585072014e-308 (1 / it finite)");
  RELAXOPS_CHECK(P.inv_eps == 1.0 / P.eps, "fastsort: inv_eps must be 1 / eps (make_fastsort_params)");
  RELAXOPS_CHECK(P.descending == 0 || P.descending == 1, "fastsort: descending must be 0 or 1");
  RELAXOPS_CHECK(B >= 0 && n >= 1 && n < (int64_t(1) << 31), "fastsort: need B >= 0 and 1 <= n < 2^31");
}

}  // namespace relaxops
