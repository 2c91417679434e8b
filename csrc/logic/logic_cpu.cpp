// Training kernels of the logic layer on the CPU (math and layout in logic.h). Feature-major rows of B samples:
// every loop over the batch is a contiguous, vectorizable loop; OpenMP splits neurons (forward, coefficient
// gradient) or inputs (input gradient), each row written by one thread, so results do not depend on the thread
// count.
#include <algorithm>
#include <cstring>

#include "logic.h"

namespace relaxops {

namespace {

// Rows per OpenMP chunk: enough work per task to amortize scheduling at small batches.
inline int64_t chunk_rows(int64_t B) { return std::max<int64_t>(1, 4096 / std::max<int64_t>(B, 1)); }

}  // namespace

template <typename T>
void logic_forward_cpu(int64_t B, int64_t n_in, int64_t n_out, const T* xt, const int64_t* a, const int64_t* b,
                       const T* coef, T* yt) {
  RELAXOPS_CHECK(B >= 0 && n_in >= 1 && n_out >= 0, "logic_forward: invalid sizes");
  const int64_t chunk = chunk_rows(B);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t j0 = 0; j0 < n_out; j0 += chunk) {
    for (int64_t j = j0; j < std::min(n_out, j0 + chunk); ++j) {
      const T* __restrict__ xa = xt + a[j] * B;
      const T* __restrict__ xb = xt + b[j] * B;
      T* __restrict__ y = yt + j * B;
      const T c0 = coef[4 * j], c1 = coef[4 * j + 1], c2 = coef[4 * j + 2], c3 = coef[4 * j + 3];
#pragma omp simd
      for (int64_t s = 0; s < B; ++s) y[s] = c0 + c1 * xa[s] + (c2 + c3 * xa[s]) * xb[s];
    }
  }
}

template <typename T>
void logic_backward_cpu(int64_t B, int64_t n_in, int64_t n_out, const T* xt, const int64_t* a, const int64_t* b,
                        const T* coef, const T* grad_yt, const int64_t* csr_start, const int64_t* csr_entry,
                        T* grad_xt, T* grad_coef) {
  RELAXOPS_CHECK(B >= 0 && n_in >= 1 && n_out >= 0, "logic_backward: invalid sizes");
  const int64_t chunk = chunk_rows(B);
  if (grad_coef != nullptr) {
    // grad_coef[j] = sum_s g [1, xa, xb, xa xb]
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t j0 = 0; j0 < n_out; j0 += chunk) {
      for (int64_t j = j0; j < std::min(n_out, j0 + chunk); ++j) {
        const T* __restrict__ xa = xt + a[j] * B;
        const T* __restrict__ xb = xt + b[j] * B;
        const T* __restrict__ g = grad_yt + j * B;
        T s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
        for (int64_t s = 0; s < B; ++s) {
          const T ga = g[s] * xa[s];
          s0 += g[s];
          s1 += ga;
          s2 += g[s] * xb[s];
          s3 += ga * xb[s];
        }
        grad_coef[4 * j] = s0;
        grad_coef[4 * j + 1] = s1;
        grad_coef[4 * j + 2] = s2;
        grad_coef[4 * j + 3] = s3;
      }
    }
  }
  if (grad_xt != nullptr) {
    // grad_x[c] = sum over the neurons reading c of g (c1 + c3 xb) (as A) or g (c2 + c3 xa) (as B)
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t c0 = 0; c0 < n_in; c0 += chunk) {
      for (int64_t c = c0; c < std::min(n_in, c0 + chunk); ++c) {
        T* __restrict__ gx = grad_xt + c * B;
        std::fill(gx, gx + B, T(0));
        for (int64_t e = csr_start[c]; e < csr_start[c + 1]; ++e) {
          const int64_t j = csr_entry[e] >> 1;
          const bool as_b = csr_entry[e] & 1;
          const T k1 = as_b ? coef[4 * j + 2] : coef[4 * j + 1], k3 = coef[4 * j + 3];
          const T* __restrict__ other = xt + (as_b ? a[j] : b[j]) * B;
          const T* __restrict__ g = grad_yt + j * B;
#pragma omp simd
          for (int64_t s = 0; s < B; ++s) gx[s] += g[s] * (k1 + k3 * other[s]);
        }
      }
    }
  }
}

template <typename T>
void logic_transpose_cpu(int64_t rows, int64_t cols, const T* src, T* dst) {
  RELAXOPS_CHECK(rows >= 0 && cols >= 0, "logic_transpose: invalid sizes");
  constexpr int64_t kTile = 64;
  const int64_t tr = (rows + kTile - 1) / kTile, tc = (cols + kTile - 1) / kTile;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < tr * tc; ++t) {
    const int64_t r0 = (t / tc) * kTile, c0 = (t % tc) * kTile;
    const int64_t r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kTile);
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t r = r0; r < r1; ++r) dst[c * rows + r] = src[r * cols + c];
  }
}

template void logic_transpose_cpu<float>(int64_t, int64_t, const float*, float*);
template void logic_transpose_cpu<double>(int64_t, int64_t, const double*, double*);
template void logic_forward_cpu<float>(int64_t, int64_t, int64_t, const float*, const int64_t*, const int64_t*,
                                       const float*, float*);
template void logic_forward_cpu<double>(int64_t, int64_t, int64_t, const double*, const int64_t*, const int64_t*,
                                        const double*, double*);
template void logic_backward_cpu<float>(int64_t, int64_t, int64_t, const float*, const int64_t*, const int64_t*,
                                        const float*, const float*, const int64_t*, const int64_t*, float*, float*);
template void logic_backward_cpu<double>(int64_t, int64_t, int64_t, const double*, const int64_t*, const int64_t*,
                                         const double*, const double*, const int64_t*, const int64_t*, double*,
                                         double*);

}  // namespace relaxops
