// Training kernels of the convolutional logic layer on CUDA (math, node order and layouts in conv.h).
//
// * forward: one thread per (b, k, output position), positions fastest (consecutive threads read consecutive
//   input columns for stride 1). The tree is evaluated from its L leaves in leaf order with a stack of one
//   partial value per level (at most d + 1 entries): after pushing leaf l, every completed pair on top of the
//   stack is combined into its parent. No per-node storage, so any depth the CPU kernel accepts works.
// * backward, kernel 1 (leaf gradients and coefficient partial sums): one block per (b, k, tile of positions),
//   one thread per position. Every thread walks the tree from the root down in the same (depth-first) order, so
//   the walk is uniform over the block; at each node it re-evaluates the node's two child subtrees (the same
//   stack evaluation as the forward: L d leaf reads a position in all, O(d) memory), then
//     grad_coef[k, n] += g [1, a, b, a b],   g_A = g (c1 + c3 b),   g_B = g (c2 + c3 a).
//   The 4 node sums are reduced over the block in a fixed order (warp shuffle tree, then the warps' sums in
//   order) into partial[(b k tile), n, 4]; at the leaves, the gradients g_A / g_B go to the workspace
//   leaf_grad[b, k, l, Ho Wo] (when the input gradient is wanted).
// * backward, kernel 2 (coefficient gradient): one warp per (k, n); lanes stride over the partial rows (b, tile)
//   in order, then a shuffle tree: a fixed order, no atomics, deterministic.
// * backward, kernel 3 (input gradient): one thread per input element (b, c, iy, ix); a gather over the CSR list
//   of channel c in its order (conv.h), reading the one leaf gradient each entry contributes: deterministic.
// Data T in {float, double, __half, __nv_bfloat16}; arithmetic, coefficients, workspace in A = double for double,
// else float.
#include <cuda_runtime.h>

#include "../common/cuda_half.cuh"
#include "../common/cuda_utils.cuh"
#include "conv.h"
#include "logic.h"

namespace relaxops {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxDepth = 16;  // L <= 65536 (make_logic_conv_params)

// First node of level t >= 1 (level 1: the L / 2 nodes above the leaves).
__host__ __device__ inline int64_t level_offset(int64_t L, int t) { return L - (L >> (t - 1)); }

// What one thread needs to read its leaves: tree k of batch item b at output position (oy, ox).
template <typename T>
struct TreeSite {
  const T* xb;            // x + b C_in H W
  const int64_t* leaves;  // leaves + 3 k L
  int64_t iy0, ix0;       // oy sh - ph, ox sw - pw
};

template <typename A, typename T>
__host__ __device__ inline A leaf_value(const LogicConvParams& p, const TreeSite<T>& s, int64_t l) {
  const int64_t* lf = s.leaves + 3 * l;
  const int64_t iy = s.iy0 + lf[1], ix = s.ix0 + lf[2];
  if (iy < 0 || iy >= p.H || ix < 0 || ix >= p.W) return A(0);
  return load_as<A>(s.xb + (lf[0] * p.H + iy) * p.W + ix);
}

// The noise of the nodes of one tree at one position (logic.h): node n's index is base + n, base = flat position
// times L - 1.
template <typename A>
struct NodeNoise {
  uint32_t seed_hash;
  A scale;
  int64_t base;
};

// Value of node i of level t (t = 0: leaf i) of the tree: its subtree evaluated from its 2^t leaves with a stack;
// every node's output act(z) for an activation or noise (conv.h).
// (Host and device: the host side lets a CPU-only build check this function against the C++ CPU kernel.)
template <typename A, int kAct = kLogicActNone, bool kNoise = false, typename T>
__host__ __device__ A subtree_value(const LogicConvParams& p, const TreeSite<T>& s, const A* __restrict__ ck, int t,
                                    int64_t i, const NodeNoise<A>& nz = NodeNoise<A>{0, A(0), 0}) {
  A stack[kMaxDepth + 1];
  int top = 0;
  const int64_t first = i << t, last = (i + 1) << t;
  for (int64_t l = first; l < last; ++l) {
    A v = leaf_value<A>(p, s, l);
    int64_t idx = l;
    int lev = 0;
    while (lev < t && (idx & 1)) {  // v is a B input: combine with the A input on the stack
      const A a = stack[--top];
      const int64_t node = level_offset(p.L, lev + 1) + (idx >> 1);
      const A* c = ck + 4 * node;
      v = c[0] + c[1] * a + (c[2] + c[3] * a) * v;
      if constexpr (kAct != kLogicActNone || kNoise)
        v = logic_act<kAct>(logic_preact<kNoise>(v, nz.seed_hash, nz.scale, nz.base + node));
      ++lev;
      idx >>= 1;
    }
    stack[top++] = v;
  }
  return stack[0];
}

template <typename T, typename A, int kAct, bool kNoise>
__global__ void conv_forward_kernel(LogicConvParams p, const T* __restrict__ x, const int64_t* __restrict__ leaves,
                                    const A* __restrict__ coef, T* __restrict__ y, int depth, NodeNoise<A> nz) {
  const int64_t P = p.Ho * p.Wo, n = p.B * p.C_out * P;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t pos = t % P, bk = t / P, k = bk % p.C_out, b = bk / p.C_out;
    const int64_t oy = pos / p.Wo, ox = pos % p.Wo;
    const TreeSite<T> s{x + b * p.C_in * p.H * p.W, leaves + 3 * k * p.L, oy * p.sh - p.ph, ox * p.sw - p.pw};
    nz.base = t * (p.L - 1);  // t = bk P + pos
    y[t] = store_as<T>(subtree_value<A, kAct, kNoise>(p, s, coef + 4 * k * (p.L - 1), depth, 0, nz));
  }
}

// The sums of 4 values over the block in a fixed order (blockDim a multiple of 32, <= 1024); valid in thread 0.
template <typename A>
__device__ inline void block_sum4(A (&v)[4], A (*sh)[32]) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
#pragma unroll
  for (int j = 0; j < 4; ++j)
    for (int off = 16; off > 0; off /= 2) v[j] += __shfl_down_sync(0xffffffffu, v[j], off);
  if (lane == 0)
#pragma unroll
    for (int j = 0; j < 4; ++j) sh[j][warp] = v[j];
  __syncthreads();
  if (threadIdx.x == 0)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      A acc = sh[j][0];
      for (int w = 1; w < warps; ++w) acc += sh[j][w];
      v[j] = acc;
    }
  __syncthreads();  // sh is reused by the next node
}

// Block (b k, tile) of `tiles` per (b, k); blockDim positions a tile. partial [B tiles, C_out, L - 1, 4] (row
// b tiles + tile) or null; leaf_grad [B, C_out, L, P] or null. With an activation, a node's gradient g (of its
// output) is first multiplied by act'(z), z recomputed from the children.
template <typename T, typename A, int kAct, bool kNoise>
__global__ void conv_backward_tree_kernel(LogicConvParams p, const T* __restrict__ x,
                                          const int64_t* __restrict__ leaves, const A* __restrict__ coef,
                                          const T* __restrict__ grad_y, int depth, int64_t tiles,
                                          A* __restrict__ partial, A* __restrict__ leaf_grad, NodeNoise<A> nz) {
  __shared__ A sh[4][32];
  const int64_t P = p.Ho * p.Wo, L = p.L;
  for (int64_t blk = blockIdx.x; blk < p.B * p.C_out * tiles; blk += gridDim.x) {  // uniform over the block
    const int64_t tile = blk % tiles, bk = blk / tiles, k = bk % p.C_out, b = bk / p.C_out;
    const int64_t pos = tile * blockDim.x + threadIdx.x;
    const bool valid = pos < P;
    const int64_t oy = valid ? pos / p.Wo : 0, ox = valid ? pos % p.Wo : 0;
    const TreeSite<T> s{x + b * p.C_in * p.H * p.W, leaves + 3 * k * L, oy * p.sh - p.ph, ox * p.sw - p.pw};
    const A* ck = coef + 4 * k * (L - 1);
    A* rows = partial != nullptr ? partial + ((b * tiles + tile) * p.C_out + k) * (L - 1) * 4 : nullptr;
    A* lg = leaf_grad != nullptr ? leaf_grad + bk * L * P : nullptr;
    nz.base = (bk * P + pos) * (L - 1);
    // Depth-first walk from the root; the stack holds (level, index, gradient) of the nodes still to visit.
    int st_t[kMaxDepth + 1];
    int64_t st_i[kMaxDepth + 1];
    A st_g[kMaxDepth + 1];
    int top = 0;
    st_t[0] = depth;
    st_i[0] = 0;
    st_g[0] = valid ? load_as<A>(grad_y + bk * P + pos) : A(0);
    top = 1;
    while (top > 0) {
      --top;
      const int t = st_t[top];
      const int64_t i = st_i[top];
      A g = st_g[top];
      const int64_t node = level_offset(L, t) + i;
      A a = 0, bv = 0;
      if (valid) {
        a = subtree_value<A, kAct, kNoise>(p, s, ck, t - 1, 2 * i, nz);
        bv = subtree_value<A, kAct, kNoise>(p, s, ck, t - 1, 2 * i + 1, nz);
      }
      const A* c = ck + 4 * node;
      if constexpr (kAct != kLogicActNone)
        g *= logic_act_grad<kAct>(
            logic_preact<kNoise>(c[0] + c[1] * a + (c[2] + c[3] * a) * bv, nz.seed_hash, nz.scale, nz.base + node));
      const A ga = g * (c[1] + c[3] * bv), gb = g * (c[2] + c[3] * a);
      if (rows != nullptr) {
        const A gA = g * a;
        A v[4] = {g, gA, g * bv, gA * bv};
        if (!valid) v[0] = v[1] = v[2] = v[3] = A(0);  // no 0 * inf / NaN from a position that does not exist
        block_sum4(v, sh);
        if (threadIdx.x == 0)
          for (int j = 0; j < 4; ++j) rows[4 * node + j] = v[j];
      }
      if (t == 1) {
        if (lg != nullptr && valid) {
          lg[(2 * i) * P + pos] = ga;
          lg[(2 * i + 1) * P + pos] = gb;
        }
      } else {  // the A child is visited first
        st_t[top] = t - 1;
        st_i[top] = 2 * i + 1;
        st_g[top] = gb;
        st_t[top + 1] = t - 1;
        st_i[top + 1] = 2 * i;
        st_g[top + 1] = ga;
        top += 2;
      }
    }
  }
}

// grad_coef [C_out (L - 1), 4] = sum over the rows r in [0, R) of partial [R, C_out (L - 1), 4]; one warp per node.
template <typename A>
__global__ void conv_coef_reduce_kernel(int64_t R, int64_t nodes, const A* __restrict__ partial,
                                        A* __restrict__ grad_coef) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t j = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32; j < nodes; j += warps) {
    A s[4] = {0, 0, 0, 0};
    for (int64_t r = lane; r < R; r += 32)
      for (int q = 0; q < 4; ++q) s[q] += partial[(r * nodes + j) * 4 + q];
    for (int q = 0; q < 4; ++q)
      for (int off = 16; off > 0; off /= 2) s[q] += __shfl_down_sync(0xffffffffu, s[q], off);
    if (lane == 0)
      for (int q = 0; q < 4; ++q) grad_coef[4 * j + q] = s[q];
  }
}

// grad_x[b, c, iy, ix] = sum over the entries e = k L + l of channel c (CSR order) of leaf_grad[b, e, oy, ox] at
// the output position (oy, ox) whose leaf e reads (iy, ix), if there is one.
template <typename T, typename A>
__global__ void conv_input_grad_kernel(LogicConvParams p, const int64_t* __restrict__ leaves,
                                       const int64_t* __restrict__ csr_start, const int64_t* __restrict__ csr_entry,
                                       const A* __restrict__ leaf_grad, T* __restrict__ grad_x) {
  const int64_t HW = p.H * p.W, P = p.Ho * p.Wo, n = p.B * p.C_in * HW;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ix = t % p.W, iy = (t / p.W) % p.H, bc = t / HW, c = bc % p.C_in, b = bc / p.C_in;
    const A* lgb = leaf_grad + b * p.C_out * p.L * P;
    A acc = 0;
    for (int64_t q = csr_start[c]; q < csr_start[c + 1]; ++q) {
      const int64_t e = csr_entry[q];
      const int64_t ny = iy + p.ph - leaves[3 * e + 1], nx = ix + p.pw - leaves[3 * e + 2];
      if (ny < 0 || nx < 0 || ny % p.sh != 0 || nx % p.sw != 0) continue;
      const int64_t oy = ny / p.sh, ox = nx / p.sw;
      if (oy >= p.Ho || ox >= p.Wo) continue;
      acc += lgb[e * P + oy * p.Wo + ox];
    }
    grad_x[t] = store_as<T>(acc);
  }
}

int blocks_for(int64_t items) { return grid_blocks((items + kThreads - 1) / kThreads); }

int depth_of(int64_t L) {
  int d = 0;
  while ((int64_t(1) << d) < L) ++d;
  return d;
}

// Threads a block of the tree kernel: the positions of one (b, k), rounded up to a power of two in [32, 256].
int tree_block(const LogicConvParams& p) {
  int bs = 32;
  while (bs < kThreads && bs < p.Ho * p.Wo) bs *= 2;
  return bs;
}

int64_t acc_size(int dtype) { return dtype == 1 ? 8 : 4; }

}  // namespace

int64_t logic_conv_backward_cuda_workspace(int dtype, const LogicConvParams& p, bool need_x, bool need_w) {
  RELAXOPS_CHECK(dtype >= 0 && dtype <= 3, "dtype must be 0..3 (float32, float64, float16, bfloat16)");
  const int64_t P = p.Ho * p.Wo, tiles = (P + tree_block(p) - 1) / tree_block(p);
  int64_t elems = 0;
  if (need_x) elems += p.B * p.C_out * p.L * P;                // leaf_grad
  if (need_w) elems += p.B * p.C_out * tiles * (p.L - 1) * 4;  // partial
  return elems * acc_size(dtype);
}

namespace {

// act 0, seed < 0: the plain layer.
void conv_forward(int dtype, const LogicConvParams& p, const void* x, const int64_t* leaves, const void* coef, int act,
                  int64_t seed, double noise_scale, void* y, std::uintptr_t stream) {
  const int64_t n = p.B * p.C_out * p.Ho * p.Wo;
  if (n == 0) return;
  DeviceGuard guard(y);
  by_dtype(dtype, [&](auto t_tag, auto a_tag) {
    using T = decltype(t_tag);
    using A = decltype(a_tag);
    const NodeNoise<A> nz{logic_hash32(uint32_t(seed)), A(noise_scale), 0};
    logic_with_act(act, seed >= 0, [&](auto kact, auto knoise) {
      conv_forward_kernel<T, A, decltype(kact)::value, decltype(knoise)::value>
          <<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(
              p, static_cast<const T*>(x), leaves, static_cast<const A*>(coef), static_cast<T*>(y), depth_of(p.L), nz);
    });
  });
  check_launch("logic conv forward");
}

void conv_backward(int dtype, const LogicConvParams& p, const void* x, const int64_t* leaves, const void* coef, int act,
                   int64_t seed, double noise_scale, const void* grad_y, const int64_t* csr_start,
                   const int64_t* csr_entry, void* grad_x, void* grad_coef, void* workspace, std::uintptr_t stream) {
  if (grad_x == nullptr && grad_coef == nullptr) return;
  DeviceGuard guard(grad_x != nullptr ? grad_x : grad_coef);
  cudaStream_t s = as_stream(stream);
  const int64_t P = p.Ho * p.Wo, bs = tree_block(p), tiles = (P + bs - 1) / bs;
  const int64_t nodes = p.C_out * (p.L - 1);
  by_dtype(dtype, [&](auto t_tag, auto a_tag) {
    using T = decltype(t_tag);
    using A = decltype(a_tag);
    A* leaf_grad = grad_x != nullptr ? static_cast<A*>(workspace) : nullptr;
    A* partial =
        grad_coef != nullptr ? static_cast<A*>(workspace) + (grad_x != nullptr ? p.B * p.C_out * p.L * P : 0) : nullptr;
    if (grad_coef != nullptr && (p.B == 0 || P == 0)) {
      check_call(cudaMemsetAsync(grad_coef, 0, size_t(4 * nodes) * sizeof(A), s), "cudaMemsetAsync");
      partial = nullptr;
      if (grad_x == nullptr) return;
    }
    if (p.B * p.C_out * tiles > 0) {
      const NodeNoise<A> nz{logic_hash32(uint32_t(seed)), A(noise_scale), 0};
      logic_with_act(act, seed >= 0, [&](auto kact, auto knoise) {
        conv_backward_tree_kernel<T, A, decltype(kact)::value, decltype(knoise)::value>
            <<<grid_blocks(p.B * p.C_out * tiles), int(bs), 0, s>>>(
                p, static_cast<const T*>(x), leaves, static_cast<const A*>(coef), static_cast<const T*>(grad_y),
                depth_of(p.L), tiles, partial, leaf_grad, nz);
      });
      check_launch("logic conv backward (tree)");
    }
    if (partial != nullptr && nodes > 0) {
      conv_coef_reduce_kernel<A><<<grid_blocks((nodes + kThreads / 32 - 1) / (kThreads / 32)), kThreads, 0, s>>>(
          p.B * tiles, nodes, partial, static_cast<A*>(grad_coef));
      check_launch("logic conv coefficient gradient");
    }
    if (grad_x != nullptr && p.B > 0) {
      conv_input_grad_kernel<T, A><<<blocks_for(p.B * p.C_in * p.H * p.W), kThreads, 0, s>>>(
          p, leaves, csr_start, csr_entry, leaf_grad, static_cast<T*>(grad_x));
      check_launch("logic conv input gradient");
    }
  });
}

}  // namespace

void logic_conv_forward_cuda(int dtype, const LogicConvParams& p, const void* x, const int64_t* leaves,
                             const void* coef, void* y, std::uintptr_t stream) {
  conv_forward(dtype, p, x, leaves, coef, kLogicActNone, -1, 0.0, y, stream);
}

void logic_conv_backward_cuda(int dtype, const LogicConvParams& p, const void* x, const int64_t* leaves,
                              const void* coef, const void* grad_y, const int64_t* csr_start, const int64_t* csr_entry,
                              void* grad_x, void* grad_coef, void* workspace, std::uintptr_t stream) {
  conv_backward(dtype, p, x, leaves, coef, kLogicActNone, -1, 0.0, grad_y, csr_start, csr_entry, grad_x, grad_coef,
                workspace, stream);
}

void logic_conv_forward_act_cuda(int dtype, const LogicConvParams& p, const void* x, const int64_t* leaves,
                                 const void* coef, int act, int64_t seed, double noise_scale, void* y,
                                 std::uintptr_t stream) {
  conv_forward(dtype, p, x, leaves, coef, act, seed, noise_scale, y, stream);
}

void logic_conv_backward_act_cuda(int dtype, const LogicConvParams& p, const void* x, const int64_t* leaves,
                                  const void* coef, int act, int64_t seed, double noise_scale, const void* grad_y,
                                  const int64_t* csr_start, const int64_t* csr_entry, void* grad_x, void* grad_coef,
                                  void* workspace, std::uintptr_t stream) {
  conv_backward(dtype, p, x, leaves, coef, act, seed, noise_scale, grad_y, csr_start, csr_entry, grad_x, grad_coef,
                workspace, stream);
}

}  // namespace relaxops
