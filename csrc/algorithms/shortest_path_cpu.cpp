// CPU kernels of shortest_path.h: OpenMP over the rows. Each thread owns one slice of a workspace allocated once per
// call (outside the parallel region, so a failed allocation raises MemoryError instead of aborting): the padded
// distance maps, the traceback state and, in the backward, the recomputed traceback states. Inner loops run along a
// grid row (x), direction by direction, so that they vectorize (the scatters of mass and gradients to the 8
// neighbours are one contiguous run per direction).
#include <algorithm>
#include <memory>

#include "../common/cpu_exp.h"
#include "../common/cpu_simd.h"
#include "shortest_path.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace relaxops {
namespace {

// From this many cell updates (rows x rounds x cells) on, the rows run in parallel (~0.3 ms of work).
constexpr int64_t kParallelWork = 1 << 14;

inline int thread_id() {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

inline int threads_for(bool parallel) {
#ifdef _OPENMP
  return parallel ? omp_get_max_threads() : 1;
#else
  (void)parallel;
  return 1;
#endif
}

enum RoundMode { kRoundPlain, kRoundJac, kRoundLast };

// Interior row y of one Bellman-Ford round: r0, r1, r2 are the padded rows y, y + 1, y + 2 of d^{t-1}; out the
// interior of padded row y + 1 of d^t; w the row y of the 8 planes (pitch HW) of J^t (kRoundJac) or of pi
// (kRoundLast, which writes no distances: the last round's d is never read).
template <typename T, int kMode>
RELAXOPS_SIMD_CLONES void relax_row(int64_t W, int64_t HW, T beta, const T* __restrict r0, const T* __restrict r1,
                                    const T* __restrict r2, const T* __restrict c, T* __restrict out,
                                    T* __restrict w) {
  for (int64_t x = 0; x < W; ++x) {
    const T n[8] = {r0[x], r0[x + 1], r0[x + 2], r1[x], r1[x + 2], r2[x], r2[x + 1], r2[x + 2]};
    T bn[8];
    T m = beta * n[0];
    for (int k = 0; k < 8; ++k) {
      bn[k] = beta * n[k];
      m = bn[k] < m ? bn[k] : m;
    }
    T e[8], z = 0;
    for (int k = 0; k < 8; ++k) {
      e[k] = fast_exp(m - bn[k]);
      z += e[k];
    }
    const T inv = T(1) / z;
    if constexpr (kMode == kRoundLast) {
      for (int k = 0; k < 8; ++k) w[k * HW + x] = e[k] * inv;
    } else {
      T s = 0;
      for (int k = 0; k < 8; ++k) {
        e[k] *= inv;
        s += e[k] * n[k];
      }
      out[x] = s + c[x];
      if constexpr (kMode == kRoundJac)
        for (int k = 0; k < 8; ++k) w[k * HW + x] = e[k] * (T(1) - beta * (n[k] - s));
    }
  }
}

// The n_iter rounds of one row: pi (and J^1..J^{n_iter-1} into jac unless it is null). da, db: padded maps.
template <typename T>
void bellman_ford_row(const SpParams& P, const T* cost, T* jac, T* pi, T* da, T* db) {
  const int64_t H = P.H, W = P.W, Q = W + 2, HW = H * W, PP = (H + 2) * Q;
  const T beta = T(P.beta);
  std::fill(da, da + PP, T(kSpInf));
  std::fill(db, db + PP, T(kSpInf));
  da[Q + 1] = 0;
  for (int64_t t = 1; t <= P.n_iter; ++t) {
    T* J = jac ? jac + (t - 1) * 8 * HW : nullptr;
    for (int64_t y = 0; y < H; ++y) {
      const T* r0 = da + y * Q;
      T* out = db + (y + 1) * Q + 1;
      if (t == P.n_iter)
        relax_row<T, kRoundLast>(W, HW, beta, r0, r0 + Q, r0 + 2 * Q, cost + y * W, out, pi + y * W);
      else if (J)
        relax_row<T, kRoundJac>(W, HW, beta, r0, r0 + Q, r0 + 2 * Q, cost + y * W, out, J + y * W);
      else
        relax_row<T, kRoundPlain>(W, HW, beta, r0, r0 + Q, r0 + 2 * Q, cost + y * W, out, nullptr);
    }
    db[Q + 1] = 0;  // the start is pinned
    std::swap(da, db);
  }
}

template <int kId, typename T>
RELAXOPS_SIMD_CLONES void accumulate_row(int64_t W, T p, T* __restrict path, const T* __restrict trace) {
  for (int64_t x = 0; x < W; ++x) path[x] = sp_t_conorm<T>(kId, p, path[x], trace[x]);
}

template <typename T>
RELAXOPS_SIMD_CLONES void axpy_row(int64_t n, const T* __restrict a, const T* __restrict b, T* __restrict dst) {
  for (int64_t x = 0; x < n; ++x) dst[x] += a[x] * b[x];
}

// One traceback step: path <- path T trace (path [H, W]; trace, next: padded), next <- the moved mass (when next is
// not null; its ring collects the mass that leaves the grid).
template <typename T>
void trace_step(const SpParams& P, const T* pi, T* path, const T* trace, T* next) {
  const int64_t H = P.H, W = P.W, Q = W + 2, HW = H * W;
  const T p = T(P.hamacher_p);
  for (int64_t y = 0; y < H; ++y) {
    const T* tr = trace + (y + 1) * Q + 1;
    if (P.t_conorm == kSpProbabilistic) accumulate_row<kSpProbabilistic>(W, p, path + y * W, tr);
    else if (P.t_conorm == kSpHamacher) accumulate_row<kSpHamacher>(W, p, path + y * W, tr);
    else accumulate_row<kSpYager1>(W, p, path + y * W, tr);
  }
  if (!next) return;
  std::fill(next, next + (H + 2) * Q, T(0));
  for (int64_t y = 0; y < H; ++y)
    for (int k = 0; k < 8; ++k)
      axpy_row(W, trace + (y + 1) * Q + 1, pi + k * HW + y * W, next + (y + 1 + sp_dy(k)) * Q + 1 + sp_dx(k));
}

template <typename T>
void trace_start(const SpParams& P, T* path, T* trace) {
  const int64_t Q = P.W + 2;
  std::fill(path, path + P.H * P.W, T(0));
  std::fill(trace, trace + (P.H + 2) * Q, T(0));
  trace[P.H * Q + P.W] = 1;  // (H - 1, W - 1)
}

// The "while" loop's trip count of one row alone: steps until P <= epsilon (0 for NaN), at most max_iter.
template <typename T>
int64_t while_count_row(const SpParams& P, const T* pi, T* path, T* ta, T* tb) {
  trace_start(P, path, ta);
  const T beta = T(P.beta), eps = T(P.epsilon);
  T Pc = sp_continuation(beta, path[0]);
  int64_t i = 0;
  while (i < P.max_iter && Pc > eps) {
    trace_step(P, pi, path, ta, tb);
    std::swap(ta, tb);
    Pc *= sp_continuation(beta, path[0]);
    ++i;
  }
  return i;
}

// K traceback steps of one row into out: path^K ("for") or the While mixture ("while").
template <typename T>
void traceback_row(const SpParams& P, int64_t K, const T* pi, T* out, T* path, T* ta, T* tb) {
  const int64_t HW = P.H * P.W;
  trace_start(P, path, ta);
  const T beta = T(P.beta);
  T Pc = sp_continuation(beta, path[0]);
  if (P.loop == kSpWhile)
    for (int64_t c = 0; c < HW; ++c) out[c] = (1 - Pc) * path[c];
  for (int64_t i = 1; i <= K; ++i) {
    trace_step(P, pi, path, ta, i < K ? tb : nullptr);
    std::swap(ta, tb);
    if (P.loop == kSpWhile) {
      const T Pn = Pc * sp_continuation(beta, path[0]), w = Pc - Pn;
      for (int64_t c = 0; c < HW; ++c) out[c] += w * path[c];
      Pc = Pn;
    }
  }
  if (P.loop == kSpWhile)
    for (int64_t c = 0; c < HW; ++c) out[c] += Pc * path[c];
  else
    std::copy(path, path + HW, out);
}

// Workspace of one thread, in elements of T: forward 4 padded maps and a path; backward the recomputed traceback
// (K + 1 paths, K padded traces, K + 1 pairs (P_i, c_i)) and the gradient buffers (a path, 4 padded maps, 8 planes,
// a row).
int64_t workspace_per_thread(const SpParams& P, int64_t K, bool backward) {
  const int64_t HW = P.H * P.W, PP = (P.H + 2) * (P.W + 2);
  if (!backward) return 4 * PP + HW;
  return (K + 1) * HW + K * PP + 2 * (K + 1) + HW + 4 * PP + 8 * HW + P.W;
}

template <int kId, typename T>
RELAXOPS_SIMD_CLONES void trace_back_row(int64_t W, int64_t Q, int64_t HW, T p, const T* __restrict pi,
                                         const T* __restrict gt, const T* __restrict a, const T* __restrict b,
                                         T* __restrict gp, T* __restrict gpi, T* __restrict gt_prev) {
  // gt: the padded gradient of trace^i at this row's cell (offsets by direction); a, b: path^{i-1}, trace^{i-1}
  for (int64_t x = 0; x < W; ++x) {
    T acc = 0;
    for (int k = 0; k < 8; ++k) {
      const T g = gt[(1 + sp_dy(k)) * Q + sp_dx(k) + x];
      acc += g * pi[k * HW + x];
      gpi[k * HW + x] += g * b[x];
    }
    T da, db;
    sp_t_conorm_grad<T>(kId, p, a[x], b[x], &da, &db);
    gt_prev[x] = acc + gp[x] * db;
    gp[x] *= da;
  }
}

template <typename T>
RELAXOPS_SIMD_CLONES void softmin_back_row(int64_t W, int64_t HW, const T* __restrict pi,
                                           const T* __restrict gpi, T* __restrict S) {
  for (int64_t x = 0; x < W; ++x) {
    T s = 0;
    for (int k = 0; k < 8; ++k) s += pi[k * HW + x] * gpi[k * HW + x];
    S[x] = s;
  }
}

template <typename T>
RELAXOPS_SIMD_CLONES void softmin_scatter_row(int64_t W, T beta, const T* __restrict pi, const T* __restrict gpi,
                                              const T* __restrict S, T* __restrict dst) {
  for (int64_t x = 0; x < W; ++x) dst[x] += -beta * pi[x] * (gpi[x] - S[x]);
}

template <typename T>
void backward_row(const SpParams& P, int64_t K, const T* g_out, const T* jac, const T* pi, T* grad_cost, T* ws) {
  const int64_t H = P.H, W = P.W, Q = W + 2, HW = H * W, PP = (H + 2) * Q;
  const T beta = T(P.beta), p = T(P.hamacher_p);
  const bool is_while = P.loop == kSpWhile;
  T* paths = ws;                   // path^0..path^K [K + 1, H, W]
  T* traces = paths + (K + 1) * HW;  // trace^0..trace^{K-1}, padded
  T* Ps = traces + K * PP;         // P_0..P_K
  T* cs = Ps + (K + 1);            // c_0..c_K
  T* gp = cs + (K + 1);
  T* gt = gp + HW;
  T* gt2 = gt + PP;
  T* gd = gt2 + PP;
  T* gd2 = gd + PP;
  T* gpi = gd2 + PP;
  T* S = gpi + 8 * HW;

  // recompute the traceback, keeping every state
  if (K > 0) trace_start(P, paths, traces);
  cs[0] = sp_continuation(beta, T(0));
  Ps[0] = cs[0];
  for (int64_t i = 1; i <= K; ++i) {
    std::copy(paths + (i - 1) * HW, paths + i * HW, paths + i * HW);
    trace_step(P, pi, paths + i * HW, traces + (i - 1) * PP, i < K ? traces + i * PP : nullptr);
    cs[i] = sp_continuation(beta, paths[i * HW]);
    Ps[i] = Ps[i - 1] * cs[i];
  }

  // reverse traceback: gp = dL/dpath^i, gt = dL/dtrace^i (padded, ring 0)
  std::fill(gt, gt + PP, T(0));
  std::fill(gt2, gt2 + PP, T(0));
  std::fill(gpi, gpi + 8 * HW, T(0));
  const T w_last = is_while && K > 0 ? (Ps[K - 1] - Ps[K]) + Ps[K] : T(1);
  for (int64_t c = 0; c < HW; ++c) gp[c] = w_last * g_out[c];
  T G_next = 0;  // "while": dL/dP_{i+1}
  for (int64_t i = K; i >= 1; --i) {
    const T* a = paths + (i - 1) * HW;
    const T* b = traces + (i - 1) * PP;
    for (int64_t y = 0; y < H; ++y) {
      const int64_t o = y * W, po = (y + 1) * Q + 1;
      if (P.t_conorm == kSpProbabilistic)
        trace_back_row<kSpProbabilistic>(W, Q, HW, p, pi + o, gt + y * Q + 1, a + o, b + po, gp + o, gpi + o,
                                         gt2 + po);
      else if (P.t_conorm == kSpHamacher)
        trace_back_row<kSpHamacher>(W, Q, HW, p, pi + o, gt + y * Q + 1, a + o, b + po, gp + o, gpi + o, gt2 + po);
      else
        trace_back_row<kSpYager1>(W, Q, HW, p, pi + o, gt + y * Q + 1, a + o, b + po, gp + o, gpi + o, gt2 + po);
    }
    std::swap(gt, gt2);
    const int64_t j = i - 1;  // gp is now dL/dpath^j without path^j's own terms in the output
    if (is_while && j >= 1) {
      const T* pj = paths + j * HW;
      const T* pn = paths + i * HW;
      T direct = 0;
      for (int64_t c = 0; c < HW; ++c) direct += g_out[c] * (pn[c] - pj[c]);
      const T G = direct + G_next * cs[i];
      G_next = G;
      const T w = Ps[j - 1] - Ps[j];
      for (int64_t c = 0; c < HW; ++c) gp[c] += w * g_out[c];
      gp[0] += G * Ps[j - 1] * cs[j] * (1 - cs[j]) * -beta;
    }
  }

  // the last round: pi^{n_iter} = softmin(beta N) of d^{n_iter-1}
  std::fill(grad_cost, grad_cost + HW, T(0));
  if (P.n_iter == 1) return;
  std::fill(gd, gd + PP, T(0));
  for (int64_t y = 0; y < H; ++y) {
    const int64_t o = y * W;
    softmin_back_row(W, HW, pi + o, gpi + o, S);
    for (int k = 0; k < 8; ++k)
      softmin_scatter_row(W, beta, pi + k * HW + o, gpi + k * HW + o, S,
                          gd + (y + 1 + sp_dy(k)) * Q + 1 + sp_dx(k));
  }
  // rounds n_iter - 1 .. 1: gd = dL/dd^t (padded; ring entries are never read)
  for (int64_t t = P.n_iter - 1; t >= 1; --t) {
    gd[Q + 1] = 0;  // d^t[start] is pinned
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x = 0; x < W; ++x) grad_cost[y * W + x] += gd[(y + 1) * Q + 1 + x];
    if (t == 1) break;
    const T* J = jac + (t - 1) * 8 * HW;
    std::fill(gd2, gd2 + PP, T(0));
    for (int64_t y = 0; y < H; ++y)
      for (int k = 0; k < 8; ++k)
        axpy_row(W, gd + (y + 1) * Q + 1, J + k * HW + y * W, gd2 + (y + 1 + sp_dy(k)) * Q + 1 + sp_dx(k));
    std::swap(gd, gd2);
  }
}

}  // namespace

template <typename T>
void shortest_path_forward_cpu(const SpParams& P, const T* cost, T* out, T* jac, T* pi, int32_t* steps) {
  sp_check_params(P);
  const int64_t HW = P.H * P.W, PP = (P.H + 2) * (P.W + 2);
  const bool parallel = P.B > 1 && P.B * P.n_iter * HW >= kParallelWork;
  const int64_t per = workspace_per_thread(P, 0, false);
  std::unique_ptr<T[]> ws(new T[size_t(threads_for(parallel)) * size_t(per)]);
  T* const base = ws.get();
  const int64_t J = (P.n_iter - 1) * 8 * HW;
  int64_t K = P.n_trace;
  if (P.loop == kSpWhile) {
    K = 0;
#pragma omp parallel for schedule(dynamic) reduction(max : K) if (parallel)
    for (int64_t b = 0; b < P.B; ++b) {
      T* w = base + thread_id() * per;
      bellman_ford_row(P, cost + b * HW, jac ? jac + b * J : nullptr, pi + b * 8 * HW, w, w + PP);
      const int64_t count = while_count_row(P, pi + b * 8 * HW, w + 4 * PP, w, w + PP);
      K = count > K ? count : K;
    }
  }
#pragma omp parallel for schedule(dynamic) if (parallel)
  for (int64_t b = 0; b < P.B; ++b) {
    T* w = base + thread_id() * per;
    if (P.loop == kSpFor)
      bellman_ford_row(P, cost + b * HW, jac ? jac + b * J : nullptr, pi + b * 8 * HW, w, w + PP);
    traceback_row(P, K, pi + b * 8 * HW, out + b * HW, w + 4 * PP, w + 2 * PP, w + 3 * PP);
  }
  steps[0] = int32_t(K);
}

template <typename T>
void shortest_path_backward_cpu(const SpParams& P, const int32_t* steps, const T* grad_out, const T* jac, const T* pi,
                                T* grad_cost) {
  sp_check_params(P);
  const int64_t K = steps[0];
  sp_check_steps(P, K);
  RELAXOPS_CHECK(P.n_iter == 1 || jac != nullptr, "shortest_path_backward: jac is required for n_iter > 1");
  const int64_t HW = P.H * P.W;
  const bool parallel = P.B > 1 && P.B * (P.n_iter + K) * HW >= kParallelWork;
  const int64_t per = workspace_per_thread(P, K, true);
  std::unique_ptr<T[]> ws(new T[size_t(threads_for(parallel)) * size_t(per)]);
  T* const base = ws.get();
  const int64_t J = (P.n_iter - 1) * 8 * HW;
#pragma omp parallel for schedule(dynamic) if (parallel)
  for (int64_t b = 0; b < P.B; ++b)
    backward_row(P, K, grad_out + b * HW, jac ? jac + b * J : nullptr, pi + b * 8 * HW, grad_cost + b * HW,
                 base + thread_id() * per);
}

#define RELAXOPS_INSTANTIATE_SHORTEST_PATH(T)                                                                 \
  template void shortest_path_forward_cpu<T>(const SpParams&, const T*, T*, T*, T*, int32_t*);              \
  template void shortest_path_backward_cpu<T>(const SpParams&, const int32_t*, const T*, const T*, const T*, \
                                              T*);

RELAXOPS_INSTANTIATE_SHORTEST_PATH(float)
RELAXOPS_INSTANTIATE_SHORTEST_PATH(double)

}  // namespace relaxops
