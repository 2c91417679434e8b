// CPU kernels of edit_distance.h: OpenMP over rows; per row the norms, the cosine matrix and the DP in row-major
// cell order (forward), the reverse DP in reverse row-major order pushing G into the three predecessors, then the
// gradients of the cosines (backward). Work buffers are per-thread scratch reused across calls.
#include <algorithm>
#include <cmath>

#include "../common/cpu_parallel.h"
#include "../common/cpu_scratch.h"
#include "edit_distance.h"

namespace relaxops {
namespace {

// Below this many cells (~13 ms of forward work) a call runs on one thread: a parallel region costs up to a scheduler
// time slice when other processes share the cores (measurements: docs/math/algorithms.md §7).
constexpr int64_t kParallelCells = 1 << 19;

// |x|_2 (norm, edit_distance_norm) and x / N(x) (unit) of each of the `count` vectors of length K at x. As
// torch.cosine_similarity, the vectors are divided by their clamped norms before the dot product: a norm that
// overflows gives cosine 0, not inf / inf.
template <typename T>
void unit_rows(const T* x, int64_t count, int64_t K, T* norm, T* unit) {
  for (int64_t i = 0; i < count; ++i) {
    norm[i] = edit_distance_norm(x + i * K, K);
    const T N = edit_distance_clamped_norm(norm[i]);
    for (int64_t k = 0; k < K; ++k) unit[i * K + k] = x[i * K + k] / N;
  }
}

template <typename T>
void forward_row(const EditDistanceParams& P, const T* s, const T* t, T* D, T* cos) {
  const int64_t n = P.n, m = P.m, K = P.K, W = m + 1;
  const T beta = T(P.beta);
  T* norms = thread_scratch<0, T>(n + m);
  T* su = thread_scratch<4, T>((n + m) * K);
  T* tu = su + n * K;
  unit_rows(s, n, K, norms, su);
  unit_rows(t, m, K, norms + n, tu);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < m; ++j) {
      T dot = 0;
      for (int64_t k = 0; k < K; ++k) dot += su[i * K + k] * tu[j * K + k];
      cos[i * m + j] = dot;
    }
  }
  for (int64_t j = 0; j <= m; ++j) D[j] = T(j);
  for (int64_t i = 0; i < n; ++i) D[(i + 1) * W] = T(i + 1);
  // anti-diagonals d = i + j: their cells are independent, so the core overlaps their exp / division chains (in
  // row-major order each cell waits for its left neighbour)
  for (int64_t d = 0; d + 1 < n + m; ++d) {
    const int64_t lo = std::max<int64_t>(0, d - (m - 1)), hi = std::min<int64_t>(d, n - 1);
    for (int64_t i = lo; i <= hi; ++i) {
      const int64_t j = d - i;
      D[(i + 1) * W + j + 1] = edit_distance_cell(beta, D[i * W + j + 1], D[(i + 1) * W + j], D[i * W + j],
                                                  T(1) - cos[i * m + j], (T*)nullptr);
    }
  }
}

template <typename T>
void backward_row(const EditDistanceParams& P, T grad_distance, const T* grad_D, const T* s, const T* t, const T* D,
                  const T* cos, T* grad_s, T* grad_t) {
  const int64_t n = P.n, m = P.m, K = P.K, W = m + 1;
  const T beta = T(P.beta);
  T* G = thread_scratch<1, T>((n + 1) * W);
  T* gcos = thread_scratch<2, T>(n * m);
  if (grad_D)
    std::copy(grad_D, grad_D + (n + 1) * W, G);
  else
    std::fill(G, G + (n + 1) * W, T(0));
  G[n * W + m] += grad_distance;
  // anti-diagonals d = i + j from the last: the consumers (i + 2, j + 1), (i + 1, j + 2), (i + 2, j + 2) of cell
  // (i + 1, j + 1) lie on later diagonals, so G[i + 1][j + 1] is complete when the cell is reached; the cells of a
  // diagonal are independent (their pushes only add)
  for (int64_t d = n + m - 2; d >= 0; --d) {
    const int64_t lo = std::max<int64_t>(0, d - (m - 1)), hi = std::min<int64_t>(d, n - 1);
    for (int64_t i = lo; i <= hi; ++i) {
      const int64_t j = d - i;
      T dv[3];
      edit_distance_cell(beta, D[i * W + j + 1], D[(i + 1) * W + j], D[i * W + j], T(1) - cos[i * m + j], dv);
      const T g = G[(i + 1) * W + j + 1];
      G[i * W + j + 1] += g * dv[0];
      G[(i + 1) * W + j] += g * dv[1];
      G[i * W + j] += g * dv[2];
      gcos[i * m + j] = -g * dv[2];
    }
  }
  // d cos_ij / d s_i = t_j / (N(s_i) N(t_j)) - cos_ij / N(s_i) * s_i / |s_i| (and t likewise)
  T* rs = thread_scratch<0, T>(n + m);
  T* rt = rs + n;
  T* su = thread_scratch<4, T>((n + m) * K);
  T* tu = su + n * K;
  unit_rows(s, n, K, rs, su);
  unit_rows(t, m, K, rt, tu);
  std::fill(grad_t, grad_t + m * K, T(0));
  T* tcoef = thread_scratch<3, T>(m);  // sum_i gcos_ij cos_ij
  std::fill(tcoef, tcoef + m, T(0));
  for (int64_t i = 0; i < n; ++i) {
    const T Ns = edit_distance_clamped_norm(rs[i]);
    T* gs = grad_s + i * K;
    std::fill(gs, gs + K, T(0));
    T scoef = 0;
    for (int64_t j = 0; j < m; ++j) {
      const T g = gcos[i * m + j];
      for (int64_t k = 0; k < K; ++k) {
        gs[k] += g * tu[j * K + k];
        grad_t[j * K + k] += g * su[i * K + k];
      }
      scoef += g * cos[i * m + j];
      tcoef[j] += g * cos[i * m + j];
    }
    const T radial = rs[i] == T(0) ? T(0) : scoef / (Ns * rs[i]);
    for (int64_t k = 0; k < K; ++k) gs[k] = gs[k] / Ns - radial * s[i * K + k];
  }
  for (int64_t j = 0; j < m; ++j) {
    const T Nt = edit_distance_clamped_norm(rt[j]);
    const T radial = rt[j] == T(0) ? T(0) : tcoef[j] / (Nt * rt[j]);
    for (int64_t k = 0; k < K; ++k) grad_t[j * K + k] = grad_t[j * K + k] / Nt - radial * t[j * K + k];
  }
}

}  // namespace

template <typename T>
void edit_distance_forward_cpu(const EditDistanceParams& P, const T* s, const T* t, T* D, T* cos) {
  edit_distance_check_params(P);
  const int64_t n = P.n, m = P.m, K = P.K;
  parallel_items(
      P.B,
      [&](int64_t b, int) { forward_row(P, s + b * n * K, t + b * m * K, D + b * (n + 1) * (m + 1), cos + b * n * m); },
      threads_for(P.B * (n + 1) * (m + 1), kParallelCells));
}

template <typename T>
void edit_distance_backward_cpu(const EditDistanceParams& P, const T* grad_distance, const T* grad_D, const T* s,
                                const T* t, const T* D, const T* cos, T* grad_s, T* grad_t) {
  edit_distance_check_params(P);
  const int64_t n = P.n, m = P.m, K = P.K, cells = (n + 1) * (m + 1);
  parallel_items(
      P.B,
      [&](int64_t b, int) {
        backward_row(P, grad_distance[b], grad_D ? grad_D + b * cells : nullptr, s + b * n * K, t + b * m * K,
                     D + b * cells, cos + b * n * m, grad_s + b * n * K, grad_t + b * m * K);
      },
      threads_for(P.B * cells, kParallelCells));
}

#define RELAXOPS_INSTANTIATE_EDIT_DISTANCE(T)                                                                    \
  template void edit_distance_forward_cpu<T>(const EditDistanceParams&, const T*, const T*, T*, T*);             \
  template void edit_distance_backward_cpu<T>(const EditDistanceParams&, const T*, const T*, const T*, const T*, \
                                              const T*, const T*, T*, T*);

RELAXOPS_INSTANTIATE_EDIT_DISTANCE(float)
RELAXOPS_INSTANTIATE_EDIT_DISTANCE(double)

}  // namespace relaxops
