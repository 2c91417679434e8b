// CPU kernels of shortest_path.h: a parallel loop over the rows (cpu_parallel.h). Each thread owns one slice of a
// workspace allocated once per call (before the loop, so that a failed allocation raises MemoryError).
//
// Every pass runs over the cells of a grid as ONE flat range: with the pitch Q = W + 2 of every buffer, cell (y, x)
// is at y Q + x of a pitched plane [H, Q] and at (y + 1) Q + x + 1 of a padded map [H + 2, Q], so the cells are the
// flat range [0, L), L = (H - 1) Q + W, and neighbour k is at the constant offset dy_k Q + dx_k. The range includes
// the padding entries x = W, W + 1 of rows 0..H-2 (the padded map's ring columns); they are computed like cells and
// reset after each pass (distances to 1e12, pi / J / traces / gradients to 0), which costs little against what a
// loop per grid row costs on small grids (W = 5: no full vector). Each pass is a loop over the range, direction by
// direction where it sums or scatters over the 8 neighbours, so that GCC vectorizes it (the file is compiled with
// -fno-trapping-math so that its selects are if-converted).
#include <algorithm>
#include <memory>
#include <vector>

#include "../common/cpu_exp.h"
#include "../common/cpu_parallel.h"
#include "../common/cpu_simd.h"
#include "shortest_path.h"

namespace relaxops {
namespace {

// From this many cell updates (rows x (rounds + steps) x cells) on, the rows run in parallel (~10 ms of work on one
// thread).
constexpr int64_t kParallelWork = 1 << 20;

// The threads of a call, each with its own workspace.
inline int call_threads(bool parallel) { return parallel ? cpu_threads() : 1; }

// exp arguments are clamped from below here (NaN passes): fast_exp gives 0 there, and from it on its 2^k factor is
// exactly 0, whereas a far more negative argument (-1e13 between a reached cell and the 1e12 ring) leaves garbage
// bits there before the result is masked.
template <typename T>
constexpr T kExpFloor = sizeof(T) == 4 ? T(-88) : T(-709);

struct Grid {
  int64_t H, W, Q, L, HQ, PP;
  int64_t off[8];  // dy_k Q + dx_k
  explicit Grid(const SpParams& P)
      : H(P.H), W(P.W), Q(P.W + 2), L((P.H - 1) * (P.W + 2) + P.W), HQ(P.H * (P.W + 2)), PP((P.H + 2) * (P.W + 2)) {
    for (int k = 0; k < 8; ++k) off[k] = sp_dy(k) * Q + sp_dx(k);
  }
  // the ring columns of a padded map's rows 1..H
  template <typename T>
  void set_ring_columns(T* map, T v) const {
    for (int64_t y = 1; y <= H; ++y) map[y * Q] = map[y * Q + W + 1] = v;
  }
  // the padding entries of a pitched plane
  template <typename T>
  void set_padding(T* plane, T v) const {
    for (int64_t y = 0; y < H; ++y) plane[y * Q + W] = plane[y * Q + W + 1] = v;
  }
};

enum RoundMode { kRoundPlain, kRoundJac, kRoundLast };

// The loops over the flat range, one direction at a time. Their own __restrict arguments tell GCC that the buffers
// do not overlap (it does not vectorize the same loops written inline under the loop over the directions).
template <typename T>
inline void min_pass(int64_t L, const T* __restrict n, T* __restrict M) {
  for (int64_t i = 0; i < L; ++i) M[i] = n[i] < M[i] ? n[i] : M[i];
}
template <typename T>
inline void exp_pass(int64_t L, T beta, const T* __restrict n, const T* __restrict M, T* __restrict e,
                     T* __restrict Z) {
  for (int64_t i = 0; i < L; ++i) {
    T v = beta * (M[i] - n[i]);
    v = v < kExpFloor<T> ? kExpFloor<T> : v;
    e[i] = fast_exp(v);
    Z[i] += e[i];
  }
}
template <typename T>
inline void scale_by(int64_t L, const T* __restrict Z, T* __restrict e) {
  for (int64_t i = 0; i < L; ++i) e[i] *= Z[i];
}
template <typename T>
inline void normalize_sum(int64_t L, const T* __restrict Z, const T* __restrict n, T* __restrict e, T* __restrict S) {
  for (int64_t i = 0; i < L; ++i) {
    e[i] *= Z[i];
    S[i] += e[i] * n[i];
  }
}
template <typename T>
inline void jac_pass(int64_t L, T beta, const T* __restrict n, const T* __restrict S, T* __restrict e) {
  for (int64_t i = 0; i < L; ++i) e[i] = e[i] * (T(1) - beta * (n[i] - S[i]));
}
template <typename T>
inline void axpy_out(int64_t L, const T* __restrict S, const T* __restrict c, T* __restrict out) {
  for (int64_t i = 0; i < L; ++i) out[i] = S[i] + c[i];
}
template <typename T>
inline void axpy(int64_t L, const T* __restrict a, const T* __restrict b, T* __restrict d) {
  for (int64_t i = 0; i < L; ++i) d[i] += a[i] * b[i];
}
template <typename T>
inline void trace_back_pass(int64_t L, const T* __restrict g, const T* __restrict p, const T* __restrict b,
                            T* __restrict acc, T* __restrict gp) {
  for (int64_t i = 0; i < L; ++i) {
    acc[i] += g[i] * p[i];
    gp[i] += g[i] * b[i];
  }
}
template <int kId, typename T>
inline void tconorm_back(int64_t L, T p, const T* __restrict a, const T* __restrict b, const T* __restrict acc,
                         T* __restrict gp, T* __restrict gt_prev) {
  for (int64_t i = 0; i < L; ++i) {
    T da, db;
    sp_t_conorm_grad<T>(kId, p, a[i], b[i], &da, &db);
    gt_prev[i] = acc[i] + gp[i] * db;
    gp[i] *= da;
  }
}
template <typename T>
inline void softmin_scatter(int64_t L, T beta, const T* __restrict p, const T* __restrict gp, const T* __restrict S,
                            T* __restrict d) {
  for (int64_t i = 0; i < L; ++i) d[i] += -beta * p[i] * (gp[i] - S[i]);
}

// One Bellman-Ford round from the padded map dprev: kRoundPlain / kRoundJac write the padded map dnext (its ring
// columns and start are the caller's), kRoundJac the planes J^t into w, kRoundLast only the planes pi into w. cq: the
// pitched costs; E (kRoundPlain: 8 planes), M, Z, S: scratch planes.
template <typename T, int kMode>
RELAXOPS_SIMD_CLONES void relax_round(const Grid& g, T beta, const T* dprev, const T* cq, T* dnext, T* w, T* E, T* M,
                                      T* Z, T* S) {
  const int64_t L = g.L, HQ = g.HQ;
  const T* c0 = dprev + g.Q + 1;
  T* planes = kMode == kRoundPlain ? E : w;
  // the softmin's shift: M = min_k N_k (exp(beta (M - N_k)) <= 1; exactly 1 at the minimum, however the products
  // round or contract)
  std::copy(c0 + g.off[0], c0 + g.off[0] + L, M);
  for (int k = 1; k < 8; ++k) min_pass(L, c0 + g.off[k], M);
  std::fill(Z, Z + L, T(0));
  for (int k = 0; k < 8; ++k) exp_pass(L, beta, c0 + g.off[k], M, planes + k * HQ, Z);
  for (int64_t i = 0; i < L; ++i) Z[i] = T(1) / Z[i];
  if constexpr (kMode == kRoundLast) {
    for (int k = 0; k < 8; ++k) scale_by(L, Z, planes + k * HQ);
  } else {
    std::fill(S, S + L, T(0));
    // s = sum_k pi_k N_k in the order k = 0..7, as torch's sum
    for (int k = 0; k < 8; ++k) normalize_sum(L, Z, c0 + g.off[k], planes + k * HQ, S);
    axpy_out(L, S, cq, dnext + g.Q + 1);
    if constexpr (kMode == kRoundJac)  // J_k = ds / dN_k = pi_k (1 - beta (N_k - s))
      for (int k = 0; k < 8; ++k) jac_pass(L, beta, c0 + g.off[k], S, planes + k * HQ);
  }
}

// dst[i + off_k] += a[i] b_k[i] for every direction k (a scatter to the 8 neighbours; dst, a padded at the cell
// origin, b pitched planes).
template <typename T>
RELAXOPS_SIMD_CLONES void scatter8(const Grid& g, const T* a, const T* b, T* dst) {
  for (int k = 0; k < 8; ++k) axpy(g.L, a, b + k * g.HQ, dst + g.off[k]);
}

template <int kId, typename T>
RELAXOPS_SIMD_CLONES void accumulate(int64_t L, T p, T* __restrict path, const T* __restrict trace) {
  for (int64_t i = 0; i < L; ++i) path[i] = sp_t_conorm<T>(kId, p, path[i], trace[i]);
}

// The Bellman-Ford rounds of one row: pi (and J^1..J^{n_iter-1} into jac unless it is null). ws: 2 padded maps and
// 12 pitched planes.
template <typename T>
void bellman_ford_row(const SpParams& P, const Grid& g, const T* cost, T* jac, T* pi, T* ws) {
  T* da = ws;
  T* db = da + g.PP;
  T* cq = db + g.PP;
  T* M = cq + g.HQ;
  T* Z = M + g.HQ;
  T* S = Z + g.HQ;
  T* E = S + g.HQ;
  const T beta = T(P.beta);
  std::fill(cq, cq + g.HQ, T(0));
  for (int64_t y = 0; y < g.H; ++y) std::copy(cost + y * g.W, cost + (y + 1) * g.W, cq + y * g.Q);
  std::fill(da, da + g.PP, T(kSpInf));
  std::fill(db, db + g.PP, T(kSpInf));
  da[g.Q + 1] = 0;
  for (int64_t t = 1; t <= P.n_iter; ++t) {
    if (t == P.n_iter) {
      relax_round<T, kRoundLast>(g, beta, da, cq, db, pi, E, M, Z, S);
      for (int k = 0; k < 8; ++k) g.set_padding(pi + k * g.HQ, T(0));
      break;
    }
    if (jac) {
      T* J = jac + (t - 1) * 8 * g.HQ;
      relax_round<T, kRoundJac>(g, beta, da, cq, db, J, E, M, Z, S);
      for (int k = 0; k < 8; ++k) g.set_padding(J + k * g.HQ, T(0));
    } else {
      relax_round<T, kRoundPlain>(g, beta, da, cq, db, nullptr, E, M, Z, S);
    }
    g.set_ring_columns(db, T(kSpInf));
    db[g.Q + 1] = 0;  // the start is pinned
    std::swap(da, db);
  }
}

// One traceback step: path <- path T trace (path pitched; trace, next padded with zero rings), next <- the moved mass
// (when next is not null; the mass that leaves the grid is cleared from its ring).
template <typename T>
void trace_step(const SpParams& P, const Grid& g, const T* pi, T* path, const T* trace, T* next) {
  const T p = T(P.hamacher_p);
  const T* tr = trace + g.Q + 1;
  if (P.t_conorm == kSpProbabilistic)
    accumulate<kSpProbabilistic>(g.L, p, path, tr);
  else if (P.t_conorm == kSpHamacher)
    accumulate<kSpHamacher>(g.L, p, path, tr);
  else
    accumulate<kSpYager1>(g.L, p, path, tr);
  if (!next) return;
  std::fill(next, next + g.PP, T(0));
  scatter8(g, tr, pi, next + g.Q + 1);
  std::fill(next, next + g.Q, T(0));
  std::fill(next + (g.H + 1) * g.Q, next + g.PP, T(0));
  g.set_ring_columns(next, T(0));
}

template <typename T>
void trace_start(const Grid& g, T* path, T* trace) {
  std::fill(path, path + g.HQ, T(0));
  std::fill(trace, trace + g.PP, T(0));
  trace[g.H * g.Q + g.W] = 1;  // (H - 1, W - 1)
}

// The "while" loop's trip count of one row alone: steps until P <= epsilon (0 for NaN), at most max_iter.
template <typename T>
int64_t while_count_row(const SpParams& P, const Grid& g, const T* pi, T* path, T* ta, T* tb) {
  trace_start(g, path, ta);
  const T beta = T(P.beta), eps = T(P.epsilon);
  T Pc = sp_continuation(beta, path[0]);
  int64_t i = 0;
  while (i < P.max_iter && Pc > eps) {
    trace_step(P, g, pi, path, ta, tb);
    std::swap(ta, tb);
    Pc *= sp_continuation(beta, path[0]);
    ++i;
  }
  return i;
}

// K traceback steps of one row into out [H, W]: path^K ("for") or the While mixture ("while"). acc: a pitched plane.
template <typename T>
void traceback_row(const SpParams& P, const Grid& g, int64_t K, const T* pi, T* out, T* path, T* ta, T* tb, T* acc) {
  const int64_t L = g.L;
  trace_start(g, path, ta);
  const T beta = T(P.beta);
  const bool is_while = P.loop == kSpWhile;
  T Pc = sp_continuation(beta, path[0]);
  if (is_while)
    for (int64_t i = 0; i < L; ++i) acc[i] = (1 - Pc) * path[i];
  for (int64_t s = 1; s <= K; ++s) {
    trace_step(P, g, pi, path, ta, s < K ? tb : nullptr);
    std::swap(ta, tb);
    if (is_while) {
      const T Pn = Pc * sp_continuation(beta, path[0]), w = Pc - Pn;
      for (int64_t i = 0; i < L; ++i) acc[i] += w * path[i];
      Pc = Pn;
    }
  }
  if (is_while)
    for (int64_t i = 0; i < L; ++i) acc[i] += Pc * path[i];
  const T* res = is_while ? acc : path;
  for (int64_t y = 0; y < g.H; ++y) std::copy(res + y * g.Q, res + y * g.Q + g.W, out + y * g.W);
}

// Reverse of one traceback step: gt (padded) the gradient of trace^i, a / b (pitched / padded) path^{i-1} /
// trace^{i-1}; gp (pitched) enters as the gradient of path^i and leaves as that of path^{i-1} (without path^{i-1}'s own
// terms); gpi += the gradient of pi; gt_prev (padded at the cell origin) <- the gradient of trace^{i-1}; acc scratch.
template <int kId, typename T>
RELAXOPS_SIMD_CLONES void trace_back(const Grid& g, T p, const T* pi, const T* gt, const T* a, const T* b, T* gp,
                                     T* gpi, T* gt_prev, T* acc) {
  const int64_t L = g.L;
  std::fill(acc, acc + L, T(0));
  for (int k = 0; k < 8; ++k) trace_back_pass(L, gt + g.off[k], pi + k * g.HQ, b, acc, gpi + k * g.HQ);
  tconorm_back<kId>(L, p, a, b, acc, gp, gt_prev);
}

// dL/dd^{n_iter-1} from dL/dpi of the last round: dst[i + off_k] += -beta pi_k (gpi_k - sum_j pi_j gpi_j).
template <typename T>
RELAXOPS_SIMD_CLONES void softmin_back(const Grid& g, T beta, const T* pi, const T* gpi, T* S, T* dst) {
  const int64_t L = g.L;
  std::fill(S, S + L, T(0));
  for (int k = 0; k < 8; ++k) axpy(L, pi + k * g.HQ, gpi + k * g.HQ, S);
  for (int k = 0; k < 8; ++k) softmin_scatter(L, beta, pi + k * g.HQ, gpi + k * g.HQ, S, dst + g.off[k]);
}

// Workspace of one thread, in elements of T. Forward: 4 padded maps, 13 pitched planes. Backward: the recomputed
// traceback (K + 1 pitched paths, K padded traces, K + 1 pairs (P_i, c_i)), 4 padded maps, 13 pitched planes.
int64_t workspace_per_thread(const Grid& g, int64_t K, bool backward) {
  if (!backward) return 4 * g.PP + 13 * g.HQ;
  return (K + 1) * g.HQ + K * g.PP + 2 * (K + 1) + 4 * g.PP + 13 * g.HQ;
}

template <typename T>
void backward_row(const SpParams& P, const Grid& g, int64_t K, const T* g_out, const T* jac, const T* pi, T* grad_cost,
                  T* ws) {
  const int64_t L = g.L, HQ = g.HQ, PP = g.PP, Q = g.Q;
  const T beta = T(P.beta), p = T(P.hamacher_p);
  const bool is_while = P.loop == kSpWhile;
  T* paths = ws;                     // path^0..path^K, pitched
  T* traces = paths + (K + 1) * HQ;  // trace^0..trace^{K-1}, padded
  T* Ps = traces + K * PP;           // P_0..P_K
  T* cs = Ps + (K + 1);              // c_0..c_K
  T* gt = cs + (K + 1);              // padded maps
  T* gt2 = gt + PP;
  T* gd = gt2 + PP;
  T* gd2 = gd + PP;
  T* gq = gd2 + PP;  // pitched planes: g_out, gp, acc, gcost, gpi (8)
  T* gp = gq + HQ;
  T* acc = gp + HQ;
  T* gcq = acc + HQ;
  T* gpi = gcq + HQ;

  std::fill(gq, gq + HQ, T(0));
  for (int64_t y = 0; y < g.H; ++y) std::copy(g_out + y * g.W, g_out + (y + 1) * g.W, gq + y * Q);

  // recompute the traceback, keeping every state
  if (K > 0) trace_start(g, paths, traces);
  cs[0] = sp_continuation(beta, T(0));
  Ps[0] = cs[0];
  for (int64_t i = 1; i <= K; ++i) {
    std::copy(paths + (i - 1) * HQ, paths + i * HQ, paths + i * HQ);
    trace_step(P, g, pi, paths + i * HQ, traces + (i - 1) * PP, i < K ? traces + i * PP : nullptr);
    cs[i] = sp_continuation(beta, paths[i * HQ]);
    Ps[i] = Ps[i - 1] * cs[i];
  }

  // reverse traceback: gp = dL/dpath^i (pitched), gt = dL/dtrace^i (padded; rows 0 and H + 1 stay 0)
  std::fill(gt, gt + PP, T(0));
  std::fill(gt2, gt2 + PP, T(0));
  std::fill(gpi, gpi + 8 * HQ, T(0));
  const T w_last = is_while && K > 0 ? (Ps[K - 1] - Ps[K]) + Ps[K] : T(1);
  for (int64_t i = 0; i < HQ; ++i) gp[i] = w_last * gq[i];
  T G_next = 0;  // "while": dL/dP_{i+1}
  for (int64_t i = K; i >= 1; --i) {
    const T* a = paths + (i - 1) * HQ;
    const T* b = traces + (i - 1) * PP + Q + 1;
    T* gt_prev = gt2 + Q + 1;
    if (P.t_conorm == kSpProbabilistic)
      trace_back<kSpProbabilistic>(g, p, pi, gt + Q + 1, a, b, gp, gpi, gt_prev, acc);
    else if (P.t_conorm == kSpHamacher)
      trace_back<kSpHamacher>(g, p, pi, gt + Q + 1, a, b, gp, gpi, gt_prev, acc);
    else
      trace_back<kSpYager1>(g, p, pi, gt + Q + 1, a, b, gp, gpi, gt_prev, acc);
    std::swap(gt, gt2);
    const int64_t j = i - 1;  // gp is dL/dpath^j but for path^j's own terms in the output
    if (is_while && j >= 1) {
      const T* pj = paths + j * HQ;
      const T* pn = paths + i * HQ;
      T direct = 0;
      for (int64_t c = 0; c < L; ++c) direct += gq[c] * (pn[c] - pj[c]);
      const T G = direct + G_next * cs[i];
      G_next = G;
      const T w = Ps[j - 1] - Ps[j];
      for (int64_t c = 0; c < L; ++c) gp[c] += w * gq[c];
      gp[0] += G * Ps[j - 1] * cs[j] * (1 - cs[j]) * -beta;
    }
  }

  // the last round (pi = softmin(beta N) of d^{n_iter-1}), then rounds n_iter - 1 .. 1 through the saved J^t;
  // gd = dL/dd^t (padded; its ring and the pinned start are cleared before use)
  std::fill(gcq, gcq + HQ, T(0));
  if (P.n_iter > 1) {
    std::fill(gd, gd + PP, T(0));
    softmin_back(g, beta, pi, gpi, acc, gd + Q + 1);
    for (int64_t t = P.n_iter - 1; t >= 1; --t) {
      g.set_ring_columns(gd, T(0));
      gd[Q + 1] = 0;
      const T* gs = gd + Q + 1;
      for (int64_t c = 0; c < L; ++c) gcq[c] += gs[c];
      if (t == 1) break;
      std::fill(gd2, gd2 + PP, T(0));
      scatter8(g, gs, jac + (t - 1) * 8 * HQ, gd2 + Q + 1);
      std::swap(gd, gd2);
    }
  }
  for (int64_t y = 0; y < g.H; ++y) std::copy(gcq + y * Q, gcq + y * Q + g.W, grad_cost + y * g.W);
}

}  // namespace

template <typename T>
void shortest_path_forward_cpu(const SpParams& P, const T* cost, T* out, T* jac, T* pi, int32_t* steps) {
  sp_check_params(P);
  const Grid g(P);
  const int64_t HW = P.H * P.W, J = (P.n_iter - 1) * 8 * g.HQ, PI = 8 * g.HQ;
  const int threads = call_threads(P.B > 1 && P.B * P.n_iter * HW >= kParallelWork);
  const int64_t per = workspace_per_thread(g, 0, false);
  std::unique_ptr<T[]> ws(new T[size_t(threads) * size_t(per)]);
  T* const base = ws.get();
  // per thread: the Bellman-Ford workspace (2 maps, 12 planes), then 2 maps (traces) and a plane (path)
  auto path_of = [&](T* w) { return w + 4 * g.PP + 12 * g.HQ; };
  int64_t K = P.n_trace;
  if (P.loop == kSpWhile) {
    std::vector<int64_t> counts(P.B);  // the While loop's step count of each row; K is their maximum
    parallel_items(
        P.B,
        [&](int64_t b, int tid) {
          T* w = base + tid * per;
          bellman_ford_row(P, g, cost + b * HW, jac ? jac + b * J : nullptr, pi + b * PI, w);
          counts[b] =
              while_count_row(P, g, pi + b * PI, path_of(w), w + 2 * g.PP + 12 * g.HQ, w + 3 * g.PP + 12 * g.HQ);
        },
        threads);
    K = *std::max_element(counts.begin(), counts.end());
  }
  parallel_items(
      P.B,
      [&](int64_t b, int tid) {
        T* w = base + tid * per;
        if (P.loop == kSpFor) bellman_ford_row(P, g, cost + b * HW, jac ? jac + b * J : nullptr, pi + b * PI, w);
        // the Bellman-Ford maps and planes are free now: the While mixture accumulates in the first plane after them
        traceback_row(P, g, K, pi + b * PI, out + b * HW, path_of(w), w + 2 * g.PP + 12 * g.HQ,
                      w + 3 * g.PP + 12 * g.HQ, w);
      },
      threads);
  steps[0] = int32_t(K);
}

template <typename T>
void shortest_path_backward_cpu(const SpParams& P, const int32_t* steps, const T* grad_out, const T* jac, const T* pi,
                                T* grad_cost) {
  sp_check_params(P);
  const int64_t K = steps[0];
  sp_check_steps(P, K);
  RELAXOPS_CHECK(P.n_iter == 1 || jac != nullptr, "shortest_path_backward: jac is required for n_iter > 1");
  const Grid g(P);
  const int64_t HW = P.H * P.W, J = (P.n_iter - 1) * 8 * g.HQ, PI = 8 * g.HQ;
  const int threads = call_threads(P.B > 1 && P.B * (P.n_iter + K) * HW >= kParallelWork);
  const int64_t per = workspace_per_thread(g, K, true);
  std::unique_ptr<T[]> ws(new T[size_t(threads) * size_t(per)]);
  T* const base = ws.get();
  parallel_items(
      P.B,
      [&](int64_t b, int tid) {
        backward_row(P, g, K, grad_out + b * HW, jac ? jac + b * J : nullptr, pi + b * PI, grad_cost + b * HW,
                     base + tid * per);
      },
      threads);
}

int64_t shortest_path_cpu_workspace(const SpParams& P, int64_t K, bool backward) {
  const Grid g(P);
  const bool parallel = P.B > 1 && P.B * ((backward ? K : 0) + P.n_iter) * P.H * P.W >= kParallelWork;
  return int64_t(call_threads(parallel)) * workspace_per_thread(g, K, backward);
}

#define RELAXOPS_INSTANTIATE_SHORTEST_PATH(T)                                                  \
  template void shortest_path_forward_cpu<T>(const SpParams&, const T*, T*, T*, T*, int32_t*); \
  template void shortest_path_backward_cpu<T>(const SpParams&, const int32_t*, const T*, const T*, const T*, T*);

RELAXOPS_INSTANTIATE_SHORTEST_PATH(float)
RELAXOPS_INSTANTIATE_SHORTEST_PATH(double)

}  // namespace relaxops
