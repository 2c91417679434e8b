// Relaxed shortest path on grids (docs/math/algorithms.md §4.2): AlgoVision's example program, relaxed Bellman-Ford
// with 8-neighbourhood and node weights, then the relaxed traceback from the bottom-right cell, fused into one forward
// and one backward kernel per batch row.
//
// Forward, per row (cost C [H, W]; padded distance map d [H + 2, W + 2]; SP_INF = 1e12):
//   d^0 = SP_INF everywhere, d^0[1, 1] = 0 (the start: the top-left cell)
//   round t = 1..n_iter (synchronous):  N_k = d^{t-1}[y + 1 + dy_k, x + 1 + dx_k]   (k: the 8 offsets of sp_dy/sp_dx)
//     pi^t_k = softmin_k(beta N) = exp(beta (m - N_k)) / sum_j exp(beta (m - N_j)),  m = min_j N_j (torch shifts by
//     min_j beta N_j: equal up to rounding; this form is exactly 1 at the minimum whether or not the products are
//     contracted into fused multiply-adds, which next to the 1e12 ring would leave residues of ~1e5 in float32)
//     s^t = sum_k pi^t_k N_k,  d^t[y + 1, x + 1] = s^t + C[y, x],  ring = SP_INF,  d^t[1, 1] = 0
//   traceback with pi = pi^{n_iter}: path^0 = 0, trace^0 = one-hot at (H - 1, W - 1); step i = 1..K:
//     path^i = path^{i-1} T trace^{i-1}                         (T-conorm, sp_t_conorm)
//     trace^i[y, x] = sum_k trace^{i-1}[y - dy_k, x - dx_k] pi_k[y - dy_k, x - dx_k]   (mass leaving the grid drops)
//   loop "for": K = n_trace, out = path^K.
//   loop "while" (AlgoVision's While(LEq(path[:, 0, 0], 1))): c_i = sigmoid(beta (1 - path^i[0, 0])), P_0 = c_0,
//     P_i = P_{i-1} c_i, out = (1 - P_0) path^0 + sum_{i=1..K} (P_{i-1} - P_i) path^i + P_K path^K, where K is the
//     batch's trip count: the loop runs while max_b P_b > epsilon and i < max_iter. P is non-increasing per row, so K
//     is the largest of the rows' own counts (the first i with P_i <= epsilon, at most max_iter; a row whose P is
//     NaN counts 0), found in a first pass; then every row runs K steps.
//
// Backward (exact reverse mode of the above for the computed K):
//   traceback, i = K..1 (path^i, trace^i recomputed from pi into a workspace): with gp = dL/dpath^i, gt = dL/dtrace^i,
//     gt^{i-1}[c] = sum_k gt^i[c + off_k] pi_k[c] + gp[c] dT/db,   gpi_k[c] += gt^i[c + off_k] trace^{i-1}[c],
//     gp^{i-1} = gp dT/da + (injected: "for": only g_out at i = K; "while": w_i g_out with w_i the mixture weights,
//     and at (0, 0) the chain through c_i: dL/dP_i = <g_out, path^{i+1} - path^i> + dL/dP_{i+1} c_{i+1} (0 at K),
//     dL/dpath^i[0, 0] += -beta c_i (1 - c_i) P_{i-1} dL/dP_i).
//   round n_iter (only pi^{n_iter} is used): gN_k = -beta pi_k (gpi_k - sum_j pi_j gpi_j) -> dL/dd^{n_iter-1}.
//   rounds t = n_iter-1..1: gs = dL/dd^t (0 at the pinned start), dL/dC += gs,
//     dL/dd^{t-1}[c + off_k] += gs[c] J^t_k[c] with J^t_k = ds^t/dN_k = pi^t_k (1 - beta (N_k - s^t)) (saved).
//   The padding ring and d^0 are constants.
//
// Conditioning: a cell not yet reached by round t (all of its neighbours still ~SP_INF) holds SP_INF + a sum of
// costs, whose rounding (~1e-4 in float64, 65536 in float32) beta amplifies: results are well-conditioned once every
// cell is reached before the last round, i.e. n_iter >= max(H, W) (the default is H + W). Non-finite costs give NaN
// (0 * inf in the sums, as the program).
//
// Memory layout (contiguous): cost, out, grad_out, grad_cost [B, H, W]; steps int32 [1] (K). The saved planes have a
// row pitch of W + 2 (so that every pass of the CPU kernels runs over the cells as one flat range; the two padding
// entries of each row are written as 0): pi [B, 8, H, W + 2] (pi^{n_iter}, direction-major) and jac [B, n_iter - 1, 8,
// H, W + 2] (J^1..J^{n_iter-1}; absent when the forward saves nothing).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "../common/common.h"

namespace relaxops {

enum SpTConorm : int { kSpProbabilistic = 0, kSpHamacher = 1, kSpYager1 = 2 };
enum SpLoop : int { kSpFor = 0, kSpWhile = 1 };

constexpr double kSpInf = 1e12;

#if !defined(__CUDACC__)
using std::exp;
#endif

struct SpParams {
  int64_t B, H, W;
  int64_t n_iter;     // Bellman-Ford rounds, >= 1
  int64_t n_trace;    // traceback steps of the "for" loop, >= 0
  int loop;           // SpLoop
  int t_conorm;       // SpTConorm
  double beta;        // > 0, finite
  double hamacher_p;  // > 0 for kSpHamacher
  double epsilon;     // "while": the continuation threshold, >= 0
  int64_t max_iter;   // "while": at most this many steps, >= 0
};

inline void sp_check_params(const SpParams& P) {
  RELAXOPS_CHECK(P.B >= 0 && P.H >= 1 && P.W >= 1, "shortest_path: need B >= 0, H >= 1, W >= 1");
  const int64_t big = int64_t(1) << 31;
  RELAXOPS_CHECK(P.H < big && P.W < big && (P.H + 2) * (P.W + 2) < big, "shortest_path: grid too large");
  RELAXOPS_CHECK(P.n_iter >= 1 && P.n_iter < big, "shortest_path: n_iter must be in [1, 2^31)");
  RELAXOPS_CHECK(P.loop == kSpFor || P.loop == kSpWhile, "shortest_path: unknown loop id");
  RELAXOPS_CHECK(P.t_conorm >= 0 && P.t_conorm <= kSpYager1, "shortest_path: unknown t_conorm id");
  RELAXOPS_CHECK(P.beta > 0 && std::isfinite(P.beta), "shortest_path: beta must be finite and > 0");
  RELAXOPS_CHECK(P.t_conorm != kSpHamacher || (P.hamacher_p > 0 && std::isfinite(P.hamacher_p)),
                 "shortest_path: hamacher_p must be finite and > 0");
  RELAXOPS_CHECK(P.n_trace >= 0 && P.n_trace < big, "shortest_path: n_trace must be in [0, 2^31)");
  RELAXOPS_CHECK(P.max_iter >= 0 && P.max_iter < big, "shortest_path: max_iter must be in [0, 2^31)");
  RELAXOPS_CHECK(P.epsilon >= 0 && std::isfinite(P.epsilon), "shortest_path: epsilon must be finite and >= 0");
  // every buffer (jac is the largest: n_iter 8 H W per row) below 2^62 elements
  const int64_t cells = P.H * P.W, most = (int64_t(1) << 62) / (P.B > 0 ? P.B : 1) / 8 / cells;
  RELAXOPS_CHECK(P.n_iter <= most, "shortest_path: buffers too large");
}

// The steps K a backward may be given: n_trace for "for", at most max_iter for "while".
inline void sp_check_steps(const SpParams& P, int64_t K) {
  RELAXOPS_CHECK(P.loop == kSpFor ? K == P.n_trace : (K >= 0 && K <= P.max_iter),
                 "shortest_path_backward: steps must be n_trace (loop 'for') or in [0, max_iter] (loop 'while'), got " +
                     std::to_string(K));
}

// Direction k = 0..7: the offsets (-1,-1) (-1,0) (-1,1) (0,-1) (0,1) (1,-1) (1,0) (1,1) (3 x 3 row-major, no centre).
HOST_DEVICE inline int sp_dy(int k) { return k < 3 ? -1 : (k < 5 ? 0 : 1); }
HOST_DEVICE inline int sp_dx(int k) { return k < 3 ? k - 1 : (k == 3 ? -1 : (k == 4 ? 1 : k - 6)); }

// a T b: probabilistic a + b - ab; Hamacher (a + b + (p - 2) ab) / (1 + (p - 1) ab); bounded sum 1 - relu(1 - a - b)
// (relu keeps NaN, as torch's).
template <typename T>
HOST_DEVICE inline T sp_t_conorm(int id, T p, T a, T b) {
  if (id == kSpProbabilistic) return a + b - a * b;
  if (id == kSpHamacher) return (a + b + (p - 2) * a * b) / (1 + (p - 1) * a * b);
  const T u = 1 - a - b;
  return 1 - (u < 0 ? T(0) : u);
}

// The partial derivatives of a T b: probabilistic (1 - b, 1 - a); Hamacher (1 - b)(1 + (p - 1) b) / D^2 and
// (1 - a)(1 + (p - 1) a) / D^2 with D = 1 + (p - 1) ab; bounded sum 1 where 1 - a - b > 0, else 0 (torch's relu').
template <typename T>
HOST_DEVICE inline void sp_t_conorm_grad(int id, T p, T a, T b, T* da, T* db) {
  if (id == kSpProbabilistic) {
    *da = 1 - b;
    *db = 1 - a;
  } else if (id == kSpHamacher) {
    const T D = 1 + (p - 1) * a * b, inv = 1 / (D * D);
    *da = (1 - b) * (1 + (p - 1) * b) * inv;
    *db = (1 - a) * (1 + (p - 1) * a) * inv;
  } else {
    const T g = (1 - a - b) > 0 ? T(1) : T(0);
    *da = g;
    *db = g;
  }
}

// The While's continuation probability sigmoid(-(path00 - 1) beta) (LEq(path[:, 0, 0], 1)).
template <typename T>
HOST_DEVICE inline T sp_continuation(T beta, T path00) {
  return T(1) / (T(1) + exp(-(-(path00 - T(1)) * beta)));
}

// CPU kernels (shortest_path_cpu.cpp), OpenMP over the rows. The forward writes out and pi, jac when it is not null
// (n_iter > 1), and steps[0] = K. The backward takes K = steps[0] (checked), recomputes the traceback and writes
// grad_cost. shortest_path_cpu_workspace: the elements of T a call allocates (the backward's with K steps).
int64_t shortest_path_cpu_workspace(const SpParams& P, int64_t K, bool backward);
template <typename T>
void shortest_path_forward_cpu(const SpParams& P, const T* cost, T* out, T* jac, T* pi, int32_t* steps);
template <typename T>
void shortest_path_backward_cpu(const SpParams& P, const int32_t* steps, const T* grad_out, const T* jac, const T* pi,
                                T* grad_cost);

// CUDA kernels (shortest_path.cu): one thread block per row. workspace: device memory of
// shortest_path_cuda_workspace(P, K, backward) elements of T (0: none needed; the forward's does not depend on K, the
// backward's takes the K its forward wrote, read by the caller). steps: device int32 [1]; counts: device int32 [B]
// (the rows' own trip counts of the "while" loop).
int64_t shortest_path_cuda_workspace(const SpParams& P, int64_t K, bool backward);
template <typename T>
void shortest_path_forward_cuda(const SpParams& P, const T* cost, T* out, T* jac, T* pi, int32_t* steps,
                                int32_t* counts, T* workspace, std::uintptr_t stream);
template <typename T>
void shortest_path_backward_cuda(const SpParams& P, int64_t K, const T* grad_out, const T* jac, const T* pi,
                                 T* grad_cost, T* workspace, std::uintptr_t stream);

}  // namespace relaxops
