// GenDR rasterizer, C++ CPU kernels: tile binning (render_cpu.h) + per-pixel fold over each tile's faces (see
// render.h). The forward carries each pixel's running state (alpha and the RGB state, kept in `image` and `aggr`)
// from one face chunk to the next. Backward: one thread per tile accumulates each (face, tile) pair's gradient into
// its own slot of an entry buffer; each face then sums its slots in tile order (deterministic, no atomics).
#include <algorithm>
#include <vector>

#include "render_cpu.h"

namespace relaxops {

template <typename T>
void render_forward_cpu(const RenderParams& P, double reach, int64_t tile_size, int64_t max_entries, int threads,
                        const T* face_vertices, const T* textures, const int64_t* offsets, T* image, T* aggr) {
  Scene<T> sc(P, offsets, reach, tile_size, max_entries, threads, face_vertices);
  const int64_t HW = P.H * P.W, R = texture_res(P.T);
  // the running state of every pixel lives in image (alpha, RGB) and aggr between passes
  const PixelState<T> s0 = pixel_start<T>(P);
  for (int64_t b = 0; b < P.B; ++b)
    for (int64_t i = 0; i < HW; ++i) {
      T* im = image + b * 4 * HW + i;
      T* ag = aggr + b * 2 * HW + i;
      for (int c = 0; c < 3; ++c) im[c * HW] = s0.rgb[c];
      im[3 * HW] = s0.A;
      ag[0] = s0.s0;
      ag[HW] = s0.s1;
    }
  for (size_t ci = 0; ci < sc.num_chunks(); ++ci) {
    sc.bin(ci, false);
    sc.for_each_pixel([&](int64_t b, int64_t i, T px, T py, int64_t e0, int64_t e1) {
      const int64_t nf = sc.mesh_faces(b);
      T* im = image + b * 4 * HW + i;
      T* ag = aggr + b * 2 * HW + i;
      PixelState<T> s{im[3 * HW], ag[0], ag[HW], {im[0], im[HW], im[2 * HW]}};
      for (int64_t e = e0; e < e1; ++e) {
        const int64_t fi = sc.bins.tile_face[e];
        pixel_step(P, sc.faces[fi], fi, nf, textures + fi * P.T * 3, R, px, py, s);
      }
      im[3 * HW] = s.A;
      ag[0] = s.s0;
      ag[HW] = s.s1;
      for (int k = 0; k < 3; ++k) im[k * HW] = s.rgb[k];
    });
  }
  if (P.rgb == 1) {
    for (int64_t b = 0; b < P.B; ++b)
      for (int64_t i = 0; i < HW; ++i)
        for (int k = 0; k < 3; ++k) image[b * 4 * HW + k * HW + i] /= aggr[b * 2 * HW + i];
  }
}

template <typename T>
void render_backward_cpu(const RenderParams& P, double reach, int64_t tile_size, int64_t max_entries, int threads,
                         const T* face_vertices, const T* textures, const int64_t* offsets, const T* image,
                         const T* aggr, const T* grad_image, T* grad_face_vertices, T* grad_textures) {
  Scene<T> sc(P, offsets, reach, tile_size, max_entries, threads, face_vertices);
  const int64_t HW = P.H * P.W, nT = sc.g.count(), R = texture_res(P.T), stride = 9 + 3 * P.T;
  std::fill(grad_face_vertices, grad_face_vertices + P.N * 9, T(0));
  std::fill(grad_textures, grad_textures + P.N * P.T * 3, T(0));
  std::vector<T> slots;
  for (size_t ci = 0; ci < sc.num_chunks(); ++ci) {
    sc.bin(ci, true);
    const Bins& bins = sc.bins;
    slots.assign(size_t(bins.tile_start[P.B * nT] * stride), T(0));
    sc.for_each_pixel([&](int64_t b, int64_t i, T px, T py, int64_t e0, int64_t e1) {
      const int64_t nf = sc.mesh_faces(b);
      const T* im = image + b * 4 * HW + i;
      const T* gi = grad_image + b * 4 * HW + i;
      const PixelState<T> q{im[3 * HW], aggr[b * 2 * HW + i], aggr[b * 2 * HW + HW + i], {im[0], im[HW], im[2 * HW]}};
      const T gc[3] = {gi[0], gi[HW], gi[2 * HW]};
      for (int64_t e = e0; e < e1; ++e) {  // this tile's slots are this thread's alone
        const int64_t fi = bins.tile_face[e];
        T gv[9], tw[3];
        int64_t texel;
        Fragment<T> fr;
        if (!pair_backward(P, sc.faces[fi], fi, nf, textures + fi * P.T * 3, R, px, py, q, gi[3 * HW], gc, gv, tw,
                           texel, fr))
          continue;
        T* slot = slots.data() + e * stride;
        for (int j = 0; j < 9; ++j) slot[j] += gv[j];
        if (P.texture == 1) {
          for (int v = 0; v < 3; ++v)
            for (int k = 0; k < 3; ++k) slot[9 + 3 * v + k] += fr.wbar[v] * tw[k];
        } else if (texel >= 0) {
          for (int k = 0; k < 3; ++k) slot[9 + 3 * texel + k] += tw[k];
        }
      }
    });
    // each face sums its slots in tile order
    sc.for_each_face([&](int64_t f, int64_t k0, int64_t k1) {
      T* gf = grad_face_vertices + f * 9;
      T* gt = grad_textures + f * P.T * 3;
      for (int64_t k = k0; k < k1; ++k) {
        const T* slot = slots.data() + bins.face_entry[k] * stride;
        for (int j = 0; j < 9; ++j) gf[j] += slot[j];
        for (int64_t j = 0; j < 3 * P.T; ++j) gt[j] += slot[9 + j];
      }
    });
  }
}

template void render_forward_cpu<float>(const RenderParams&, double, int64_t, int64_t, int, const float*, const float*,
                                        const int64_t*, float*, float*);
template void render_forward_cpu<double>(const RenderParams&, double, int64_t, int64_t, int, const double*,
                                         const double*, const int64_t*, double*, double*);
template void render_backward_cpu<float>(const RenderParams&, double, int64_t, int64_t, int, const float*, const float*,
                                         const int64_t*, const float*, const float*, const float*, float*, float*);
template void render_backward_cpu<double>(const RenderParams&, double, int64_t, int64_t, int, const double*,
                                          const double*, const int64_t*, const double*, const double*, const double*,
                                          double*, double*);

}  // namespace relaxops
