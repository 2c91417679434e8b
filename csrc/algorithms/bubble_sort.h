// Relaxed bubble sort, fused: the program of docs/math/algorithms.md §4.1 (AlgoVision's While / For / If) in one
// forward and one backward kernel per direction.
//
// A state is n + 3 numbers: the values v[0..n), swapped, swaps, any_swap. State 0 is (x, 1, 0, 0). Pass i (1-based)
// runs the comparators (k, k + 1), k < m_i = n - i, one after the other, on the state after pass i - 1, with
// swapped reset to 0:
//
//   a = v[k], b = v[k + 1],  p = sigmoid(beta (a - b)),  q = p (soft) or [p > 1/2] (hard=True)
//   v[k] = q b + (1 - q) a,  v[k + 1] = q a + (1 - q) b
//   swapped = q + (1 - q) swapped,  any_swap = q + (1 - q) any_swap,  swaps = swaps + q
//
// A pass is a comparator network (the comparators of csrc/sortnet: alpha = 1 - q on the min wire, the gap
// d = b - a, relaxed_minmax / relaxed_gap_grad of sortnet.h), run as a carry: the value moving right is the
// comparator's max wire. The While (docs/math/algorithms.md §2.7) mixes the states after the passes:
//
//   P_0 = 1,  P_i = P_{i-1} swapped_i,  out = sum_{i=1..T} (P_{i-1} - P_i) state_i + P_T state_T
//
// with the batch-wide trip count T = min(max_iter, max_b t_b), t_b the first i with P_b(i) <= epsilon (P_b is
// non-increasing, so this is AlgoVision's `while max_b P_b > epsilon and i < max_iter`). Every row runs T passes;
// T <= min(max_iter, n) since pass n has no pairs (swapped = 0). AlgoVision's If skip of a branch with
// probability <= epsilon for the whole batch is not reproduced: the fused op is the program at epsilon = 0 for the
// If (epsilon only ends the While).
//
// Backward (exact reverse mode): e_i = <g, state_i> with g the output gradients (values, 0, swaps, any_swap); the
// mixture weights c_i = P_{i-1} - P_i (+ P_T for i = T) give state_i the gradient c_i g, and P_j (j < T) the
// gradient e_{j+1} - e_j (P_T's cancels), which flows into swapped_j through P_j = P_{j-1} swapped_j. The passes
// are then reversed from T to 1; each recomputes its forward from the stored state before it, keeping per
// comparator (q, 1 - q, d, f'(d), swapped and any_swap before it), and runs its adjoint backwards.
//
// Rows with a non-finite value: every output, state and gradient of the row is NaN, and the row takes no part in
// the trip count.
//
// Memory layout (row-major, contiguous, T = float or double): x, sorted, grad_x [B, n]; swaps, any_swap [B];
// states [B, passes, n + 3] (the state after each pass; after T the last state repeated), passes =
// min(max_iter, n); trips: int32 [1], the batch's T.
#pragma once

#include <cmath>
#include <cstdint>

#include "../common/common.h"
#include "../sortnet/sortnet.h"

namespace relaxops {

struct BubbleParams {
  int64_t B, n;
  double beta;     // finite, > 0
  int hard;        // 1: the If mixes with q = [p > 1/2]
  int64_t passes;  // min(max_iter, n): the most passes a call can run
  double epsilon;  // the While runs while some row's P > epsilon; finite, >= 0
};

inline void bubble_check_params(const BubbleParams& P) {
  RELAXOPS_CHECK(P.B >= 0 && P.n >= 1 && P.n < (int64_t(1) << 31), "bubble_sort: need B >= 0 and 1 <= n < 2^31");
  RELAXOPS_CHECK(P.beta > 0 && std::isfinite(P.beta), "bubble_sort: beta must be finite and > 0");
  RELAXOPS_CHECK(P.epsilon >= 0 && std::isfinite(P.epsilon), "bubble_sort: epsilon must be finite and >= 0");
  RELAXOPS_CHECK(P.passes >= 0 && P.passes <= P.n, "bubble_sort: passes must be min(max_iter, n)");
  RELAXOPS_CHECK(P.hard == 0 || P.hard == 1, "bubble_sort: hard must be 0 or 1");
}

constexpr int kBubbleTape = 6;  // per comparator: q, 1 - q, d, f'(d), swapped and any_swap before it

// The mixing weight q of a comparator and 1 - q, each to full relative accuracy (one exp: a tiny swap probability
// stays exact in swaps), and the slope dq/d(a - b) = d(1 - q)/d(b - a) (0 for hard).
template <typename T>
HOST_DEVICE inline void bubble_swap_weight(T beta, T a, T b, bool hard, T* q, T* nq, T* slope) {
  const T z = beta * (a - b);
  const T e = relax_exp(-fabs(z));
  const T r = T(1) / (T(1) + e);
  const T p = z >= T(0) ? r : e * r, np = z >= T(0) ? e * r : r;
  if (hard) {
    *q = p > T(0.5) ? T(1) : T(0);
    *nq = T(1) - *q;
    *slope = T(0);
  } else {
    *q = p;
    *nq = np;
    *slope = beta * p * np;
  }
}

// Passes of G rows in lockstep (the CPU kernels interleave rows so that their independent dependency chains overlap
// in the core; the CUDA kernels run G = 1). Row l goes from state prev[l] to next[l] (n + 3 each, distinct
// buffers) through m pairs; tape[l] (kBubbleTape m; tape may be null) keeps what the adjoint needs.
template <int G, typename T>
HOST_DEVICE inline void bubble_pass_forward(T beta, bool hard, int64_t n, int64_t m, const T* const* prev,
                                            T* const* next, T* const* tape) {
  T carry[G], s[G], w[G], y[G];
  for (int l = 0; l < G; ++l) carry[l] = prev[l][0], s[l] = T(0), w[l] = prev[l][n + 1], y[l] = prev[l][n + 2];
  for (int64_t k = 0; k < m; ++k) {
    for (int l = 0; l < G; ++l) {
      const T a = carry[l], b = prev[l][k + 1];
      T q, nq, slope;
      bubble_swap_weight(beta, a, b, hard, &q, &nq, &slope);
      const T d = relaxed_gap(a, b);
      T lo, hi;
      relaxed_minmax(nq, a, b, d, &lo, &hi);
      if (tape) {
        T* e = tape[l] + kBubbleTape * k;
        e[0] = q, e[1] = nq, e[2] = d, e[3] = slope, e[4] = s[l], e[5] = y[l];
      }
      next[l][k] = lo;
      carry[l] = hi;
      s[l] = q + nq * s[l];
      y[l] = q + nq * y[l];
      w[l] = w[l] + q;
    }
  }
  for (int l = 0; l < G; ++l) {
    next[l][m] = carry[l];
    for (int64_t j = m + 1; j < n; ++j) next[l][j] = prev[l][j];
    next[l][n] = s[l], next[l][n + 1] = w[l], next[l][n + 2] = y[l];
  }
}

// Its adjoint: the gradient gnext[l] of the state after the pass -> gprev[l] of the state before it (distinct
// buffers; gprev[l][n] = 0: the pass resets swapped).
template <int G, typename T>
HOST_DEVICE inline void bubble_pass_backward(int64_t n, int64_t m, const T* const* tape, const T* const* gnext,
                                             T* const* gprev) {
  T gs[G], gw[G], gy[G], gcarry[G];
  for (int l = 0; l < G; ++l) {
    gs[l] = gnext[l][n], gw[l] = gnext[l][n + 1], gy[l] = gnext[l][n + 2], gcarry[l] = gnext[l][m];
    for (int64_t j = m + 1; j < n; ++j) gprev[l][j] = gnext[l][j];
  }
  for (int64_t k = m - 1; k >= 0; --k) {
    for (int l = 0; l < G; ++l) {
      const T* e = tape[l] + kBubbleTape * k;
      const T q = e[0], nq = e[1], d = e[2], slope = e[3];
      const T gq = gs[l] * (T(1) - e[4]) + gy[l] * (T(1) - e[5]) + gw[l];
      gs[l] *= nq;
      gy[l] *= nq;
      const T gi = gnext[l][k], gj = gcarry[l];              // min wire (a's place), max wire (the carry)
      const T dd = relaxed_gap_grad(-gq, gi, gj, d, slope);  // alpha = 1 - q: dl/dalpha = -gq
      gprev[l][k + 1] = q * gi + nq * gj + dd;
      gcarry[l] = nq * gi + q * gj - dd;
    }
  }
  for (int l = 0; l < G; ++l)
    gprev[l][0] = gcarry[l], gprev[l][n] = T(0), gprev[l][n + 1] = gw[l], gprev[l][n + 2] = gy[l];
}

template <typename T>
HOST_DEVICE inline bool bubble_row_finite(int64_t n, const T* x) {
  bool ok = true;
  for (int64_t j = 0; j < n; ++j) ok &= x[j] - x[j] == T(0);  // NaN for NaN and +-inf
  return ok;
}

// State 0 of a row: (x, swapped 1, swaps 0, any_swap 0).
template <typename T>
HOST_DEVICE inline void bubble_initial_state(int64_t n, const T* x, T* state) {
  for (int64_t j = 0; j < n; ++j) state[j] = x[j];
  state[n] = T(1), state[n + 1] = T(0), state[n + 2] = T(0);
}

// Passes from + 1 .. to of G rows: row l's state after pass i at states[l] + (i - 1)(n + 3), state 0 at init[l].
// With stop_at_epsilon, only until every row's P <= epsilon (prob[l]: P_from on entry, updated; a NaN P counts as
// done). Returns the number of the last pass run.
template <int G, typename T>
HOST_DEVICE inline int64_t bubble_run_passes(const BubbleParams& P, const T* const* init, T* const* states,
                                             int64_t from, int64_t to, bool stop_at_epsilon, T* prob) {
  const int64_t L = P.n + 3;
  int64_t i = from;
  for (; i < to; ++i) {
    bool more = !stop_at_epsilon;
    for (int l = 0; l < G; ++l) more |= prob[l] > T(P.epsilon);
    if (!more) break;
    const T* prev[G];
    T* next[G];
    for (int l = 0; l < G; ++l) prev[l] = i == 0 ? init[l] : states[l] + (i - 1) * L, next[l] = states[l] + i * L;
    bubble_pass_forward<G>(T(P.beta), P.hard != 0, P.n, P.n - 1 - i, prev, next, (T* const*)nullptr);
    for (int l = 0; l < G; ++l) prob[l] *= next[l][P.n];
  }
  return i;
}

// The While's output from the states of T passes (values, swaps, any_swap), and the unused state slots filled
// with the last state.
template <typename T>
HOST_DEVICE inline void bubble_mixture(const BubbleParams& P, int64_t trips, const T* init, T* states, T* sorted,
                                       T* swaps, T* any_swap) {
  const int64_t n = P.n, L = n + 3;
  T prob = T(1), w = T(0), y = T(0);
  for (int64_t j = 0; j < n; ++j) sorted[j] = T(0);
  for (int64_t i = 0; i < trips; ++i) {
    const T* st = states + i * L;
    const T next = prob * st[n];
    const T c = prob - next;
    for (int64_t j = 0; j < n; ++j) sorted[j] += c * st[j];
    w += c * st[n + 1];
    y += c * st[n + 2];
    prob = next;
  }
  const T* last = trips ? states + (trips - 1) * L : init;
  for (int64_t j = 0; j < n; ++j) sorted[j] += prob * last[j];
  *swaps = w + prob * last[n + 1];
  *any_swap = y + prob * last[n + 2];
  for (int64_t i = trips; i < P.passes; ++i)
    for (int64_t j = 0; j < L; ++j) states[i * L + j] = last[j];
}

// <g, state> for the output gradient g = (gv, 0, gw, gy).
template <typename T>
HOST_DEVICE inline T bubble_state_dot(int64_t n, const T* gv, T gw, T gy, const T* state) {
  T e = gw * state[n + 1] + gy * state[n + 2];
  for (int64_t j = 0; j < n; ++j) e += gv[j] * state[j];
  return e;
}

// The gradients grad_x[l] of G rows through `trips` passes (states as the forward wrote them) for the output
// gradients gv[l] [n], gw[l], gy[l]. Scratch per row: next, ga, gb (n + 3 each), tape (kBubbleTape n), prob and e
// (trips + 1 each).
template <int G, typename T>
HOST_DEVICE inline void bubble_backward_rows(const BubbleParams& P, int64_t trips, const T* const* gv, const T* gw,
                                             const T* gy, const T* const* init, const T* const* states, T* const* next,
                                             T* const* ga, T* const* gb, T* const* tape, T* const* prob, T* const* e,
                                             T* const* grad_x) {
  const int64_t n = P.n, L = n + 3;
  for (int l = 0; l < G; ++l) {
    prob[l][0] = T(1);
    e[l][0] = bubble_state_dot(n, gv[l], gw[l], gy[l], init[l]);
    for (int64_t i = 1; i <= trips; ++i) {
      const T* st = states[l] + (i - 1) * L;
      prob[l][i] = prob[l][i - 1] * st[n];
      e[l][i] = bubble_state_dot(n, gv[l], gw[l], gy[l], st);
    }
  }
  if (trips == 0) {  // the output is state 0
    for (int l = 0; l < G; ++l)
      for (int64_t j = 0; j < n; ++j) grad_x[l][j] = gv[l][j];
    return;
  }
  // state T: weight c_T = P_{T-1} - P_T + P_T; P_T's gradient cancels (swapped_T gets 0)
  T gprob[G];  // dl/dP_i, all paths
  for (int l = 0; l < G; ++l) {
    const T c = prob[l][trips - 1];
    for (int64_t j = 0; j < n; ++j) ga[l][j] = c * gv[l][j];
    ga[l][n] = T(0), ga[l][n + 1] = c * gw[l], ga[l][n + 2] = c * gy[l];
    gprob[l] = T(0);
  }
  for (int64_t i = trips; i >= 1; --i) {
    const T* before[G];
    for (int l = 0; l < G; ++l) before[l] = i == 1 ? init[l] : states[l] + (i - 2) * L;
    const int64_t m = n - i;
    bubble_pass_forward<G>(T(P.beta), P.hard != 0, n, m, before, next, tape);
    bubble_pass_backward<G>(n, m, tape, ga, gb);
    if (i == 1) break;
    // state i - 1: weight c = P_{i-2} - P_{i-1}; dl/dP_{i-1} = e_i - e_{i-1} + dl/dP_i swapped_i, and
    // P_{i-1} = P_{i-2} swapped_{i-1}
    for (int l = 0; l < G; ++l) {
      gprob[l] = (e[l][i] - e[l][i - 1]) + gprob[l] * states[l][(i - 1) * L + n];
      const T c = prob[l][i - 2] - prob[l][i - 1];
      for (int64_t j = 0; j < n; ++j) ga[l][j] = gb[l][j] + c * gv[l][j];
      ga[l][n] = gprob[l] * prob[l][i - 2], ga[l][n + 1] = gb[l][n + 1] + c * gw[l];
      ga[l][n + 2] = gb[l][n + 2] + c * gy[l];
    }
  }
  for (int l = 0; l < G; ++l)
    for (int64_t j = 0; j < n; ++j) grad_x[l][j] = gb[l][j];  // state 0's own weight 1 - P_0 is 0
}

// CPU kernels (bubble_sort_cpu.cpp), OpenMP over rows.
template <typename T>
void bubble_sort_forward_cpu(const BubbleParams& P, const T* x, T* sorted, T* swaps, T* any_swap, T* states,
                             int32_t* trips);
template <typename T>
void bubble_sort_backward_cpu(const BubbleParams& P, const T* grad_sorted, const T* grad_swaps, const T* grad_any,
                              const T* x, const T* states, const int32_t* trips, T* grad_x);

// CUDA launchers (bubble_sort.cu): one thread per row (the comparators of a row form one chain); the trip count is
// reduced on the device (atomicMax), no host synchronisation. Workspace: bubble_cuda_workspace(P, backward)
// elements of T, and for the forward B int32 row counts (`row_trips`).
inline int64_t bubble_cuda_workspace(const BubbleParams& P, bool backward) {
  // per row: state 0; backward also the tape, a recomputed state, two gradient states and P_i, e_i
  const int64_t L = P.n + 3;
  return P.B * (L + (backward ? kBubbleTape * P.n + 3 * L + 2 * (P.passes + 1) : 0));
}
template <typename T>
void bubble_sort_forward_cuda(const BubbleParams& P, const T* x, T* sorted, T* swaps, T* any_swap, T* states,
                              int32_t* trips, int32_t* row_trips, T* workspace, std::uintptr_t stream);
template <typename T>
void bubble_sort_backward_cuda(const BubbleParams& P, const T* grad_sorted, const T* grad_swaps, const T* grad_any,
                               const T* x, const T* states, const int32_t* trips, T* grad_x, T* workspace,
                               std::uintptr_t stream);

}  // namespace relaxops
