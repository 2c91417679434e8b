// CUDA kernels of baselines.h. Same formulas as baselines_cpu.cpp; the caller provides the sort permutation.
#include <cuda_runtime.h>

#include <algorithm>
#include <cub/block/block_scan.cuh>
#include <stdexcept>
#include <string>

#include "../common/cuda_utils.cuh"
#include "baselines.h"

namespace relaxops {
namespace {

constexpr int kThreads = 256;       // column and element kernels
constexpr int kScanThreads = 256;   // row kernels: one block scan of kScanThreads elements per chunk
constexpr int kMaxColumnTile = 32;  // columns per block of the column kernels

// Column tile width: the smallest power of two >= k, at most kMaxColumnTile; kThreads / width element strides.
int column_tile(int64_t k) {
  int w = 1;
  while (w < k && w < kMaxColumnTile) w *= 2;
  return w;
}

// The host-side invariants (lengths and ks are device data: the caller checks their values).
void check_sizes(int64_t B, int64_t n, int64_t k, double tau, const int64_t* ks, bool left) {
  RELAXOPS_CHECK(B >= 0 && n >= 1 && k >= 1 && k <= n, "need B >= 0 and 1 <= k <= n");
  RELAXOPS_CHECK(tau > 0, "tau must be > 0");
  RELAXOPS_CHECK(!left || (k == n && !ks), "left needs k = n and no ks");
}

// The row layout of baselines.h: lengths, ks (nullptr: full rows, k columns), left.
struct Rows {
  const int64_t* lengths;
  const int64_t* ks;
  bool left;
  __device__ RowColumns at(int64_t b, int64_t n, int64_t k) const { return row_columns(lengths, ks, left, n, k, b); }
};

// ---- logits (see baselines.h) ------------------------------------------------------------------------
// A functor gives, for row b: column(b, r), a per-column value loaded once (r: the column's ascending
// position); column_max(col), the column's largest logit (known in closed form for both methods, so the
// softmax needs no max pass); row(b, i), the row of X of reduction index i < L; and the logit (b, i, r, col).

// Iterates sorted positions q: row perm[q], the logit relative to the column maximum, neuralsort_delta
// (baselines.h; 0 at q = r_j, also the non-finite limits), from the centred D and the row's centre c.
template <typename T>
struct NeuralSortLogit {
  const T* x;
  const int64_t* perm;
  const T* D;
  const T* centre;
  int64_t n;
  T inv_tau;
  __device__ int64_t row(int64_t b, int64_t q) const { return perm[b * n + q]; }
  __device__ T column(int64_t b, int64_t r) const { return D[b * n + r]; }
  __device__ T column_max(T) const { return T(0); }
  __device__ T operator()(int64_t b, int64_t q, int64_t r, T Dr) const {
    const T tq = x[b * n + perm[b * n + q]], tr = x[b * n + perm[b * n + r]];
    return neuralsort_delta(tq, tr, T(tq - centre[b]), D[b * n + q], Dr, T(r - q), inv_tau);
  }
};

// Iterates elements c: z = -|t_{r_j} - x_c|^pow / tau <= 0, with t_{r_j} = column(b, r_j); the maximum is 0.
template <int K, typename T>
struct SoftSortLogit {
  const T* x;
  const int64_t* perm;
  int64_t n;
  T p, inv_tau;
  __device__ int64_t row(int64_t, int64_t c) const { return c; }
  __device__ T column(int64_t b, int64_t r) const { return x[b * n + perm[b * n + r]]; }
  __device__ T column_max(T) const { return T(0); }
  __device__ T operator()(int64_t b, int64_t c, int64_t, T t) const {
    return -softsort_phi<K, T>(softsort_gap(t, x[b * n + c]), p) * inv_tau;
  }
};

// Sum of v over the element strides of the block (thread = (tx column, ty stride), tid = ty W + tx), in a
// fixed tree order; every thread of column tx gets the total. Ends with a barrier.
template <typename T>
__device__ T stride_sum(T v, T* sm, int W, int H) {
  const int tid = threadIdx.x, ty = tid / W;
  sm[tid] = v;
  __syncthreads();
  for (int h = H / 2; h > 0; h >>= 1) {
    if (ty < h) sm[tid] += sm[tid + h * W];
    __syncthreads();
  }
  const T total = sm[tid % W];
  __syncthreads();
  return total;
}

// One block per (row b, tile of W columns). Pass 1: s_j = sum_i exp(z - max_j) over the L real elements (per
// thread over its element stride, then a fixed tree over the strides); pass 2 writes X = exp(z - max_j) / s_j
// and 0 in the pad rows; a dropped column is all 0. NaN logits make s_j and so the column NaN.
template <typename T, typename F>
__global__ void __launch_bounds__(kThreads)
    column_softmax_kernel(F f, Rows rows, int64_t B, int64_t n, int64_t k, int W, T* __restrict__ X) {
  __shared__ T sm[kThreads];
  const int tid = threadIdx.x, tx = tid % W, ty = tid / W, H = kThreads / W;
  const int64_t tiles = (k + W - 1) / W;
  for (int64_t item = blockIdx.x; item < B * tiles; item += gridDim.x) {
    const int64_t b = item / tiles, j = (item % tiles) * W + tx;
    const RowColumns rc = rows.at(b, n, k);
    const bool kept = j >= rc.j0 && j < rc.j1, active = j < k;
    const int64_t r = j + rc.shift;
    const T col = kept ? f.column(b, r) : T(0);
    const T mx = f.column_max(col);
    T s = T(0);
    if (kept)
      for (int64_t i = ty; i < rc.L; i += H) s += exp(f(b, i, r, col) - mx);
    const T inv = T(1) / stride_sum(s, sm, W, H);
    if (kept) {
      for (int64_t i = ty; i < rc.L; i += H) X[(b * n + f.row(b, i)) * k + j] = exp(f(b, i, r, col) - mx) * inv;
      for (int64_t c = rc.L + ty; c < n; c += H) X[(b * n + c) * k + j] = T(0);
    } else if (active) {
      for (int64_t c = ty; c < n; c += H) X[(b * n + c) * k + j] = T(0);
    }
  }
}

// One block per (row, column tile): dot_j = sum_c X G over the real rows c < L; for SoftSort also the
// sorted-value adjoint gt_j = -sum_c X (G - dot_j) phi'(t_j - x_c) / tau; both 0 for a dropped column.
template <int K, typename T, bool kSoftSort>
__global__ void __launch_bounds__(kThreads)
    column_adjoint_kernel(Rows rows, int64_t B, int64_t n, int64_t k, int W, const T* __restrict__ X,
                          const T* __restrict__ G, const T* __restrict__ x, const int64_t* __restrict__ perm, T p,
                          T inv_tau, T* __restrict__ dot, T* __restrict__ gt) {
  __shared__ T sm[kThreads];
  const int tid = threadIdx.x, tx = tid % W, ty = tid / W, H = kThreads / W;
  const int64_t tiles = (k + W - 1) / W;
  for (int64_t item = blockIdx.x; item < B * tiles; item += gridDim.x) {
    const int64_t b = item / tiles, j = (item % tiles) * W + tx;
    const RowColumns rc = rows.at(b, n, k);
    const bool kept = j >= rc.j0 && j < rc.j1;
    const T* Xb = X + b * n * k;
    const T* Gb = G + b * n * k;
    T acc = T(0);
    if (kept)
      for (int64_t c = ty; c < rc.L; c += H) acc += Xb[c * k + j] * Gb[c * k + j];
    const T d = stride_sum(acc, sm, W, H);
    if (j < k && ty == 0) dot[b * k + j] = d;
    if (kSoftSort) {
      acc = T(0);
      if (kept) {
        const T t = x[b * n + perm[b * n + j + rc.shift]];
        for (int64_t c = ty; c < rc.L; c += H)
          acc += softsort_slope_term<K, T>(Xb[c * k + j] * (Gb[c * k + j] - d), softsort_gap(t, x[b * n + c]), p);
      }
      const T g = stride_sum(acc, sm, W, H);
      if (j < k && ty == 0) gt[b * k + j] = -g * inv_tau;
    }
  }
}

// One thread per (row, element c), a loop over the kept columns of its row of X:
//   grad_x_c = sum_j dz (2 r_j + 1 - L) / tau,  beta_c = -sum_j dz / tau,  dz = X (G - dot_j);
// both 0 for an infinite x_c (baselines.h, non-finite inputs) and for a pad c >= L.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    neuralsort_element_kernel(Rows rows, int64_t B, int64_t n, int64_t k, const T* __restrict__ X,
                              const T* __restrict__ G, const T* __restrict__ x, const T* __restrict__ dot, T inv_tau,
                              T* __restrict__ grad_x, T* __restrict__ beta) {
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < B * n;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = idx / n, c = idx % n;
    const RowColumns rc = rows.at(b, n, k);
    if (c >= rc.L) {
      grad_x[idx] = T(0);
      beta[idx] = T(0);
      continue;
    }
    const T* Xc = X + idx * k;
    const T* Gc = G + idx * k;
    const T* db = dot + b * k;
    T direct = T(0), sum = T(0);
    for (int64_t j = rc.j0; j < rc.j1; ++j) {
      const T dz = Xc[j] * (Gc[j] - db[j]);
      direct += dz * T(2 * (j + rc.shift) + 1 - rc.L);
      sum += dz;
    }
    const bool inf = isinf(x[idx]);
    grad_x[idx] = inf ? T(0) : direct * inv_tau;
    beta[idx] = inf ? T(0) : -sum * inv_tau;
  }
}

// One thread per (row, element c): grad_x_c = sum_j X (G - dot_j) phi'(t_j - x_c) / tau over the kept columns
// (0 for an infinite x_c and for a pad c >= L).
template <int K, typename T>
__global__ void __launch_bounds__(kThreads)
    softsort_element_kernel(Rows rows, int64_t B, int64_t n, int64_t k, const T* __restrict__ X,
                            const T* __restrict__ G, const T* __restrict__ x, const int64_t* __restrict__ perm,
                            const T* __restrict__ dot, T p, T inv_tau, T* __restrict__ grad_x) {
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < B * n;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = idx / n, c = idx % n;
    const RowColumns rc = rows.at(b, n, k);
    if (c >= rc.L) {
      grad_x[idx] = T(0);
      continue;
    }
    const T xc = x[idx];
    const T* Xc = X + idx * k;
    const T* Gc = G + idx * k;
    const T* db = dot + b * k;
    const int64_t* pb = perm + b * n;
    T acc = T(0);
    for (int64_t j = rc.j0; j < rc.j1; ++j)  // pb[j + shift]: the element sorted at column j's position
      acc += softsort_slope_term<K, T>(Xc[j] * (Gc[j] - db[j]), softsort_gap(x[b * n + pb[j + rc.shift]], xc), p);
    grad_x[idx] = isinf(xc) ? T(0) : acc * inv_tau;
  }
}

// grad_x[perm[r_j]] += gt_j for the kept columns unless that element is infinite, one thread per (row,
// column); perm is a permutation, so no two threads collide.
template <typename T>
__global__ void scatter_sorted_adjoint_kernel(Rows rows, int64_t B, int64_t n, int64_t k,
                                              const int64_t* __restrict__ perm, const T* __restrict__ x,
                                              const T* __restrict__ gt, T* __restrict__ grad_x) {
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < B * k;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = idx / k, j = idx % k;
    const RowColumns rc = rows.at(b, n, k);
    if (j < rc.j0 || j >= rc.j1) continue;
    const int64_t e = b * n + perm[b * n + j + rc.shift];
    if (!isinf(x[e])) grad_x[e] += gt[idx];
  }
}

// The number of leading sorted positions of a row whose value is -inf (kFinite false) or < +inf (true):
// the bounds lo, hi of the finite positions (the sorted order is -inf, finite, +inf, NaN).
template <bool kFinite, typename T>
__device__ int64_t sorted_prefix_count(const T* xb, const int64_t* pb, int64_t n) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    const T v = xb[pb[mid]];
    if (kFinite ? v < T(INFINITY) : v == -T(INFINITY))
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

// One block per row: D_q = 2 S_q + t_q - c in sorted order over the finite positions [lo, hi) of the L real
// ones, S the exclusive prefix sum of t - c (double), c = centre[b] = the median finite value (as the CPU
// kernel; D is unused elsewhere, and not written at the pad positions [L, n)).
template <typename T>
__global__ void __launch_bounds__(kScanThreads)
    neuralsort_prefix_kernel(Rows rows, int64_t B, int64_t n, const T* __restrict__ x, const int64_t* __restrict__ perm,
                             T* __restrict__ D, T* __restrict__ centre) {
  using Scan = cub::BlockScan<double, kScanThreads>;
  __shared__ typename Scan::TempStorage tmp;
  for (int64_t b = blockIdx.x; b < B; b += gridDim.x) {
    const T* xb = x + b * n;
    const int64_t* pb = perm + b * n;
    const int64_t L = rows.lengths ? rows.lengths[b] : n;
    const int64_t lo = sorted_prefix_count<false>(xb, pb, L), hi = sorted_prefix_count<true>(xb, pb, L);
    const double c = lo < hi ? double(xb[pb[(lo + hi) / 2]]) : 0.0;
    if (threadIdx.x == 0) centre[b] = T(c);
    double carry = 0.0;
    for (int64_t base = 0; base < L; base += kScanThreads) {
      const int64_t q = base + threadIdx.x;
      const double t = q >= lo && q < hi ? double(xb[pb[q]]) - c : 0.0;
      double excl, total;
      Scan(tmp).ExclusiveSum(t, excl, total);
      if (q < L) D[b * n + q] = T(2.0 * (carry + excl) + t);
      carry += total;
      __syncthreads();
    }
  }
}

// (index of the last group start so far, prefix sum of beta before it); -1: no start in the range.
struct GroupStart {
  int64_t key;
  double val;
};
struct LastGroupStart {
  __device__ GroupStart operator()(const GroupStart& a, const GroupStart& b) const { return b.key >= a.key ? b : a; }
};

// One block per row: the adjoint of b (baselines.h item 2) over the L real sorted positions. Direction +1 walks
// sorted positions upwards (elements below the tie group: count lo, beta sum below), -1 downwards (elements
// above); each is a chunked sum scan of beta and a "last group start" scan carrying (lo, sum before lo) across
// chunks.
template <typename T>
__global__ void __launch_bounds__(kScanThreads)
    neuralsort_b_adjoint_kernel(Rows rows, int64_t B, int64_t n, const T* __restrict__ x,
                                const int64_t* __restrict__ perm, const T* __restrict__ beta, T* grad_x) {
  using SumScan = cub::BlockScan<double, kScanThreads>;
  using StartScan = cub::BlockScan<GroupStart, kScanThreads>;
  __shared__ typename SumScan::TempStorage tmp_sum;
  __shared__ typename StartScan::TempStorage tmp_start;
  for (int64_t b = blockIdx.x; b < B; b += gridDim.x) {
    const int64_t* pb = perm + b * n;
    const T* xb = x + b * n;
    const int64_t L = rows.lengths ? rows.lengths[b] : n;
    for (int dir = 0; dir < 2; ++dir) {
      double carry = 0.0;
      GroupStart carry_start{-1, 0.0};
      for (int64_t base = 0; base < L; base += kScanThreads) {
        const int64_t i = base + threadIdx.x;
        const bool valid = i < L;
        const int64_t q = dir == 0 ? i : L - 1 - i;
        int64_t e = 0;
        double be = 0.0;
        bool start = false;
        if (valid) {
          e = pb[q];
          be = double(beta[b * n + e]);
          start = i == 0 || !(xb[e] == xb[pb[dir == 0 ? q - 1 : q + 1]]);
        }
        double excl, total;
        SumScan(tmp_sum).ExclusiveSum(be, excl, total);
        GroupStart gs{start ? i : -1, carry + excl}, agg;
        StartScan(tmp_start).InclusiveScan(gs, gs, LastGroupStart(), agg);
        if (gs.key < 0) gs = carry_start;
        if (valid && !isinf(xb[e])) {  // infinite elements: gradient 0 (their beta is 0)
          const double g = be * double(gs.key) + gs.val;
          grad_x[b * n + e] += T(dir == 0 ? g : -g);
        }
        carry += total;
        if (agg.key >= 0) carry_start = agg;
        __syncthreads();
      }
    }
  }
}

template <typename T, typename F>
void launch_column_softmax(const F& f, Rows rows, int64_t B, int64_t n, int64_t k, T* X, cudaStream_t s) {
  const int W = column_tile(k);
  column_softmax_kernel<T, F><<<grid_blocks(B * ((k + W - 1) / W)), kThreads, 0, s>>>(f, rows, B, n, k, W, X);
}

template <int K, typename T>
void softsort_forward_k(int64_t B, int64_t n, int64_t k, double tau, double pow, const T* x, const int64_t* perm,
                        Rows rows, T* X, cudaStream_t s) {
  const SoftSortLogit<K, T> f{x, perm, n, T(pow), inverse_tau<T>(tau)};
  launch_column_softmax<T>(f, rows, B, n, k, X, s);
  check_launch("softsort forward");
}

template <int K, typename T>
void softsort_backward_k(int64_t B, int64_t n, int64_t k, double tau, double pow, const T* grad_X, const T* X,
                         const T* x, const int64_t* perm, Rows rows, T* grad_x, T* workspace, cudaStream_t s) {
  T* dot = workspace;
  T* gt = workspace + B * k;
  const int W = column_tile(k);
  column_adjoint_kernel<K, T, true><<<grid_blocks(B * ((k + W - 1) / W)), kThreads, 0, s>>>(
      rows, B, n, k, W, X, grad_X, x, perm, T(pow), inverse_tau<T>(tau), dot, gt);
  check_launch("softsort backward column_adjoint");
  softsort_element_kernel<K, T><<<grid_blocks((B * n + kThreads - 1) / kThreads), kThreads, 0, s>>>(
      rows, B, n, k, X, grad_X, x, perm, dot, T(pow), inverse_tau<T>(tau), grad_x);
  check_launch("softsort backward element");
  scatter_sorted_adjoint_kernel<T>
      <<<grid_blocks((B * k + kThreads - 1) / kThreads), kThreads, 0, s>>>(rows, B, n, k, perm, x, gt, grad_x);
  check_launch("softsort backward scatter");
}

}  // namespace

template <typename T>
void neuralsort_forward_cuda(int64_t B, int64_t n, int64_t k, double tau, const T* x, const int64_t* perm,
                             const int64_t* lengths, const int64_t* ks, bool left, T* X, T* workspace,
                             std::uintptr_t stream) {
  check_sizes(B, n, k, tau, ks, left);
  if (B == 0) return;
  DeviceGuard guard(X);
  const cudaStream_t s = as_stream(stream);
  const Rows rows{lengths, ks, left};
  T* centre = workspace + B * n;
  neuralsort_prefix_kernel<T><<<grid_blocks(B), kScanThreads, 0, s>>>(rows, B, n, x, perm, workspace, centre);
  check_launch("neuralsort forward prefix");
  const NeuralSortLogit<T> f{x, perm, workspace, centre, n, inverse_tau<T>(tau)};
  launch_column_softmax<T>(f, rows, B, n, k, X, s);
  check_launch("neuralsort forward softmax");
}

template <typename T>
void neuralsort_backward_cuda(int64_t B, int64_t n, int64_t k, double tau, const T* grad_X, const T* X, const T* x,
                              const int64_t* perm, const int64_t* lengths, const int64_t* ks, bool left, T* grad_x,
                              T* workspace, std::uintptr_t stream) {
  check_sizes(B, n, k, tau, ks, left);
  if (B == 0) return;
  DeviceGuard guard(grad_x);
  const cudaStream_t s = as_stream(stream);
  const Rows rows{lengths, ks, left};
  T* dot = workspace;
  T* beta = workspace + B * k;
  const int W = column_tile(k);
  column_adjoint_kernel<kPowOne, T, false><<<grid_blocks(B * ((k + W - 1) / W)), kThreads, 0, s>>>(
      rows, B, n, k, W, X, grad_X, x, perm, T(1), inverse_tau<T>(tau), dot, nullptr);
  check_launch("neuralsort backward column_adjoint");
  neuralsort_element_kernel<T><<<grid_blocks((B * n + kThreads - 1) / kThreads), kThreads, 0, s>>>(
      rows, B, n, k, X, grad_X, x, dot, inverse_tau<T>(tau), grad_x, beta);
  check_launch("neuralsort backward element");
  neuralsort_b_adjoint_kernel<T><<<grid_blocks(B), kScanThreads, 0, s>>>(rows, B, n, x, perm, beta, grad_x);
  check_launch("neuralsort backward b_adjoint");
}

template <typename T>
void softsort_forward_cuda(int64_t B, int64_t n, int64_t k, double tau, double pow, const T* x, const int64_t* perm,
                           const int64_t* lengths, const int64_t* ks, bool left, T* X, std::uintptr_t stream) {
  check_sizes(B, n, k, tau, ks, left);
  RELAXOPS_CHECK(pow > 0, "pow must be > 0");
  if (B == 0) return;
  DeviceGuard guard(X);
  const cudaStream_t s = as_stream(stream);
  const Rows rows{lengths, ks, left};
  switch (softsort_pow_kind(pow)) {
    case kPowOne: return softsort_forward_k<kPowOne, T>(B, n, k, tau, pow, x, perm, rows, X, s);
    case kPowTwo: return softsort_forward_k<kPowTwo, T>(B, n, k, tau, pow, x, perm, rows, X, s);
    default: return softsort_forward_k<kPowGeneral, T>(B, n, k, tau, pow, x, perm, rows, X, s);
  }
}

template <typename T>
void softsort_backward_cuda(int64_t B, int64_t n, int64_t k, double tau, double pow, const T* grad_X, const T* X,
                            const T* x, const int64_t* perm, const int64_t* lengths, const int64_t* ks, bool left,
                            T* grad_x, T* workspace, std::uintptr_t stream) {
  check_sizes(B, n, k, tau, ks, left);
  RELAXOPS_CHECK(pow > 0, "pow must be > 0");
  if (B == 0) return;
  DeviceGuard guard(grad_x);
  const cudaStream_t s = as_stream(stream);
  const Rows rows{lengths, ks, left};
  switch (softsort_pow_kind(pow)) {
    case kPowOne:
      return softsort_backward_k<kPowOne, T>(B, n, k, tau, pow, grad_X, X, x, perm, rows, grad_x, workspace, s);
    case kPowTwo:
      return softsort_backward_k<kPowTwo, T>(B, n, k, tau, pow, grad_X, X, x, perm, rows, grad_x, workspace, s);
    default:
      return softsort_backward_k<kPowGeneral, T>(B, n, k, tau, pow, grad_X, X, x, perm, rows, grad_x, workspace, s);
  }
}

#define RELAXOPS_INSTANTIATE_BASELINES_CUDA(T)                                                                     \
  template void neuralsort_forward_cuda<T>(int64_t, int64_t, int64_t, double, const T*, const int64_t*,            \
                                           const int64_t*, const int64_t*, bool, T*, T*, std::uintptr_t);          \
  template void neuralsort_backward_cuda<T>(int64_t, int64_t, int64_t, double, const T*, const T*, const T*,       \
                                            const int64_t*, const int64_t*, const int64_t*, bool, T*, T*,          \
                                            std::uintptr_t);                                                       \
  template void softsort_forward_cuda<T>(int64_t, int64_t, int64_t, double, double, const T*, const int64_t*,      \
                                         const int64_t*, const int64_t*, bool, T*, std::uintptr_t);                \
  template void softsort_backward_cuda<T>(int64_t, int64_t, int64_t, double, double, const T*, const T*, const T*, \
                                          const int64_t*, const int64_t*, const int64_t*, bool, T*, T*,            \
                                          std::uintptr_t);

RELAXOPS_INSTANTIATE_BASELINES_CUDA(float)
RELAXOPS_INSTANTIATE_BASELINES_CUDA(double)

}  // namespace relaxops
