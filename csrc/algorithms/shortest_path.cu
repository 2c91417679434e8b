// CUDA kernels of shortest_path.h: one thread block per grid (batch row); the threads stride over the cells, each
// computing its own cells from the previous state (gather form: no atomics, deterministic), rounds and traceback
// steps separated by __syncthreads(). The forward's padded maps and traceback state live in shared memory when they
// fit (kSharedLimit), else in a per-row slice of the global workspace; the backward's recomputed traceback states
// (K + 1 paths, K traces per row) always in the workspace.
//
//   forward:  kernel 1 the Bellman-Ford rounds (pi, jac) and, for "while", each row's own trip count (counts[b]);
//             kernel 2 ("while") steps[0] = max_b counts[b]; kernel 3 the traceback of K steps ("for": n_trace,
//             written to steps[0]).
//   backward: one kernel: the traceback recomputed and reversed, then the rounds reversed through jac.
//
// Not yet verified on a GPU (auto does not pick it before `python -m relaxops selftest` passes).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "../common/cuda_utils.cuh"
#include "shortest_path.h"

namespace relaxops {
namespace {

constexpr int kMaxThreads = 256;
constexpr int64_t kSharedLimit = 48 * 1024;  // bytes of dynamic shared memory a block may use without opting in

struct SpGrid {
  int64_t H, W, Q, HW, HQ, PP;
};

__host__ __device__ inline SpGrid sp_grid(const SpParams& P) {
  return {P.H, P.W, P.W + 2, P.H * P.W, P.H * (P.W + 2), (P.H + 2) * (P.W + 2)};
}

// Forward state of one row: 4 padded maps (d, d', trace, trace') and 2 planes [H, W] (path, the While mixture).
__host__ __device__ inline int64_t forward_row_elements(const SpGrid& g) { return 4 * g.PP + 2 * g.HW; }

// Backward workspace of one row: K + 1 paths [H, W], K padded traces, K + 1 pairs (P_i, c_i), 2 padded maps (the
// trace gradients), 8 planes (dL/dpi) and 5 planes (g_out's injections gp, S, two distance gradients, dL/dcost).
__host__ __device__ inline int64_t backward_row_elements(const SpGrid& g, int64_t K) {
  return (K + 1) * g.HW + K * g.PP + 2 * (K + 1) + 2 * g.PP + 13 * g.HW;
}

inline int threads_for(const SpGrid& g) {
  int t = 32;
  while (t < kMaxThreads && t < g.HW) t *= 2;
  return t;
}

// The rounds of one row (block): writes pi (and jac unless null) in their pitched layout, padding entries 0.
template <typename T>
__device__ void bellman_ford_block(const SpParams& P, const SpGrid& g, const T* cost, T* jac, T* pi, T* da, T* db) {
  const T beta = T(P.beta);
  for (int64_t i = threadIdx.x; i < g.PP; i += blockDim.x) da[i] = db[i] = T(kSpInf);
  __syncthreads();
  if (threadIdx.x == 0) da[g.Q + 1] = 0;
  // padding entries of the saved planes
  for (int64_t i = threadIdx.x; i < 2 * g.H; i += blockDim.x) {
    const int64_t e = (i >> 1) * g.Q + g.W + (i & 1);
    for (int k = 0; k < 8; ++k) {
      pi[k * g.HQ + e] = 0;
      if (jac)
        for (int64_t t = 0; t + 1 < P.n_iter; ++t) jac[(t * 8 + k) * g.HQ + e] = 0;
    }
  }
  __syncthreads();
  for (int64_t t = 1; t <= P.n_iter; ++t) {
    const bool last = t == P.n_iter;
    T* w = last ? pi : (jac ? jac + (t - 1) * 8 * g.HQ : nullptr);
    for (int64_t c = threadIdx.x; c < g.HW; c += blockDim.x) {
      const int64_t y = c / g.W, x = c - y * g.W, p = (y + 1) * g.Q + x + 1, o = y * g.Q + x;
      T n[8], e[8];
      T m = da[p + sp_dy(0) * g.Q + sp_dx(0)];
      for (int k = 0; k < 8; ++k) {
        n[k] = da[p + sp_dy(k) * g.Q + sp_dx(k)];
        m = n[k] < m ? n[k] : m;
      }
      T z = 0;
      for (int k = 0; k < 8; ++k) {
        e[k] = exp(beta * (m - n[k]));
        z += e[k];
      }
      const T inv = T(1) / z;
      if (last) {
        for (int k = 0; k < 8; ++k) w[k * g.HQ + o] = e[k] * inv;
        continue;
      }
      T s = 0;
      for (int k = 0; k < 8; ++k) {
        e[k] *= inv;
        s += e[k] * n[k];
      }
      db[p] = c == 0 ? T(0) : s + cost[c];  // the start is pinned
      if (w)
        for (int k = 0; k < 8; ++k) w[k * g.HQ + o] = e[k] * (T(1) - beta * (n[k] - s));
    }
    __syncthreads();
    T* tmp = da;
    da = db;
    db = tmp;
  }
}

// One traceback step of a block: path <- path T trace (own cells), next <- the moved mass (gather from the cells
// whose predecessor in direction k is this one). trace, next: padded with zero rings.
template <typename T>
__device__ void trace_step_block(const SpParams& P, const SpGrid& g, const T* pi, T* path, const T* trace, T* next) {
  const T hp = T(P.hamacher_p);
  for (int64_t c = threadIdx.x; c < g.HW; c += blockDim.x) {
    const int64_t y = c / g.W, x = c - y * g.W, p = (y + 1) * g.Q + x + 1;
    path[c] = sp_t_conorm<T>(P.t_conorm, hp, path[c], trace[p]);
    if (!next) continue;
    T v = 0;
    for (int k = 0; k < 8; ++k) {
      const int64_t ys = y - sp_dy(k), xs = x - sp_dx(k);
      if (ys >= 0 && ys < g.H && xs >= 0 && xs < g.W)
        v += trace[p - sp_dy(k) * g.Q - sp_dx(k)] * pi[k * g.HQ + ys * g.Q + xs];
    }
    next[p] = v;
  }
  __syncthreads();
}

template <typename T>
__device__ void trace_start_block(const SpGrid& g, T* path, T* ta, T* tb) {
  for (int64_t i = threadIdx.x; i < g.PP; i += blockDim.x) ta[i] = tb[i] = 0;
  for (int64_t i = threadIdx.x; i < g.HW; i += blockDim.x) path[i] = 0;
  __syncthreads();
  if (threadIdx.x == 0) ta[g.H * g.Q + g.W] = 1;  // (H - 1, W - 1)
  __syncthreads();
}

template <typename T>
__device__ T* row_state(const SpGrid& g, T* ws, int64_t b, bool shared) {
  extern __shared__ __align__(16) unsigned char sp_shared[];
  return shared ? reinterpret_cast<T*>(sp_shared) : ws + b * forward_row_elements(g);
}

template <typename T>
__global__ void bellman_ford_kernel(SpParams P, const T* cost, T* jac, T* pi, int32_t* counts, T* ws, bool shared) {
  const SpGrid g = sp_grid(P);
  for (int64_t b = blockIdx.x; b < P.B; b += gridDim.x) {
    T* st = row_state(g, ws, b, shared);
    T* rpi = pi + b * 8 * g.HQ;
    bellman_ford_block(P, g, cost + b * g.HW, jac ? jac + b * (P.n_iter - 1) * 8 * g.HQ : nullptr, rpi, st, st + g.PP);
    if (P.loop != kSpWhile) continue;
    // this row's own trip count: steps until P <= epsilon (0 for NaN), at most max_iter
    T* ta = st + 2 * g.PP;
    T* tb = st + 3 * g.PP;
    T* path = st + 4 * g.PP;
    trace_start_block(g, path, ta, tb);
    const T beta = T(P.beta), eps = T(P.epsilon);
    T Pc = sp_continuation(beta, T(0));
    int64_t i = 0;
    while (i < P.max_iter && Pc > eps) {  // uniform: every thread reads the same path[0]
      trace_step_block(P, g, rpi, path, ta, tb);
      T* tmp = ta;
      ta = tb;
      tb = tmp;
      Pc *= sp_continuation(beta, path[0]);
      ++i;
      __syncthreads();
    }
    if (threadIdx.x == 0) counts[b] = int32_t(i);
    __syncthreads();
  }
}

__global__ void max_count_kernel(int64_t B, const int32_t* counts, int32_t* steps) {
  __shared__ int32_t sh[1024];
  int32_t m = 0;
  for (int64_t b = threadIdx.x; b < B; b += blockDim.x) m = counts[b] > m ? counts[b] : m;
  sh[threadIdx.x] = m;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s && sh[threadIdx.x + s] > sh[threadIdx.x]) sh[threadIdx.x] = sh[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) steps[0] = sh[0];
}

template <typename T>
__global__ void traceback_kernel(SpParams P, const T* pi, T* out, int32_t* steps, T* ws, bool shared) {
  const SpGrid g = sp_grid(P);
  const int64_t K = P.loop == kSpFor ? P.n_trace : steps[0];
  if (P.loop == kSpFor && blockIdx.x == 0 && threadIdx.x == 0) steps[0] = int32_t(K);
  const bool is_while = P.loop == kSpWhile;
  const T beta = T(P.beta);
  for (int64_t b = blockIdx.x; b < P.B; b += gridDim.x) {
    T* st = row_state(g, ws, b, shared);
    T* ta = st + 2 * g.PP;
    T* tb = st + 3 * g.PP;
    T* path = st + 4 * g.PP;
    T* acc = path + g.HW;
    const T* rpi = pi + b * 8 * g.HQ;
    trace_start_block(g, path, ta, tb);
    T Pc = sp_continuation(beta, T(0));
    for (int64_t c = threadIdx.x; c < g.HW; c += blockDim.x) acc[c] = (1 - Pc) * path[c];
    for (int64_t s = 1; s <= K; ++s) {
      trace_step_block(P, g, rpi, path, ta, s < K ? tb : nullptr);
      T* tmp = ta;
      ta = tb;
      tb = tmp;
      if (is_while) {
        const T Pn = Pc * sp_continuation(beta, path[0]), w = Pc - Pn;
        for (int64_t c = threadIdx.x; c < g.HW; c += blockDim.x) acc[c] += w * path[c];
        Pc = Pn;
        __syncthreads();  // path[0] is read by every thread before the next step writes it
      }
    }
    T* o = out + b * g.HW;
    for (int64_t c = threadIdx.x; c < g.HW; c += blockDim.x) o[c] = is_while ? acc[c] + Pc * path[c] : path[c];
    __syncthreads();
  }
}

template <typename T>
__global__ void backward_kernel(SpParams P, int64_t K, const T* grad_out, const T* jac, const T* pi, T* grad_cost,
                                T* ws) {
  __shared__ T sh[kMaxThreads];
  const SpGrid g = sp_grid(P);
  const bool is_while = P.loop == kSpWhile;
  const T beta = T(P.beta), hp = T(P.hamacher_p);
  for (int64_t b = blockIdx.x; b < P.B; b += gridDim.x) {
    T* paths = ws + b * backward_row_elements(g, K);
    T* traces = paths + (K + 1) * g.HW;
    T* Ps = traces + K * g.PP;
    T* cs = Ps + (K + 1);
    T* gt = cs + (K + 1);
    T* gt2 = gt + g.PP;
    T* gpi = gt2 + g.PP;
    T* gp = gpi + 8 * g.HW;
    T* S = gp + g.HW;
    T* gd = S + g.HW;
    T* gd2 = gd + g.HW;
    T* gc = gd2 + g.HW;
    const T* gq = grad_out + b * g.HW;
    const T* rpi = pi + b * 8 * g.HQ;
    const T* rjac = jac ? jac + b * (P.n_iter - 1) * 8 * g.HQ : nullptr;

    // recompute the traceback, keeping every state (gt: scratch here; K = 0 keeps no trace)
    trace_start_block(g, paths, K > 0 ? traces : gt, gt);
    for (int64_t i = 1; i <= K; ++i) {
      T* pa = paths + i * g.HW;
      for (int64_t c = threadIdx.x; c < g.HW; c += blockDim.x) pa[c] = pa[c - g.HW];
      __syncthreads();
      if (i < K)  // zero ring of trace^i
        for (int64_t q = threadIdx.x; q < g.PP; q += blockDim.x) traces[i * g.PP + q] = 0;
      __syncthreads();
      trace_step_block(P, g, rpi, pa, traces + (i - 1) * g.PP, i < K ? traces + i * g.PP : nullptr);
    }
    if (threadIdx.x == 0) {
      cs[0] = sp_continuation(beta, T(0));
      Ps[0] = cs[0];
      for (int64_t i = 1; i <= K; ++i) {
        cs[i] = sp_continuation(beta, paths[i * g.HW]);
        Ps[i] = Ps[i - 1] * cs[i];
      }
    }
    for (int64_t q = threadIdx.x; q < g.PP; q += blockDim.x) gt[q] = gt2[q] = 0;
    __syncthreads();

    // reverse traceback (own cells): gp = dL/dpath^i, gt = dL/dtrace^i (padded, zero ring)
    const T w_last = is_while && K > 0 ? (Ps[K - 1] - Ps[K]) + Ps[K] : T(1);
    for (int64_t c = threadIdx.x; c < g.HW; c += blockDim.x) {
      gp[c] = w_last * gq[c];
      for (int k = 0; k < 8; ++k) gpi[k * g.HW + c] = 0;
    }
    T G_next = 0;
    for (int64_t i = K; i >= 1; --i) {
      const T* a = paths + (i - 1) * g.HW;
      const T* tr = traces + (i - 1) * g.PP;
      for (int64_t c = threadIdx.x; c < g.HW; c += blockDim.x) {
        const int64_t y = c / g.W, x = c - y * g.W, p = (y + 1) * g.Q + x + 1, o = y * g.Q + x;
        const T bt = tr[p];
        T acc = 0;
        for (int k = 0; k < 8; ++k) {
          const T gk = gt[p + sp_dy(k) * g.Q + sp_dx(k)];
          acc += gk * rpi[k * g.HQ + o];
          gpi[k * g.HW + c] += gk * bt;
        }
        T da, db;
        sp_t_conorm_grad<T>(P.t_conorm, hp, a[c], bt, &da, &db);
        gt2[p] = acc + gp[c] * db;
        gp[c] *= da;
      }
      __syncthreads();
      T* tmp = gt;
      gt = gt2;
      gt2 = tmp;
      const int64_t j = i - 1;
      if (is_while && j >= 1) {
        const T* pj = paths + j * g.HW;
        const T* pn = paths + i * g.HW;
        T part = 0;
        for (int64_t c = threadIdx.x; c < g.HW; c += blockDim.x) part += gq[c] * (pn[c] - pj[c]);
        const T G = block_sum(part, sh) + G_next * cs[i];
        G_next = G;
        const T w = Ps[j - 1] - Ps[j];
        for (int64_t c = threadIdx.x; c < g.HW; c += blockDim.x) {
          gp[c] += w * gq[c];
          if (c == 0) gp[0] += G * Ps[j - 1] * cs[j] * (1 - cs[j]) * -beta;
        }
        __syncthreads();
      }
    }

    // the last round: dL/dd^{n_iter-1}[c] = sum over the cells s with c = s + off_k of -beta pi_k(s) (gpi_k(s) - S(s))
    for (int64_t c = threadIdx.x; c < g.HW; c += blockDim.x) {
      const int64_t y = c / g.W, x = c - y * g.W, o = y * g.Q + x;
      T s = 0;
      for (int k = 0; k < 8; ++k) s += rpi[k * g.HQ + o] * gpi[k * g.HW + c];
      S[c] = s;
      gc[c] = 0;
    }
    __syncthreads();
    if (P.n_iter > 1) {
      for (int64_t c = threadIdx.x; c < g.HW; c += blockDim.x) {
        const int64_t y = c / g.W, x = c - y * g.W;
        T v = 0;
        for (int k = 0; k < 8; ++k) {
          const int64_t ys = y - sp_dy(k), xs = x - sp_dx(k);
          if (ys < 0 || ys >= g.H || xs < 0 || xs >= g.W) continue;
          const int64_t s = ys * g.W + xs;
          v += -beta * rpi[k * g.HQ + ys * g.Q + xs] * (gpi[k * g.HW + s] - S[s]);
        }
        gd[c] = c == 0 ? T(0) : v;  // d^{n_iter-1}[start] is pinned
      }
      __syncthreads();
      // rounds n_iter - 1 .. 1: gd = dL/dd^t (0 at the start)
      for (int64_t t = P.n_iter - 1; t >= 1; --t) {
        const T* J = rjac + (t - 1) * 8 * g.HQ;
        for (int64_t c = threadIdx.x; c < g.HW; c += blockDim.x) {
          gc[c] += gd[c];
          if (t == 1) continue;
          const int64_t y = c / g.W, x = c - y * g.W;
          T v = 0;
          for (int k = 0; k < 8; ++k) {
            const int64_t ys = y - sp_dy(k), xs = x - sp_dx(k);
            if (ys < 0 || ys >= g.H || xs < 0 || xs >= g.W) continue;
            v += gd[ys * g.W + xs] * J[k * g.HQ + ys * g.Q + xs];
          }
          gd2[c] = c == 0 ? T(0) : v;
        }
        __syncthreads();
        T* tmp = gd;
        gd = gd2;
        gd2 = tmp;
      }
    }
    T* o = grad_cost + b * g.HW;
    for (int64_t c = threadIdx.x; c < g.HW; c += blockDim.x) o[c] = gc[c];
    __syncthreads();
  }
}

template <typename T>
bool forward_in_shared(const SpGrid& g) {
  return forward_row_elements(g) * int64_t(sizeof(T)) <= kSharedLimit;
}

}  // namespace

int64_t shortest_path_cuda_workspace(const SpParams& P, int64_t K, bool backward) {
  sp_check_params(P);
  const SpGrid g = sp_grid(P);
  if (backward) return P.B * backward_row_elements(g, K);
  // the forward's state in global memory only where it does not fit in shared memory (float: the smaller bound)
  return forward_row_elements(g) * 8 <= kSharedLimit ? 0 : P.B * forward_row_elements(g);
}

template <typename T>
void shortest_path_forward_cuda(const SpParams& P, const T* cost, T* out, T* jac, T* pi, int32_t* steps,
                                int32_t* counts, T* workspace, std::uintptr_t stream) {
  sp_check_params(P);
  if (P.B == 0) return;
  DeviceGuard guard(cost);
  const SpGrid g = sp_grid(P);
  const bool shared = forward_row_elements(g) * 8 <= kSharedLimit;  // as shortest_path_cuda_workspace
  RELAXOPS_CHECK(shared || workspace != nullptr, "shortest_path_forward: a workspace is required for this grid");
  const size_t smem = shared ? size_t(forward_row_elements(g)) * sizeof(T) : 0;
  const cudaStream_t s = as_stream(stream);
  const int threads = threads_for(g), blocks = grid_blocks(P.B);
  bellman_ford_kernel<T><<<blocks, threads, smem, s>>>(P, cost, jac, pi, counts, workspace, shared);
  check_launch("shortest_path_bellman_ford");
  if (P.loop == kSpWhile) {
    max_count_kernel<<<1, 1024, 0, s>>>(P.B, counts, steps);
    check_launch("shortest_path_max_count");
  }
  traceback_kernel<T><<<blocks, threads, smem, s>>>(P, pi, out, steps, workspace, shared);
  check_launch("shortest_path_traceback");
}

template <typename T>
void shortest_path_backward_cuda(const SpParams& P, int64_t K, const T* grad_out, const T* jac, const T* pi,
                                 T* grad_cost, T* workspace, std::uintptr_t stream) {
  sp_check_params(P);
  sp_check_steps(P, K);
  RELAXOPS_CHECK(P.n_iter == 1 || jac != nullptr, "shortest_path_backward: jac is required for n_iter > 1");
  if (P.B == 0) return;
  RELAXOPS_CHECK(workspace != nullptr, "shortest_path_backward: a workspace is required");
  DeviceGuard guard(grad_out);
  const SpGrid g = sp_grid(P);
  backward_kernel<T>
      <<<grid_blocks(P.B), threads_for(g), 0, as_stream(stream)>>>(P, K, grad_out, jac, pi, grad_cost, workspace);
  check_launch("shortest_path_backward");
}

#define RELAXOPS_INSTANTIATE_SHORTEST_PATH_CUDA(T)                                                             \
  template void shortest_path_forward_cuda<T>(const SpParams&, const T*, T*, T*, T*, int32_t*, int32_t*, T*,   \
                                              std::uintptr_t);                                                 \
  template void shortest_path_backward_cuda<T>(const SpParams&, int64_t, const T*, const T*, const T*, T*, T*, \
                                               std::uintptr_t);

RELAXOPS_INSTANTIATE_SHORTEST_PATH_CUDA(float)
RELAXOPS_INSTANTIATE_SHORTEST_PATH_CUDA(double)

}  // namespace relaxops
