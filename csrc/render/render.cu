// GenDR rasterizer, CUDA kernels (math in render.h, shared with the CPU kernels; binning in render_cuda.cuh).
//
// Forward: one block per (batch item, tile), one thread per pixel, each folding the tile's face list.
// Backward: same mapping; per face of the list the block reduces its pixels' 9 vertex gradients (and the
// texture gradients of vertex colours or one-texel surfaces) in a fixed order (warp shuffles, then warps in
// order) into the pair's slot. Surface textures with several texels: each pixel hits one texel of the face, so the
// block writes each pixel's (texel, gradient) to shared memory and the first pixel of every texel sums that texel's
// pixels in ascending order (as the CPU kernel does). A final pass sums each face's slots in tile order. Every
// gradient is deterministic (no atomics).
#include "render_cuda.cuh"

namespace relaxops {

namespace {

constexpr int kReduce = 18;  // 9 vertex gradients + 9 vertex-colour (or 3 one-texel) texture gradients

template <typename T>
__global__ void forward_kernel(RenderParams P, TileGrid g, int64_t R, const Face<T>* __restrict__ faces,
                               const int64_t* __restrict__ tile_start, const int64_t* __restrict__ pairs,
                               const int32_t* __restrict__ pair_face, const int64_t* __restrict__ offsets,
                               const T* __restrict__ textures, T* image, T* aggr) {
  const int64_t bt = blockIdx.x, nT = g.count(), b = bt / nT, t = bt % nT;
  const int64_t r = (t / g.nx) * g.size + threadIdx.x / g.size, c = (t % g.nx) * g.size + threadIdx.x % g.size;
  if (r >= P.H || c >= P.W) return;
  const int64_t HW = P.H * P.W;
  const T px = pixel_x<T>(g, c), py = pixel_y<T>(g, r);
  const int64_t nf = offsets[b + 1] - offsets[b];
  PixelState<T> s = pixel_start<T>(P);
  for (int64_t e = tile_start[bt]; e < tile_start[bt + 1]; ++e) {
    const int64_t fi = pair_face[pairs[e]];
    pixel_step(P, faces[fi], fi, nf, textures + fi * P.T * 3, R, px, py, s);
  }
  T* im = image + b * 4 * HW + r * P.W + c;
  T* ag = aggr + b * 2 * HW + r * P.W + c;
  for (int k = 0; k < 3; ++k) im[k * HW] = pixel_colour(P, s, k);
  im[3 * HW] = s.A;
  ag[0] = s.s0;
  ag[HW] = s.s1;
}

template <typename T>
__global__ void backward_kernel(RenderParams P, TileGrid g, int64_t R, int64_t stride,
                                const Face<T>* __restrict__ faces, const int64_t* __restrict__ tile_start,
                                const int64_t* __restrict__ pairs, const int32_t* __restrict__ pair_face,
                                const int64_t* __restrict__ offsets, const T* __restrict__ textures,
                                const T* __restrict__ image, const T* __restrict__ aggr,
                                const T* __restrict__ grad_image, T* slots) {
  __shared__ T partial[kRenderThreads / 32][kReduce];
  __shared__ int32_t texel_of[kRenderThreads];  // several texels: each pixel's texel (-1: none) and gradient
  __shared__ T texel_grad[kRenderThreads][3];
  const int64_t bt = blockIdx.x, nT = g.count(), b = bt / nT, t = bt % nT;
  const int64_t r = (t / g.nx) * g.size + threadIdx.x / g.size, c = (t % g.nx) * g.size + threadIdx.x % g.size;
  const bool on = r < P.H && c < P.W && threadIdx.x < g.size * g.size;
  const int64_t HW = P.H * P.W, i = on ? r * P.W + c : 0;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = (blockDim.x + 31) / 32;
  const bool reduce_tex = P.texture == 1 || P.T == 1;  // texture gradients at fixed positions
  const bool texels = !reduce_tex;                     // surface textures with several texels
  const T px = pixel_x<T>(g, c), py = pixel_y<T>(g, r);
  const T* im = image + b * 4 * HW + i;
  const T* gi = grad_image + b * 4 * HW + i;
  const PixelState<T> q{im[3 * HW], aggr[b * 2 * HW + i], aggr[b * 2 * HW + HW + i], {im[0], im[HW], im[2 * HW]}};
  const T gc[3] = {gi[0], gi[HW], gi[2 * HW]};
  const int64_t nf = offsets[b + 1] - offsets[b];
  for (int64_t e = tile_start[bt]; e < tile_start[bt + 1]; ++e) {
    const int64_t pair = pairs[e], fi = pair_face[pair];
    T* slot = slots + pair * stride;
    T v[kReduce], tw[3] = {0, 0, 0};
    for (int j = 0; j < kReduce; ++j) v[j] = 0;
    int64_t texel = -1;
    Fragment<T> fr;
    if (on &&
        pair_backward(P, faces[fi], fi, nf, textures + fi * P.T * 3, R, px, py, q, gi[3 * HW], gc, v, tw, texel, fr)) {
      if (P.texture == 1) {
        for (int w = 0; w < 3; ++w)
          for (int k = 0; k < 3; ++k) v[9 + 3 * w + k] = fr.wbar[w] * tw[k];
      } else if (texel >= 0 && P.T == 1) {
        for (int k = 0; k < 3; ++k) v[9 + k] = tw[k];
      }
    }
    if (texels) {
      texel_of[threadIdx.x] = int32_t(texel);
      for (int k = 0; k < 3; ++k) texel_grad[threadIdx.x][k] = tw[k];
    }
    const int n = reduce_tex ? kReduce : 9;
    for (int j = 0; j < n; ++j) {
      const T s = warp_sum(v[j]);
      if (lane == 0) partial[warp][j] = s;
    }
    __syncthreads();
    if (threadIdx.x < n && threadIdx.x < stride) {  // the pair's slot belongs to this block alone
      T s = 0;
      for (int w = 0; w < nwarps; ++w) s += partial[w][threadIdx.x];
      slot[threadIdx.x] += s;
    }
    if (texels && texel >= 0) {  // the texel's first pixel sums its pixels in ascending order
      bool first = true;
      for (unsigned p = 0; p < threadIdx.x && first; ++p) first = texel_of[p] != texel;
      if (first) {
        T s[3] = {0, 0, 0};
        for (unsigned p = threadIdx.x; p < blockDim.x; ++p)
          if (texel_of[p] == texel)
            for (int k = 0; k < 3; ++k) s[k] += texel_grad[p][k];
        for (int k = 0; k < 3; ++k) slot[9 + 3 * texel + k] += s[k];
      }
    }
    __syncthreads();
  }
}

// Each face sums its slots (face-major, so contiguous and in tile order).
template <typename T>
__global__ void gather_kernel(int64_t N, int64_t T_, int64_t stride, const FaceCount* __restrict__ start,
                              const T* __restrict__ slots, T* grad_fv, T* grad_tex) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < N; i += int64_t(gridDim.x) * blockDim.x) {
    T* gf = grad_fv + 9 * i;
    T* gt = grad_tex + 3 * T_ * i;
    for (int j = 0; j < 9; ++j) gf[j] = 0;
    for (int64_t j = 0; j < 3 * T_; ++j) gt[j] = 0;
    for (int64_t k = start[i].pairs; k < start[i + 1].pairs; ++k) {
      const T* s = slots + k * stride;
      for (int j = 0; j < 9; ++j) gf[j] += s[j];
      for (int64_t j = 0; j < 3 * T_; ++j) gt[j] += s[9 + j];
    }
  }
}

template <typename T>
void forward(const RenderParams& P, double reach, int64_t tile_size, const T* fv, const T* tex, const int64_t* offsets,
             T* image, T* aggr, cudaStream_t stream) {
  const TileGrid g = grid_of(P, reach, tile_size);
  if (P.B == 0) return;
  DeviceBins<T> d;
  bin(P, reach, g, fv, offsets, stream, d);
  forward_kernel<T><<<P.B * g.count(), int(tile_size * tile_size), 0, stream>>>(
      P, g, texture_res(P.T), d.faces.get(), d.tile_start.get(), d.pairs.get(), d.pair_face.get(), offsets, tex, image,
      aggr);
  check_launch("render forward");
}

template <typename T>
void backward(const RenderParams& P, double reach, int64_t tile_size, const T* fv, const T* tex, const int64_t* offsets,
              const T* image, const T* aggr, const T* grad_image, T* grad_fv, T* grad_tex, cudaStream_t stream) {
  const TileGrid g = grid_of(P, reach, tile_size);
  const int64_t N = P.N, stride = 9 + 3 * P.T;
  if (N == 0) return;
  DeviceBins<T> d;
  bin(P, reach, g, fv, offsets, stream, d);
  const int64_t total = d.total.pairs;
  StreamArray<T> slots(total * stride, stream);
  if (total > 0) check_call(cudaMemsetAsync(slots.get(), 0, sizeof(T) * total * stride, stream), "render backward");
  const int threads = int((tile_size * tile_size + 31) / 32 * 32);
  backward_kernel<T><<<P.B * g.count(), threads, 0, stream>>>(P, g, texture_res(P.T), stride, d.faces.get(),
                                                              d.tile_start.get(), d.pairs.get(), d.pair_face.get(),
                                                              offsets, tex, image, aggr, grad_image, slots.get());
  check_launch("render backward");
  gather_kernel<T><<<grid_blocks((N + kRenderThreads - 1) / kRenderThreads), kRenderThreads, 0, stream>>>(
      N, P.T, stride, d.start.get(), slots.get(), grad_fv, grad_tex);
  check_launch("render gather");
}

}  // namespace

void render_forward_cuda(int dtype, const RenderParams& P, double reach, int64_t tile_size, const void* fv,
                         const void* tex, const int64_t* offsets, void* image, void* aggr, std::uintptr_t stream) {
  DeviceGuard guard(offsets);
  if (dtype == 0)
    forward<float>(P, reach, tile_size, static_cast<const float*>(fv), static_cast<const float*>(tex), offsets,
                   static_cast<float*>(image), static_cast<float*>(aggr), as_stream(stream));
  else
    forward<double>(P, reach, tile_size, static_cast<const double*>(fv), static_cast<const double*>(tex), offsets,
                    static_cast<double*>(image), static_cast<double*>(aggr), as_stream(stream));
}

void render_backward_cuda(int dtype, const RenderParams& P, double reach, int64_t tile_size, const void* fv,
                          const void* tex, const int64_t* offsets, const void* image, const void* aggr,
                          const void* grad_image, void* grad_fv, void* grad_tex, std::uintptr_t stream) {
  DeviceGuard guard(offsets);
  if (dtype == 0)
    backward<float>(P, reach, tile_size, static_cast<const float*>(fv), static_cast<const float*>(tex), offsets,
                    static_cast<const float*>(image), static_cast<const float*>(aggr),
                    static_cast<const float*>(grad_image), static_cast<float*>(grad_fv), static_cast<float*>(grad_tex),
                    as_stream(stream));
  else
    backward<double>(P, reach, tile_size, static_cast<const double*>(fv), static_cast<const double*>(tex), offsets,
                     static_cast<const double*>(image), static_cast<const double*>(aggr),
                     static_cast<const double*>(grad_image), static_cast<double*>(grad_fv),
                     static_cast<double*>(grad_tex), as_stream(stream));
}

}  // namespace relaxops
