// CUDA kernels of otsort.h: one block per row (problem); the threads stride over the rows i or the targets j of
// the cost, recomputed from the points in every pass. Log-sum-exp sweeps are one pass per target (column sweep) or
// per row (row sweep) with a block-wide maximum then a block-wide sum (shared-memory reductions); a thread owns
// whole rows or whole columns, so a pass over one orientation needs no atomics. Vectors handed between passes (the
// new potentials, conjugate-gradient vectors, replayed adjoints) live in the outputs or a per-row workspace of
// 6 m + 3 n entries (see ot_cuda_workspace); passes are separated by __syncthreads().
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "../common/cuda_utils.cuh"
#include "otsort.h"

namespace relaxops {
namespace {

constexpr int kThreads = 256;

template <typename T>
__device__ T nan_value() {
  return T(NAN);
}

// Block-wide maximum (all threads get the result; block_sum is in cuda_utils.cuh).
template <typename T>
__device__ T block_max(T v, T* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] = fmax(sh[threadIdx.x], sh[threadIdx.x + s]);
    __syncthreads();
  }
  const T out = sh[0];
  __syncthreads();
  return out;
}

// Zeroes v[k .. size) by the block (the pads of a row with k real entries).
template <typename T>
__device__ void zero_tail(T* v, int64_t k, int64_t size) {
  for (int64_t i = k + threadIdx.x; i < size; i += blockDim.x) v[i] = T(0);
}

// Row r's own sizes (otsort.h), both 0 for an empty row (no source or no target).
__device__ void row_sizes(const OtParams& p, int64_t r, int64_t& nr, int64_t& mr) {
  nr = ot_row_n(p, r), mr = ot_row_m(p, r);
  if (nr == 0 || mr == 0) nr = mr = 0;
}

// C_ij = -2 xs_i y_j (otsort.h); dC_ij / dxs_i = -2 y_j, dC_ij / dy_j = -2 xs_i.
template <typename T>
__device__ T cost(T x, T y) {
  return T(-2) * x * y;
}

// LSE_i((f_i - C_ij) / e) for one column j, by the whole block (max, then sum).
template <typename T>
__device__ double column_lse(int64_t n, const T* xs, const T* f, T yj, double e, double* sh) {
  double mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) mx = fmax(mx, double(f[i]) - double(cost(xs[i], yj)));
  mx = block_max(mx, sh);
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += exp((double(f[i]) - double(cost(xs[i], yj)) - mx) / e);
  s = block_sum(s, sh);
  return mx / e + log(s);
}

// LSE_j((g_j - C_ij) / e) for one row i, by the whole block.
template <typename T>
__device__ double row_lse(int64_t m, T xi, const T* y, const T* g, double e, double* sh) {
  double mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < m; j += blockDim.x) mx = fmax(mx, double(g[j]) - double(cost(xi, y[j])));
  mx = block_max(mx, sh);
  double s = 0;
  for (int64_t j = threadIdx.x; j < m; j += blockDim.x) s += exp((double(g[j]) - double(cost(xi, y[j])) - mx) / e);
  s = block_sum(s, sh);
  return mx / e + log(s);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    sinkhorn_kernel(OtParams p, const T* __restrict__ xs, const T* __restrict__ y, const T* __restrict__ loga,
                    const T* __restrict__ logb, T* f, T* g, T* eps, int32_t* iters, T* hist, T* ws) {
  __shared__ double sh[kThreads];
  const int64_t n = p.n, m = p.m;
  for (int64_t r = blockIdx.x; r < p.R; r += gridDim.x) {
    const T *x = xs + r * n, *yr = y + r * m, *la = loga + r * n, *lb = logb + r * m;
    T *fr = f + r * n, *gr = g + r * m, *gnew = ws + r * (6 * m + 3 * n);
    int64_t nr, mr;
    row_sizes(p, r, nr, mr);
    zero_tail(fr, nr, n);
    zero_tail(gr, mr, m);
    if (nr == 0) {  // an empty row
      if (threadIdx.x == 0) eps[r] = T(p.epsilon), iters[r] = 0;
      continue;
    }
    double bad = 0;
    for (int64_t i = threadIdx.x; i < nr; i += blockDim.x) bad += isfinite(double(x[i]) + double(la[i])) ? 0 : 1;
    for (int64_t j = threadIdx.x; j < mr; j += blockDim.x) bad += isfinite(double(yr[j]) + double(lb[j])) ? 0 : 1;
    bad = block_sum(bad, sh);
    if (bad > 0) {
      for (int64_t i = threadIdx.x; i < nr; i += blockDim.x) fr[i] = nan_value<T>();
      for (int64_t j = threadIdx.x; j < mr; j += blockDim.x) gr[j] = nan_value<T>();
      if (threadIdx.x == 0) eps[r] = nan_value<T>(), iters[r] = 0;
      __syncthreads();
      continue;
    }
    for (int64_t i = threadIdx.x; i < nr; i += blockDim.x) fr[i] = T(0);
    for (int64_t j = threadIdx.x; j < mr; j += blockDim.x) gr[j] = T(0);
    __syncthreads();
    double e = p.epsilon0 > p.epsilon ? p.epsilon0 : p.epsilon, e_prev = -1;
    int64_t t = 0;
    for (; t < p.max_iterations; ++t) {
      double err = 0;
      for (int64_t j = 0; j < mr; ++j) {  // column sweep, a column at a time (block-wide LSE)
        const double gn = e * double(lb[j]) - e * column_lse(nr, x, fr, yr[j], e, sh);
        if (threadIdx.x == 0) gnew[j] = T(gn);
        err = fmax(err, fabs(expm1((double(gr[j]) - double(T(gn))) / e)));
      }
      __syncthreads();
      if (t > 0 && t % kOtCheckEvery == 0 && e_prev == p.epsilon && err <= p.tolerance) break;
      for (int64_t j = threadIdx.x; j < mr; j += blockDim.x) gr[j] = gnew[j];
      __syncthreads();
      for (int64_t i = 0; i < nr; ++i) {  // row sweep
        const double fn = e * double(la[i]) - e * row_lse(mr, x[i], yr, gr, e, sh);
        if (threadIdx.x == 0) fr[i] = T(fn);
      }
      __syncthreads();
      if (hist != nullptr) {
        T* h = hist + (r * p.history_len + t) * (n + m);
        for (int64_t i = threadIdx.x; i < nr; i += blockDim.x) h[i] = fr[i];
        for (int64_t j = threadIdx.x; j < mr; j += blockDim.x) h[n + j] = gr[j];
      }
      e_prev = e;
      e = ot_next_epsilon(e, p);
    }
    if (threadIdx.x == 0) eps[r] = T(e_prev), iters[r] = int32_t(t);
    __syncthreads();
  }
}

// T_ij for row r.
template <typename T>
__device__ T plan_entry(const T* x, const T* y, const T* f, const T* g, int64_t i, int64_t j, T inv_e) {
  return exp((f[i] + g[j] - cost(x[i], y[j])) * inv_e);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    apply_forward_kernel(OtParams p, const T* xs, const T* y, const T* f, const T* g, const T* eps, const T* loga,
                         const T* logb, const T* u, const T* v, T* cols, T* rows, T* plan) {
  const int64_t n = p.n, m = p.m;
  for (int64_t r = blockIdx.x; r < p.R; r += gridDim.x) {
    const T *x = xs + r * n, *yr = y + r * m, *fr = f + r * n, *gr = g + r * m;
    const T inv_e = T(1) / eps[r];
    int64_t nr, mr;
    row_sizes(p, r, nr, mr);
    zero_tail(rows + r * n, nr, n);
    zero_tail(cols + r * m, mr, m);
    for (int64_t k = threadIdx.x; plan != nullptr && k < n * m; k += blockDim.x)
      if (k / m >= nr || k % m >= mr) plan[r * n * m + k] = T(0);
    for (int64_t i = threadIdx.x; i < nr; i += blockDim.x) {
      T acc = 0;
      for (int64_t j = 0; j < mr; ++j) {
        const T t = plan_entry(x, yr, fr, gr, i, j, inv_e);
        acc += t * v[r * m + j];
        if (plan != nullptr) plan[(r * n + i) * m + j] = t;
      }
      rows[r * n + i] = acc / exp(loga[r * n + i]);
    }
    for (int64_t j = threadIdx.x; j < mr; j += blockDim.x) {
      T acc = 0;
      for (int64_t i = 0; i < nr; ++i) acc += plan_entry(x, yr, fr, gr, i, j, inv_e) * u[r * n + i];
      cols[r * m + j] = acc / exp(logb[r * m + j]);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    apply_backward_kernel(OtParams p, const T* gcols, const T* grows, const T* gplan, const T* xs, const T* y,
                          const T* f, const T* g, const T* eps, const T* loga, const T* logb, const T* u, const T* v,
                          const T* cols, const T* rows, T* gxs, T* gy, T* gf, T* gg, T* gu, T* gv, T* gloga, T* glogb) {
  const int64_t n = p.n, m = p.m;
  for (int64_t r = blockIdx.x; r < p.R; r += gridDim.x) {
    const T *x = xs + r * n, *yr = y + r * m, *fr = f + r * n, *gr = g + r * m;
    const T inv_e = T(1) / eps[r];
    int64_t nr, mr;
    row_sizes(p, r, nr, mr);
    zero_tail(gxs + r * n, nr, n);
    zero_tail(gf + r * n, nr, n);
    zero_tail(gu + r * n, nr, n);
    zero_tail(gloga + r * n, nr, n);
    zero_tail(gy + r * m, mr, m);
    zero_tail(gg + r * m, mr, m);
    zero_tail(gv + r * m, mr, m);
    zero_tail(glogb + r * m, mr, m);
    auto W = [&](int64_t i, int64_t j) {
      T w = gcols[r * m + j] / exp(logb[r * m + j]) * u[r * n + i] +
            grows[r * n + i] / exp(loga[r * n + i]) * v[r * m + j];
      if (gplan != nullptr) w += gplan[(r * n + i) * m + j];
      return w;
    };
    for (int64_t i = threadIdx.x; i < nr; i += blockDim.x) {
      T af = 0, ax = 0, au = 0;
      for (int64_t j = 0; j < mr; ++j) {
        const T t = plan_entry(x, yr, fr, gr, i, j, inv_e), D = t * W(i, j) * inv_e;
        af += D;  // gC_ij = -D_ij
        ax += D * T(2) * yr[j];
        au += t * gcols[r * m + j] / exp(logb[r * m + j]);
      }
      gf[r * n + i] = af, gxs[r * n + i] = ax, gu[r * n + i] = au;
      gloga[r * n + i] = -grows[r * n + i] * rows[r * n + i];
    }
    for (int64_t j = threadIdx.x; j < mr; j += blockDim.x) {
      T ag = 0, ay = 0, av = 0;
      for (int64_t i = 0; i < nr; ++i) {
        const T t = plan_entry(x, yr, fr, gr, i, j, inv_e), D = t * W(i, j) * inv_e;
        ag += D;
        ay += D * T(2) * x[i];
        av += t * grows[r * n + i] / exp(loga[r * n + i]);
      }
      gg[r * m + j] = ag, gy[r * m + j] = ay, gv[r * m + j] = av;
      glogb[r * m + j] = -gcols[r * m + j] * cols[r * m + j];
    }
  }
}

// Workspace of the implicit backward per row (double): r, w, nuf (n each); c, x, res, dir, q (m each).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    implicit_backward_kernel(OtParams p, const T* gf, const T* gg, const T* xs, const T* y, const T* f, const T* g,
                             const T* eps, const T* loga, const T* logb, T* gxs, T* gy, T* gloga, T* glogb,
                             double* ws) {
  __shared__ double sh[kThreads];
  const int64_t n = p.n, m = p.m;
  for (int64_t r = blockIdx.x; r < p.R; r += gridDim.x) {
    const T *x = xs + r * n, *yr = y + r * m, *fr = f + r * n, *gr = g + r * m;
    const T e = eps[r];
    int64_t nr, mr;
    row_sizes(p, r, nr, mr);
    zero_tail(gxs + r * n, nr, n);
    zero_tail(gloga + r * n, nr, n);
    zero_tail(gy + r * m, mr, m);
    zero_tail(glogb + r * m, mr, m);
    if (nr == 0) continue;  // an empty row
    if (!(e == e)) {
      for (int64_t i = threadIdx.x; i < nr; i += blockDim.x) gxs[r * n + i] = gloga[r * n + i] = nan_value<T>();
      for (int64_t j = threadIdx.x; j < mr; j += blockDim.x) gy[r * m + j] = glogb[r * m + j] = nan_value<T>();
      continue;
    }
    const T inv_e = T(1) / e;
    double* rs = ws + r * (6 * m + 3 * n);
    double *w = rs + n, *nuf = rs + 2 * n, *cs = rs + 3 * n, *xv = cs + m, *res = cs + 2 * m, *dir = cs + 3 * m,
           *q = cs + 4 * m;
    // w_i = (sum_j T_ij vin_j - win_i) / r_i (vin = nullptr: 0); out_j = sum_i T_ij w_i
    auto row_pass = [&](const double* vin, const double* win, const double* rdiv, double* wout) {
      for (int64_t i = threadIdx.x; i < nr; i += blockDim.x) {
        double acc = 0;
        for (int64_t j = 0; j < mr; ++j) acc += double(plan_entry(x, yr, fr, gr, i, j, inv_e)) * (vin ? vin[j] : 1.0);
        wout[i] = (acc - (win ? win[i] : 0.0)) / (rdiv ? rdiv[i] : 1.0);
      }
      __syncthreads();
    };
    auto column_pass = [&](const double* win, double* out) {
      for (int64_t j = threadIdx.x; j < mr; j += blockDim.x) {
        double acc = 0;
        for (int64_t i = 0; i < nr; ++i) acc += double(plan_entry(x, yr, fr, gr, i, j, inv_e)) * (win ? win[i] : 1.0);
        out[j] = acc;
      }
      __syncthreads();
    };
    row_pass(nullptr, nullptr, nullptr, rs);
    column_pass(nullptr, cs);
    for (int64_t i = threadIdx.x; i < nr; i += blockDim.x) w[i] = -double(gf[r * n + i]) / rs[i];
    __syncthreads();
    column_pass(w, q);
    double mean = 0;
    for (int64_t j = threadIdx.x; j < mr; j += blockDim.x) mean += double(gg[r * m + j]) + q[j];
    mean = block_sum(mean, sh) / double(mr);
    double rn = 0, rz = 0;
    for (int64_t j = threadIdx.x; j < mr; j += blockDim.x) {
      res[j] = double(gg[r * m + j]) + q[j] - mean;
      dir[j] = res[j] / cs[j];
      xv[j] = 0;
      rn += res[j] * res[j];
      rz += res[j] * dir[j];
    }
    rn = block_sum(rn, sh);
    rz = block_sum(rz, sh);
    const double stop = kCgTolerance<T>() * sqrt(rn);
    for (int64_t it = 0; it < kCgMaxIterations(mr) && rn > 0; ++it) {
      row_pass(dir, nullptr, rs, w);
      column_pass(w, q);
      double pq = 0;
      for (int64_t j = threadIdx.x; j < mr; j += blockDim.x) {
        q[j] = cs[j] * dir[j] - q[j];
        pq += dir[j] * q[j];
      }
      pq = block_sum(pq, sh);
      if (!(pq > 0)) break;
      const double alpha = rz / pq;
      double rsum = 0;
      for (int64_t j = threadIdx.x; j < mr; j += blockDim.x) {
        xv[j] += alpha * dir[j];
        rsum += (res[j] -= alpha * q[j]);
      }
      const double rmean = block_sum(rsum, sh) / double(mr);
      double rn2 = 0, rz_new = 0;
      for (int64_t j = threadIdx.x; j < mr; j += blockDim.x) {
        res[j] -= rmean;
        rn2 += res[j] * res[j];
        rz_new += res[j] * res[j] / cs[j];
      }
      rn2 = block_sum(rn2, sh);
      rz_new = block_sum(rz_new, sh);
      if (sqrt(rn2) <= stop) break;
      const double beta = rz_new / rz;
      rz = rz_new;
      for (int64_t j = threadIdx.x; j < mr; j += blockDim.x) dir[j] = res[j] / cs[j] + beta * dir[j];
      __syncthreads();
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < nr; i += blockDim.x) w[i] = double(gf[r * n + i]);
    __syncthreads();
    row_pass(xv, w, rs, nuf);  // (T x - gf) / r = -nu_f
    for (int64_t i = threadIdx.x; i < nr; i += blockDim.x) {
      double ax = 0;
      for (int64_t j = 0; j < mr; ++j)
        ax -= double(plan_entry(x, yr, fr, gr, i, j, inv_e)) * (xv[j] - nuf[i]) * 2.0 * double(yr[j]);
      gxs[r * n + i] = T(ax);
      gloga[r * n + i] = T(double(e) * exp(double(loga[r * n + i])) * -nuf[i]);
    }
    for (int64_t j = threadIdx.x; j < mr; j += blockDim.x) {
      double ay = 0;
      for (int64_t i = 0; i < nr; ++i)
        ay -= double(plan_entry(x, yr, fr, gr, i, j, inv_e)) * (xv[j] - nuf[i]) * 2.0 * double(x[i]);
      gy[r * m + j] = T(ay);
      glogb[r * m + j] = T(double(e) * exp(double(logb[r * m + j])) * xv[j]);
    }
    __syncthreads();
  }
}

// Workspace of the unrolled backward per row (T): F, Fnew (n each), G (m).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    unrolled_backward_kernel(OtParams p, const T* gf, const T* gg, const T* xs, const T* y, const T* loga,
                             const T* logb, const int32_t* iters, const T* hist, T* gxs, T* gy, T* gloga, T* glogb,
                             T* ws) {
  __shared__ double sh[kThreads];
  const int64_t n = p.n, m = p.m;
  for (int64_t r = blockIdx.x; r < p.R; r += gridDim.x) {
    const T *x = xs + r * n, *yr = y + r * m, *la = loga + r * n, *lb = logb + r * m;
    T *F = ws + r * (6 * m + 3 * n), *Fn = F + n, *G = F + 2 * n;
    T *gx = gxs + r * n, *gyr = gy + r * m, *gla = gloga + r * n, *glb = glogb + r * m;
    int64_t nr, mr;
    row_sizes(p, r, nr, mr);
    zero_tail(gx, nr, n);
    zero_tail(gla, nr, n);
    zero_tail(gyr, mr, m);
    zero_tail(glb, mr, m);
    if (nr == 0) continue;  // an empty row
    double bad = 0;
    for (int64_t i = threadIdx.x; i < nr; i += blockDim.x) bad += isfinite(double(x[i]) + double(la[i])) ? 0 : 1;
    for (int64_t j = threadIdx.x; j < mr; j += blockDim.x) bad += isfinite(double(yr[j]) + double(lb[j])) ? 0 : 1;
    bad = block_sum(bad, sh);
    for (int64_t i = threadIdx.x; i < nr; i += blockDim.x) {
      F[i] = gf[r * n + i];
      gx[i] = gla[i] = bad > 0 ? nan_value<T>() : T(0);
    }
    for (int64_t j = threadIdx.x; j < mr; j += blockDim.x) {
      G[j] = gg[r * m + j];
      gyr[j] = glb[j] = bad > 0 ? nan_value<T>() : T(0);
    }
    __syncthreads();
    if (bad > 0) continue;
    const int64_t K = iters[r];
    for (int64_t t = K - 1; t >= 0; --t) {
      double e = p.epsilon0 > p.epsilon ? p.epsilon0 : p.epsilon;
      for (int64_t s = 0; s < t; ++s) e = ot_next_epsilon(e, p);
      const T et = T(e), inv_e = T(1.0 / e);
      const T* f1 = hist + (r * p.history_len + t) * (n + m);
      const T* g1 = f1 + n;
      const T* f0 = t > 0 ? f1 - (n + m) : nullptr;
      // row sweep t: P_ij = exp((f1_i - e loga_i + g1_j - C_ij) / e)
      for (int64_t j = threadIdx.x; j < mr; j += blockDim.x) {
        T dG = 0, ay = 0;
        for (int64_t i = 0; i < nr; ++i) {
          const T P = exp((f1[i] - et * la[i] + g1[j] - cost(x[i], yr[j])) * inv_e), wv = P * F[i];
          dG -= wv;
          ay -= wv * T(2) * x[i];
        }
        G[j] += dG;
        gyr[j] += ay;
        glb[j] += et * G[j];
      }
      for (int64_t i = threadIdx.x; i < nr; i += blockDim.x) {
        T ax = 0;
        for (int64_t j = 0; j < mr; ++j) {
          const T P = exp((f1[i] - et * la[i] + g1[j] - cost(x[i], yr[j])) * inv_e);
          ax -= P * F[i] * T(2) * yr[j];
        }
        gx[i] += ax;
        gla[i] += et * F[i];
      }
      __syncthreads();
      // column sweep t: Q_ij = exp((f0_i + g1_j - e logb_j - C_ij) / e); F_i = -sum_j Q_ij G_j
      for (int64_t i = threadIdx.x; i < nr; i += blockDim.x) {
        T aq = 0, ax = 0;
        const T fi = f0 ? f0[i] : T(0);
        for (int64_t j = 0; j < mr; ++j) {
          const T Q = exp((fi + g1[j] - et * lb[j] - cost(x[i], yr[j])) * inv_e), wv = Q * G[j];
          aq -= wv;
          ax -= wv * T(2) * yr[j];
        }
        Fn[i] = aq;
        gx[i] += ax;
      }
      for (int64_t j = threadIdx.x; j < mr; j += blockDim.x) {
        T ay = 0;
        for (int64_t i = 0; i < nr; ++i) {
          const T fi = f0 ? f0[i] : T(0);
          const T Q = exp((fi + g1[j] - et * lb[j] - cost(x[i], yr[j])) * inv_e);
          ay -= Q * G[j] * T(2) * x[i];
        }
        gyr[j] += ay;
      }
      __syncthreads();
      for (int64_t i = threadIdx.x; i < nr; i += blockDim.x) F[i] = Fn[i];
      for (int64_t j = threadIdx.x; j < mr; j += blockDim.x) G[j] = T(0);
      __syncthreads();
    }
  }
}

int blocks(int64_t R) { return grid_blocks(R); }

}  // namespace

template <typename T>
void ot_sinkhorn_forward_cuda(const OtParams& p, const T* xs, const T* y, const T* loga, const T* logb, T* f, T* g,
                              T* eps, int32_t* iters, T* history, T* workspace, std::uintptr_t stream) {
  ot_check_params("ot_sinkhorn_forward", p);
  RELAXOPS_CHECK(history == nullptr || p.history_len >= p.max_iterations,
                 "ot_sinkhorn_forward: the history must hold max_iterations rows");
  if (p.R == 0) return;
  DeviceGuard guard(xs);
  sinkhorn_kernel<T>
      <<<blocks(p.R), kThreads, 0, as_stream(stream)>>>(p, xs, y, loga, logb, f, g, eps, iters, history, workspace);
  check_launch("ot_sinkhorn_forward");
}

template <typename T>
void ot_apply_forward_cuda(const OtParams& p, const T* xs, const T* y, const T* f, const T* g, const T* eps,
                           const T* loga, const T* logb, const T* u, const T* v, T* cols, T* rows, T* plan,
                           std::uintptr_t stream) {
  ot_check_params("ot_apply_forward", p);
  if (p.R == 0) return;
  DeviceGuard guard(xs);
  apply_forward_kernel<T>
      <<<blocks(p.R), kThreads, 0, as_stream(stream)>>>(p, xs, y, f, g, eps, loga, logb, u, v, cols, rows, plan);
  check_launch("ot_apply_forward");
}

template <typename T>
void ot_apply_backward_cuda(const OtParams& p, const T* gcols, const T* grows, const T* gplan, const T* xs, const T* y,
                            const T* f, const T* g, const T* eps, const T* loga, const T* logb, const T* u, const T* v,
                            const T* cols, const T* rows, T* gxs, T* gy, T* gf, T* gg, T* gu, T* gv, T* gloga, T* glogb,
                            std::uintptr_t stream) {
  ot_check_params("ot_apply_backward", p);
  if (p.R == 0) return;
  DeviceGuard guard(xs);
  apply_backward_kernel<T><<<blocks(p.R), kThreads, 0, as_stream(stream)>>>(
      p, gcols, grows, gplan, xs, y, f, g, eps, loga, logb, u, v, cols, rows, gxs, gy, gf, gg, gu, gv, gloga, glogb);
  check_launch("ot_apply_backward");
}

template <typename T>
void ot_implicit_backward_cuda(const OtParams& p, const T* gf, const T* gg, const T* xs, const T* y, const T* f,
                               const T* g, const T* eps, const T* loga, const T* logb, T* gxs, T* gy, T* gloga,
                               T* glogb, T* workspace, std::uintptr_t stream) {
  ot_check_params("ot_implicit_backward", p);
  if (p.R == 0) return;
  DeviceGuard guard(xs);
  // the CG vectors are double: the caller's workspace holds R (6 m + 3 n) doubles whatever T (ops.py)
  implicit_backward_kernel<T><<<blocks(p.R), kThreads, 0, as_stream(stream)>>>(
      p, gf, gg, xs, y, f, g, eps, loga, logb, gxs, gy, gloga, glogb, reinterpret_cast<double*>(workspace));
  check_launch("ot_implicit_backward");
}

template <typename T>
void ot_unrolled_backward_cuda(const OtParams& p, const T* gf, const T* gg, const T* xs, const T* y, const T* loga,
                               const T* logb, const int32_t* iters, const T* history, T* gxs, T* gy, T* gloga, T* glogb,
                               T* workspace, std::uintptr_t stream) {
  ot_check_params("ot_unrolled_backward", p);
  if (p.R == 0) return;
  DeviceGuard guard(xs);
  unrolled_backward_kernel<T><<<blocks(p.R), kThreads, 0, as_stream(stream)>>>(
      p, gf, gg, xs, y, loga, logb, iters, history, gxs, gy, gloga, glogb, workspace);
  check_launch("ot_unrolled_backward");
}

#define RELAXOPS_INSTANTIATE_OTSORT_CUDA(T)                                                                            \
  template void ot_sinkhorn_forward_cuda<T>(const OtParams&, const T*, const T*, const T*, const T*, T*, T*, T*,       \
                                            int32_t*, T*, T*, std::uintptr_t);                                         \
  template void ot_apply_forward_cuda<T>(const OtParams&, const T*, const T*, const T*, const T*, const T*, const T*,  \
                                         const T*, const T*, const T*, T*, T*, T*, std::uintptr_t);                    \
  template void ot_apply_backward_cuda<T>(const OtParams&, const T*, const T*, const T*, const T*, const T*, const T*, \
                                          const T*, const T*, const T*, const T*, const T*, const T*, const T*,        \
                                          const T*, T*, T*, T*, T*, T*, T*, T*, T*, std::uintptr_t);                   \
  template void ot_implicit_backward_cuda<T>(const OtParams&, const T*, const T*, const T*, const T*, const T*,        \
                                             const T*, const T*, const T*, const T*, T*, T*, T*, T*, T*,               \
                                             std::uintptr_t);                                                          \
  template void ot_unrolled_backward_cuda<T>(const OtParams&, const T*, const T*, const T*, const T*, const T*,        \
                                             const T*, const int32_t*, const T*, T*, T*, T*, T*, T*, std::uintptr_t);

RELAXOPS_INSTANTIATE_OTSORT_CUDA(float)
RELAXOPS_INSTANTIATE_OTSORT_CUDA(double)

}  // namespace relaxops
