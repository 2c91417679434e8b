// Optimal-transport sort (Cuturi, Teboul, Vert 2019; docs/math/otsort.md): log-domain Sinkhorn between the
// squashed inputs xs (weights a) and sorted targets y (weights b), with epsilon annealing, read-outs of the plan
// and two backward passes. The n x m cost is never stored: every sweep recomputes it from the O(n + m) points.
// It is C_ij = -2 xs_i y_j, the cross term of the squared distance (xs_i - y_j)^2: the squares are a row and a column
// term, which only shift the potentials (the same plan at every fixed point; the first column sweep absorbs a
// shift c of xs, -2 c y_j, exactly), while in the exponents they would cancel to the rounding of their size. The
// plan's relative rounding error is about eps(T) max|xs| max|y| / e: callers centre xs and y (midranges).
//
// Memory layout (row-major, contiguous, one problem per row r = 0..R-1): xs, loga, f [R, n]; y, logb, g [R, m];
// eps [R] (the epsilon of the last update), iters [R] int32; history [R, H, n + m] (row t: f^{t+1}, g^{t+1});
// plan [R, n, m]. loga / logb are the logs of positive weights that sum to 1 per row.
// Rows of their own length: with n_len / m_len (int64 [R], null: every row full), row r is the problem of its first
// n_r = n_len[r] sources and m_r = m_len[r] targets (its loga / logb sum to 1 over those); the entries past them are
// never read, and every output writes 0 there (f, g, read-outs, gradients, plan rows i >= n_r and columns j >= m_r).
// A row with n_r = 0 or m_r = 0 is empty: every output 0, eps = epsilon, iters = 0. The strides stay n and m (the
// history too: row t of a problem is f^{t+1} [n_r of n] then g^{t+1} [m_r of m]); the work is O(n_r m_r) per sweep.
//
// 1. sinkhorn_forward, per row, from f = 0, g = 0, e_0 = max(epsilon0, epsilon), e_{t+1} = max(decay e_t, epsilon):
//      g_j <- e logb_j - e LSE_i((f_i - C_ij) / e)     (column sweep: column marginals exact)
//      f_i <- e loga_i - e LSE_j((g_j - C_ij) / e)     (row sweep: row marginals exact)
//    Stopping rule, checked at the column sweep of iterations t = 5, 10, ... once the previous update used
//    epsilon: the column marginals of the state (f^t, g^t) are c_j = b_j exp((g^t_j - g^{t+1}_j) / e) (free from
//    the sweep); if max_j |c_j / b_j - 1| <= tolerance the row stops with (f^t, g^t). At most max_iterations
//    iterations. LSE shift: after a row sweep every term of the next column sweep is <= a_i, after a column sweep
//    every term of the next row sweep is <= b_j, so the exponents shifted by the current potential are <= 0 and
//    one pass suffices (the first column sweep, from f = 0, is shifted by max_i -C_ij = 2 max(y_j min xs,
//    y_j max xs)); a sum below kUnderflow (all terms lost to underflow) is recomputed with the exact maximum.
//    A row with a non-finite xs, y, loga or logb gets NaN potentials (and iters = 0) at once.
// 2. Read-outs (apply): T_ij = exp((f_i + g_j - C_ij) / e), cols_j = sum_i T_ij u_i / b_j (u = x: soft sorted
//    values), rows_i = sum_j T_ij v_j / a_i (v = n cs(b) - 1: soft ranks), plan = T when requested.
//    Backward: W_ij = gcols_j u_i / b_j + grows_i v_j / a_i + gplan_ij, D_ij = T_ij W_ij / e:
//      gf_i = sum_j D_ij, gg_j = sum_i D_ij, gC_ij = -D_ij, gu_i = sum_j T_ij gcols_j / b_j,
//      gv_j = sum_i T_ij grows_i / a_i, gloga_i = -grows_i rows_i, glogb_j = -gcols_j cols_j.
//    gC goes to xs and y at once: gxs_i -= sum_j gC_ij 2 y_j, gy_j -= sum_i gC_ij 2 xs_i.
// 3. Implicit backward (at convergence): the fixed point solves r(f, g) = a, c(f, g) = b (row / column sums of
//    T). With H = [[diag(r), T], [T^t, diag(c)]] (symmetric positive semi-definite, null vector (1, -1)), the
//    adjoint is H (nu_f, nu_g) = (gf, gg) (gf, gg sum to the same total for gauge-invariant losses, e.g. every
//    read-out), and gC_ij = T_ij (nu_f_i + nu_g_j), gloga_i = e a_i nu_f_i, glogb_j = e b_j nu_g_j.
//    Solved on the Schur complement S = diag(c) - T^t diag(1/r) T (m x m, null vector 1) by conjugate gradients
//    preconditioned with diag(c), matrix-free (each product: one row pass for T nu_g, one column pass for
//    T^t w), then nu_f = (gf - T nu_g) / r. Iterates stay orthogonal to 1 (projected each step); stops at a
//    relative residual kCgTolerance(T) or after kCgMaxIterations(m) steps.
// 4. Unrolled backward (replay): the adjoint of the iterations of 1, run backwards from the stored history:
//    row sweep t (P_ij = exp((f^{t+1}_i + g^{t+1}_j - C_ij) / e_t) / a_i, row-stochastic):
//      gg^{t+1} -= P^t gf, gC += P * gf_i, gloga += e_t gf;
//    column sweep t (Q_ij = exp((f^t_i + g^{t+1}_j - C_ij) / e_t) / b_j, column-stochastic):
//      gf^t = -Q gg^{t+1}, gC += Q * gg_j, glogb += e_t gg;
//    (gf, gg) at the stop are the incoming gradients; f^0 = g^0 = 0 are constants. Exact gradient of the computed
//    potentials (the iteration count is piecewise constant); costs the forward's sweeps again.
#pragma once

#include <cmath>
#include <cstdint>

#include "../common/common.h"

namespace relaxops {

// Parameters of the Sinkhorn loop shared by the CPU and CUDA launchers.
struct OtParams {
  int64_t R, n, m;
  double epsilon, epsilon0, decay, tolerance;
  int64_t max_iterations;
  int64_t history_len;  // rows of the history buffer per problem (0: none)
  // each row's number of sources / targets (int64 [R], host memory for the CPU kernels, device memory for CUDA);
  // null: n / m
  const int64_t* n_len = nullptr;
  const int64_t* m_len = nullptr;
};

// Row r's own number of sources and of targets.
HOST_DEVICE inline int64_t ot_row_n(const OtParams& p, int64_t r) { return p.n_len != nullptr ? p.n_len[r] : p.n; }
HOST_DEVICE inline int64_t ot_row_m(const OtParams& p, int64_t r) { return p.m_len != nullptr ? p.m_len[r] : p.m; }

constexpr int kOtCheckEvery = 5;  // the stopping rule is checked every this many iterations

// Conjugate gradients of the implicit backward: relative residual and iteration cap.
template <typename T>
HOST_DEVICE inline double kCgTolerance() {
  return sizeof(T) == 4 ? 1e-6 : 1e-12;
}
HOST_DEVICE inline int64_t kCgMaxIterations(int64_t m) { return 2 * m + 100; }

// The epsilon after `e` in the annealing schedule.
HOST_DEVICE inline double ot_next_epsilon(double e, const OtParams& p) {
  const double d = p.decay * e;
  return d > p.epsilon ? d : p.epsilon;
}

inline void ot_check_params(const char* op, const OtParams& p) {
  RELAXOPS_CHECK(p.R >= 0 && p.n >= 1 && p.m >= 1, std::string(op) + ": need R >= 0, n >= 1, m >= 1");
  RELAXOPS_CHECK(p.epsilon > 0 && std::isfinite(p.epsilon) && p.epsilon0 > 0 && std::isfinite(p.epsilon0),
                 std::string(op) + ": epsilon and epsilon0 must be finite and > 0");
  RELAXOPS_CHECK(p.decay > 0 && p.decay <= 1, std::string(op) + ": decay must be in (0, 1]");
  RELAXOPS_CHECK(p.tolerance >= 0, std::string(op) + ": tolerance must be >= 0");
  RELAXOPS_CHECK(p.max_iterations >= 1, std::string(op) + ": max_iterations must be >= 1");
  RELAXOPS_CHECK(p.history_len >= 0, std::string(op) + ": history_len must be >= 0");
}

// The row lengths of host memory (the CPU kernels): n_len in [0, n], m_len in [0, m].
inline void ot_check_lengths(const char* op, const OtParams& p) {
  bool ok = true;
  for (int64_t r = 0; r < p.R; ++r) {
    const int64_t nr = ot_row_n(p, r), mr = ot_row_m(p, r);
    ok &= nr >= 0 && nr <= p.n && mr >= 0 && mr <= p.m;
  }
  RELAXOPS_CHECK(ok, std::string(op) + ": lengths must be in [0, n] and target lengths in [0, m]");
}

// CPU kernels (otsort_cpu.cpp), parallel over rows. Optional outputs / inputs may be null where noted.
template <typename T>
void ot_sinkhorn_forward_cpu(const OtParams& p, const T* xs, const T* y, const T* loga, const T* logb, T* f, T* g,
                             T* eps, int32_t* iters, T* history);
// plan may be null.
template <typename T>
void ot_apply_forward_cpu(const OtParams& p, const T* xs, const T* y, const T* f, const T* g, const T* eps,
                          const T* loga, const T* logb, const T* u, const T* v, T* cols, T* rows, T* plan);
// gplan may be null.
template <typename T>
void ot_apply_backward_cpu(const OtParams& p, const T* gcols, const T* grows, const T* gplan, const T* xs, const T* y,
                           const T* f, const T* g, const T* eps, const T* loga, const T* logb, const T* u, const T* v,
                           const T* cols, const T* rows, T* gxs, T* gy, T* gf, T* gg, T* gu, T* gv, T* gloga, T* glogb);
template <typename T>
void ot_implicit_backward_cpu(const OtParams& p, const T* gf, const T* gg, const T* xs, const T* y, const T* f,
                              const T* g, const T* eps, const T* loga, const T* logb, T* gxs, T* gy, T* gloga,
                              T* glogb);
template <typename T>
void ot_unrolled_backward_cpu(const OtParams& p, const T* gf, const T* gg, const T* xs, const T* y, const T* loga,
                              const T* logb, const int32_t* iters, const T* history, T* gxs, T* gy, T* gloga, T* glogb);

// CUDA launchers (otsort.cu): device pointers, queued on `stream`; one block per row, LSE sweeps by block
// reductions. `workspace`: a device buffer of at least ot_cuda_workspace(p) elements of T (of double for
// ot_implicit_backward_cuda, whose conjugate-gradient vectors are double).
inline int64_t ot_cuda_workspace(const OtParams& p) { return p.R * (6 * p.m + 3 * p.n); }
template <typename T>
void ot_sinkhorn_forward_cuda(const OtParams& p, const T* xs, const T* y, const T* loga, const T* logb, T* f, T* g,
                              T* eps, int32_t* iters, T* history, T* workspace, std::uintptr_t stream);
template <typename T>
void ot_apply_forward_cuda(const OtParams& p, const T* xs, const T* y, const T* f, const T* g, const T* eps,
                           const T* loga, const T* logb, const T* u, const T* v, T* cols, T* rows, T* plan,
                           std::uintptr_t stream);
template <typename T>
void ot_apply_backward_cuda(const OtParams& p, const T* gcols, const T* grows, const T* gplan, const T* xs, const T* y,
                            const T* f, const T* g, const T* eps, const T* loga, const T* logb, const T* u, const T* v,
                            const T* cols, const T* rows, T* gxs, T* gy, T* gf, T* gg, T* gu, T* gv, T* gloga, T* glogb,
                            std::uintptr_t stream);
template <typename T>
void ot_implicit_backward_cuda(const OtParams& p, const T* gf, const T* gg, const T* xs, const T* y, const T* f,
                               const T* g, const T* eps, const T* loga, const T* logb, T* gxs, T* gy, T* gloga,
                               T* glogb, T* workspace, std::uintptr_t stream);
template <typename T>
void ot_unrolled_backward_cuda(const OtParams& p, const T* gf, const T* gg, const T* xs, const T* y, const T* loga,
                               const T* logb, const int32_t* iters, const T* history, T* gxs, T* gy, T* gloga, T* glogb,
                               T* workspace, std::uintptr_t stream);

}  // namespace relaxops
