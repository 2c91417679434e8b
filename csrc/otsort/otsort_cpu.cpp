// CPU kernels of otsort.h: parallel over rows (problems). Each row's sweeps keep y and the target-side vectors in
// per-thread buffers padded to a multiple of kLanes (padding: y = 0, potential = -inf, so its T entries are exactly
// 0), so that every inner loop over the targets j has a fixed lane count and vectorizes (reductions over j go
// into kLanes partial sums); T entries come from fast_exp_nonpos (csrc/common/cpu_exp.h: every exponent of the
// sweeps is <= 0 up to rounding, each term being an entry of a plan with marginals <= 1).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../common/cpu_exp.h"
#include "../common/cpu_parallel.h"
#include "../common/cpu_scratch.h"
#include "../common/cpu_simd.h"
#include "otsort.h"

namespace relaxops {
namespace {

constexpr int64_t kLanes = 16;
// Below this many cost entries per call (R n m) a call runs on one thread.
constexpr int64_t kParallelWork = 1 << 15;

// A one-pass sum below this lost its terms to underflow (fast_exp flushes below -87 / -708): recomputed exactly.
template <typename T>
constexpr T kUnderflow() {
  return sizeof(T) == 4 ? T(1e-17) : T(1e-280);
}

inline int64_t padded(int64_t m) { return (m + kLanes - 1) / kLanes * kLanes; }

template <typename T>
constexpr T nan_v() {
  return std::numeric_limits<T>::quiet_NaN();
}

template <typename T>
inline T lane_sum(const T* acc) {
  T s = 0;
  for (int64_t l = 0; l < kLanes; ++l) s += acc[l];
  return s;
}

// Zeroes v[k .. size) (the pads of a row with k real entries).
template <typename T>
void zero_tail(T* v, int64_t k, int64_t size) {
  if (v != nullptr) std::fill(v + k, v + size, T(0));
}

// Fills a row's outputs with NaN (a row whose forward was NaN).
template <typename T>
void nan_row(T* a, int64_t na, T* b, int64_t nb) {
  if (a != nullptr) std::fill(a, a + na, nan_v<T>());
  if (b != nullptr) std::fill(b, b + nb, nan_v<T>());
}

// One row's targets, padded: y (0 in the padding) and a target-side vector (-inf in the padding where it is a
// potential, 0 where it is a weight).
template <typename T>
struct Targets {
  int64_t m, mp;
  T* y;
};

template <typename T>
Targets<T> load_targets(const T* y, int64_t m) {
  const int64_t mp = padded(m);
  T* yp = thread_scratch<0, T>(mp);
  std::copy(y, y + m, yp);
  std::fill(yp + m, yp + mp, T(0));
  return {m, mp, yp};
}

template <int kSlot, typename T>
T* padded_copy(const T* v, int64_t m, int64_t mp, T pad) {
  T* out = thread_scratch<kSlot, T>(mp);
  if (v != nullptr)
    std::copy(v, v + m, out);
  else
    std::fill(out, out + m, T(0));
  std::fill(out + m, out + mp, pad);
  return out;
}

// s_j = sum_i exp((f_i + sh_j - C_ij) inv_e) for all (padded) j, C_ij = -2 xs_i y_j (otsort.h).
template <typename T>
RELAXOPS_SIMD_CLONES void column_sums(int64_t n, int64_t mp, const T* xs, const T* y, const T* f, const T* sh, T inv_e,
                                      T* s) {
  std::fill(s, s + mp, T(0));
  for (int64_t i = 0; i < n; ++i) {
    const T x2 = T(2) * xs[i], fi = f[i];
    for (int64_t j = 0; j < mp; ++j) s[j] += fast_exp_nonpos((fi + sh[j] + x2 * y[j]) * inv_e);
  }
}

// sum_j exp((sh + g_j - C_ij) inv_e) for one i; with kStore, row[j] receives the terms.
template <bool kStore, typename T>
RELAXOPS_SIMD_CLONES T row_terms(int64_t mp, T xi, const T* y, T sh, const T* g, T inv_e, T* row) {
  T acc[kLanes] = {};
  const T x2 = T(2) * xi;
  for (int64_t j0 = 0; j0 < mp; j0 += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) {
      const T t = fast_exp_nonpos((sh + g[j0 + l] + x2 * y[j0 + l]) * inv_e);
      acc[l] += t;
      if (kStore) row[j0 + l] = t;
    }
  }
  return lane_sum(acc);
}

template <typename T>
T row_sum(int64_t mp, T xi, const T* y, T sh, const T* g, T inv_e, T* row) {
  return row == nullptr ? row_terms<false>(mp, xi, y, sh, g, inv_e, row)
                        : row_terms<true>(mp, xi, y, sh, g, inv_e, row);
}

// max_i (f_i - C_ij): the shift of an exact column LSE (the fallback of the one-pass sweeps).
template <typename T>
RELAXOPS_SIMD_CLONES T column_max(int64_t n, const T* xs, const T* f, T yj) {
  T mx = -std::numeric_limits<T>::infinity();
  const T y2 = T(2) * yj;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, f[i] + y2 * xs[i]);
  return mx;
}

// sum_i exp((f_i - C_ij + sh) inv_e).
template <typename T>
RELAXOPS_SIMD_CLONES T column_sum(int64_t n, const T* xs, const T* f, T yj, T sh, T inv_e) {
  T acc[kLanes] = {};
  const T y2 = T(2) * yj;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) acc[l] += fast_exp_nonpos((f[i + l] + y2 * xs[i + l] + sh) * inv_e);
  T s = lane_sum(acc);
  for (; i < n; ++i) s += fast_exp_nonpos((f[i] + y2 * xs[i] + sh) * inv_e);
  return s;
}

// max_j (g_j - C_ij) over the padded targets (the padding has g = -inf).
template <typename T>
RELAXOPS_SIMD_CLONES T row_max(int64_t mp, T xi, const T* y, const T* g) {
  T acc[kLanes];
  std::fill(acc, acc + kLanes, -std::numeric_limits<T>::infinity());
  const T x2 = T(2) * xi;
  for (int64_t j0 = 0; j0 < mp; j0 += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) acc[l] = std::max(acc[l], g[j0 + l] + x2 * y[j0 + l]);
  return *std::max_element(acc, acc + kLanes);
}

template <typename T>
bool all_finite(const T* v, int64_t k) {
  bool ok = true;
  for (int64_t i = 0; i < k; ++i) ok &= std::isfinite(v[i]);
  return ok;
}

// g_j = e logb_j - e LSE_i((f_i - C_ij) / e) from s_j = sum_i exp((f_i + gsh_j - C_ij) / e) (the sum shifted by
// gsh_j), or exactly (max first) where s_j lost its terms to underflow.
template <typename T>
void column_update(int64_t n, const Targets<T>& tg, const T* xs, const T* f, const T* gsh, const T* s, const T* logb,
                   double e, T* gnew) {
  for (int64_t j = 0; j < tg.m; ++j) {
    if (s[j] >= kUnderflow<T>()) {
      gnew[j] = T(e * double(logb[j]) + double(gsh[j]) - e * std::log(double(s[j])));
    } else {
      const T mx = column_max(n, xs, f, tg.y[j]);
      const double lse = double(mx) / e + std::log(double(column_sum(n, xs, f, tg.y[j], -mx, T(1.0 / e))));
      gnew[j] = T(e * (double(logb[j]) - lse));
    }
  }
}

// Rows of 1 in blocks of kRowBlock: f_i <- e loga_i - e LSE_j((g_j - C_ij) / e) with the terms shifted by the
// current f_i (<= 0), and the column sums of the new state, col_j += exp((f_i + g_j - C_ij) / e) for the new f_i
// (the same terms times a_i / s_i: no second exp pass unless the row lost its terms to underflow); a block's rows
// are added to col in one pass (col is loaded and stored once per block). a = exp(loga).
constexpr int64_t kRowBlock = 4;

template <typename T>
void row_updates(const Targets<T>& tg, int64_t n, const T* xs, const T* g, const T* la, const T* a, double e, T* f,
                 T* rows, T* col) {
  const T inv_e = T(1.0 / e);
  const int64_t mp = tg.mp;
  for (int64_t i0 = 0; i0 < n; i0 += kRowBlock) {
    const int64_t cnt = std::min(kRowBlock, n - i0);
    T scale[kRowBlock] = {};
    for (int64_t k = 0; k < cnt; ++k) {
      const int64_t i = i0 + k;
      T* row = rows + k * mp;
      const T s = row_sum<T>(mp, xs[i], tg.y, f[i], g, inv_e, row);
      if (s >= kUnderflow<T>()) {
        f[i] = T(e * double(la[i]) + double(f[i]) - e * std::log(double(s)));
        scale[k] = a[i] / s;
      } else {
        const T mx = row_max(mp, xs[i], tg.y, g);
        const double lse = double(mx) / e + std::log(double(row_sum<T>(mp, xs[i], tg.y, -mx, g, inv_e, nullptr)));
        f[i] = T(e * (double(la[i]) - lse));
        row_sum<T>(mp, xs[i], tg.y, f[i], g, inv_e, row);
        scale[k] = T(1);
      }
    }
    if (cnt == kRowBlock) {
      const T *r0 = rows, *r1 = rows + mp, *r2 = rows + 2 * mp, *r3 = rows + 3 * mp;
      for (int64_t j = 0; j < mp; ++j)
        col[j] += (r0[j] * scale[0] + r1[j] * scale[1]) + (r2[j] * scale[2] + r3[j] * scale[3]);
    } else {
      for (int64_t k = 0; k < cnt; ++k)
        for (int64_t j = 0; j < mp; ++j) col[j] += rows[k * mp + j] * scale[k];
    }
  }
}

// 1. for one row. Iteration t: the row sweep (with e_t) of (f^t, g^{t+1}) gives f^{t+1} and, in the same pass,
// the column sums c of the state (f^{t+1}, g^{t+1}) at e_t; when e_{t+1} = e_t, the next column sweep needs no
// exp pass (g^{t+2}_j = e logb_j + g^{t+1}_j - e log c_j) and c is the stopping rule's column marginal. During
// the annealing the column sweep is its own pass. One exp pass per iteration after the annealing, two before.
// The row's own sizes n, m (<= p.n, p.m: its history rows are p.n + p.m apart).
template <typename T>
void sinkhorn_row(const OtParams& p, int64_t n, int64_t m, const T* xs, const T* y, const T* loga, const T* logb, T* f,
                  T* g, T* eps, int32_t* iters, T* hist) {
  if (!(all_finite(xs, n) && all_finite(y, m) && all_finite(loga, n) && all_finite(logb, m))) {
    std::fill(f, f + n, nan_v<T>());
    std::fill(g, g + m, nan_v<T>());
    *eps = nan_v<T>();
    *iters = 0;
    return;
  }
  const Targets<T> tg = load_targets(y, m);
  const int64_t mp = tg.mp;
  T* gp = padded_copy<1, T>(nullptr, m, mp, -std::numeric_limits<T>::infinity());  // g, padded
  T* gnew = thread_scratch<2, T>(mp);
  T* col = thread_scratch<3, T>(mp);
  T* rows = thread_scratch<4, T>(kRowBlock * mp);
  T* a = thread_scratch<5, T>(n);
  for (int64_t i = 0; i < n; ++i) a[i] = T(std::exp(double(loga[i])));
  std::fill(f, f + n, T(0));
  double e = std::max(p.epsilon0, p.epsilon);
  // g^1 from f^0 = 0 (a column pass), its terms shifted by -max_i (-C_ij) = -2 max(y_j min xs, y_j max xs): the
  // exponents are <= 0 (the cost has either sign)
  const auto [xlo, xhi] = std::minmax_element(xs, xs + n);
  for (int64_t j = 0; j < m; ++j) gp[j] = -std::max(T(2) * *xlo * tg.y[j], T(2) * *xhi * tg.y[j]);
  column_sums(n, mp, xs, tg.y, f, gp, T(1.0 / e), col);
  column_update(n, tg, xs, f, gp, col, logb, e, gp);
  int64_t t = 0;
  double e_used = e;
  while (true) {
    std::fill(col, col + mp, T(0));
    row_updates(tg, n, xs, gp, loga, a, e, f, rows, col);
    e_used = e;
    if (hist != nullptr) {
      T* h = hist + t * (p.n + p.m);
      std::copy(f, f + n, h);
      std::copy(gp, gp + m, h + p.n);
    }
    ++t;  // the state is (f^t, g^t), computed with e_used
    if (t >= p.max_iterations) break;
    const double e_next = ot_next_epsilon(e, p);
    if (e_next == e) {
      if (t % kOtCheckEvery == 0 && e == p.epsilon) {
        double err = 0;
        for (int64_t j = 0; j < m; ++j) err = std::max(err, std::fabs(double(col[j]) / std::exp(double(logb[j])) - 1));
        if (err <= p.tolerance) break;
      }
      column_update(n, tg, xs, f, gp, col, logb, e, gnew);
    } else {
      e = e_next;
      column_sums(n, mp, xs, tg.y, f, gp, T(1.0 / e), col);
      column_update(n, tg, xs, f, gp, col, logb, e, gnew);
    }
    std::copy(gnew, gnew + m, gp);
  }
  std::copy(gp, gp + m, g);
  *eps = T(e_used);
  *iters = int32_t(t);
}

}  // namespace

template <typename T>
void ot_sinkhorn_forward_cpu(const OtParams& p, const T* xs, const T* y, const T* loga, const T* logb, T* f, T* g,
                             T* eps, int32_t* iters, T* history) {
  ot_check_params("ot_sinkhorn_forward", p);
  RELAXOPS_CHECK(history == nullptr || p.history_len >= p.max_iterations,
                 "ot_sinkhorn_forward: the history must hold max_iterations rows");
  ot_check_lengths("ot_sinkhorn_forward", p);
  const int64_t n = p.n, m = p.m;
  parallel_items(
      p.R,
      [&](int64_t r, int) {
        const int64_t nr = ot_row_n(p, r), mr = ot_row_m(p, r);
        const bool empty = nr == 0 || mr == 0;
        zero_tail(f + r * n, empty ? 0 : nr, n);
        zero_tail(g + r * m, empty ? 0 : mr, m);
        if (empty) {
          eps[r] = T(p.epsilon);
          iters[r] = 0;
          return;
        }
        sinkhorn_row(p, nr, mr, xs + r * n, y + r * m, loga + r * n, logb + r * m, f + r * n, g + r * m, eps + r,
                     iters + r, history == nullptr ? nullptr : history + r * p.history_len * (n + m));
      },
      threads_for(p.R * p.n * p.m, kParallelWork));
}

template <typename T>
void ot_apply_forward_cpu(const OtParams& p, const T* xs, const T* y, const T* f, const T* g, const T* eps,
                          const T* loga, const T* logb, const T* u, const T* v, T* cols, T* rows, T* plan) {
  ot_check_params("ot_apply_forward", p);
  ot_check_lengths("ot_apply_forward", p);
  const int64_t n = p.n, m = p.m;
  parallel_items(
      p.R,
      [&](int64_t r, int) {
        const T *xr = xs + r * n, *fr = f + r * n, *ur = u + r * n, *lar = loga + r * n;
        const T e = eps[r];
        const int64_t nr = ot_row_n(p, r), mr = ot_row_m(p, r);
        const bool empty = nr == 0 || mr == 0;
        zero_tail(rows + r * n, empty ? 0 : nr, n);
        zero_tail(cols + r * m, empty ? 0 : mr, m);
        if (plan != nullptr) std::fill(plan + r * n * m, plan + (r + 1) * n * m, T(0));  // its pads
        if (empty) return;
        if (!(e == e)) {  // a NaN row of the forward
          nan_row(rows + r * n, nr, cols + r * m, mr);
          for (int64_t i = 0; plan != nullptr && i < nr; ++i)
            std::fill(plan + (r * n + i) * m, plan + (r * n + i) * m + mr, nan_v<T>());
          return;
        }
        const Targets<T> tg = load_targets(y + r * m, mr);
        T* gp = padded_copy<1, T>(g + r * m, mr, tg.mp, -std::numeric_limits<T>::infinity());
        T* vp = padded_copy<2, T>(v + r * m, mr, tg.mp, T(0));
        T* acc = thread_scratch<3, T>(tg.mp);
        T* row = thread_scratch<4, T>(tg.mp);
        std::fill(acc, acc + tg.mp, T(0));
        const T inv_e = T(1) / e;
        for (int64_t i = 0; i < nr; ++i) {
          row_sum<T>(tg.mp, xr[i], tg.y, fr[i], gp, inv_e, row);
          T lanes[kLanes] = {};
          const T ui = ur[i];
          for (int64_t j0 = 0; j0 < tg.mp; j0 += kLanes)
            for (int64_t l = 0; l < kLanes; ++l) {
              lanes[l] += row[j0 + l] * vp[j0 + l];
              acc[j0 + l] += row[j0 + l] * ui;
            }
          rows[r * n + i] = lane_sum(lanes) / std::exp(lar[i]);
          if (plan != nullptr) std::copy(row, row + mr, plan + (r * n + i) * m);
        }
        for (int64_t j = 0; j < mr; ++j) cols[r * m + j] = acc[j] / std::exp(logb[r * m + j]);
      },
      threads_for(p.R * p.n * p.m, kParallelWork));
}

template <typename T>
void ot_apply_backward_cpu(const OtParams& p, const T* gcols, const T* grows, const T* gplan, const T* xs, const T* y,
                           const T* f, const T* g, const T* eps, const T* loga, const T* logb, const T* u, const T* v,
                           const T* cols, const T* rows, T* gxs, T* gy, T* gf, T* gg, T* gu, T* gv, T* gloga,
                           T* glogb) {
  ot_check_params("ot_apply_backward", p);
  ot_check_lengths("ot_apply_backward", p);
  const int64_t n = p.n, m = p.m;
  parallel_items(
      p.R,
      [&](int64_t r, int) {
        const T *xr = xs + r * n, *fr = f + r * n, *ur = u + r * n;
        const T e = eps[r];
        const int64_t nr = ot_row_n(p, r), mr = ot_row_m(p, r);
        const bool empty = nr == 0 || mr == 0;
        for (T* o : {gxs, gf, gu, gloga}) zero_tail(o + r * n, empty ? 0 : nr, n);
        for (T* o : {gy, gg, gv, glogb}) zero_tail(o + r * m, empty ? 0 : mr, m);
        if (empty) return;
        if (!(e == e)) {  // a NaN row of the forward
          for (T* o : {gxs, gf, gu, gloga}) nan_row(o + r * n, nr, static_cast<T*>(nullptr), 0);
          for (T* o : {gy, gg, gv, glogb}) nan_row(o + r * m, mr, static_cast<T*>(nullptr), 0);
          return;
        }
        const Targets<T> tg = load_targets(y + r * m, mr);
        const int64_t mp = tg.mp;
        T* gp = padded_copy<1, T>(g + r * m, mr, mp, -std::numeric_limits<T>::infinity());
        T* vp = padded_copy<2, T>(v + r * m, mr, mp, T(0));
        T* gcb = padded_copy<3, T>(gcols + r * m, mr, mp, T(0));  // gcols_j / b_j
        for (int64_t j = 0; j < mr; ++j) gcb[j] /= std::exp(logb[r * m + j]);
        T* row = thread_scratch<4, T>(mp);
        T* gpl = thread_scratch<5, T>(mp);
        T* agg = thread_scratch<6, T>(mp);  // gg_j
        T* agy = thread_scratch<7, T>(mp);  // gy_j
        T* agv = thread_scratch<8, T>(mp);  // gv_j
        std::fill(agg, agg + mp, T(0));
        std::fill(agy, agy + mp, T(0));
        std::fill(agv, agv + mp, T(0));
        std::fill(gpl, gpl + mp, T(0));
        const T inv_e = T(1) / e;
        for (int64_t i = 0; i < nr; ++i) {
          const T xi = xr[i], ui = ur[i], gra = grows[r * n + i] / std::exp(loga[r * n + i]);
          row_sum<T>(mp, xi, tg.y, fr[i], gp, inv_e, row);
          if (gplan != nullptr) std::copy(gplan + (r * n + i) * m, gplan + (r * n + i) * m + mr, gpl);
          T lf[kLanes] = {}, lx[kLanes] = {}, lu[kLanes] = {};
          for (int64_t j0 = 0; j0 < mp; j0 += kLanes)
            for (int64_t l = 0; l < kLanes; ++l) {
              const int64_t j = j0 + l;
              const T t = row[j];
              const T D = t * (gcb[j] * ui + gra * vp[j] + gpl[j]) * inv_e;  // gC_ij = -D_ij
              lf[l] += D;
              agg[j] += D;
              lx[l] += D * tg.y[j];
              agy[j] += D * xi;
              lu[l] += t * gcb[j];
              agv[j] += t * gra;
            }
          gf[r * n + i] = lane_sum(lf);
          gxs[r * n + i] = T(2) * lane_sum(lx);
          gu[r * n + i] = lane_sum(lu);
          gloga[r * n + i] = -grows[r * n + i] * rows[r * n + i];
        }
        for (int64_t j = 0; j < mr; ++j) {
          gg[r * m + j] = agg[j];
          gy[r * m + j] = T(2) * agy[j];
          gv[r * m + j] = agv[j];
          glogb[r * m + j] = -gcols[r * m + j] * cols[r * m + j];
        }
      },
      threads_for(p.R * p.n * p.m, kParallelWork));
}

template <typename T>
void ot_implicit_backward_cpu(const OtParams& p, const T* gf, const T* gg, const T* xs, const T* y, const T* f,
                              const T* g, const T* eps, const T* loga, const T* logb, T* gxs, T* gy, T* gloga,
                              T* glogb) {
  ot_check_params("ot_implicit_backward", p);
  ot_check_lengths("ot_implicit_backward", p);
  parallel_items(
      p.R,
      [&](int64_t r, int) {
        // row r's vectors; n, m: its own sizes
        const T *xr = xs + r * p.n, *fr = f + r * p.n, *gfr = gf + r * p.n, *lar = loga + r * p.n;
        const T *ggr = gg + r * p.m, *lbr = logb + r * p.m;
        T *gxr = gxs + r * p.n, *glar = gloga + r * p.n, *gyr = gy + r * p.m, *glbr = glogb + r * p.m;
        const T e = eps[r];
        const int64_t n = ot_row_n(p, r), m = ot_row_m(p, r);
        const bool empty = n == 0 || m == 0;
        zero_tail(gxr, empty ? 0 : n, p.n);
        zero_tail(glar, empty ? 0 : n, p.n);
        zero_tail(gyr, empty ? 0 : m, p.m);
        zero_tail(glbr, empty ? 0 : m, p.m);
        if (empty) return;
        if (!(e == e)) {
          nan_row(gxr, n, gyr, m);
          nan_row(glar, n, glbr, m);
          return;
        }
        const Targets<T> tg = load_targets(y + r * p.m, m);
        const int64_t mp = tg.mp;
        const T inv_e = T(1) / e;
        T* gp = padded_copy<1, T>(g + r * p.m, m, mp, -std::numeric_limits<T>::infinity());
        T* row = thread_scratch<2, T>(mp);
        T* colacc = thread_scratch<3, T>(mp);
        double* rs = thread_scratch<4, double>(n);  // row marginals r_i
        double* cs = thread_scratch<5, double>(m);  // column marginals c_j
        // vectors of the Schur CG (double): x, res, z, dir, q; w (length n)
        double* x = thread_scratch<6, double>(m);
        double* res = thread_scratch<7, double>(m);
        double* dir = thread_scratch<8, double>(m);
        double* q = thread_scratch<9, double>(m);
        T* dirp = thread_scratch<10, T>(mp);  // dir as T, padded with 0
        double* nuf = thread_scratch<11, double>(n);

        // S-product building block: out_j = sum_i T_ij w_i with w_i = (sum_j T_ij vin_j - win_i) / r_i
        // (one exp pass: the row of T is cached between its two uses).
        auto pass = [&](const T* vin, const double* win, double* wout, double* out) {
          std::fill(colacc, colacc + mp, T(0));
          for (int64_t i = 0; i < n; ++i) {
            row_sum<T>(mp, xr[i], tg.y, fr[i], gp, inv_e, row);
            T lanes[kLanes] = {};
            for (int64_t j0 = 0; j0 < mp; j0 += kLanes)
              for (int64_t l = 0; l < kLanes; ++l) lanes[l] += row[j0 + l] * vin[j0 + l];
            const double w = (double(lane_sum(lanes)) - (win != nullptr ? win[i] : 0.0)) / rs[i];
            if (wout != nullptr) wout[i] = w;
            const T wt = T(w);
            for (int64_t j = 0; j < mp; ++j) colacc[j] += row[j] * wt;
          }
          for (int64_t j = 0; j < m; ++j) out[j] = colacc[j];
        };
        // marginals
        std::fill(colacc, colacc + mp, T(0));
        for (int64_t i = 0; i < n; ++i) {
          rs[i] = row_sum<T>(mp, xr[i], tg.y, fr[i], gp, inv_e, row);
          for (int64_t j = 0; j < mp; ++j) colacc[j] += row[j];
        }
        for (int64_t j = 0; j < m; ++j) cs[j] = colacc[j];
        // rhs = gg + T^t (-gf / r): pass with vin = 0, win = gf  (w_i = -gf_i / r_i)
        double* gfd = nuf;  // gf as double (nuf is written only after the solve)
        for (int64_t i = 0; i < n; ++i) gfd[i] = gfr[i];
        std::fill(dirp, dirp + mp, T(0));
        pass(dirp, gfd, nullptr, q);
        double mean = 0, rhs_norm = 0;
        for (int64_t j = 0; j < m; ++j) mean += (res[j] = double(ggr[j]) + q[j]);
        mean /= double(m);
        for (int64_t j = 0; j < m; ++j) {
          res[j] -= mean;  // project onto the range of S (orthogonal to 1)
          rhs_norm += res[j] * res[j];
          x[j] = 0;
        }
        rhs_norm = std::sqrt(rhs_norm);
        // preconditioned CG on S x = rhs, S v = c v - T^t ((T v) / r)
        double rz = 0;
        for (int64_t j = 0; j < m; ++j) {
          dir[j] = res[j] / cs[j];
          rz += res[j] * dir[j];
        }
        const double stop = kCgTolerance<T>() * rhs_norm;
        for (int64_t it = 0; it < kCgMaxIterations(m) && rhs_norm > 0; ++it) {
          for (int64_t j = 0; j < m; ++j) dirp[j] = T(dir[j]);
          pass(dirp, nullptr, nullptr, q);
          double pq = 0;
          for (int64_t j = 0; j < m; ++j) {
            q[j] = cs[j] * dir[j] - q[j];
            pq += dir[j] * q[j];
          }
          if (!(pq > 0)) break;
          const double alpha = rz / pq;
          double rmean = 0;
          for (int64_t j = 0; j < m; ++j) {
            x[j] += alpha * dir[j];
            rmean += (res[j] -= alpha * q[j]);
          }
          rmean /= double(m);
          double rn = 0, rz_new = 0;
          for (int64_t j = 0; j < m; ++j) {
            res[j] -= rmean;
            rn += res[j] * res[j];
            rz_new += res[j] * res[j] / cs[j];
          }
          if (std::sqrt(rn) <= stop) break;
          const double beta = rz_new / rz;
          rz = rz_new;
          for (int64_t j = 0; j < m; ++j) dir[j] = res[j] / cs[j] + beta * dir[j];
        }
        // nu_g = x, nu_f = (gf - T nu_g) / r; then gC_ij = T_ij (nu_f_i + nu_g_j) into xs and y
        for (int64_t j = 0; j < m; ++j) dirp[j] = T(x[j]);
        T* agy = colacc;
        std::fill(agy, agy + mp, T(0));
        for (int64_t i = 0; i < n; ++i) {
          const T xi = xr[i];
          row_sum<T>(mp, xi, tg.y, fr[i], gp, inv_e, row);
          T lanes[kLanes] = {};
          for (int64_t j0 = 0; j0 < mp; j0 += kLanes)
            for (int64_t l = 0; l < kLanes; ++l) lanes[l] += row[j0 + l] * dirp[j0 + l];
          const double nf = (double(gfr[i]) - double(lane_sum(lanes))) / rs[i];
          nuf[i] = nf;
          const T nft = T(nf);
          T lx[kLanes] = {};
          for (int64_t j0 = 0; j0 < mp; j0 += kLanes)
            for (int64_t l = 0; l < kLanes; ++l) {
              const int64_t j = j0 + l;
              const T gc = row[j] * (nft + dirp[j]);  // gC_ij; dC_ij / dxs_i = -2 y_j, dC_ij / dy_j = -2 xs_i
              lx[l] -= gc * tg.y[j];
              agy[j] -= gc * xi;
            }
          gxr[i] = T(2) * lane_sum(lx);
          glar[i] = T(double(e) * std::exp(double(lar[i])) * nf);
        }
        for (int64_t j = 0; j < m; ++j) {
          gyr[j] = T(2) * agy[j];
          glbr[j] = T(double(e) * std::exp(double(lbr[j])) * x[j]);
        }
      },
      threads_for(p.R * p.n * p.m, kParallelWork));
}

template <typename T>
void ot_unrolled_backward_cpu(const OtParams& p, const T* gf, const T* gg, const T* xs, const T* y, const T* loga,
                              const T* logb, const int32_t* iters, const T* history, T* gxs, T* gy, T* gloga,
                              T* glogb) {
  ot_check_params("ot_unrolled_backward", p);
  ot_check_lengths("ot_unrolled_backward", p);
  bool ok = true;
  for (int64_t r = 0; r < p.R; ++r) ok &= iters[r] >= 0 && iters[r] <= p.history_len;
  RELAXOPS_CHECK(ok, "ot_unrolled_backward: iters must be in [0, history_len]");
  parallel_items(
      p.R,
      [&](int64_t r, int) {
        // row r's vectors; n, m: its own sizes (the history's rows are p.n + p.m apart)
        const T *xr = xs + r * p.n, *lar = loga + r * p.n, *lbr = logb + r * p.m, *yr = y + r * p.m;
        const T* hist = history + r * p.history_len * (p.n + p.m);
        const int64_t K = iters[r];
        T *gx = gxs + r * p.n, *gla = gloga + r * p.n, *gyr = gy + r * p.m, *glbr = glogb + r * p.m;
        const int64_t n = ot_row_n(p, r), m = ot_row_m(p, r);
        const bool empty = n == 0 || m == 0;
        zero_tail(gx, empty ? 0 : n, p.n);
        zero_tail(gla, empty ? 0 : n, p.n);
        zero_tail(gyr, empty ? 0 : m, p.m);
        zero_tail(glbr, empty ? 0 : m, p.m);
        if (empty) return;
        if (!(all_finite(xr, n) && all_finite(yr, m) && all_finite(lar, n) && all_finite(lbr, m))) {
          // a NaN row of the forward
          nan_row(gx, n, gyr, m);
          nan_row(gla, n, glbr, m);
          return;
        }
        const Targets<T> tg = load_targets(yr, m);
        const int64_t mp = tg.mp;
        T* F = thread_scratch<1, T>(n);       // adjoint of f^{t+1}
        T* G = thread_scratch<2, T>(mp);      // adjoint of g^{t+1}
        T* gpot = thread_scratch<3, T>(mp);   // g^{t+1}, padded
        T* shift = thread_scratch<4, T>(mp);  // g^{t+1} - e logb, padded
        T* agy = thread_scratch<5, T>(mp);
        T* agb = thread_scratch<6, T>(mp);
        T* row = thread_scratch<7, T>(mp);
        T* fz = thread_scratch<8, T>(n);
        std::fill(fz, fz + n, T(0));
        std::copy(gf + r * p.n, gf + r * p.n + n, F);
        std::fill(G, G + mp, T(0));
        std::copy(gg + r * p.m, gg + r * p.m + m, G);
        std::fill(agy, agy + mp, T(0));
        std::fill(agb, agb + mp, T(0));
        std::fill(gx, gx + n, T(0));
        std::fill(gla, gla + n, T(0));
        // the schedule: e_t for t < K
        std::vector<double> es(size_t(std::max<int64_t>(K, 1)));
        double e = std::max(p.epsilon0, p.epsilon);
        for (int64_t t = 0; t < K; ++t) {
          es[t] = e;
          e = ot_next_epsilon(e, p);
        }
        for (int64_t t = K - 1; t >= 0; --t) {
          const T et = T(es[t]), inv_e = T(1.0 / es[t]);
          const T* f1 = hist + t * (p.n + p.m);
          const T* f0 = t > 0 ? hist + (t - 1) * (p.n + p.m) : fz;
          std::copy(f1 + p.n, f1 + p.n + m, gpot);
          std::fill(gpot + m, gpot + mp, -std::numeric_limits<T>::infinity());
          // row sweep t: P_ij = exp((f1_i - e loga_i + g1_j - C_ij) / e)
          T* dG = shift;  // reused below as the column shift; here the accumulated -P^t F
          std::fill(dG, dG + mp, T(0));
          for (int64_t i = 0; i < n; ++i) {
            const T xi = xr[i], Fi = F[i];
            gla[i] += et * Fi;
            row_sum<T>(mp, xi, tg.y, f1[i] - et * lar[i], gpot, inv_e, row);
            T lx[kLanes] = {};
            for (int64_t j0 = 0; j0 < mp; j0 += kLanes)
              for (int64_t l = 0; l < kLanes; ++l) {
                const int64_t j = j0 + l;
                const T w = row[j] * Fi;  // gC_ij
                dG[j] -= w;
                lx[l] -= w * tg.y[j];
                agy[j] -= w * xi;
              }
            gx[i] += T(2) * lane_sum(lx);
          }
          for (int64_t j = 0; j < m; ++j) {
            G[j] += dG[j];
            agb[j] += et * G[j];
            shift[j] = gpot[j] - et * lbr[j];
          }
          std::fill(shift + m, shift + mp, -std::numeric_limits<T>::infinity());
          // column sweep t: Q_ij = exp((f0_i + g1_j - e logb_j - C_ij) / e); F^t_i = -sum_j Q_ij G_j
          for (int64_t i = 0; i < n; ++i) {
            const T xi = xr[i];
            row_sum<T>(mp, xi, tg.y, f0[i], shift, inv_e, row);
            T lq[kLanes] = {}, lx[kLanes] = {};
            for (int64_t j0 = 0; j0 < mp; j0 += kLanes)
              for (int64_t l = 0; l < kLanes; ++l) {
                const int64_t j = j0 + l;
                const T w = row[j] * G[j];  // gC_ij
                lq[l] -= w;
                lx[l] -= w * tg.y[j];
                agy[j] -= w * xi;
              }
            F[i] = lane_sum(lq);
            gx[i] += T(2) * lane_sum(lx);
          }
          std::fill(G, G + mp, T(0));
        }
        for (int64_t j = 0; j < m; ++j) {
          gyr[j] = T(2) * agy[j];
          glbr[j] = agb[j];
        }
      },
      threads_for(p.R * p.n * p.m, kParallelWork));
}

#define RELAXOPS_INSTANTIATE_OTSORT(T)                                                                                \
  template void ot_sinkhorn_forward_cpu<T>(const OtParams&, const T*, const T*, const T*, const T*, T*, T*, T*,       \
                                           int32_t*, T*);                                                             \
  template void ot_apply_forward_cpu<T>(const OtParams&, const T*, const T*, const T*, const T*, const T*, const T*,  \
                                        const T*, const T*, const T*, T*, T*, T*);                                    \
  template void ot_apply_backward_cpu<T>(const OtParams&, const T*, const T*, const T*, const T*, const T*, const T*, \
                                         const T*, const T*, const T*, const T*, const T*, const T*, const T*,        \
                                         const T*, T*, T*, T*, T*, T*, T*, T*, T*);                                   \
  template void ot_implicit_backward_cpu<T>(const OtParams&, const T*, const T*, const T*, const T*, const T*,        \
                                            const T*, const T*, const T*, const T*, T*, T*, T*, T*);                  \
  template void ot_unrolled_backward_cpu<T>(const OtParams&, const T*, const T*, const T*, const T*, const T*,        \
                                            const T*, const int32_t*, const T*, T*, T*, T*, T*);

RELAXOPS_INSTANTIATE_OTSORT(float)
RELAXOPS_INSTANTIATE_OTSORT(double)

}  // namespace relaxops
