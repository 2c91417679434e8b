// CUDA kernels of edit_distance.h. The norms, cosines, partials and cosine gradients are independent items,
// spread over the whole grid; each DP (forward and reverse) is an anti-diagonal wavefront with one block per row:
// the cells of a diagonal are independent, the block synchronizes between diagonals, and D (or G) lives in global
// memory (written by the block itself: __syncthreads makes the writes visible to its threads).
//
// Workspace (elements of T, per row): forward the norms |s_i|, |t_j| [n + m]; backward also G [(n + 1)(m + 1)],
// the partials dMin/dX [n m 3] and gcos [n m].
//
// Not yet verified on a GPU (auto does not pick it before `python -m relaxops selftest` passes).
#include "../common/cuda_utils.cuh"
#include "edit_distance.h"

namespace relaxops {
namespace {

constexpr int kThreads = 256;

// Threads of a wavefront block: the longest diagonal has min(n, m) cells (+1 for the reverse DP's).
inline int wavefront_threads(int64_t n, int64_t m) {
  const int64_t cells = std::min(n, m) + 1;
  return int(std::min<int64_t>(1024, std::max<int64_t>(32, (cells + 31) / 32 * 32)));
}

template <typename T>
__global__ void norms_kernel(EditDistanceParams P, const T* s, const T* t, T* norms) {
  const int64_t per = P.n + P.m, total = P.B * per, K = P.K;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = idx / per, r = idx % per;
    const T* x = r < P.n ? s + (b * P.n + r) * K : t + (b * P.m + (r - P.n)) * K;
    norms[idx] = edit_distance_norm(x, K);
  }
}

template <typename T>
__global__ void cos_kernel(EditDistanceParams P, const T* s, const T* t, const T* norms, T* cos) {
  const int64_t n = P.n, m = P.m, K = P.K, total = P.B * n * m;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = idx / (n * m), i = (idx / m) % n, j = idx % m;
    const T* si = s + (b * n + i) * K;
    const T* tj = t + (b * m + j) * K;
    const T* nb = norms + b * (n + m);
    const T Ns = edit_distance_clamped_norm(nb[i]), Nt = edit_distance_clamped_norm(nb[n + j]);
    T dot = 0;  // of the unit vectors, as torch (a norm that overflows gives 0, not inf / inf)
    for (int64_t k = 0; k < K; ++k) dot += (si[k] / Ns) * (tj[k] / Nt);
    cos[idx] = dot;
  }
}

template <typename T>
__global__ void forward_wavefront_kernel(EditDistanceParams P, const T* cos, T* D) {
  const int64_t n = P.n, m = P.m, W = m + 1;
  const T beta = T(P.beta);
  for (int64_t b = blockIdx.x; b < P.B; b += gridDim.x) {
    T* Db = D + b * (n + 1) * W;
    const T* cb = cos + b * n * m;
    for (int64_t j = threadIdx.x; j <= m; j += blockDim.x) Db[j] = T(j);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) Db[(i + 1) * W] = T(i + 1);
    __syncthreads();
    for (int64_t d = 0; d + 1 < n + m; ++d) {  // inner cells (i + 1, j + 1) with i + j = d
      const int64_t lo = d - (m - 1) > 0 ? d - (m - 1) : 0, hi = d < n - 1 ? d : n - 1;
      for (int64_t i = lo + threadIdx.x; i <= hi; i += blockDim.x) {
        const int64_t j = d - i;
        Db[(i + 1) * W + j + 1] = edit_distance_cell(beta, Db[i * W + j + 1], Db[(i + 1) * W + j], Db[i * W + j],
                                                     T(1) - cb[i * m + j], (T*)nullptr);
      }
      __syncthreads();
    }
  }
}

// G = grad_D (0 if null) + grad_distance at D[n][m], and the partials of every inner cell.
template <typename T>
__global__ void partials_kernel(EditDistanceParams P, const T* grad_distance, const T* grad_D, const T* D, const T* cos,
                                T* G, T* dv) {
  const int64_t n = P.n, m = P.m, W = m + 1, cells = (n + 1) * W;
  const T beta = T(P.beta);
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < P.B * cells;
       idx += int64_t(gridDim.x) * blockDim.x)
    G[idx] = (grad_D ? grad_D[idx] : T(0)) + (idx % cells == cells - 1 ? grad_distance[idx / cells] : T(0));
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < P.B * n * m;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = idx / (n * m), i = (idx / m) % n, j = idx % m;
    const T* Db = D + b * cells;
    edit_distance_cell(beta, Db[i * W + j + 1], Db[(i + 1) * W + j], Db[i * W + j], T(1) - cos[idx], dv + 3 * idx);
  }
}

// The reverse DP pulled cell by cell: G[p][q] (inner, p, q >= 1) gets its consumers (p + 1, q) through X_0,
// (p, q + 1) through X_1 and (p + 1, q + 1) through X_2, all on later diagonals; then gcos = -G dMin/dX_2.
template <typename T>
__global__ void backward_wavefront_kernel(EditDistanceParams P, T* G, const T* dv, T* gcos) {
  const int64_t n = P.n, m = P.m, W = m + 1;
  for (int64_t b = blockIdx.x; b < P.B; b += gridDim.x) {
    T* Gb = G + b * (n + 1) * W;
    const T* a = dv + b * n * m * 3;        // a[3 (i m + j) + k]: cell (i + 1, j + 1)
    for (int64_t d = n + m; d >= 2; --d) {  // cells (p, q), p + q = d, 1 <= p <= n, 1 <= q <= m
      const int64_t lo = d - m > 1 ? d - m : 1, hi = d - 1 < n ? d - 1 : n;
      for (int64_t p = lo + threadIdx.x; p <= hi; p += blockDim.x) {
        const int64_t q = d - p;
        T g = Gb[p * W + q];
        if (p < n) g += Gb[(p + 1) * W + q] * a[3 * (p * m + q - 1)];
        if (q < m) g += Gb[p * W + q + 1] * a[3 * ((p - 1) * m + q) + 1];
        if (p < n && q < m) g += Gb[(p + 1) * W + q + 1] * a[3 * (p * m + q) + 2];
        Gb[p * W + q] = g;
      }
      __syncthreads();
    }
    for (int64_t c = threadIdx.x; c < n * m; c += blockDim.x) {
      const int64_t i = c / m, j = c % m;
      gcos[b * n * m + c] = -Gb[(i + 1) * W + j + 1] * a[3 * c + 2];
    }
  }
}

// grad of one vector x (row r of s or t) against the other sequence y: d cos_ij / d x = y / (N(x) N(y)) -
// cos / N(x) * x / |x|. One thread per (row, position, letter).
template <typename T>
__global__ void cos_grad_kernel(EditDistanceParams P, bool of_t, const T* s, const T* t, const T* norms, const T* cos,
                                const T* gcos, T* grad) {
  const int64_t n = P.n, m = P.m, K = P.K;
  const int64_t len = of_t ? m : n, other = of_t ? n : m, total = P.B * len * K;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = idx / (len * K), r = (idx / K) % len, k = idx % K;
    const T* x = (of_t ? t + (b * m + r) * K : s + (b * n + r) * K);
    const T* y = of_t ? s + b * n * K : t + b * m * K;
    const T* nb = norms + b * (n + m);
    const T rx = of_t ? nb[n + r] : nb[r];
    const T* ny = of_t ? nb : nb + n;
    T lin = 0, radial = 0;
    for (int64_t o = 0; o < other; ++o) {
      const int64_t c = b * n * m + (of_t ? o * m + r : r * m + o);
      lin += gcos[c] * y[o * K + k] / edit_distance_clamped_norm(ny[o]);
      radial += gcos[c] * cos[c];
    }
    const T Nx = edit_distance_clamped_norm(rx);
    grad[idx] = lin / Nx - (rx == T(0) ? T(0) : radial / (Nx * rx) * x[k]);
  }
}

inline int items_grid(int64_t items) { return grid_blocks((items + kThreads - 1) / kThreads); }

}  // namespace

template <typename T>
void edit_distance_forward_cuda(const EditDistanceParams& P, const T* s, const T* t, T* D, T* cos, T* workspace,
                                std::uintptr_t stream) {
  edit_distance_check_params(P);
  if (P.B == 0) return;
  DeviceGuard guard(D);
  const cudaStream_t st = as_stream(stream);
  if (P.n + P.m > 0) {
    norms_kernel<T><<<items_grid(P.B * (P.n + P.m)), kThreads, 0, st>>>(P, s, t, workspace);
    check_launch("edit_distance norms");
  }
  if (P.n * P.m > 0) {
    cos_kernel<T><<<items_grid(P.B * P.n * P.m), kThreads, 0, st>>>(P, s, t, workspace, cos);
    check_launch("edit_distance cos");
  }
  forward_wavefront_kernel<T><<<grid_blocks(P.B), wavefront_threads(P.n, P.m), 0, st>>>(P, cos, D);
  check_launch("edit_distance forward");
}

template <typename T>
void edit_distance_backward_cuda(const EditDistanceParams& P, const T* grad_distance, const T* grad_D, const T* s,
                                 const T* t, const T* D, const T* cos, T* grad_s, T* grad_t, T* workspace,
                                 std::uintptr_t stream) {
  edit_distance_check_params(P);
  if (P.B == 0) return;
  DeviceGuard guard(D);
  const cudaStream_t st = as_stream(stream);
  const int64_t n = P.n, m = P.m;
  T* norms = workspace;
  T* G = norms + P.B * (n + m);
  T* dv = G + P.B * (n + 1) * (m + 1);
  T* gcos = dv + P.B * n * m * 3;
  if (n + m > 0) {
    norms_kernel<T><<<items_grid(P.B * (n + m)), kThreads, 0, st>>>(P, s, t, norms);
    check_launch("edit_distance norms");
  }
  partials_kernel<T><<<items_grid(P.B * (n + 1) * (m + 1)), kThreads, 0, st>>>(P, grad_distance, grad_D, D, cos, G, dv);
  check_launch("edit_distance partials");
  backward_wavefront_kernel<T><<<grid_blocks(P.B), wavefront_threads(n, m), 0, st>>>(P, G, dv, gcos);
  check_launch("edit_distance backward");
  if (n > 0) {
    cos_grad_kernel<T><<<items_grid(P.B * n * P.K), kThreads, 0, st>>>(P, false, s, t, norms, cos, gcos, grad_s);
    check_launch("edit_distance grad_s");
  }
  if (m > 0) {
    cos_grad_kernel<T><<<items_grid(P.B * m * P.K), kThreads, 0, st>>>(P, true, s, t, norms, cos, gcos, grad_t);
    check_launch("edit_distance grad_t");
  }
}

#define RELAXOPS_INSTANTIATE_EDIT_DISTANCE_CUDA(T)                                                                \
  template void edit_distance_forward_cuda<T>(const EditDistanceParams&, const T*, const T*, T*, T*, T*,          \
                                              std::uintptr_t);                                                    \
  template void edit_distance_backward_cuda<T>(const EditDistanceParams&, const T*, const T*, const T*, const T*, \
                                               const T*, const T*, T*, T*, T*, std::uintptr_t);

RELAXOPS_INSTANTIATE_EDIT_DISTANCE_CUDA(float)
RELAXOPS_INSTANTIATE_EDIT_DISTANCE_CUDA(double)

}  // namespace relaxops
