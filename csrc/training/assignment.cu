// CUDA kernel of assignment.h: one block per item (blocks loop over items beyond the grid), the shortest augmenting
// path algorithm with dual potentials in double, no initialisation: rows are inserted in index order, each by a
// Dijkstra search whose relaxation and minimum over the columns run on the block's threads.
//
// Why it is exact: the search keeps the invariant of assignment.h (reduced costs c - u - v >= 0 everywhere, 0 on
// matched edges). The block reduction returns a column of exactly minimal tentative distance (a comparison-only
// minimum, ties by (free column first, lowest index), so it is also deterministic), which is all Dijkstra needs;
// the potential update and the flip along the path are the sequential algorithm's, done by one thread or by
// disjoint threads. After d insertions every row is matched and complementary slackness holds: the matching is a
// maximum-weight one (up to the rounding of double sums, as the CPU kernel).
//
// Workspace layout (bytes, B items of d): u, v, sp double [B, d] each; path, row4col, col4row int32 [B, d] each;
// row and column scanned flags uint8 [B, d] each (assignment_cuda_workspace).
#include <cuda_runtime.h>

#include <cstdint>

#include "../common/cuda_utils.cuh"
#include "assignment.h"

namespace relaxops {
namespace {

constexpr int kThreads = 256;  // a power of two (the reduction halves it)

// a before b in the search order: smaller distance, then a free column, then the lower index
__device__ inline bool key_less(double da, int fa, int ja, double db, int fb, int jb) {
  if (da != db) return da < db;
  if (fa != fb) return fa < fb;
  return ja < jb;
}

template <typename T>
__global__ void assignment_kernel(int64_t B, int64_t d, const T* __restrict__ theta, int64_t* __restrict__ perm,
                                  unsigned char* __restrict__ ws) {
  __shared__ double s_val[kThreads];
  __shared__ int s_busy[kThreads];
  __shared__ int s_col[kThreads];
  __shared__ int s_row, s_sink;
  __shared__ double s_min;
  const double inf = __longlong_as_double(0x7ff0000000000000LL);
  const int tid = threadIdx.x;
  double* u_all = reinterpret_cast<double*>(ws);
  double* v_all = u_all + B * d;
  double* sp_all = v_all + B * d;
  int32_t* path_all = reinterpret_cast<int32_t*>(sp_all + B * d);
  int32_t* r4c_all = path_all + B * d;
  int32_t* c4r_all = r4c_all + B * d;
  unsigned char* rdone_all = reinterpret_cast<unsigned char*>(c4r_all + B * d);
  unsigned char* cdone_all = rdone_all + B * d;

  for (int64_t b = blockIdx.x; b < B; b += gridDim.x) {
    const T* th = theta + b * d * d;
    double* u = u_all + b * d;
    double* v = v_all + b * d;
    double* sp = sp_all + b * d;
    int32_t* path = path_all + b * d;
    int32_t* row4col = r4c_all + b * d;
    int32_t* col4row = c4r_all + b * d;
    unsigned char* rdone = rdone_all + b * d;
    unsigned char* cdone = cdone_all + b * d;
    for (int64_t k = tid; k < d; k += blockDim.x) {
      u[k] = 0, v[k] = 0;
      row4col[k] = -1, col4row[k] = -1;
    }
    __syncthreads();
    for (int64_t f = 0; f < d; ++f) {
      for (int64_t k = tid; k < d; k += blockDim.x) {
        sp[k] = inf;
        rdone[k] = 0, cdone[k] = 0;
      }
      if (tid == 0) s_row = int(f), s_sink = -1, s_min = 0.0;
      __syncthreads();
      while (true) {
        const int i = s_row;
        const double base = s_min - u[i];
        __syncthreads();  // every thread has read s_row and s_min before thread 0 rewrites them
        if (tid == 0) rdone[i] = 1;
        double best = inf;
        int best_busy = 2, best_col = 0x7fffffff;
        for (int64_t j = tid; j < d; j += blockDim.x) {
          if (cdone[j]) continue;
          const double r = base + (-double(th[int64_t(i) * d + j])) - v[j];
          if (r < sp[j]) {
            sp[j] = r;
            path[j] = i;
          }
          const int busy = row4col[j] >= 0 ? 1 : 0;
          if (key_less(sp[j], busy, int(j), best, best_busy, best_col))
            best = sp[j], best_busy = busy, best_col = int(j);
        }
        s_val[tid] = best, s_busy[tid] = best_busy, s_col[tid] = best_col;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s >>= 1) {
          if (tid < s &&
              key_less(s_val[tid + s], s_busy[tid + s], s_col[tid + s], s_val[tid], s_busy[tid], s_col[tid])) {
            s_val[tid] = s_val[tid + s], s_busy[tid] = s_busy[tid + s], s_col[tid] = s_col[tid + s];
          }
          __syncthreads();
        }
        if (tid == 0) {
          // a free column exists while row f is unmatched and every distance is finite, so s_col[0] is a column
          const int j = s_col[0];
          s_min = s_val[0];
          cdone[j] = 1;
          if (row4col[j] < 0)
            s_sink = j;
          else
            s_row = row4col[j];
        }
        __syncthreads();
        if (s_sink >= 0) break;
      }
      // potentials (before the flip: col4row of the scanned rows still names the columns they came through)
      const double mn = s_min;
      for (int64_t k = tid; k < d; k += blockDim.x) {
        if (rdone[k] && k != f) u[k] += mn - sp[col4row[k]];
        if (cdone[k]) v[k] -= mn - sp[k];
      }
      __syncthreads();
      if (tid == 0) {
        u[f] += mn;
        int j = s_sink;
        for (;;) {
          const int r = path[j];
          row4col[j] = r;
          const int next = col4row[r];
          col4row[r] = j;
          j = next;
          if (r == f) break;
        }
      }
      __syncthreads();
    }
    for (int64_t k = tid; k < d; k += blockDim.x) perm[b * d + k] = col4row[k];
    __syncthreads();
  }
}

}  // namespace

template <typename T>
void assignment_cuda(const AssignmentParams& P, const T* theta, int64_t* perm, void* workspace, std::uintptr_t stream) {
  assignment_check_params(P);
  if (P.B == 0 || P.d == 0) return;
  DeviceGuard guard(theta);
  assignment_kernel<T><<<grid_blocks(P.B), kThreads, 0, as_stream(stream)>>>(P.B, P.d, theta, perm,
                                                                             static_cast<unsigned char*>(workspace));
  check_launch("assignment_kernel");
}

template void assignment_cuda<float>(const AssignmentParams&, const float*, int64_t*, void*, std::uintptr_t);
template void assignment_cuda<double>(const AssignmentParams&, const double*, int64_t*, void*, std::uintptr_t);

}  // namespace relaxops
