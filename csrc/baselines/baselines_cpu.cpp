// CPU kernels of baselines.h: parallel over rows; each row sorts itself, then O(n k) column softmaxes with the
// columns as the inner (contiguous, vectorizable) loop.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "../common/cpu_exp.h"
#include "../common/cpu_parallel.h"
#include "../common/cpu_scratch.h"
#include "../common/cpu_simd.h"
#include "baselines.h"

namespace relaxops {
namespace {

// Below this many X entries a call runs on one thread (a parallel region costs more than the work).
constexpr int64_t kParallelWork = 1 << 14;

template <typename T>
struct SortKey {
  T v;
  int64_t i;
};

// Ascending order, NaN last, ties by index: a strict total order (std::sort never sees an inconsistent
// comparison) that equals torch.sort(stable=True).
template <typename T>
inline bool key_less(const SortKey<T>& a, const SortKey<T>& b) {
  const bool an = a.v != a.v, bn = b.v != b.v;
  if (an || bn) return an == bn ? a.i < b.i : bn;
  return a.v < b.v || (a.v == b.v && a.i < b.i);
}

template <typename T>
void sort_row(const T* x, int64_t n, int64_t* perm) {
  SortKey<T>* keys = thread_scratch<0, SortKey<T>>(n);
  for (int64_t c = 0; c < n; ++c) keys[c] = {x[c], c};
  std::sort(keys, keys + n, key_less<T>);
  for (int64_t q = 0; q < n; ++q) perm[q] = keys[q].i;
}

// Sorted positions of a row (the order of sort_row): [0, lo) -inf, [lo, hi) finite, then +inf, then NaN.
struct FiniteRange {
  int64_t lo, hi;
  bool nan;
};

template <typename T>
FiniteRange finite_range(const T* x, const int64_t* perm, int64_t n) {
  const T inf = std::numeric_limits<T>::infinity();
  int64_t lo = 0, hi = n;
  while (lo < n && x[perm[lo]] == -inf) ++lo;
  while (hi > lo && !(x[perm[hi - 1]] < inf)) --hi;
  return {lo, hi, x[perm[n - 1]] != x[perm[n - 1]]};
}

// The invariants the kernels index memory with (checked before any row runs).
void check_sizes(const char* op, int64_t B, int64_t n, int64_t k, double tau, const int64_t* lengths, const int64_t* ks,
                 bool left) {
  RELAXOPS_CHECK(B >= 0 && n >= 1 && k >= 1 && k <= n, std::string(op) + ": need B >= 0 and 1 <= k <= n");
  RELAXOPS_CHECK(tau > 0, std::string(op) + ": tau must be > 0");
  RELAXOPS_CHECK(!left || (k == n && !ks), std::string(op) + ": left needs k = n and no ks");
  bool ok = true;
  for (int64_t b = 0; lengths && b < B; ++b) ok &= lengths[b] >= 0 && lengths[b] <= n;
  RELAXOPS_CHECK(ok, std::string(op) + ": lengths must lie in [0, n]");
  for (int64_t b = 0; ks && b < B; ++b) ok &= ks[b] >= 0 && ks[b] <= k;
  RELAXOPS_CHECK(ok, std::string(op) + ": ks must lie in [0, k]");
}

void check_perm(const char* op, int64_t B, int64_t n, const int64_t* perm) {
  bool ok = true;
  for (int64_t i = 0; i < B * n; ++i) ok &= static_cast<uint64_t>(perm[i]) < static_cast<uint64_t>(n);
  RELAXOPS_CHECK(ok, std::string(op) + ": perm must hold indices in [0, n)");
}

// Sorts the L real entries of a row into perm[0, L) and puts the pads L..n-1 after them, in order.
template <typename T>
void sort_real(const T* x, int64_t L, int64_t n, int64_t* perm) {
  if (L > 0) sort_row(x, L, perm);
  for (int64_t q = L; q < n; ++q) perm[q] = q;
}

// Zeros what a row's kernels do not write: the pad rows [L, n) and, in the real rows, the dropped columns
// [0, j0) and [j1, k) of X [n, k].
template <typename T>
void zero_outside(int64_t n, int64_t k, const RowColumns& rc, T* X) {
  for (int64_t c = 0; c < rc.L; ++c) {
    std::fill(X + c * k, X + c * k + rc.j0, T(0));
    std::fill(X + c * k + rc.j1, X + (c + 1) * k, T(0));
  }
  std::fill(X + rc.L * k, X + n * k, T(0));
}

// X[c, j] *= 1 / s_j for the real rows c < L and the m kept columns (X points at the first kept column, row
// stride k): the normalisation pass of the column softmaxes.
template <typename T>
void normalize_columns(int64_t L, int64_t k, int64_t m, const double* s, T* X) {
  T* inv = thread_scratch<1, T>(m);
  for (int64_t j = 0; j < m; ++j) inv[j] = T(1.0 / s[j]);
  for (int64_t c = 0; c < L; ++c)
    for (int64_t j = 0; j < m; ++j) X[c * k + j] *= inv[j];
}

// NeuralSort columns of one row without NaN, exp pass over the m kept columns (X points at the first, row
// stride k; pos[j] their ascending positions): X[perm[q], j] = exp(delta(q, r_j)) (neuralsort_delta in
// baselines.h, one exp per entry), s_j = column sums (double). t, D: the centred values and D over the finite
// positions [lo, hi); a column of an infinite position gets D_r = +inf, so that the finite entries get
// delta = -inf; the infinite elements have weight 1 in the columns of their own group, 0 elsewhere. L: the
// row's real entries (the sorted positions [0, L)).
template <typename T>
RELAXOPS_SIMD_CLONES void neuralsort_exp_row(int64_t L, int64_t k, int64_t m, const T* pos, T inv_tau,
                                             const int64_t* perm, const T* t, const T* D, int64_t lo, int64_t hi, T* X,
                                             double* s) {
  T* Dr = thread_scratch<5, T>(m);
  for (int64_t j = 0; j < m; ++j) {
    const int64_t r = int64_t(pos[j]);
    Dr[j] = r >= lo && r < hi ? D[r] : std::numeric_limits<T>::infinity();
    s[j] = 0.0;
  }
  for (int64_t q = lo; q < hi; ++q) {
    T* Xr = X + perm[q] * k;
    const T two_t = T(2) * t[q], Dq = D[q], qf = T(q);
    for (int64_t j = 0; j < m; ++j) {
      const T d = two_t * (pos[j] - qf) + (Dq - Dr[j]);
      const T e = fast_exp((d < T(0) ? d : T(0)) * inv_tau);
      Xr[j] = e;
      s[j] += e;
    }
  }
  // the -inf elements [0, lo) own the columns of positions [0, lo), the +inf elements [hi, L) those of [hi, L)
  for (const int64_t group : {0, 1}) {
    const int64_t begin = group == 0 ? 0 : hi, end = group == 0 ? lo : L;
    for (int64_t q = begin; q < end; ++q) {
      T* Xr = X + perm[q] * k;
      for (int64_t j = 0; j < m; ++j) {
        const T e = pos[j] >= T(begin) && pos[j] < T(end) ? T(1) : T(0);
        Xr[j] = e;
        s[j] += e;
      }
    }
  }
}

// SoftSort columns of one row, exp pass over the real elements c < L and the m kept columns (X points at the
// first, row stride k): the logits -|t_j - x_c|^pow / tau are <= 0 with maximum 0 (at the element sorted at
// position r_j), so X[c, j] = exp(z) unnormalised, s_j = column sums (double). Equal infinities have gap 0,
// other infinite gaps give exp(-inf) = 0 (the limits of baselines.h).
template <int K, typename T>
RELAXOPS_SIMD_CLONES void softsort_exp_row(int64_t L, int64_t k, int64_t m, T inv_tau, T p, const T* x, const T* t,
                                           T* X, double* s) {
  std::fill(s, s + m, 0.0);
  for (int64_t c = 0; c < L; ++c) {
    T* Xr = X + c * k;
    const T xc = x[c];
    for (int64_t j = 0; j < m; ++j) {
      const T e = fast_exp(-softsort_phi<K, T>(softsort_gap(t[j], xc), p) * inv_tau);
      Xr[j] = e;
      s[j] += e;
    }
  }
}

// dot_j = sum_c X[c, j] G[c, j] (double) over the real rows c < L and the m kept columns (X, G point at the
// first, row stride k), the softmax adjoint's column term.
template <typename T>
void column_dot(int64_t L, int64_t k, int64_t m, const T* X, const T* G, T* dot) {
  double* acc = thread_scratch<2, double>(m);
  std::fill(acc, acc + m, 0.0);
  for (int64_t c = 0; c < L; ++c)
    for (int64_t j = 0; j < m; ++j) acc[j] += double(X[c * k + j]) * double(G[c * k + j]);
  for (int64_t j = 0; j < m; ++j) dot[j] = T(acc[j]);
}

// Adds the adjoint of b_c = sum_i |x_c - x_i| (over the L real entries) to g given beta = dl/db, in sorted
// order with tie groups (equal values contribute sign(0) = 0): one ascending pass (elements below the group),
// one descending.
template <typename T>
void b_adjoint(int64_t L, const T* x, const int64_t* perm, const T* beta, T* g) {
  double below = 0.0, below_group = 0.0;  // sum of beta before q / before q's group
  int64_t lo = 0;
  for (int64_t q = 0; q < L; ++q) {
    const int64_t e = perm[q];
    if (q == 0 || !(x[e] == x[perm[q - 1]])) {
      lo = q;
      below_group = below;
    }
    g[e] += T(double(beta[e]) * double(lo) + below_group);
    below += beta[e];
  }
  double above = 0.0, above_group = 0.0;
  int64_t hi = L;
  for (int64_t q = L - 1; q >= 0; --q) {
    const int64_t e = perm[q];
    if (q == L - 1 || !(x[e] == x[perm[q + 1]])) {
      hi = q + 1;
      above_group = above;
    }
    g[e] -= T(double(beta[e]) * double(L - hi) + above_group);
    above += beta[e];
  }
}

template <int K, typename T>
void softsort_forward_rows(int64_t B, int64_t n, int64_t k, double tau, double pow_, const T* x, const int64_t* lengths,
                           const int64_t* ks, bool left, T* X, int64_t* perm) {
  const T inv_tau = inverse_tau<T>(tau), p = T(pow_);
  parallel_items(
      B,
      [&](int64_t b, int) {
        const RowColumns rc = row_columns(lengths, ks, left, n, k, b);
        const int64_t m = rc.j1 - rc.j0;
        const T* xb = x + b * n;
        int64_t* pb = perm + b * n;
        T* Xb = X + b * n * k;
        sort_real(xb, rc.L, n, pb);
        zero_outside(n, k, rc, Xb);
        if (m == 0) return;
        T* t = thread_scratch<3, T>(m);  // sorted values of the kept positions
        double* s = thread_scratch<2, double>(m);
        for (int64_t j = 0; j < m; ++j) t[j] = xb[pb[rc.j0 + j + rc.shift]];
        softsort_exp_row<K, T>(rc.L, k, m, inv_tau, p, xb, t, Xb + rc.j0, s);
        normalize_columns(rc.L, k, m, s, Xb + rc.j0);
      },
      threads_for(B * n * k, kParallelWork));
}

template <int K, typename T>
void softsort_backward_rows(int64_t B, int64_t n, int64_t k, double tau, double pow_, const T* grad_X, const T* X,
                            const T* x, const int64_t* perm, const int64_t* lengths, const int64_t* ks, bool left,
                            T* grad_x) {
  const T inv_tau = inverse_tau<T>(tau), p = T(pow_);
  parallel_items(
      B,
      [&](int64_t b, int) {
        const RowColumns rc = row_columns(lengths, ks, left, n, k, b);
        const int64_t m = rc.j1 - rc.j0, L = rc.L;
        const T *xb = x + b * n, *Xb = X + b * n * k + rc.j0, *Gb = grad_X + b * n * k + rc.j0;
        const int64_t* pb = perm + b * n;
        T* gx = grad_x + b * n;
        std::fill(gx + L, gx + n, T(0));  // pads
        T* dot = thread_scratch<3, T>(m);
        T* t = thread_scratch<4, T>(m);
        double* gt = thread_scratch<5, double>(m);
        column_dot(L, k, m, Xb, Gb, dot);
        for (int64_t j = 0; j < m; ++j) {
          t[j] = xb[pb[rc.j0 + j + rc.shift]];
          gt[j] = 0.0;
        }
        for (int64_t c = 0; c < L; ++c) {
          T acc = 0;
          for (int64_t j = 0; j < m; ++j) {
            const T w =
                softsort_slope_term<K, T>(Xb[c * k + j] * (Gb[c * k + j] - dot[j]), softsort_gap(t[j], xb[c]), p);
            acc += w;
            gt[j] -= w;
          }
          gx[c] = acc * inv_tau;
        }
        for (int64_t j = 0; j < m; ++j) gx[pb[rc.j0 + j + rc.shift]] += T(gt[j]) * inv_tau;
        for (int64_t c = 0; c < L; ++c)
          if (isinf(xb[c])) gx[c] = T(0);  // the limit does not depend on an infinite element
      },
      threads_for(B * n * k, kParallelWork));
}

}  // namespace

template <typename T>
void neuralsort_forward_cpu(int64_t B, int64_t n, int64_t k, double tau, const T* x, const int64_t* lengths,
                            const int64_t* ks, bool left, T* X, int64_t* perm) {
  check_sizes("neuralsort_forward", B, n, k, tau, lengths, ks, left);
  const T inv_tau = inverse_tau<T>(tau);
  parallel_items(
      B,
      [&](int64_t b, int) {
        const RowColumns rc = row_columns(lengths, ks, left, n, k, b);
        const int64_t m = rc.j1 - rc.j0, L = rc.L;
        const T* xb = x + b * n;
        int64_t* pb = perm + b * n;
        T* Xb = X + b * n * k;
        sort_real(xb, L, n, pb);
        zero_outside(n, k, rc, Xb);
        if (m == 0) return;
        const FiniteRange g = finite_range(xb, pb, L);
        if (g.nan) {
          for (int64_t c = 0; c < L; ++c)
            std::fill(Xb + c * k + rc.j0, Xb + c * k + rc.j1, std::numeric_limits<T>::quiet_NaN());
          return;
        }
        // Finite positions, centred on the median finite value c: t_q - c and D_q = 2 S_q + t_q - c (S in double).
        T* t = thread_scratch<3, T>(L);
        T* D = thread_scratch<4, T>(L);
        T* pos = thread_scratch<6, T>(m);
        const double c = g.lo < g.hi ? double(xb[pb[(g.lo + g.hi) / 2]]) : 0.0;
        double S = 0.0;
        for (int64_t q = g.lo; q < g.hi; ++q) {
          const double v = double(xb[pb[q]]) - c;
          t[q] = T(v);
          D[q] = T(2.0 * S + v);
          S += v;
        }
        for (int64_t j = 0; j < m; ++j) pos[j] = T(rc.j0 + j + rc.shift);
        double* s = thread_scratch<2, double>(m);
        neuralsort_exp_row<T>(L, k, m, pos, inv_tau, pb, t, D, g.lo, g.hi, Xb + rc.j0, s);
        normalize_columns(L, k, m, s, Xb + rc.j0);
      },
      threads_for(B * n * k, kParallelWork));
}

template <typename T>
void neuralsort_backward_cpu(int64_t B, int64_t n, int64_t k, double tau, const T* grad_X, const T* X, const T* x,
                             const int64_t* perm, const int64_t* lengths, const int64_t* ks, bool left, T* grad_x) {
  check_sizes("neuralsort_backward", B, n, k, tau, lengths, ks, left);
  check_perm("neuralsort_backward", B, n, perm);
  const T inv_tau = inverse_tau<T>(tau);
  parallel_items(
      B,
      [&](int64_t b, int) {
        const RowColumns rc = row_columns(lengths, ks, left, n, k, b);
        const int64_t m = rc.j1 - rc.j0, L = rc.L;
        const T *Xb = X + b * n * k + rc.j0, *Gb = grad_X + b * n * k + rc.j0;
        T* gx = grad_x + b * n;
        std::fill(gx + L, gx + n, T(0));  // pads
        T* dot = thread_scratch<3, T>(m);
        T* coef = thread_scratch<4, T>(m);
        T* beta = thread_scratch<5, T>(L);
        column_dot(L, k, m, Xb, Gb, dot);
        for (int64_t j = 0; j < m; ++j) coef[j] = T(2 * (rc.j0 + j + rc.shift) + 1 - L);
        for (int64_t c = 0; c < L; ++c) {
          T direct = 0, sum = 0;
          for (int64_t j = 0; j < m; ++j) {
            const T dz = Xb[c * k + j] * (Gb[c * k + j] - dot[j]);
            direct += dz * coef[j];
            sum += dz;
          }
          gx[c] = direct * inv_tau;
          beta[c] = -sum * inv_tau;
        }
        // infinite elements: no b adjoint from them (their beta's sum over a group is 0 in exact arithmetic) and
        // gradient 0 (the limit does not depend on them)
        const T* xb = x + b * n;
        for (int64_t c = 0; c < L; ++c)
          if (isinf(xb[c])) beta[c] = T(0);
        b_adjoint(L, xb, perm + b * n, beta, gx);
        for (int64_t c = 0; c < L; ++c)
          if (isinf(xb[c])) gx[c] = T(0);
      },
      threads_for(B * n * k, kParallelWork));
}

template <typename T>
void softsort_forward_cpu(int64_t B, int64_t n, int64_t k, double tau, double pow, const T* x, const int64_t* lengths,
                          const int64_t* ks, bool left, T* X, int64_t* perm) {
  check_sizes("softsort_forward", B, n, k, tau, lengths, ks, left);
  RELAXOPS_CHECK(pow > 0, "softsort_forward: pow must be > 0");
  switch (softsort_pow_kind(pow)) {
    case kPowOne: return softsort_forward_rows<kPowOne, T>(B, n, k, tau, pow, x, lengths, ks, left, X, perm);
    case kPowTwo: return softsort_forward_rows<kPowTwo, T>(B, n, k, tau, pow, x, lengths, ks, left, X, perm);
    default: return softsort_forward_rows<kPowGeneral, T>(B, n, k, tau, pow, x, lengths, ks, left, X, perm);
  }
}

template <typename T>
void softsort_backward_cpu(int64_t B, int64_t n, int64_t k, double tau, double pow, const T* grad_X, const T* X,
                           const T* x, const int64_t* perm, const int64_t* lengths, const int64_t* ks, bool left,
                           T* grad_x) {
  check_sizes("softsort_backward", B, n, k, tau, lengths, ks, left);
  RELAXOPS_CHECK(pow > 0, "softsort_backward: pow must be > 0");
  check_perm("softsort_backward", B, n, perm);
  switch (softsort_pow_kind(pow)) {
    case kPowOne:
      return softsort_backward_rows<kPowOne, T>(B, n, k, tau, pow, grad_X, X, x, perm, lengths, ks, left, grad_x);
    case kPowTwo:
      return softsort_backward_rows<kPowTwo, T>(B, n, k, tau, pow, grad_X, X, x, perm, lengths, ks, left, grad_x);
    default:
      return softsort_backward_rows<kPowGeneral, T>(B, n, k, tau, pow, grad_X, X, x, perm, lengths, ks, left, grad_x);
  }
}

#define RELAXOPS_INSTANTIATE_BASELINES(T)                                                                              \
  template void neuralsort_forward_cpu<T>(int64_t, int64_t, int64_t, double, const T*, const int64_t*, const int64_t*, \
                                          bool, T*, int64_t*);                                                         \
  template void neuralsort_backward_cpu<T>(int64_t, int64_t, int64_t, double, const T*, const T*, const T*,            \
                                           const int64_t*, const int64_t*, const int64_t*, bool, T*);                  \
  template void softsort_forward_cpu<T>(int64_t, int64_t, int64_t, double, double, const T*, const int64_t*,           \
                                        const int64_t*, bool, T*, int64_t*);                                           \
  template void softsort_backward_cpu<T>(int64_t, int64_t, int64_t, double, double, const T*, const T*, const T*,      \
                                         const int64_t*, const int64_t*, const int64_t*, bool, T*);

RELAXOPS_INSTANTIATE_BASELINES(float)
RELAXOPS_INSTANTIATE_BASELINES(double)

}  // namespace relaxops
