// GenDR rasterizer, CUDA: the device binning shared by the kernels of the render family (render.cu, buffers.cu).
//
// One thread per packed face computes its tile count; an exclusive scan gives each face its contiguous range of
// (face, tile) pairs in face-major order (ascending packed face, tile row, tile column; the face's mesh, hence its
// image, found by a binary search in the offsets); the pairs are stably sorted by tile, so every tile lists its
// faces in ascending index (the fold order), and each sorted pair keeps its face-major position `pair` as the slot
// of its gradient. Kernels run one block per (image, tile) of at most kRenderThreads pixels.
#pragma once

#include <cuda_runtime.h>
#include <thrust/binary_search.h>
#include <thrust/device_vector.h>
#include <thrust/execution_policy.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/scan.h>
#include <thrust/sort.h>

#include "../common/cuda_utils.cuh"
#include "render.h"

namespace relaxops {

constexpr int kRenderThreads = 256;

template <typename T>
__global__ void setup_kernel(RenderParams P, double reach, TileGrid g, const T* __restrict__ fv, Face<T>* faces,
                             int64_t* counts) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < P.N; i += int64_t(gridDim.x) * blockDim.x) {
    Face<T> f;
    face_setup(fv + 9 * i, reach, f);
    faces[i] = f;
    counts[i] = tiles_of(f, g);
  }
}

// The mesh of packed face i: the b with offsets[b] <= i < offsets[b + 1] (offsets[0] = 0 <= i < N = offsets[B]).
__device__ inline int64_t mesh_of(const int64_t* __restrict__ offsets, int64_t B, int64_t i) {
  int64_t lo = 0, hi = B;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (offsets[mid] <= i)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

// Writes each face's pairs: key = tile over the batch (b * tiles + t), pair = face-major position, face = packed
// index.
template <typename T>
__global__ void emit_kernel(RenderParams P, TileGrid g, const Face<T>* __restrict__ faces,
                            const int64_t* __restrict__ start, const int64_t* __restrict__ offsets, int64_t* keys,
                            int64_t* pairs, int32_t* pair_face) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < P.N; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t r0, r1, c0, c1, k = start[i];
    if (start[i + 1] == k || !pixel_range(faces[i], g, r0, r1, c0, c1)) continue;
    const int64_t b = mesh_of(offsets, P.B, i);
    for (int64_t ty = r0 / g.size; ty <= r1 / g.size; ++ty)
      for (int64_t tx = c0 / g.size; tx <= c1 / g.size; ++tx, ++k) {
        keys[k] = b * g.count() + ty * g.nx + tx;
        pairs[k] = k;
        pair_face[k] = int32_t(i);
      }
  }
}

template <typename T>
__device__ inline T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}

// The sorted pairs of a scene: faces, per-face pair ranges (start), per-tile ranges (tile_start).
template <typename T>
struct DeviceBins {
  thrust::device_vector<Face<T>> faces;
  thrust::device_vector<int64_t> start, keys, pairs, tile_start;
  thrust::device_vector<int32_t> pair_face;
};

template <typename T>
void bin(const RenderParams& P, double reach, const TileGrid& g, const T* fv, const int64_t* offsets,
         cudaStream_t stream, DeviceBins<T>& d) {
  const int64_t N = P.N, nT = g.count();
  const auto policy = thrust::cuda::par.on(stream);
  d.faces.resize(N);
  d.start.assign(N + 1, 0);
  if (N > 0) {
    setup_kernel<T><<<grid_blocks((N + kRenderThreads - 1) / kRenderThreads), kRenderThreads, 0, stream>>>(
        P, reach, g, fv, thrust::raw_pointer_cast(d.faces.data()), thrust::raw_pointer_cast(d.start.data()));
    check_launch("render setup");
    thrust::exclusive_scan(policy, d.start.begin(), d.start.end(), d.start.begin());
    check_call(cudaStreamSynchronize(stream), "render binning");  // the total is read on the host next
  }
  const int64_t total = d.start[N];
  d.keys.resize(total);
  d.pairs.resize(total);
  d.pair_face.resize(total);
  if (total > 0) {
    emit_kernel<T><<<grid_blocks((N + kRenderThreads - 1) / kRenderThreads), kRenderThreads, 0, stream>>>(
        P, g, thrust::raw_pointer_cast(d.faces.data()), thrust::raw_pointer_cast(d.start.data()), offsets,
        thrust::raw_pointer_cast(d.keys.data()), thrust::raw_pointer_cast(d.pairs.data()),
        thrust::raw_pointer_cast(d.pair_face.data()));
    check_launch("render emit");
    thrust::stable_sort_by_key(policy, d.keys.begin(), d.keys.end(), d.pairs.begin());
  }
  d.tile_start.resize(P.B * nT + 1);
  thrust::lower_bound(policy, d.keys.begin(), d.keys.end(), thrust::counting_iterator<int64_t>(0),
                      thrust::counting_iterator<int64_t>(P.B * nT + 1), d.tile_start.begin());
}

inline TileGrid grid_of(const RenderParams& P, double reach, int64_t tile_size) {
  RELAXOPS_CHECK(tile_size * tile_size <= kRenderThreads, "tile_size must be in [1, 16] (one thread a pixel)");
  return tile_grid(P, reach, tile_size);
}

}  // namespace relaxops
