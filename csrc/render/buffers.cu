// GenDR render buffers, CUDA kernels (math in buffers.h, shared with the CPU kernels; binning in render_cuda.cuh).
//
// Forward: one block per (image, tile), one thread per pixel, folding the tile's face list with the softmax sums in
// the output buffer, then the final channel values.
// Backward: same mapping; per face of the list the block reduces its pixels' 9 vertex, 3 C attribute and 6 uv
// gradients in a fixed order (warp shuffles, then warps in order, 32 values at a time) into the pair's slot; a final
// pass sums each face's slots in tile order: vertex, attribute and uv gradients are deterministic. Texture gradients
// are added to the texels atomically (their order, hence their rounding, varies from run to run).
#include <vector>

#include "buffers.h"
#include "render_cuda.cuh"

namespace relaxops {

namespace {

constexpr int kGroup = 32;  // slot values reduced per round

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
                                const T* __restrict__ aggr, const T* __restrict__ grad_buffers, T* slots,
                                T* grad_texture) {
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
  T* gtex = grad_texture + b * Q.Tt * Q.Ct;
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
    if (scale != 0 && v.tex)
      for (int j = 0; j < 8; ++j)
        for (int64_t ch = 0; ch < Q.Ct; ++ch)
          atomicAdd(gtex + v.taps.idx[j] * Q.Ct + ch, scale * v.taps.w[j] * gout[(C + ch) * HW]);
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
__global__ void gather_kernel(int64_t N, int64_t C, const int64_t* __restrict__ start, const T* __restrict__ slots,
                              T* grad_fv, T* grad_attr, T* grad_uv) {
  const int64_t stride = 9 + 3 * C + 6;
  for (int64_t f = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; f < N; f += int64_t(gridDim.x) * blockDim.x) {
    T* gf = grad_fv + 9 * f;
    T* ga = grad_attr + 3 * C * f;
    T* gu = grad_uv + 6 * f;
    for (int j = 0; j < 9; ++j) gf[j] = 0;
    for (int64_t j = 0; j < 3 * C; ++j) ga[j] = 0;
    for (int j = 0; j < 6; ++j) gu[j] = 0;
    for (int64_t k = start[f]; k < start[f + 1]; ++k) {
      const T* s = slots + k * stride;
      for (int j = 0; j < 9; ++j) gf[j] += s[j];
      for (int64_t j = 0; j < 3 * C; ++j) ga[j] += s[9 + j];
      for (int j = 0; j < 6; ++j) gu[j] += s[9 + 3 * C + j];
    }
  }
}

template <typename T>
void forward(const RenderParams& P, const BufferParams& Q, double reach, int64_t tile_size, const T* fv, const T* attr,
             const T* uv, const T* tex, const int64_t* offsets, const double* background, T* buffers, T* aggr,
             cudaStream_t stream) {
  const TileGrid g = grid_of(P, reach, tile_size);
  if (P.B == 0) return;
  const std::vector<T> host_bg(background, background + Q.K() - 1);
  thrust::device_vector<T> bg(host_bg.begin(), host_bg.end());
  DeviceBins<T> d;
  bin(P, reach, g, fv, offsets, stream, d);
  forward_kernel<T><<<P.B * g.count(), int(tile_size * tile_size), 0, stream>>>(
      P, Q, g, thrust::raw_pointer_cast(d.faces.data()), thrust::raw_pointer_cast(d.tile_start.data()),
      thrust::raw_pointer_cast(d.pairs.data()), thrust::raw_pointer_cast(d.pair_face.data()), offsets, attr, uv, tex,
      thrust::raw_pointer_cast(bg.data()), buffers, aggr);
  check_launch("render_buffers forward");
  check_call(cudaStreamSynchronize(stream), "render_buffers forward");  // the bins are freed on return
}

template <typename T>
void backward(const RenderParams& P, const BufferParams& Q, double reach, int64_t tile_size, const T* fv, const T* attr,
              const T* uv, const T* tex, const int64_t* offsets, const T* buffers, const T* aggr, const T* grad_buffers,
              T* grad_fv, T* grad_attr, T* grad_uv, T* grad_tex, cudaStream_t stream) {
  const TileGrid g = grid_of(P, reach, tile_size);
  if (P.B * Q.Tt * Q.Ct > 0)
    check_call(cudaMemsetAsync(grad_tex, 0, sizeof(T) * P.B * Q.Tt * Q.Ct, stream), "render_buffers backward");
  if (P.N == 0) {
    check_call(cudaStreamSynchronize(stream), "render_buffers backward");
    return;
  }
  DeviceBins<T> d;
  bin(P, reach, g, fv, offsets, stream, d);
  const int64_t stride = 9 + 3 * Q.C + 6, total = int64_t(d.pairs.size());
  thrust::device_vector<T> slots(total * stride, T(0));
  const int threads = int((tile_size * tile_size + 31) / 32 * 32);
  backward_kernel<T><<<P.B * g.count(), threads, 0, stream>>>(
      P, Q, g, thrust::raw_pointer_cast(d.faces.data()), thrust::raw_pointer_cast(d.tile_start.data()),
      thrust::raw_pointer_cast(d.pairs.data()), thrust::raw_pointer_cast(d.pair_face.data()), offsets, attr, uv, tex,
      buffers, aggr, grad_buffers, thrust::raw_pointer_cast(slots.data()), grad_tex);
  check_launch("render_buffers backward");
  gather_kernel<T><<<grid_blocks((P.N + kRenderThreads - 1) / kRenderThreads), kRenderThreads, 0, stream>>>(
      P.N, Q.C, thrust::raw_pointer_cast(d.start.data()), thrust::raw_pointer_cast(slots.data()), grad_fv, grad_attr,
      grad_uv);
  check_launch("render_buffers gather");
  check_call(cudaStreamSynchronize(stream), "render_buffers backward");
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
