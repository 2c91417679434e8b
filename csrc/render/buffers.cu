// GenDR render buffers, CUDA kernels (math in buffers.h, shared with the CPU kernels; binning in render_cuda.cuh).
//
// Forward: one block per (image, tile), one thread per pixel, folding the tile's face list with the softmax sums in
// the output buffer, then the final channel values.
// Backward: same mapping; per face of the list the block reduces its pixels' 9 vertex, 3 C attribute and 6 uv
// gradients in a fixed order (warp shuffles, then warps in order, 32 values at a time) into the pair's slot; a final
// pass sums each face's slots in tile order. Texture gradients: every candidate (pixel, face) of the binning (the
// face's pixel box, render_cuda.cuh) owns 8 tap records at a fixed position, (texel, scale * tap weight) or an unused
// key past the last texel; the records are stably radix-sorted by texel and one warp per texel sums its records'
// values times the pixel's upstream gradient, lane l taking records l, l + 32, ... in (face, pixel, tap) order, then
// a fixed shuffle tree. Every gradient is deterministic.
#include "buffers.h"
#include "render_cuda.cuh"

namespace relaxops {

namespace {

constexpr int kGroup = 32;       // slot values reduced per round
constexpr int kBackground = 64;  // background values per launch of fill_kernel

// Background values, passed by value (no host-to-device copy).
template <typename T>
struct Values {
  T v[kBackground];
};

template <typename T>
__global__ void fill_kernel(Values<T> values, int64_t n, T* out) {
  if (threadIdx.x < n) out[threadIdx.x] = values.v[threadIdx.x];
}

// Texture gradient records of the backward: 8 per candidate pixel of a face (texel key b Tt + texel, or `unused`),
// their values (scale * tap weight) and each candidate's pixel (index in its image).
template <typename T>
struct TapRecords {
  uint64_t* keys;
  int32_t* index;  // the record's own position (sorted along with the keys)
  T* w;
  int64_t* pixel;
  uint64_t unused;
};

template <typename T>
__global__ void forward_kernel(RenderParams P, BufferParams Q, TileGrid g, const Face<T>* __restrict__ faces,
                               const int64_t* __restrict__ tile_start, const int64_t* __restrict__ pairs,
                               const int32_t* __restrict__ pair_face, const int64_t* __restrict__ offsets,
                               const T* __restrict__ attributes, const T* __restrict__ face_uvs,
                               const T* __restrict__ texture, const T* __restrict__ bg, T* buffers, T* aggr) {
  const int64_t bt = blockIdx.x, nT = g.count(), b = bt / nT, t = bt % nT;
  const int64_t r = (t / g.nx) * g.size + threadIdx.x / g.size, c = (t % g.nx) * g.size + threadIdx.x % g.size;
  if (r >= P.H || c >= P.W) return;
  const int64_t HW = P.H * P.W, i = r * P.W + c;
  const T px = pixel_x<T>(g, c), py = pixel_y<T>(g, r);
  const MeshData<T> m{offsets[b + 1] - offsets[b], attributes, face_uvs, texture + b * Q.Tt * Q.Ct};
  T* out = buffers + b * Q.K() * HW + i;
  BufferState<T> s = buffer_start(P, Q, bg, out, HW);
  for (int64_t e = tile_start[bt]; e < tile_start[bt + 1]; ++e) {
    const int64_t fi = pair_face[pairs[e]];
    buffer_step(P, Q, faces[fi], fi, m, px, py, s, out, HW);
  }
  aggr[b * 2 * HW + i] = s.s0;
  aggr[b * 2 * HW + HW + i] = s.s1;
  buffer_finish(P, Q, s, s.s1 >= 0 ? faces + int64_t(s.s1) : nullptr, m, bg, px, py, out, HW);
}

// Slot of a (face, tile) pair: [9 vertex | 3 C attribute (corner-major) | 6 uv] gradients.
template <typename T>
__global__ void backward_kernel(RenderParams P, BufferParams Q, TileGrid g, const Face<T>* __restrict__ faces,
                                const int64_t* __restrict__ tile_start, const int64_t* __restrict__ pairs,
                                const int32_t* __restrict__ pair_face, const int64_t* __restrict__ offsets,
                                const T* __restrict__ attributes, const T* __restrict__ face_uvs,
                                const T* __restrict__ texture, const T* __restrict__ buffers,
                                const T* __restrict__ aggr, const T* __restrict__ grad_buffers,
                                const PixelBox* __restrict__ boxes, const FaceCount* __restrict__ start, T* slots,
                                TapRecords<T> rec) {
  __shared__ T partial[kRenderThreads / 32][kGroup];
  const int64_t bt = blockIdx.x, nT = g.count(), b = bt / nT, t = bt % nT;
  const int64_t r = (t / g.nx) * g.size + threadIdx.x / g.size, c = (t % g.nx) * g.size + threadIdx.x % g.size;
  const bool on = r < P.H && c < P.W && threadIdx.x < g.size * g.size;
  const int64_t HW = P.H * P.W, i = on ? r * P.W + c : 0, K = Q.K(), C = Q.C, stride = 9 + 3 * C + 6;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = (blockDim.x + 31) / 32;
  const T px = pixel_x<T>(g, c), py = pixel_y<T>(g, r);
  const T* out = buffers + b * K * HW + i;
  const T* gout = grad_buffers + b * K * HW + i;
  const BufferState<T> s{out[(K - 1) * HW], aggr[b * 2 * HW + i], aggr[b * 2 * HW + HW + i]};
  const MeshData<T> m{offsets[b + 1] - offsets[b], attributes, face_uvs, texture + b * Q.Tt * Q.Ct};
  for (int64_t e = tile_start[bt]; e < tile_start[bt + 1]; ++e) {
    const int64_t pair = pairs[e], fi = pair_face[pair];
    T* slot = slots + pair * stride;
    T gv[9], guv[6], scale = 0;
    Fragment<T> fr;
    FragValues<T> v;
    const bool hit =
        on && buffer_pair_backward(P, Q, faces[fi], fi, m, px, py, s, out, gout, HW, gv, guv, scale, fr, v);
    if (!hit) {
      for (int j = 0; j < 9; ++j) gv[j] = 0;
      for (int j = 0; j < 6; ++j) guv[j] = 0;
      scale = 0;
    }
    const PixelBox x = Q.Ct > 0 ? boxes[fi] : PixelBox{0, 0, 0, 0};
    if (on && r >= x.r0 && r < x.r0 + x.h && c >= x.c0 && c < x.c0 + x.w) {  // this candidate's tap records
      const int64_t cand = start[fi].pixels + (r - x.r0) * x.w + (c - x.c0);
      const bool taps = scale != 0 && v.tex;
      rec.pixel[cand] = i;
      for (int j = 0; j < 8; ++j) {
        rec.keys[8 * cand + j] = taps ? uint64_t(b * Q.Tt + v.taps.idx[j]) : rec.unused;
        rec.index[8 * cand + j] = int32_t(8 * cand + j);
        rec.w[8 * cand + j] = taps ? scale * v.taps.w[j] : T(0);
      }
    }
    for (int64_t j0 = 0; j0 < stride; j0 += kGroup) {
      const int64_t n = stride - j0 < kGroup ? stride - j0 : kGroup;
      for (int64_t j = j0; j < j0 + n; ++j) {
        T x;
        if (j < 9) {
          x = gv[j];
        } else if (j < 9 + 3 * C) {
          const int64_t k = (j - 9) / C, ch = (j - 9) % C;
          x = scale != 0 ? v.b[k] * (scale * gout[ch * HW]) : T(0);
        } else {
          x = guv[j - 9 - 3 * C];
        }
        const T sum = warp_sum(x);
        if (lane == 0) partial[warp][j - j0] = sum;
      }
      __syncthreads();
      if (threadIdx.x < n) {  // the pair's slot belongs to this block alone
        T sum = 0;
        for (int w = 0; w < nwarps; ++w) sum += partial[w][threadIdx.x];
        slot[j0 + threadIdx.x] += sum;
      }
      __syncthreads();
    }
  }
}

// Each face sums its slots (face-major, so contiguous and in tile order).
template <typename T>
__global__ void gather_kernel(int64_t N, int64_t C, const FaceCount* __restrict__ start, const T* __restrict__ slots,
                              T* grad_fv, T* grad_attr, T* grad_uv) {
  const int64_t stride = 9 + 3 * C + 6;
  for (int64_t f = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; f < N; f += int64_t(gridDim.x) * blockDim.x) {
    T* gf = grad_fv + 9 * f;
    T* ga = grad_attr + 3 * C * f;
    T* gu = grad_uv + 6 * f;
    for (int j = 0; j < 9; ++j) gf[j] = 0;
    for (int64_t j = 0; j < 3 * C; ++j) ga[j] = 0;
    for (int j = 0; j < 6; ++j) gu[j] = 0;
    for (int64_t k = start[f].pairs; k < start[f + 1].pairs; ++k) {
      const T* s = slots + k * stride;
      for (int j = 0; j < 9; ++j) gf[j] += s[j];
      for (int64_t j = 0; j < 3 * C; ++j) ga[j] += s[9 + j];
      for (int j = 0; j < 6; ++j) gu[j] += s[9 + 3 * C + j];
    }
  }
}

// One warp per texel key (b Tt + texel): its records, contiguous in the sorted keys, each add
// w * grad_buffers[b, C + ch, pixel]; lane l sums records l, l + 32, ... in order, then a fixed shuffle tree.
template <typename T>
__global__ void texture_kernel(int64_t keys, int64_t records, int64_t Tt, int64_t Ct, int64_t C, int64_t K, int64_t HW,
                               const uint64_t* __restrict__ sorted, const int32_t* __restrict__ index,
                               const T* __restrict__ w, const int64_t* __restrict__ pixel,
                               const T* __restrict__ grad_buffers, T* grad_texture) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t key = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; key < keys; key += warps) {
    int64_t lo = 0, hi = records;  // the first record of key, then of key + 1
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (sorted[mid] < uint64_t(key))
        lo = mid + 1;
      else
        hi = mid;
    }
    const int64_t first = lo;
    hi = records;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (sorted[mid] <= uint64_t(key))
        lo = mid + 1;
      else
        hi = mid;
    }
    const T* g = grad_buffers + (key / Tt) * K * HW + C * HW;
    for (int64_t ch = 0; ch < Ct; ++ch) {
      T s = 0;
      for (int64_t k = first + lane; k < lo; k += 32) {
        const int32_t r = index[k];
        s += w[r] * g[ch * HW + pixel[r / 8]];
      }
      s = warp_sum(s);
      if (lane == 0) grad_texture[key * Ct + ch] = s;
    }
  }
}

template <typename T>
void forward(const RenderParams& P, const BufferParams& Q, double reach, int64_t tile_size, const T* fv, const T* attr,
             const T* uv, const T* tex, const int64_t* offsets, const double* background, T* buffers, T* aggr,
             cudaStream_t stream) {
  const TileGrid g = grid_of(P, reach, tile_size);
  if (P.B == 0) return;
  StreamArray<T> bg(Q.K() - 1, stream);
  for (int64_t k0 = 0; k0 < Q.K() - 1; k0 += kBackground) {
    Values<T> chunk{};
    const int64_t n = Q.K() - 1 - k0 < kBackground ? Q.K() - 1 - k0 : kBackground;
    for (int64_t k = 0; k < n; ++k) chunk.v[k] = T(background[k0 + k]);
    fill_kernel<T><<<1, kBackground, 0, stream>>>(chunk, n, bg.get() + k0);
    check_launch("render_buffers background");
  }
  DeviceBins<T> d;
  bin(P, reach, g, fv, offsets, stream, d);
  forward_kernel<T><<<P.B * g.count(), int(tile_size * tile_size), 0, stream>>>(
      P, Q, g, d.faces.get(), d.tile_start.get(), d.pairs.get(), d.pair_face.get(), offsets, attr, uv, tex, bg.get(),
      buffers, aggr);
  check_launch("render_buffers forward");
}

template <typename T>
void backward(const RenderParams& P, const BufferParams& Q, double reach, int64_t tile_size, const T* fv, const T* attr,
              const T* uv, const T* tex, const int64_t* offsets, const T* buffers, const T* aggr, const T* grad_buffers,
              T* grad_fv, T* grad_attr, T* grad_uv, T* grad_tex, cudaStream_t stream) {
  const TileGrid g = grid_of(P, reach, tile_size);
  const int64_t texels = P.B * Q.Tt * Q.Ct;
  if (P.N == 0) {
    if (texels > 0) check_call(cudaMemsetAsync(grad_tex, 0, sizeof(T) * texels, stream), "render_buffers backward");
    return;
  }
  DeviceBins<T> d;
  bin(P, reach, g, fv, offsets, stream, d);
  const int64_t stride = 9 + 3 * Q.C + 6, total = d.total.pairs, records = texels > 0 ? 8 * d.total.pixels : 0;
  RELAXOPS_CHECK(records <= kMaxSortItems,
                 "render_buffers: more than 2^31 - 1 texture taps to sort; render fewer pixels or a smaller batch");
  StreamArray<T> slots(total * stride, stream), w(records, stream);
  StreamArray<uint64_t> keys(records, stream), keys_alt(records, stream);
  StreamArray<int32_t> index(records, stream), index_alt(records, stream);
  StreamArray<int64_t> pixel(records / 8, stream);
  if (total > 0)
    check_call(cudaMemsetAsync(slots.get(), 0, sizeof(T) * total * stride, stream), "render_buffers backward");
  // unused records take the largest key of the sorted bits, past the last texel key B Tt - 1
  const int bits = key_bits(uint64_t(P.B * Q.Tt) + 1);
  const TapRecords<T> rec{keys.get(), index.get(), w.get(), pixel.get(), (uint64_t(1) << bits) - 1};
  const int threads = int((tile_size * tile_size + 31) / 32 * 32);
  backward_kernel<T><<<P.B * g.count(), threads, 0, stream>>>(
      P, Q, g, d.faces.get(), d.tile_start.get(), d.pairs.get(), d.pair_face.get(), offsets, attr, uv, tex, buffers,
      aggr, grad_buffers, d.boxes.get(), d.start.get(), slots.get(), rec);
  check_launch("render_buffers backward");
  gather_kernel<T><<<grid_blocks((P.N + kRenderThreads - 1) / kRenderThreads), kRenderThreads, 0, stream>>>(
      P.N, Q.C, d.start.get(), slots.get(), grad_fv, grad_attr, grad_uv);
  check_launch("render_buffers gather");
  if (texels == 0) return;
  // the double-buffer sort needs no copy of the records in its temporary storage
  cub::DoubleBuffer<uint64_t> sorted_keys(keys.get(), keys_alt.get());
  cub::DoubleBuffer<int32_t> sorted_index(index.get(), index_alt.get());
  if (records > 0)
    cub_run(stream, "render_buffers texture sort", [&](void* temp, size_t& bytes) {
      return cub::DeviceRadixSort::SortPairs(temp, bytes, sorted_keys, sorted_index, int(records), 0, bits, stream);
    });
  const int64_t keys_n = P.B * Q.Tt;
  texture_kernel<T>
      <<<grid_blocks((keys_n + kRenderThreads / 32 - 1) / (kRenderThreads / 32)), kRenderThreads, 0, stream>>>(
          keys_n, records, Q.Tt, Q.Ct, Q.C, Q.K(), P.H * P.W, sorted_keys.Current(), sorted_index.Current(), w.get(),
          pixel.get(), grad_buffers, grad_tex);
  check_launch("render_buffers texture gradient");
}

}  // namespace

void buffers_forward_cuda(int dtype, const RenderParams& P, const BufferParams& Q, double reach, int64_t tile_size,
                          const void* fv, const void* attr, const void* uv, const void* tex, const int64_t* offsets,
                          const double* background, void* buffers, void* aggr, std::uintptr_t stream) {
  DeviceGuard guard(buffers);
  if (dtype == 0)
    forward<float>(P, Q, reach, tile_size, static_cast<const float*>(fv), static_cast<const float*>(attr),
                   static_cast<const float*>(uv), static_cast<const float*>(tex), offsets, background,
                   static_cast<float*>(buffers), static_cast<float*>(aggr), as_stream(stream));
  else
    forward<double>(P, Q, reach, tile_size, static_cast<const double*>(fv), static_cast<const double*>(attr),
                    static_cast<const double*>(uv), static_cast<const double*>(tex), offsets, background,
                    static_cast<double*>(buffers), static_cast<double*>(aggr), as_stream(stream));
}

void buffers_backward_cuda(int dtype, const RenderParams& P, const BufferParams& Q, double reach, int64_t tile_size,
                           const void* fv, const void* attr, const void* uv, const void* tex, const int64_t* offsets,
                           const void* buffers, const void* aggr, const void* grad_buffers, void* grad_fv,
                           void* grad_attr, void* grad_uv, void* grad_tex, std::uintptr_t stream) {
  DeviceGuard guard(buffers);
  if (dtype == 0)
    backward<float>(
        P, Q, reach, tile_size, static_cast<const float*>(fv), static_cast<const float*>(attr),
        static_cast<const float*>(uv), static_cast<const float*>(tex), offsets, static_cast<const float*>(buffers),
        static_cast<const float*>(aggr), static_cast<const float*>(grad_buffers), static_cast<float*>(grad_fv),
        static_cast<float*>(grad_attr), static_cast<float*>(grad_uv), static_cast<float*>(grad_tex), as_stream(stream));
  else
    backward<double>(P, Q, reach, tile_size, static_cast<const double*>(fv), static_cast<const double*>(attr),
                     static_cast<const double*>(uv), static_cast<const double*>(tex), offsets,
                     static_cast<const double*>(buffers), static_cast<const double*>(aggr),
                     static_cast<const double*>(grad_buffers), static_cast<double*>(grad_fv),
                     static_cast<double*>(grad_attr), static_cast<double*>(grad_uv), static_cast<double*>(grad_tex),
                     as_stream(stream));
}

}  // namespace relaxops
