// CUDA kernels of sortnet.h. Same algorithms and arithmetic as sortnet_cpu.cpp; comparators of one layer
// touch disjoint wires, so a block runs a layer's comparators in parallel and synchronises between layers.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <stdexcept>
#include <string>

#include "../common/cuda_utils.cuh"
#include "sortnet.h"

namespace relaxops {
namespace {

// Columns per matrix tile. A layer's work is (comparator, column) pairs; the kTile lanes of one comparator
// are adjacent lanes of one warp (block sizes are multiples of 32), so the backward sums over columns with
// a fixed shuffle tree.
constexpr int kTile = 8;
// Row stride of a tile W[r][cc]: one padding element spreads column reads over the shared-memory banks.
constexpr int kRowStride = kTile + 1;
constexpr int kMaxThreads = 256;
constexpr int kDefaultSharedBytes = 48 * 1024;
// matrix_backward plan (see make_plan): whole trajectory per segment up to this many bytes per tile ...
constexpr int64_t kSegmentBytes = 1 << 20;
// ... aim for this many (row, tile group) items, with at most this many bytes of partial sums ...
constexpr int64_t kTargetItems = 1024;
constexpr int64_t kPartialBytes = 128ll << 20;
// ... and per-block scratch for at most this many resident blocks / bytes (at least kMinBlocks blocks).
constexpr int64_t kMaxBlocks = 1024;
constexpr int64_t kScratchBytes = 128ll << 20;
constexpr int64_t kMinBlocks = 32;

// Largest dynamic shared memory a block may opt in to on the current device (cached per device).
int max_shared_bytes() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cache[kMaxDevices] = {};
  int dev = 0;
  check_call(cudaGetDevice(&dev), "cudaGetDevice");
  if (dev >= 0 && dev < kMaxDevices) {
    const int v = cache[dev].load(std::memory_order_relaxed);
    if (v > 0) return v;
  }
  int v = 0;
  check_call(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
             "cudaDeviceGetAttribute(MaxSharedMemoryPerBlockOptin)");
  v = std::max(v, kDefaultSharedBytes);
  if (dev >= 0 && dev < kMaxDevices) cache[dev].store(v, std::memory_order_relaxed);
  return v;
}

// True if `kernel` can run with `bytes` of dynamic shared memory (raising its limit when > 48 KB).
template <typename Kernel>
bool fits_shared(Kernel kernel, int64_t bytes) {
  if (bytes <= kDefaultSharedBytes) return true;
  if (bytes > max_shared_bytes()) return false;
  check_call(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)),
             "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
  return true;
}

int block_threads(int64_t work_per_layer) {
  const int64_t t = std::min<int64_t>(kMaxThreads, std::max<int64_t>(32, work_per_layer));
  return int((t + 31) / 32 * 32);
}

template <typename T>
__device__ inline T* shared_buffer() {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  return reinterpret_cast<T*>(smem_raw);
}

// ---- values ---------------------------------------------------------------------------------------------
// Rows of their own lengths (sortnet.h, Rows / RowSpec): row b runs rn = rows.row(b), layers [rn.l0, rn.l1) of its
// network, a comparator only where rn.takes(c); its entries rn.wires.. are pads (never read, 0 in the outputs).

// One block per row: v = x, then every comparator c of layer l records d_c = v_j - v_i, alpha_c = f(d_c) and mixes
// v_i, v_j (d and alpha 0 for the comparators that are not the row's). v is shared memory, or the row of `sorted`
// itself (use_shared == false).
template <typename T>
__global__ void __launch_bounds__(kMaxThreads)
    values_forward_kernel(Rows rows, RelaxParams rp, int64_t B, const T* __restrict__ x, T* sorted, T* d, T* alpha,
                          bool use_shared) {
  const int n = int(rows.n());
  const int64_t C = rows.C;
  for (int64_t b = blockIdx.x; b < B; b += gridDim.x) {
    const RowNet rn = rows.row(b);
    const NetView& net = rn.net;
    T* v = use_shared ? shared_buffer<T>() : sorted + b * n;
    for (int r = threadIdx.x; r < n; r += blockDim.x) v[r] = r < rn.wires ? x[b * n + r] : T(0);
    T* db = d + b * C;
    T* ab = alpha + b * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
      if (c < rn.c0 || c >= rn.c1) db[c] = ab[c] = T(0);
    __syncthreads();
    for (int64_t l = rn.l0; l < rn.l1; ++l) {
      const int c1 = net.layer_ptr[l + 1];
      for (int c = net.layer_ptr[l] + threadIdx.x; c < c1; c += blockDim.x) {
        if (rn.takes(c))
          relaxed_swap_forward<T>(rp, v, net.cmin[c], net.cmax[c], db + c, ab + c);
        else
          db[c] = ab[c] = T(0);
      }
      __syncthreads();
    }
    if (use_shared)
      for (int r = threadIdx.x; r < n; r += blockDim.x) sorted[b * n + r] = v[r];
    __syncthreads();
  }
}

// One block per row, layers in reverse: g = grad_sorted (or 0; 0 on the pads); per comparator of the row
//   dalpha = grad_alpha_c - (g_i - g_j) d_c,  dd = dalpha f'(d_c),
//   g_i, g_j <- a g_i + (1-a) g_j - dd, (1-a) g_i + a g_j + dd.
template <typename T>
__global__ void __launch_bounds__(kMaxThreads)
    values_backward_kernel(Rows rows, RelaxParams rp, int64_t B, const T* __restrict__ grad_sorted,
                           const T* __restrict__ grad_alpha, const T* __restrict__ d, const T* __restrict__ alpha,
                           T* grad_x, bool use_shared) {
  const int n = int(rows.n());
  const int64_t C = rows.C;
  for (int64_t b = blockIdx.x; b < B; b += gridDim.x) {
    const RowNet rn = rows.row(b);
    const NetView& net = rn.net;
    T* g = use_shared ? shared_buffer<T>() : grad_x + b * n;
    for (int r = threadIdx.x; r < n; r += blockDim.x)
      g[r] = grad_sorted && r < rn.wires ? grad_sorted[b * n + r] : T(0);
    __syncthreads();
    const T* db = d + b * C;
    const T* ab = alpha + b * C;
    const T* gab = grad_alpha ? grad_alpha + b * C : nullptr;
    for (int64_t l = rn.l1 - 1; l >= rn.l0; --l) {
      const int c1 = net.layer_ptr[l + 1];
      for (int c = net.layer_ptr[l] + threadIdx.x; c < c1; c += blockDim.x)
        if (rn.takes(c)) relaxed_swap_backward<T>(rp, g, net.cmin[c], net.cmax[c], db[c], ab[c], gab ? gab[c] : T(0));
      __syncthreads();
    }
    if (use_shared)
      for (int r = threadIdx.x; r < n; r += blockDim.x) grad_x[b * n + r] = g[r];
    __syncthreads();
  }
}

// ---- ranks ----------------------------------------------------------------------------------------------

// rank = P_1 ... P_L pos: the row's comparators in reverse, each mixing v_i, v_j with its stored alpha (as the
// matrix tiles: v_i <- v_j + a e, v_j <- v_i - a e, e = v_i - v_j). With du, the alpha gradient of the rank backward
// goes into the values backward of g (item 6 of sortnet.h). Ends with a barrier after every layer.
template <typename T>
__device__ void positions_reverse(const RowNet& rn, const RelaxParams& rp, const T* __restrict__ ab,
                                  const T* __restrict__ db, const T* __restrict__ du, T* v, T* g) {
  const NetView& net = rn.net;
  for (int64_t l = rn.l1 - 1; l >= rn.l0; --l) {
    const int c1 = net.layer_ptr[l + 1];
    for (int c = net.layer_ptr[l] + threadIdx.x; c < c1; c += blockDim.x) {
      if (!rn.takes(c)) continue;
      const int i = net.cmin[c], j = net.cmax[c];
      const T a = ab[c], vi = v[i], vj = v[j], e = vi - vj;
      v[i] = vj + a * e;
      v[j] = vi - a * e;
      if (du) relaxed_swap_backward<T>(rp, g, i, j, db[c], a, du[c] * e);
    }
    __syncthreads();
  }
}

// The values pass of one row on v (values_forward_kernel), keeping alpha (and d) of the row's comparators.
template <typename T>
__device__ void rank_values_pass(const RowNet& rn, const RelaxParams& rp, T* v, T* db, T* ab) {
  const NetView& net = rn.net;
  for (int64_t l = rn.l0; l < rn.l1; ++l) {
    const int c1 = net.layer_ptr[l + 1];
    for (int c = net.layer_ptr[l] + threadIdx.x; c < c1; c += blockDim.x) {
      if (!rn.takes(c)) continue;
      const int i = net.cmin[c], j = net.cmax[c];
      const T xi = v[i], xj = v[j];
      const T dc = relaxed_gap(xi, xj);
      const T a = relax_alpha<T>(rp, dc, nullptr);
      if (db) db[c] = dc;
      ab[c] = a;
      relaxed_minmax(a, xi, xj, dc, v + i, v + j);
    }
    __syncthreads();
  }
}

// One block per row: the values pass on v (alpha to the workspace row, C values), then v = 1..n through the
// layers in reverse; 0 on the pads. v is shared memory, or the row of `rank` itself (use_shared == false).
template <typename T>
__global__ void __launch_bounds__(kMaxThreads)
    rank_forward_kernel(Rows rows, RelaxParams rp, int64_t B, const T* __restrict__ x, T* rank, T* workspace,
                        bool use_shared) {
  const int n = int(rows.n());
  const int64_t C = rows.C;
  for (int64_t b = blockIdx.x; b < B; b += gridDim.x) {
    const RowNet rn = rows.row(b);
    T* v = use_shared ? shared_buffer<T>() : rank + b * n;
    T* ab = workspace + b * C;
    for (int r = threadIdx.x; r < n; r += blockDim.x) v[r] = r < rn.wires ? x[b * n + r] : T(0);
    __syncthreads();
    rank_values_pass<T>(rn, rp, v, static_cast<T*>(nullptr), ab);
    for (int r = threadIdx.x; r < n; r += blockDim.x) v[r] = T(r + 1);
    __syncthreads();
    positions_reverse<T>(rn, rp, ab, static_cast<const T*>(nullptr), static_cast<const T*>(nullptr), v,
                         static_cast<T*>(nullptr));
    for (int r = threadIdx.x; r < n; r += blockDim.x) rank[b * n + r] = r < rn.wires ? v[r] : T(0);
    __syncthreads();
  }
}

// One block per row, workspace row [d (C), alpha (C), du (C), a row (n)]: the values pass on v = x again (d, alpha)
// with u = grad_rank pushed through each layer after it, storing du_c = u_i - u_j; then v = 1..n and g = 0
// through the layers in reverse, with grad_alpha_c = du_c (v_i - v_j). v, u, g are shared memory, or (use_shared
// == false) the row of grad_x (v, then g), the workspace row's last n values (u, then v). Pads: x and grad_rank
// are not read there, g stays 0.
template <typename T>
__global__ void __launch_bounds__(kMaxThreads)
    rank_backward_kernel(Rows rows, RelaxParams rp, int64_t B, const T* __restrict__ x, const T* __restrict__ grad_rank,
                         T* grad_x, T* workspace, bool use_shared) {
  const int n = int(rows.n());
  const int64_t C = rows.C;
  for (int64_t b = blockIdx.x; b < B; b += gridDim.x) {
    const RowNet rn = rows.row(b);
    const NetView& net = rn.net;
    T* db = workspace + b * (3 * C + n);
    T* ab = db + C;
    T* du = ab + C;
    T* v = use_shared ? shared_buffer<T>() : grad_x + b * n;
    T* u = use_shared ? shared_buffer<T>() + n : du + C;
    T* g = use_shared ? shared_buffer<T>() + 2 * n : grad_x + b * n;
    for (int r = threadIdx.x; r < n; r += blockDim.x) {
      v[r] = r < rn.wires ? x[b * n + r] : T(0);
      u[r] = r < rn.wires ? grad_rank[b * n + r] : T(0);
    }
    __syncthreads();
    for (int64_t l = rn.l0; l < rn.l1; ++l) {
      const int c0 = net.layer_ptr[l], c1 = net.layer_ptr[l + 1];
      for (int c = c0 + threadIdx.x; c < c1; c += blockDim.x) {
        if (!rn.takes(c)) continue;
        const int i = net.cmin[c], j = net.cmax[c];
        relaxed_swap_forward<T>(rp, v, i, j, db + c, ab + c);
        const T a = ab[c], ui = u[i], uj = u[j], e = ui - uj;
        du[c] = e;
        u[i] = uj + a * e;
        u[j] = ui - a * e;
      }
      __syncthreads();
    }
    // positions in u's buffer (v's may be g's: the row of grad_x)
    for (int r = threadIdx.x; r < n; r += blockDim.x) {
      u[r] = T(r + 1);
      g[r] = T(0);
    }
    __syncthreads();
    positions_reverse<T>(rn, rp, ab, db, du, u, g);
    if (use_shared)
      for (int r = threadIdx.x; r < n; r += blockDim.x) grad_x[b * n + r] = g[r];
    __syncthreads();
  }
}

// ---- matrix tiles ---------------------------------------------------------------------------------------
// A tile holds columns [col0, col0 + ncols) of Y (ncols <= kTile); element (r, cc) is W[r * rs + cc * cs]. Of a
// row's tile of output columns t0.., the columns cc in [cc0, cc1) are its own (Y-column col0 + cc), the others 0.

struct TileCols {
  int col0, cc0, cc1;
};
__device__ inline TileCols tile_cols(const RowNet& rn, int t0) {
  const int first = int(rn.wires - rn.cols);  // the row's first Y-column, at output column out_first
  return {t0 - int(rn.out_first) + first, max(0, int(rn.out_first) - t0), min(kTile, int(rn.out_first + rn.cols) - t0)};
}

// W = I restricted to the tile's own columns, over the padded layout W[n][kRowStride] (padding zeroed).
template <typename T>
__device__ void init_identity(T* W, int n, const TileCols& tc) {
  for (int idx = threadIdx.x; idx < n * kRowStride; idx += blockDim.x) {
    const int r = idx / kRowStride, cc = idx % kRowStride;
    W[idx] = (cc >= tc.cc0 && cc < tc.cc1 && r == tc.col0 + cc) ? T(1) : T(0);
  }
}

template <typename T>
__device__ void copy_tile(T* dst, const T* src, int n) {
  for (int idx = threadIdx.x; idx < n * kRowStride; idx += blockDim.x) dst[idx] = src[idx];
}

// Layers [l0, l1) of the row's network on the tile: rows i, j mixed with [[a, 1-a], [1-a, a]]. With kDiff, stores
// Y_i - Y_j (before mixing) at diffs[(c - cbase) * kTile + cc]. Ends with a barrier after every layer.
template <typename T, bool kDiff>
__device__ void apply_layers(const RowNet& rn, const T* __restrict__ ab, int l0, int l1, T* W, int rs, int cs,
                             int ncols, T* diffs, int cbase) {
  const NetView& net = rn.net;
  for (int l = l0; l < l1; ++l) {
    const int c0 = net.layer_ptr[l];
    const int npairs = (net.layer_ptr[l + 1] - c0) * kTile;
    for (int p = threadIdx.x; p < npairs; p += blockDim.x) {
      const int cc = p % kTile;
      const int c = c0 + p / kTile;
      if (cc >= ncols || !rn.takes(c)) continue;
      T* wi = W + net.cmin[c] * rs + cc * cs;
      T* wj = W + net.cmax[c] * rs + cc * cs;
      const T a = ab[c];
      const T u = *wi, v = *wj;
      const T diff = u - v;
      *wi = v + a * diff;  // a u + (1 - a) v
      *wj = u - a * diff;  // (1 - a) u + a v
      if (kDiff) diffs[int64_t(c - cbase) * kTile + cc] = diff;
    }
    __syncthreads();
  }
}

// Reverse sweep over layers [l0, l1): per comparator of the row, add the sum over the tile's columns of
// (H_i - H_j)(Y_i - Y_j) to part[c], then mix rows i, j of H.
template <typename T>
__device__ void reverse_layers(const RowNet& rn, const T* __restrict__ ab, int l0, int l1, T* H, int ncols,
                               const T* diffs, int cbase, T* part) {
  const NetView& net = rn.net;
  for (int l = l1 - 1; l >= l0; --l) {
    const int c0 = net.layer_ptr[l];
    const int npairs = (net.layer_ptr[l + 1] - c0) * kTile;
    // Uniform trip count: every lane reaches the shuffles.
    for (int base = 0; base < npairs; base += blockDim.x) {
      const int p = base + threadIdx.x;
      const int cc = p % kTile;
      const int c = c0 + p / kTile;
      const bool active = p < npairs && rn.takes(c);
      T prod = T(0);
      if (active && cc < ncols) {
        T* hi = H + net.cmin[c] * kRowStride + cc;
        T* hj = H + net.cmax[c] * kRowStride + cc;
        const T u = *hi, v = *hj;
        const T hd = u - v;
        prod = hd * diffs[int64_t(c - cbase) * kTile + cc];
        const T a = ab[c];
        *hi = v + a * hd;
        *hj = u - a * hd;
      }
#pragma unroll
      for (int off = kTile / 2; off > 0; off >>= 1) prod += __shfl_xor_sync(0xffffffffu, prod, off);
      if (active && cc == 0) part[c] += prod;
    }
    __syncthreads();
  }
}

// One block per (row b, tile): Y = I on the tile's own columns, the row's layers, stored as rows t0.. of X[b]
// ([m, n], m = n - col_begin). Without shared memory the tile lives in X itself.
template <typename T>
__global__ void __launch_bounds__(kMaxThreads)
    matrix_forward_kernel(Rows rows, int64_t B, int col_begin, const T* __restrict__ alpha, T* X, bool use_shared) {
  const int n = int(rows.n()), m = n - col_begin;
  const int64_t C = rows.C;
  const int tiles = (m + kTile - 1) / kTile;
  for (int64_t item = blockIdx.x; item < B * tiles; item += gridDim.x) {
    const int64_t b = item / tiles;
    const RowNet rn = rows.row(b, m);
    const int t0 = int(item % tiles) * kTile;
    const TileCols tc = tile_cols(rn, t0);
    const int ncols = min(kTile, m - t0);
    T* Xt = X + (b * m + t0) * n;  // ncols contiguous rows of X[b]
    T* W;
    int rs, cs;
    if (use_shared) {
      W = shared_buffer<T>();
      rs = kRowStride;
      cs = 1;
      init_identity(W, n, tc);
    } else {
      W = Xt;
      rs = 1;
      cs = n;
      for (int idx = threadIdx.x; idx < ncols * n; idx += blockDim.x) {
        const int cc = idx / n;
        W[idx] = (cc >= tc.cc0 && cc < tc.cc1 && idx % n == tc.col0 + cc) ? T(1) : T(0);
      }
    }
    __syncthreads();
    apply_layers<T, false>(rn, alpha + b * C, int(rn.l0), int(rn.l1), W, rs, cs, ncols, nullptr, 0);
    if (use_shared)
      for (int idx = threadIdx.x; idx < ncols * n; idx += blockDim.x) Xt[idx] = W[(idx % n) * kRowStride + idx / n];
    __syncthreads();
  }
}

struct BackwardPlan {
  int64_t tiles;          // column tiles per row (over the m = n - col_begin columns)
  int64_t S;              // layers per segment
  int64_t nseg;           // segments; checkpoints of segments 1..nseg-1 are stored
  int64_t max_seg_comps;  // comparators per segment, bounded by S floor(n/2) (disjoint wires per layer)
  int64_t groups;         // tile groups per row: items = B * groups
  int64_t tiles_per_group;
  int64_t blocks;         // resident blocks, each with its own scratch slot
  int64_t block_elems;    // scratch per block: W, H [n][kRowStride], checkpoints, segment differences
  int64_t partial_bytes;  // [B, groups, C] partial sums (0 if groups == 1: written to grad_alpha)
  int64_t bytes;          // workspace total
};

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// Depends on n, L, C, B, m and sizeof(T) only, so the caller can size the workspace before the launch.
template <typename T>
BackwardPlan make_plan(int64_t n, int64_t L, int64_t C, int64_t B, int64_t m) {
  BackwardPlan p{};
  if (B <= 0 || C <= 0) return p;
  const int64_t es = int64_t(sizeof(T));
  p.tiles = (m + kTile - 1) / kTile;
  p.S = (C * kTile * es <= kSegmentBytes) ? L : std::max<int64_t>(1, int64_t(std::ceil(std::sqrt(2.0 * L))));
  p.S = std::min(p.S, L);
  p.nseg = (L + p.S - 1) / p.S;
  p.max_seg_comps = std::min<int64_t>(C, p.S * (n / 2));
  int64_t groups = std::min<int64_t>(p.tiles, (kTargetItems + B - 1) / B);
  groups = std::min<int64_t>(groups, std::max<int64_t>(1, kPartialBytes / (B * C * es)));
  groups = std::max<int64_t>(groups, 1);
  p.tiles_per_group = (p.tiles + groups - 1) / groups;
  p.groups = (p.tiles + p.tiles_per_group - 1) / p.tiles_per_group;
  const int64_t tile_elems = n * kRowStride;
  p.block_elems = round_up((2 + p.nseg - 1) * tile_elems + p.max_seg_comps * kTile, 64);
  const int64_t items = B * p.groups;
  const int64_t by_memory = std::max<int64_t>(kMinBlocks, kScratchBytes / (p.block_elems * es));
  p.blocks = std::max<int64_t>(1, std::min({items, kMaxBlocks, by_memory}));
  p.partial_bytes = p.groups > 1 ? round_up(B * p.groups * C * es, 256) : 0;
  p.bytes = p.partial_bytes + p.blocks * p.block_elems * es;
  return p;
}

// Blocks loop over items (row b, tile group g). Per tile: H = grad_X^T on the tile's own columns and the row's
// real wires; checkpoints of the forward trajectory at segment starts (segments of S layers of the row's layers);
// then per segment, last first: recompute it from its checkpoint keeping Y_i - Y_j, and sweep it in reverse
// (reverse_layers). The group's tiles accumulate into part = partial[b][g][:] (zeroed first) in tile order.
template <typename T>
__global__ void __launch_bounds__(kMaxThreads)
    matrix_backward_kernel(Rows rows, BackwardPlan plan, int64_t B, int col_begin, const T* __restrict__ alpha,
                           const T* __restrict__ grad_X, T* partial, T* scratch, bool use_shared) {
  const int n = int(rows.n()), m = n - col_begin;
  const int64_t C = rows.C;
  const int S = int(plan.S), nseg_max = int(plan.nseg);
  const int64_t tile_elems = int64_t(n) * kRowStride;
  T* blk = scratch + blockIdx.x * plan.block_elems;
  T* W = use_shared ? shared_buffer<T>() : blk;
  T* H = use_shared ? shared_buffer<T>() + tile_elems : blk + tile_elems;
  T* ckpt = blk + 2 * tile_elems;  // checkpoint s (1 <= s < nseg) at ckpt + (s - 1) * tile_elems
  T* diffs = ckpt + (nseg_max - 1) * tile_elems;
  for (int64_t item = blockIdx.x; item < B * plan.groups; item += gridDim.x) {
    const int64_t b = item / plan.groups;
    const RowNet rn = rows.row(b, m);
    const int L0 = int(rn.l0), Lr = int(rn.l1 - rn.l0), nseg = (Lr + S - 1) / S;
    const int t0 = int((item % plan.groups) * plan.tiles_per_group);
    const int t1 = int(min(plan.tiles, t0 + plan.tiles_per_group));
    const T* ab = alpha + b * C;
    const T* G = grad_X + b * m * n;
    T* part = partial + item * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) part[c] = T(0);
    __syncthreads();
    for (int t = t0; t < t1; ++t) {
      const TileCols tc = tile_cols(rn, t * kTile);
      if (tc.cc0 >= tc.cc1 || nseg == 0) continue;  // none of the row's columns: no gradient
      const int ncols = min(kTile, m - t * kTile);
      // H[r][cc] = grad_X[b][t * kTile + cc][r] on the row's columns and real wires; zero elsewhere.
      for (int idx = threadIdx.x; idx < kRowStride * n; idx += blockDim.x) {
        const int cc = idx / n, r = idx % n;
        H[r * kRowStride + cc] =
            cc >= tc.cc0 && cc < tc.cc1 && r < rn.wires ? G[int64_t(t * kTile + cc) * n + r] : T(0);
      }
      if (nseg > 1) {
        init_identity(W, n, tc);
        __syncthreads();
        for (int s = 1; s < nseg; ++s) {
          apply_layers<T, false>(rn, ab, L0 + (s - 1) * S, L0 + s * S, W, kRowStride, 1, ncols, nullptr, 0);
          copy_tile(ckpt + (s - 1) * tile_elems, W, n);
          __syncthreads();
        }
      }
      for (int s = nseg - 1; s >= 0; --s) {
        if (s == 0)
          init_identity(W, n, tc);
        else
          copy_tile(W, ckpt + (s - 1) * tile_elems, n);
        __syncthreads();
        const int l0 = L0 + s * S, l1 = L0 + min(Lr, (s + 1) * S);
        const int cbase = rn.net.layer_ptr[l0];
        apply_layers<T, true>(rn, ab, l0, l1, W, kRowStride, 1, ncols, diffs, cbase);
        reverse_layers<T>(rn, ab, l0, l1, H, ncols, diffs, cbase, part);
      }
    }
  }
}

// grad_alpha[b][c] = sum over g = 0, 1, ... of partial[b][g][c], in that order.
template <typename T>
__global__ void reduce_groups_kernel(int64_t B, int64_t groups, int64_t C, const T* __restrict__ partial,
                                     T* __restrict__ grad_alpha) {
  const int64_t total = B * C;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = idx / C, c = idx % C;
    const T* p = partial + b * groups * C + c;
    T acc = p[0];
    for (int64_t g = 1; g < groups; ++g) acc += p[g * C];
    grad_alpha[idx] = acc;
  }
}

void check_rows(const Rows& rows) {
  const NetView& net = rows.net;
  RELAXOPS_CHECK(net.n >= 1 && net.n <= (int64_t(1) << 26), "n must be in [1, 2^26] for the CUDA kernels");
  RELAXOPS_CHECK(net.num_layers >= 0 && net.num_comparators >= 0 && rows.C >= 0 && rows.C < (int64_t(1) << 31),
                 "network size out of range for the CUDA kernels");
}

}  // namespace

template <typename T>
void sortnet_values_forward_cuda(const Rows& rows, const RelaxParams& rp, int64_t B, const T* x, T* sorted, T* d,
                                 T* alpha, std::uintptr_t stream) {
  check_rows(rows);
  if (B <= 0) return;
  DeviceGuard guard(x);
  const int64_t smem = rows.n() * int64_t(sizeof(T));
  const bool use_shared = fits_shared(values_forward_kernel<T>, smem);
  values_forward_kernel<T><<<grid_blocks(B), block_threads(rows.n() / 2), use_shared ? smem : 0, as_stream(stream)>>>(
      rows, rp, B, x, sorted, d, alpha, use_shared);
  check_launch("sortnet values_forward");
}

template <typename T>
void sortnet_values_backward_cuda(const Rows& rows, const RelaxParams& rp, int64_t B, const T* grad_sorted,
                                  const T* grad_alpha, const T* d, const T* alpha, T* grad_x, std::uintptr_t stream) {
  check_rows(rows);
  if (B <= 0) return;
  DeviceGuard guard(grad_x);
  const int64_t smem = rows.n() * int64_t(sizeof(T));
  const bool use_shared = fits_shared(values_backward_kernel<T>, smem);
  values_backward_kernel<T><<<grid_blocks(B), block_threads(rows.n() / 2), use_shared ? smem : 0, as_stream(stream)>>>(
      rows, rp, B, grad_sorted, grad_alpha, d, alpha, grad_x, use_shared);
  check_launch("sortnet values_backward");
}

template <typename T>
void sortnet_rank_forward_cuda(const Rows& rows, const RelaxParams& rp, int64_t B, const T* x, T* rank, T* workspace,
                               int64_t workspace_elements, std::uintptr_t stream) {
  check_rows(rows);
  if (B <= 0) return;
  const int64_t need = B * rows.C;  // 0 for n = 1: no comparator, no workspace
  RELAXOPS_CHECK((need == 0 || workspace != nullptr) && workspace_elements >= need,
                 "rank_forward workspace too small: " + std::to_string(workspace_elements) + " elements, " +
                     std::to_string(need) + " (B * C) needed");
  DeviceGuard guard(x);
  const int64_t smem = rows.n() * int64_t(sizeof(T));
  const bool use_shared = fits_shared(rank_forward_kernel<T>, smem);
  rank_forward_kernel<T><<<grid_blocks(B), block_threads(rows.n() / 2), use_shared ? smem : 0, as_stream(stream)>>>(
      rows, rp, B, x, rank, workspace, use_shared);
  check_launch("sortnet rank_forward");
}

template <typename T>
void sortnet_rank_backward_cuda(const Rows& rows, const RelaxParams& rp, int64_t B, const T* x, const T* grad_rank,
                                T* grad_x, T* workspace, int64_t workspace_elements, std::uintptr_t stream) {
  check_rows(rows);
  if (B <= 0) return;
  const int64_t need = B * (3 * rows.C + rows.n());
  RELAXOPS_CHECK(workspace != nullptr && workspace_elements >= need,
                 "rank_backward workspace too small: " + std::to_string(workspace_elements) + " elements, " +
                     std::to_string(need) + " (B * (3 C + n)) needed");
  DeviceGuard guard(grad_x);
  const int64_t smem = 3 * rows.n() * int64_t(sizeof(T));
  const bool use_shared = fits_shared(rank_backward_kernel<T>, smem);
  rank_backward_kernel<T><<<grid_blocks(B), block_threads(rows.n() / 2), use_shared ? smem : 0, as_stream(stream)>>>(
      rows, rp, B, x, grad_rank, grad_x, workspace, use_shared);
  check_launch("sortnet rank_backward");
}

template <typename T>
void sortnet_matrix_forward_cuda(const Rows& rows, int64_t B, int64_t col_begin, const T* alpha, T* X,
                                 std::uintptr_t stream) {
  check_rows(rows);
  RELAXOPS_CHECK(col_begin >= 0 && col_begin < rows.n(), "col_begin must be in [0, n)");
  if (B <= 0) return;
  DeviceGuard guard(X);
  const int64_t tiles = (rows.n() - col_begin + kTile - 1) / kTile;
  const int64_t smem = rows.n() * kRowStride * int64_t(sizeof(T));
  const bool use_shared = fits_shared(matrix_forward_kernel<T>, smem);
  matrix_forward_kernel<T>
      <<<grid_blocks(B * tiles), block_threads(rows.n() / 2 * kTile), use_shared ? smem : 0, as_stream(stream)>>>(
          rows, B, int(col_begin), alpha, X, use_shared);
  check_launch("sortnet matrix_forward");
}

template <typename T>
int64_t sortnet_matrix_backward_workspace_bytes_cuda(const NetView& net, int64_t B, int64_t col_begin) {
  check_rows(Rows{net, 0, nullptr, nullptr, net.num_comparators});
  RELAXOPS_CHECK(col_begin >= 0 && col_begin < net.n, "col_begin must be in [0, n)");
  return make_plan<T>(net.n, net.num_layers, net.num_comparators, B, net.n - col_begin).bytes;
}

// The plan of (n, L, C) = (rows.n(), rows.net.num_layers, rows.C): with a RowSpec, the most layers of a row's network
// (sortnet.h, Rows), as in the caller's workspace query.
template <typename T>
void sortnet_matrix_backward_cuda(const Rows& rows, int64_t B, int64_t col_begin, const T* alpha, const T* grad_X,
                                  T* grad_alpha, void* workspace, int64_t workspace_bytes, std::uintptr_t stream) {
  check_rows(rows);
  RELAXOPS_CHECK(col_begin >= 0 && col_begin < rows.n(), "col_begin must be in [0, n)");
  if (B <= 0 || rows.C == 0) return;
  const BackwardPlan plan = make_plan<T>(rows.n(), rows.net.num_layers, rows.C, B, rows.n() - col_begin);
  RELAXOPS_CHECK(workspace != nullptr && workspace_bytes >= plan.bytes,
                 "matrix_backward workspace too small: " + std::to_string(workspace_bytes) + " bytes, " +
                     std::to_string(plan.bytes) + " needed");
  DeviceGuard guard(grad_alpha);
  char* ws = static_cast<char*>(workspace);
  T* partial = plan.groups > 1 ? reinterpret_cast<T*>(ws) : grad_alpha;
  T* scratch = reinterpret_cast<T*>(ws + plan.partial_bytes);
  const int64_t smem = 2 * rows.n() * kRowStride * int64_t(sizeof(T));
  const bool use_shared = fits_shared(matrix_backward_kernel<T>, smem);
  const cudaStream_t s = as_stream(stream);
  matrix_backward_kernel<T><<<int(plan.blocks), block_threads(rows.n() / 2 * kTile), use_shared ? smem : 0, s>>>(
      rows, plan, B, int(col_begin), alpha, grad_X, partial, scratch, use_shared);
  check_launch("sortnet matrix_backward");
  if (plan.groups > 1) {
    const int64_t total = B * rows.C;
    reduce_groups_kernel<T><<<grid_blocks((total + kMaxThreads - 1) / kMaxThreads), kMaxThreads, 0, s>>>(
        B, plan.groups, rows.C, partial, grad_alpha);
    check_launch("sortnet matrix_backward reduce_groups");
  }
}

#define RELAXOPS_INSTANTIATE_CUDA(T)                                                                                   \
  template void sortnet_values_forward_cuda<T>(const Rows&, const RelaxParams&, int64_t, const T*, T*, T*, T*,         \
                                               std::uintptr_t);                                                        \
  template void sortnet_values_backward_cuda<T>(const Rows&, const RelaxParams&, int64_t, const T*, const T*,          \
                                                const T*, const T*, T*, std::uintptr_t);                               \
  template void sortnet_matrix_forward_cuda<T>(const Rows&, int64_t, int64_t, const T*, T*, std::uintptr_t);           \
  template int64_t sortnet_matrix_backward_workspace_bytes_cuda<T>(const NetView&, int64_t, int64_t);                  \
  template void sortnet_matrix_backward_cuda<T>(const Rows&, int64_t, int64_t, const T*, const T*, T*, void*, int64_t, \
                                                std::uintptr_t);                                                       \
  template void sortnet_rank_forward_cuda<T>(const Rows&, const RelaxParams&, int64_t, const T*, T*, T*, int64_t,      \
                                             std::uintptr_t);                                                          \
  template void sortnet_rank_backward_cuda<T>(const Rows&, const RelaxParams&, int64_t, const T*, const T*, T*, T*,    \
                                              int64_t, std::uintptr_t);

RELAXOPS_INSTANTIATE_CUDA(float)
RELAXOPS_INSTANTIATE_CUDA(double)

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

std::string cuda_device_name(int device) {
  const int count = cuda_device_count();
  RELAXOPS_CHECK(device >= 0 && device < count, "device index " + std::to_string(device) + " out of range (" +
                                                    std::to_string(count) + " CUDA devices)");
  cudaDeviceProp prop;
  check_call(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  return std::string(prop.name);
}

int cuda_runtime_version() {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return v;
}

int cuda_driver_version() {
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return v;
}

}  // namespace relaxops
