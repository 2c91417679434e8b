// Fast soft sort and soft rank (Blondel et al. 2020, "Fast Differentiable Sorting and Ranking"): projections onto
// the permutahedron through isotonic regression solved by PAV (pool adjacent violators), O(n log n) per row (a
// sort, then a linear PAV), forward and backward. Conventions of torchsort 0.1.10 (ascending, ranks 1-based);
// docs/math/fastsort.md.
//
// Every kernel works on one sorted row: y = sgn x sorted ASCENDING (sgn = -1 for descending=True, else +1; ties by
// index, as torch.sort(stable=True)), perm[j] = the element at sorted position j. The isotonic problems of
// docs/math/fastsort.md §1, rewritten in y (divided through by eps where that avoids forming x / eps or rho / eps,
// which overflow or lose precision: torchsort's float32 soft_sort at eps = 1e-4 adds and subtracts rho / eps ~ 1e7),
// become conditions on adjacent blocks P = [p, t) and T = [t, e] of sorted positions (cP = t - p, cT = e - t + 1):
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
//
// Padded rows: lengths [B] int64 (or null: every row full, L_b = n). Row b is then the row of its first L_b
// entries alone: every kernel runs the row functions below with n = L_b on the row's first L_b entries (sort, PAV,
// outputs, backward: the work scales with L_b), so perm[0, L_b) holds indices in [0, L_b), and the pads [L_b, n)
// are never read. The forward writes out[j] = 0, perm[j] = j, block[j] = j at the pads (out[j] is the pad element's
// rank, or the sorted value at the pad position: both 0), the backward grad_x[j] = 0.
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
  if (!(cP * P.inv_eps + fastsort_log_geometric(cP, P.eps) - fastsort_log_geometric(cT, P.eps) <= d + log(accP / accT)))
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
// are stale); with kBothEnds also first[s] = e (the chunked PAV below walks blocks forwards too). Each position is
// pushed once and merged at most once: O(hi - lo).
template <bool kBothEnds = false, typename Y, typename I>
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
    if (kBothEnds) first[t] = I(e);
    first[e] = I(t);
  }
}

// The outputs of the block [s, e] with statistic acc (before the sign and scatter of the header note): constants
// per block (fastsort_block), then one value per position (fastsort_value).
struct FastSortBlock {
  double k0, k1;
};

template <typename Y>
HOST_DEVICE inline FastSortBlock fastsort_block(const FastSortParams& P, int64_t s, int64_t e, double acc, const Y& y) {
  const double c = double(e - s + 1), mid = double(s + e) * 0.5;
  if (P.op == kSoftRank) {
    if (P.reg == kRegL2) return {acc / c, mid + 1.0};  // mean_B (y - y_s), rank offset
    return {c * (mid + 1.0) / acc, double(y[e])};      // W_B / S_B, the block's max
  }
  if (P.reg == kRegL2) return {acc, mid};  // mean_B y, mid
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

// The finite positions [lo, hi) of a sorted row (y ascending, NaN last: a row with a NaN is NaN anyway).
template <typename Y>
HOST_DEVICE inline void fastsort_finite_range(int64_t n, const Y& y, int64_t* lo, int64_t* hi) {
  *lo = 0;
  *hi = n;
  while (*lo < n && y[*lo] == -INFINITY) ++*lo;
  while (*hi > *lo && !(double(y[*hi - 1]) < INFINITY)) --*hi;
}

// Whether every output of the row is NaN: a NaN, or an infinity in soft_sort.
HOST_DEVICE inline bool fastsort_bad_row(const FastSortParams& P, int64_t n, bool nan, int64_t lo, int64_t hi) {
  return nan || (P.op == kSoftSort && (lo > 0 || hi < n));
}

// The output at a sorted position j that PAV does not see: every position of a bad row (NaN, block[j] = j), or
// soft_rank's infinite groups [0, lo) and [hi, n) (equal infinities share their positions' mean rank).
template <typename T>
HOST_DEVICE inline void fastsort_write_nonfinite(int64_t n, int64_t lo, int64_t hi, bool bad, int64_t j,
                                                 const int64_t* perm, T* out, int32_t* block) {
  if (bad) {
    out[j] = T(NAN);
    block[j] = int32_t(j);
    return;
  }
  const int64_t s = j < lo ? 0 : hi, e = j < lo ? lo : n;
  block[j] = int32_t(s);
  out[perm[j]] = T(double(s + e - 1) * 0.5 + 1.0);
}

// The outputs and block[] of the positions [j0, j1] of the PAV block [s, e] with statistic acc_s.
template <typename T, typename Y>
HOST_DEVICE inline void fastsort_write_block(const FastSortParams& P, int64_t s, int64_t e, int64_t j0, int64_t j1,
                                             double acc_s, const Y& y, const int64_t* perm, T* out, int32_t* block) {
  const double sgn = P.descending ? -1.0 : 1.0;
  const FastSortBlock K = fastsort_block(P, s, e, acc_s, y);
  for (int64_t j = j0; j <= j1; ++j) {
    block[j] = int32_t(s);
    const double v = fastsort_value(P, j, s, e, K, y);
    if (P.op == kSoftRank)
      out[perm[j]] = T(v);
    else
      out[j] = T(sgn * v);
  }
}

// One row after its sort (y: the sorted values sgn x[perm[j]], ascending, NaN last; nan: the row holds a NaN): the
// non-finite rules, PAV over the finite positions, then one pass over the blocks from the end writing the outputs
// and block (which holds PAV's block ends until then). acc: n doubles of scratch.
template <typename T, typename Y>
HOST_DEVICE inline void fastsort_forward_row(const FastSortParams& P, int64_t n, bool nan, const Y& y,
                                             const int64_t* perm, T* out, int32_t* block, double* acc) {
  int64_t lo, hi;
  fastsort_finite_range(n, y, &lo, &hi);
  const bool bad = fastsort_bad_row(P, n, nan, lo, hi);
  if (!bad) {
    fastsort_pav(P, lo, hi, y, block, acc);
    for (int64_t e = hi - 1; e >= lo;) {
      const int64_t s = block[e];
      fastsort_write_block(P, s, e, s, e, acc[s], y, perm, out, block);
      e = s - 1;
    }
  }
  for (int64_t j = 0; j < n; ++j)
    if (bad || j < lo || j >= hi) fastsort_write_nonfinite(n, lo, hi, bad, j, perm, out, block);
}

// The real length L_b of row b (lengths null: n). Clamped to [0, n]: the CPU kernels and the Python ops check it
// lies there first, the CUDA kernels rely on that check.
HOST_DEVICE inline int64_t fastsort_row_length(const int64_t* lengths, int64_t b, int64_t n) {
  if (lengths == nullptr) return n;
  const int64_t L = lengths[b];
  return L < 0 ? 0 : (L > n ? n : L);
}

// The forward's outputs at a pad j in [L_b, n) of a row (perm is written by the CPU forward only; the callers'
// sorts of the other backends put the pads last in index order, perm[j] = j, already).
template <typename T>
HOST_DEVICE inline void fastsort_write_pad(int64_t j, T* out, int32_t* block) {
  out[j] = T(0);
  block[j] = int32_t(j);
}

// ---- Chunked PAV (the CUDA kernels' long rows: one thread per chunk, fastsort.cu) -----------------------------
//
// [lo, hi) is cut into C chunks of ceil((hi - lo) / C) positions (trailing chunks may be empty). Phases, each
// run by every chunk k before the next starts (a barrier between phases on the GPU; loops over k on the CPU test
// entry point fastsort_forward_chunked_cpu):
//  1. fastsort_chunk_pav: the in-place PAV of the chunk, keeping both ends of each block (first[s] = e and
//     first[e] = s; acc[s] the statistic).
//  2. fastsort_chunk_merge, rounds w = 1, 2, 4, ... < C: chunk k (k % 2w == 0) merges the PAV results of the
//     segments [k, k + w) and [k + w, k + 2w) of chunks. Both are already non-violating inside, so only blocks at
//     the boundary m can violate: the right segment's blocks are pushed in order onto the left's stack, each
//     merging with the top (which contains m - 1) and cascading left while the order is violated, until a block
//     does not merge: it and every block after it (which do not violate it) stay. All the merges of a round's
//     pair make ONE block [p, e] around m; chunk starts inside it, (p, e], record it in cross (2 entries per
//     chunk: start, end; -1 if the chunk starts a block). A later round can only grow it and overwrites them.
//  3. fastsort_chunk_outputs: chunk k writes its positions: the part of the recorded block crossing into it,
//     then the blocks starting in it (walked forwards through first[s] = e). It reads first[] only at block
//     starts inside its own chunk, so writing block[] (the same array) races with nothing.
// PAV's blocks are unique (the level sets of the isotonic solution, ties pooled): in exact arithmetic the
// merge order does not matter. In float64 the statistics of merged blocks are formed in another order than the
// sequential PAV's, so they differ by rounding, and a merge decision within rounding of a tie could differ.
// Every block stays a run of positions; each position is merged at most once over all phases (O(n) work), the
// merges of one boundary run sequentially (a row that pools into one block from many small ones: O(n) depth).

// The start of chunk k of [lo, hi) cut into C chunks.
HOST_DEVICE inline int64_t fastsort_chunk_start(int64_t lo, int64_t hi, int C, int k) {
  const int64_t len = (hi - lo + C - 1) / C, c = lo + len * k;
  return c < hi ? c : hi;
}

template <typename Y, typename I>
HOST_DEVICE inline void fastsort_chunk_pav(const FastSortParams& P, int64_t lo, int64_t hi, int C, int k, const Y& y,
                                           I* first, double* acc, int64_t* cross) {
  cross[2 * k] = cross[2 * k + 1] = -1;
  fastsort_pav<true>(P, fastsort_chunk_start(lo, hi, C, k), fastsort_chunk_start(lo, hi, C, k + 1), y, first, acc);
}

template <typename Y, typename I>
HOST_DEVICE inline void fastsort_chunk_merge(const FastSortParams& P, int64_t lo, int64_t hi, int C, int k, int w,
                                             const Y& y, I* first, double* acc, int64_t* cross) {
  if (k % (2 * w) != 0 || k + w >= C) return;
  const int64_t sl = fastsort_chunk_start(lo, hi, C, k), m = fastsort_chunk_start(lo, hi, C, k + w);
  const int64_t sr = fastsort_chunk_start(lo, hi, C, k + 2 * w < C ? k + 2 * w : C);
  int64_t p = m, e = m - 1;       // the merged block, none yet
  for (int64_t j = m; j < sr;) {  // the right segment's blocks [j, first[j]], in order
    const int64_t end = first[j];
    double a = acc[j];
    int64_t t = j;
    while (t > sl) {
      const int64_t q = first[t - 1];
      if (!fastsort_merge_if_violated(P, q, t, end, acc[q], a, y, &a)) break;
      t = q;
    }
    if (t == j) break;
    acc[t] = a;
    first[t] = I(end);
    first[end] = I(t);
    p = t;
    e = end;
    j = end + 1;
  }
  const int64_t len = (hi - lo + C - 1) / C;
  for (int64_t c = e >= m ? (p - lo) / len + 1 : 1, last = e >= m ? (e - lo) / len : 0; c <= last; ++c) {
    cross[2 * c] = p;
    cross[2 * c + 1] = e;
  }
}

template <typename T, typename Y>
HOST_DEVICE inline void fastsort_chunk_outputs(const FastSortParams& P, int64_t lo, int64_t hi, int C, int k,
                                               const Y& y, const int64_t* perm, T* out, int32_t* block,
                                               const double* acc, const int64_t* cross) {
  const int64_t c0 = fastsort_chunk_start(lo, hi, C, k), c1 = fastsort_chunk_start(lo, hi, C, k + 1);
  int64_t j = c0;
  if (j < c1 && cross[2 * k] >= 0) {
    const int64_t s = cross[2 * k], e = cross[2 * k + 1];
    fastsort_write_block(P, s, e, c0, e < c1 ? e : c1 - 1, acc[s], y, perm, out, block);
    j = e + 1;
  }
  while (j < c1) {
    const int64_t e = block[j];  // first[j]: the end of the block starting at j
    fastsort_write_block(P, j, e, j, e < c1 ? e : c1 - 1, acc[j], y, perm, out, block);
    j = e + 1;
  }
}

// Host only (the CPU test entry point): the phases one chunk after the other, as the GPU runs them with a barrier
// between phases. cross: 2 C entries of scratch.
template <typename T, typename Y>
inline void fastsort_forward_row_chunked(const FastSortParams& P, int64_t n, bool nan, const Y& y, const int64_t* perm,
                                         T* out, int32_t* block, double* acc, int C, int64_t* cross) {
  int64_t lo, hi;
  fastsort_finite_range(n, y, &lo, &hi);
  const bool bad = fastsort_bad_row(P, n, nan, lo, hi);
  if (!bad) {
    for (int k = 0; k < C; ++k) fastsort_chunk_pav(P, lo, hi, C, k, y, block, acc, cross);
    for (int w = 1; w < C; w *= 2)
      for (int k = 0; k < C; ++k) fastsort_chunk_merge(P, lo, hi, C, k, w, y, block, acc, cross);
    for (int k = 0; k < C; ++k) fastsort_chunk_outputs(P, lo, hi, C, k, y, perm, out, block, acc, cross);
  }
  for (int64_t j = 0; j < n; ++j)
    if (bad || j < lo || j >= hi) fastsort_write_nonfinite(n, lo, hi, bad, j, perm, out, block);
}

// ---- Backward ---------------------------------------------------------------------------------------------------

// The sums of the backward over (part of) a block, in position order: s1 = sum of g (rank L2, sort L2, sort KL)
// or of r g (rank KL), s2 = S_B relative to the block's first element (sort KL), c = the positions summed.
struct FastSortSums {
  double s1, s2;
  int64_t c;
};

HOST_DEVICE inline FastSortSums operator+(const FastSortSums& a, const FastSortSums& b) {
  return {a.s1 + b.s1, a.s2 + b.s2, a.c + b.c};
}

// Adds the positions [j0, j1] of the block starting at s to *S.
template <typename T>
HOST_DEVICE inline void fastsort_block_sums(const FastSortParams& P, int64_t s, int64_t j0, int64_t j1, const T* g,
                                            const T* out, const T* x, const int64_t* perm, FastSortSums* S) {
  const double sgn = P.descending ? -1.0 : 1.0;
  double s1 = S->s1, s2 = S->s2;
  if (P.op == kSoftRank && P.reg == kRegL2) {
    for (int64_t j = j0; j <= j1; ++j) s1 += double(g[perm[j]]);
  } else if (P.op == kSoftRank) {
    for (int64_t j = j0; j <= j1; ++j) s1 += double(out[perm[j]]) * double(g[perm[j]]);
  } else if (P.reg == kRegL2) {
    for (int64_t j = j0; j <= j1; ++j) s1 += double(g[j]);
  } else {
    const double ys = sgn * double(x[perm[s]]);
    for (int64_t j = j0; j <= j1; ++j) {
      s2 += exp(ys - sgn * double(x[perm[j]]));
      s1 += double(g[j]);
    }
  }
  *S = FastSortSums{s1, s2, S->c + (j1 - j0 + 1)};
}

// The gradient at the positions [j0, j1] of the block starting at s, whose sums over all of it are S (the
// vector-Jacobian products of the header note; soft_rank's limit does not depend on an infinite element).
template <typename T>
HOST_DEVICE inline void fastsort_block_grads(const FastSortParams& P, int64_t s, int64_t j0, int64_t j1,
                                             const FastSortSums& S, const T* g, const T* out, const T* x,
                                             const int64_t* perm, T* gx) {
  const double sgn = P.descending ? -1.0 : 1.0, c = double(S.c), s1 = S.s1, s2 = S.s2;
  const bool rank = P.op == kSoftRank;
  if (rank && P.reg == kRegL2) {
    const double mean = s1 / c;
    for (int64_t j = j0; j <= j1; ++j) gx[perm[j]] = T(sgn * (double(g[perm[j]]) - mean) * P.inv_eps);
  } else if (rank) {
    const double W = c * ((double(s) + double(s + S.c - 1)) * 0.5 + 1.0);
    for (int64_t j = j0; j <= j1; ++j) {
      const double r = double(out[perm[j]]);
      gx[perm[j]] = T(sgn * (r * double(g[perm[j]]) - r / W * s1) * P.inv_eps);
    }
  } else if (P.reg == kRegL2) {
    for (int64_t j = j0; j <= j1; ++j) gx[perm[j]] = T(s1 / c);
  } else {
    const double ys = sgn * double(x[perm[s]]);
    for (int64_t j = j0; j <= j1; ++j) gx[perm[j]] = T(exp(ys - sgn * double(x[perm[j]])) / s2 * s1);
  }
  if (rank)  // the limit does not depend on an infinite element
    for (int64_t j = j0; j <= j1; ++j)
      if (double(x[perm[j]]) == INFINITY || double(x[perm[j]]) == -INFINITY) gx[perm[j]] = T(0);
}

// Whether the row's gradient is NaN: a NaN, or an infinity in soft_sort (elements [c0, c1) of x).
template <typename T>
HOST_DEVICE inline bool fastsort_nan_grad(const FastSortParams& P, int64_t c0, int64_t c1, const T* x) {
  bool nan_row = false;
  for (int64_t c = c0; c < c1; ++c) {
    const double v = double(x[c]);
    nan_row |= v != v || (P.op == kSoftSort && (v == INFINITY || v == -INFINITY));
  }
  return nan_row;
}

// The backward of one row (g = grad_out), block by block.
template <typename T>
HOST_DEVICE inline void fastsort_backward_row(const FastSortParams& P, int64_t n, const T* g, const T* out, const T* x,
                                              const int64_t* perm, const int32_t* block, T* gx) {
  if (fastsort_nan_grad(P, 0, n, x)) {
    for (int64_t c = 0; c < n; ++c) gx[c] = T(NAN);
    return;
  }
  for (int64_t s = 0; s < n;) {
    int64_t e = s;
    while (e + 1 < n && block[e + 1] == s) ++e;
    FastSortSums S{0.0, 0.0, 0};
    fastsort_block_sums(P, s, s, e, g, out, x, perm, &S);
    fastsort_block_grads(P, s, s, e, S, g, out, x, perm, gx);
    s = e + 1;
  }
}

// Chunked backward (long rows on the GPU): [0, n) cut into C chunks as above. Phases:
//  0. fastsort_chunk_check: chunk k's share of fastsort_valid_row (bit 0) and of fastsort_nan_grad (bit 1).
//  A. fastsort_chunk_sums: the blocks starting and ending in the chunk get their gradients; the sums of the part
//     of a block crossing in from the left go to head[k], of one crossing out to the right to tail[k] (else c = 0).
//  B. fastsort_chunk_totals: a chunk with a tail adds the heads of the chunks its block covers, in order
//     (deterministic), and writes the block's sums back to its tail and their heads.
//  C. fastsort_chunk_crossing_grads: the gradients of the crossing parts from those sums.
template <typename T>
HOST_DEVICE inline int fastsort_chunk_check(const FastSortParams& P, int64_t n, int C, int k, const T* x,
                                            const int64_t* perm, const int32_t* block) {
  const int64_t c0 = fastsort_chunk_start(0, n, C, k), c1 = fastsort_chunk_start(0, n, C, k + 1);
  bool bad = false;
  for (int64_t j = c0; j < c1; ++j) {
    bad |= static_cast<uint64_t>(perm[j]) >= static_cast<uint64_t>(n);
    bad |= j == 0 ? block[0] != 0 : block[j] != j && block[j] != block[j - 1];
  }
  return int(bad) | (fastsort_nan_grad(P, c0, c1, x) ? 2 : 0);
}

// The last position of the block starting at s that lies in [j, c1) (block[j] == s).
HOST_DEVICE inline int64_t fastsort_run_end(int64_t s, int64_t j, int64_t c1, const int32_t* block) {
  while (j + 1 < c1 && block[j + 1] == s) ++j;
  return j;
}

template <typename T>
HOST_DEVICE inline void fastsort_chunk_sums(const FastSortParams& P, int64_t n, int C, int k, const T* g, const T* out,
                                            const T* x, const int64_t* perm, const int32_t* block, T* gx,
                                            FastSortSums* head, FastSortSums* tail) {
  const int64_t c0 = fastsort_chunk_start(0, n, C, k), c1 = fastsort_chunk_start(0, n, C, k + 1);
  head[k] = tail[k] = FastSortSums{0.0, 0.0, 0};
  int64_t j = c0;
  if (j < c1 && block[j] != j) {
    const int64_t e = fastsort_run_end(block[j], j, c1, block);
    fastsort_block_sums(P, block[j], j, e, g, out, x, perm, &head[k]);
    j = e + 1;
  }
  while (j < c1) {
    const int64_t e = fastsort_run_end(j, j, c1, block);
    FastSortSums S{0.0, 0.0, 0};
    fastsort_block_sums(P, j, j, e, g, out, x, perm, &S);
    if (e + 1 == c1 && c1 < n && block[c1] == j) {
      tail[k] = S;
      break;
    }
    fastsort_block_grads(P, j, j, e, S, g, out, x, perm, gx);
    j = e + 1;
  }
}

HOST_DEVICE inline void fastsort_chunk_totals(int64_t n, int C, int k, const int32_t* block, FastSortSums* head,
                                              FastSortSums* tail) {
  if (tail[k].c == 0) return;
  const int64_t s = block[fastsort_chunk_start(0, n, C, k + 1) - 1];
  FastSortSums S = tail[k];
  int last = k;
  for (int c = k + 1; c < C; ++c) {
    const int64_t c0 = fastsort_chunk_start(0, n, C, c);
    if (c0 >= n || block[c0] != s) break;
    S = S + head[c];
    last = c;
  }
  tail[k] = S;
  for (int c = k + 1; c <= last; ++c) head[c] = S;
}

template <typename T>
HOST_DEVICE inline void fastsort_chunk_crossing_grads(const FastSortParams& P, int64_t n, int C, int k, const T* g,
                                                      const T* out, const T* x, const int64_t* perm,
                                                      const int32_t* block, T* gx, const FastSortSums* head,
                                                      const FastSortSums* tail) {
  const int64_t c0 = fastsort_chunk_start(0, n, C, k), c1 = fastsort_chunk_start(0, n, C, k + 1);
  if (c0 >= c1) return;
  if (block[c0] != c0)
    fastsort_block_grads(P, block[c0], c0, fastsort_run_end(block[c0], c0, c1, block), head[k], g, out, x, perm, gx);
  if (tail[k].c > 0) {
    const int64_t s = block[c1 - 1];
    fastsort_block_grads(P, s, s, c1 - 1, tail[k], g, out, x, perm, gx);
  }
}

// perm holds indices in [0, n) and block is a partition into runs (block[0] = 0, block[j] in {j, block[j - 1]}).
HOST_DEVICE inline bool fastsort_valid_row(int64_t n, const int64_t* perm, const int32_t* block) {
  bool ok = n == 0 || block[0] == 0;
  for (int64_t j = 0; j < n; ++j) {
    ok &= static_cast<uint64_t>(perm[j]) < static_cast<uint64_t>(n);
    if (j > 0) ok &= block[j] == j || block[j] == block[j - 1];
  }
  return ok;
}

// CPU kernels (fastsort_cpu.cpp), parallel over rows. The forward sorts each row and writes out, perm and block; the
// backward takes them back (out is read by rank KL, x by sort KL and for the non-finite rules) and checks that
// perm holds indices in [0, L_b) and block a partition into runs (block[0] = 0, block[j] in {j, block[j - 1]})
// over the row's first L_b positions. lengths: null or B entries, each checked to lie in [0, n] (else throws).
template <typename T>
void fastsort_forward_cpu(const FastSortParams& P, int64_t B, int64_t n, const int64_t* lengths, const T* x, T* out,
                          int64_t* perm, int32_t* block);
template <typename T>
void fastsort_backward_cpu(const FastSortParams& P, int64_t B, int64_t n, const int64_t* lengths, const T* grad_out,
                           const T* out, const T* x, const int64_t* perm, const int32_t* block, T* grad_x);

// CPU test entry points of the GPU's chunked PAV (serial over rows; the phases of the chunked forward and backward
// above with `chunks` chunks, run one chunk after the other): the merge logic of the CUDA kernels' long rows,
// testable without a GPU. The backward throws on a malformed perm or block, as fastsort_backward_cpu.
template <typename T>
void fastsort_forward_chunked_cpu(const FastSortParams& P, int64_t B, int64_t n, const int64_t* lengths, const T* x,
                                  T* out, int64_t* perm, int32_t* block, int chunks);
template <typename T>
void fastsort_backward_chunked_cpu(const FastSortParams& P, int64_t B, int64_t n, const int64_t* lengths,
                                   const T* grad_out, const T* out, const T* x, const int64_t* perm,
                                   const int32_t* block, T* grad_x, int chunks);

// CUDA launchers (fastsort.cu): one thread per row (sequential PAV, as torchsort's CUDA kernel); perm is an INPUT
// of the forward (the caller sorts sgn x with torch.sort(stable=True), the pads replaced by NaN: they follow the
// row's own NaNs, in index order, so perm[0, L_b) sorts the real entries); work is queued on `stream`. workspace: a
// device buffer of B * n doubles (the block statistics, indexed by block start) for the forward, none for the
// backward, which gives a row with a malformed perm or block a NaN gradient instead of throwing (no host sync).
template <typename T>
void fastsort_forward_cuda(const FastSortParams& P, int64_t B, int64_t n, const int64_t* lengths, const T* x,
                           const int64_t* perm, T* out, int32_t* block, double* workspace, std::uintptr_t stream);
template <typename T>
void fastsort_backward_cuda(const FastSortParams& P, int64_t B, int64_t n, const int64_t* lengths, const T* grad_out,
                            const T* out, const T* x, const int64_t* perm, const int32_t* block, T* grad_x,
                            std::uintptr_t stream);

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
