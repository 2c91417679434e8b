// GenDR rasterizer, CUDA: the device binning shared by the kernels of the render family (render.cu, buffers.cu).
//
// One thread per packed face computes its pixel box (the pixels within its reach, render.h's pixel_range), its tile
// count and pixel count; an inclusive scan gives each face its contiguous range of (face, tile) pairs in face-major
// order (ascending packed face, tile row, tile column; the face's mesh, hence its image, found by a binary search in
// the offsets) and of candidate pixels (its box in raster order); the pairs are stably radix-sorted by tile, so
// every tile lists its faces in ascending index (the fold order), and each sorted pair keeps its face-major position
// `pair` as the slot of its gradient. Kernels run one block per (image, tile) of at most kRenderThreads pixels.
//
// Memory: every array of a call is allocated and freed in stream order (cudaMallocAsync / cudaFreeAsync on the
// call's stream, the device's default memory pool): no device synchronisation, and a free waits for the kernels
// queued before it. The only host synchronisation of a call is the one read of the scanned totals (pairs and
// candidate pixels), which size the pair arrays (read_total).
#pragma once

#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include "../common/cuda_utils.cuh"
#include "render.h"

namespace relaxops {

constexpr int kRenderThreads = 256;
constexpr int64_t kMaxSortItems = (int64_t(1) << 31) - 1;  // CUB's item counts are int

// Device memory of one call, in stream order (see above); empty for n = 0.
template <typename T>
class StreamArray {
 public:
  StreamArray() = default;
  StreamArray(int64_t n, cudaStream_t s) { allocate(n, s); }
  ~StreamArray() {
    if (p_ != nullptr) cudaFreeAsync(p_, s_);
  }
  StreamArray(const StreamArray&) = delete;
  StreamArray& operator=(const StreamArray&) = delete;
  void allocate(int64_t n, cudaStream_t s) {
    s_ = s;
    if (n > 0) check_call(cudaMallocAsync(reinterpret_cast<void**>(&p_), sizeof(T) * size_t(n), s), "cudaMallocAsync");
  }
  T* get() const { return p_; }

 private:
  T* p_ = nullptr;
  cudaStream_t s_ = nullptr;
};

// Runs a CUB device algorithm: f(temp, bytes) queries its temporary storage, then runs with it.
template <typename F>
void cub_run(cudaStream_t s, const char* what, F&& f) {
  size_t bytes = 0;
  check_call(f(nullptr, bytes), what);
  StreamArray<char> temp(int64_t(bytes > 0 ? bytes : 1), s);
  check_call(f(temp.get(), bytes), what);
}

// The bits that hold the keys 0 .. n - 1 (at least 1).
inline int key_bits(uint64_t n) {
  int b = 1;
  while (b < 64 && (uint64_t(1) << b) < n) ++b;
  return b;
}

// A face's (face, tile) pairs and candidate pixels, or their prefix sums over the faces.
struct FaceCount {
  int64_t pairs, pixels;
};
struct AddCounts {
  __host__ __device__ FaceCount operator()(const FaceCount& a, const FaceCount& b) const {
    return {a.pairs + b.pairs, a.pixels + b.pixels};
  }
};

// Pixel rows r0 .. r0 + h - 1 and columns c0 .. c0 + w - 1 of a face's reach (h = 0: none).
struct PixelBox {
  int32_t r0, c0, h, w;
};

template <typename T>
__global__ void setup_kernel(RenderParams P, double reach, TileGrid g, const T* __restrict__ fv, Face<T>* faces,
                             PixelBox* boxes, FaceCount* counts) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < P.N; i += int64_t(gridDim.x) * blockDim.x) {
    Face<T> f;
    face_setup(fv + 9 * i, reach, f);
    faces[i] = f;
    int64_t r0, r1, c0, c1;
    if (!pixel_range(f, g, r0, r1, c0, c1)) {
      boxes[i] = {0, 0, 0, 0};
      counts[i] = {0, 0};
      continue;
    }
    boxes[i] = {int32_t(r0), int32_t(c0), int32_t(r1 - r0 + 1), int32_t(c1 - c0 + 1)};
    counts[i] = {(r1 / g.size - r0 / g.size + 1) * (c1 / g.size - c0 / g.size + 1), (r1 - r0 + 1) * (c1 - c0 + 1)};
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
static __global__ void emit_kernel(int64_t N, int64_t B, TileGrid g, const PixelBox* __restrict__ boxes,
                                   const FaceCount* __restrict__ start, const int64_t* __restrict__ offsets,
                                   uint64_t* keys, int64_t* pairs, int32_t* pair_face) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < N; i += int64_t(gridDim.x) * blockDim.x) {
    const PixelBox x = boxes[i];
    if (x.h == 0) continue;
    const int64_t b = mesh_of(offsets, B, i);
    int64_t k = start[i].pairs;
    for (int64_t ty = x.r0 / g.size; ty <= (x.r0 + x.h - 1) / g.size; ++ty)
      for (int64_t tx = x.c0 / g.size; tx <= (x.c0 + x.w - 1) / g.size; ++tx, ++k) {
        keys[k] = uint64_t(b * g.count() + ty * g.nx + tx);
        pairs[k] = k;
        pair_face[k] = int32_t(i);
      }
  }
}

// tile_start[t] = the first sorted pair of tile t (lower bound of t in the sorted keys), t = 0 .. tiles.
static __global__ void tile_start_kernel(int64_t total, int64_t tiles, const uint64_t* __restrict__ keys,
                                         int64_t* tile_start) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t <= tiles; t += int64_t(gridDim.x) * blockDim.x) {
    int64_t lo = 0, hi = total;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (keys[mid] < uint64_t(t))
        lo = mid + 1;
      else
        hi = mid;
    }
    tile_start[t] = lo;
  }
}

template <typename T>
__device__ inline T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}

// The sorted pairs of a scene: faces and their pixel boxes, per-face prefix sums of pairs and candidate pixels
// (start [N + 1]), the sorted pairs (face-major position and face) and per-tile ranges (tile_start [tiles + 1]).
template <typename T>
struct DeviceBins {
  StreamArray<Face<T>> faces;
  StreamArray<PixelBox> boxes;
  StreamArray<FaceCount> start;
  StreamArray<int64_t> pairs, tile_start;
  StreamArray<int32_t> pair_face;
  FaceCount total{0, 0};
};

// The call's one host synchronisation: the scanned totals, read to size the pair arrays.
inline FaceCount read_total(const FaceCount* total, cudaStream_t stream) {
  FaceCount host;
  check_call(cudaMemcpyAsync(&host, total, sizeof(FaceCount), cudaMemcpyDeviceToHost, stream), "render binning");
  check_call(cudaStreamSynchronize(stream), "render binning");
  return host;
}

template <typename T>
void bin(const RenderParams& P, double reach, const TileGrid& g, const T* fv, const int64_t* offsets,
         cudaStream_t stream, DeviceBins<T>& d) {
  const int64_t N = P.N, tiles = P.B * g.count();
  const int blocks = grid_blocks((N + kRenderThreads - 1) / kRenderThreads);
  d.faces.allocate(N, stream);
  d.boxes.allocate(N, stream);
  d.start.allocate(N + 1, stream);
  check_call(cudaMemsetAsync(d.start.get(), 0, sizeof(FaceCount), stream), "render binning");
  if (N > 0) {
    StreamArray<FaceCount> counts(N, stream);
    setup_kernel<T><<<blocks, kRenderThreads, 0, stream>>>(P, reach, g, fv, d.faces.get(), d.boxes.get(), counts.get());
    check_launch("render setup");
    cub_run(stream, "render binning scan", [&](void* temp, size_t& bytes) {
      return cub::DeviceScan::InclusiveScan(temp, bytes, counts.get(), d.start.get() + 1, AddCounts{}, int(N), stream);
    });
    d.total = read_total(d.start.get() + N, stream);
  }
  const int64_t total = d.total.pairs;
  RELAXOPS_CHECK(total <= kMaxSortItems, "render: more than 2^31 - 1 (face, tile) pairs; render fewer pixels");
  d.pairs.allocate(total, stream);
  d.pair_face.allocate(total, stream);
  d.tile_start.allocate(tiles + 1, stream);
  StreamArray<uint64_t> keys(total, stream), sorted_keys(total, stream);
  if (total > 0) {
    StreamArray<int64_t> unsorted(total, stream);
    emit_kernel<<<blocks, kRenderThreads, 0, stream>>>(N, P.B, g, d.boxes.get(), d.start.get(), offsets, keys.get(),
                                                       unsorted.get(), d.pair_face.get());
    check_launch("render emit");
    cub_run(stream, "render binning sort", [&](void* temp, size_t& bytes) {
      return cub::DeviceRadixSort::SortPairs(temp, bytes, keys.get(), sorted_keys.get(), unsorted.get(), d.pairs.get(),
                                             int(total), 0, key_bits(uint64_t(tiles)), stream);
    });
  }
  tile_start_kernel<<<grid_blocks((tiles + kRenderThreads) / kRenderThreads), kRenderThreads, 0, stream>>>(
      total, tiles, sorted_keys.get(), d.tile_start.get());
  check_launch("render tile ranges");
}

inline TileGrid grid_of(const RenderParams& P, double reach, int64_t tile_size) {
  RELAXOPS_CHECK(tile_size * tile_size <= kRenderThreads, "tile_size must be in [1, 16] (one thread a pixel)");
  return tile_grid(P, reach, tile_size);
}

}  // namespace relaxops
