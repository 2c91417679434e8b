// GenDR render buffers, C++ CPU kernels: render_cpu.h's tile binning + per-pixel fold over each tile's faces (math
// in buffers.h).
//
// Forward: the running state of every pixel lives in `buffers` (alpha; the softmax's weighted channel sums) and
// `aggr` from one face chunk to the next; a final pass divides the softmax sums by S, or writes the hard winner's
// values (its fragment recomputed) or the background.
// Backward: every (face, tile) entry of a chunk has its own slot (9 vertex, 3 C attribute and 6 uv gradients),
// written by the one thread of its tile in pixel order and summed per face in tile order. Texture gradients: each
// tile lists its (texel, weight, pixel) taps in pixel order (at most 8 per pixel and entry: the caller sizes the
// chunks for them); after the chunk, each image adds its tiles' lists in tile order (images in parallel). Every
// gradient is deterministic and independent of the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "../common/cpu_parallel.h"
#include "buffers.h"
#include "render_cpu.h"

namespace relaxops {
namespace {

// A texel's share of a pixel's texture-channel gradient: grad_tex[idx, c] += w * grad_buffers[C + c, pixel].
template <typename T>
struct TexRecord {
  int64_t idx, pixel;
  T w;
};

template <typename T>
MeshData<T> mesh_data(const Scene<T>& sc, const BufferParams& Q, int64_t b, const T* attributes, const T* face_uvs,
                      const T* texture) {
  return {sc.mesh_faces(b), attributes, face_uvs, texture + b * Q.Tt * Q.Ct};
}

}  // namespace

template <typename T>
void buffers_forward_cpu(const RenderParams& P, const BufferParams& Q, double reach, int64_t tile_size,
                         int64_t max_entries, int threads, const T* face_vertices, const T* attributes,
                         const T* face_uvs, const T* texture, const int64_t* offsets, const double* background,
                         T* buffers, T* aggr) {
  Scene<T> sc(P, offsets, reach, tile_size, max_entries, threads, face_vertices);
  const int64_t HW = P.H * P.W, K = Q.K();
  const std::vector<T> bg(background, background + K - 1);
  parallel_items(
      P.B * P.H,
      [&](int64_t row, int) {
        const int64_t b = row / P.H;
        for (int64_t i = (row % P.H) * P.W; i < (row % P.H + 1) * P.W; ++i) {
          T* out = buffers + b * K * HW + i;
          const BufferState<T> s = buffer_start(P, Q, bg.data(), out, HW);
          out[(K - 1) * HW] = s.A;
          aggr[b * 2 * HW + i] = s.s0;
          aggr[b * 2 * HW + HW + i] = s.s1;
        }
      },
      sc.nt);
  for (size_t ci = 0; ci < sc.num_chunks(); ++ci) {
    sc.bin(ci, false);
    sc.for_each_pixel([&](int64_t b, int64_t i, T px, T py, int64_t e0, int64_t e1) {
      const MeshData<T> m = mesh_data(sc, Q, b, attributes, face_uvs, texture);
      T* out = buffers + b * K * HW + i;
      T* ag = aggr + b * 2 * HW + i;
      BufferState<T> s{out[(K - 1) * HW], ag[0], ag[HW]};
      for (int64_t e = e0; e < e1; ++e) {
        const int64_t fi = sc.bins.tile_face[e];
        buffer_step(P, Q, sc.faces[fi], fi, m, px, py, s, out, HW);
      }
      out[(K - 1) * HW] = s.A;
      ag[0] = s.s0;
      ag[HW] = s.s1;
    });
  }
  parallel_items(
      P.B * P.H,
      [&](int64_t row, int) {
        const int64_t b = row / P.H, r = row % P.H;
        const MeshData<T> m = mesh_data(sc, Q, b, attributes, face_uvs, texture);
        for (int64_t c = 0; c < P.W; ++c) {
          const int64_t i = r * P.W + c;
          T* out = buffers + b * K * HW + i;
          const BufferState<T> s{out[(K - 1) * HW], aggr[b * 2 * HW + i], aggr[b * 2 * HW + HW + i]};
          const Face<T>* f = s.s1 >= 0 ? &sc.faces[int64_t(s.s1)] : nullptr;
          buffer_finish(P, Q, s, f, m, bg.data(), pixel_x<T>(sc.g, c), pixel_y<T>(sc.g, r), out, HW);
        }
      },
      sc.nt);
}

template <typename T>
void buffers_backward_cpu(const RenderParams& P, const BufferParams& Q, double reach, int64_t tile_size,
                          int64_t max_entries, int threads, const T* face_vertices, const T* attributes,
                          const T* face_uvs, const T* texture, const int64_t* offsets, const T* buffers, const T* aggr,
                          const T* grad_buffers, T* grad_face_vertices, T* grad_attributes, T* grad_face_uvs,
                          T* grad_texture) {
  Scene<T> sc(P, offsets, reach, tile_size, max_entries, threads, face_vertices);
  const int64_t HW = P.H * P.W, K = Q.K(), nT = sc.g.count(), C = Q.C, stride = 9 + 3 * C + 6;
  std::fill(grad_face_vertices, grad_face_vertices + P.N * 9, T(0));
  std::fill(grad_attributes, grad_attributes + P.N * 3 * C, T(0));
  std::fill(grad_face_uvs, grad_face_uvs + P.N * 6, T(0));
  std::fill(grad_texture, grad_texture + P.B * Q.Tt * Q.Ct, T(0));
  std::vector<T> slots;
  std::vector<std::vector<TexRecord<T>>> records(Q.Ct > 0 ? P.B * nT : 0);
  for (size_t ci = 0; ci < sc.num_chunks(); ++ci) {
    sc.bin(ci, true);
    const Bins& bins = sc.bins;
    slots.assign(size_t(bins.tile_start[P.B * nT] * stride), T(0));
    for (auto& r : records) r.clear();
    sc.for_each_pixel([&](int64_t b, int64_t i, T px, T py, int64_t e0, int64_t e1) {
      const MeshData<T> m = mesh_data(sc, Q, b, attributes, face_uvs, texture);
      const T* out = buffers + b * K * HW + i;
      const T* gout = grad_buffers + b * K * HW + i;
      const BufferState<T> s{out[(K - 1) * HW], aggr[b * 2 * HW + i], aggr[b * 2 * HW + HW + i]};
      const int64_t bt = b * nT + (i / P.W / sc.g.size) * sc.g.nx + (i % P.W) / sc.g.size;
      for (int64_t e = e0; e < e1; ++e) {  // this tile's slots and records are this thread's alone
        const int64_t fi = bins.tile_face[e];
        T g[9], guv[6], scale;
        Fragment<T> fr;
        FragValues<T> v;
        if (!buffer_pair_backward(P, Q, sc.faces[fi], fi, m, px, py, s, out, gout, HW, g, guv, scale, fr, v)) continue;
        T* slot = slots.data() + e * stride;
        for (int j = 0; j < 9; ++j) slot[j] += g[j];
        if (scale == 0) continue;
        for (int k = 0; k < 3; ++k)
          for (int64_t c = 0; c < C; ++c) slot[9 + k * C + c] += v.b[k] * (scale * gout[c * HW]);
        for (int j = 0; j < 6; ++j) slot[9 + 3 * C + j] += guv[j];
        if (v.tex)
          for (int j = 0; j < 8; ++j) records[bt].push_back({v.taps.idx[j], i, scale * v.taps.w[j]});
      }
    });
    sc.for_each_face([&](int64_t f, int64_t k0, int64_t k1) {
      T* gf = grad_face_vertices + f * 9;
      T* ga = grad_attributes + f * 3 * C;
      T* gu = grad_face_uvs + f * 6;
      for (int64_t k = k0; k < k1; ++k) {
        const T* slot = slots.data() + bins.face_entry[k] * stride;
        for (int j = 0; j < 9; ++j) gf[j] += slot[j];
        for (int64_t j = 0; j < 3 * C; ++j) ga[j] += slot[9 + j];
        for (int j = 0; j < 6; ++j) gu[j] += slot[9 + 3 * C + j];
      }
    });
    if (Q.Ct > 0)
      parallel_items(
          P.B,
          [&](int64_t b, int) {
            T* gt = grad_texture + b * Q.Tt * Q.Ct;
            const T* gout = grad_buffers + b * K * HW + C * HW;
            for (int64_t t = 0; t < nT; ++t)
              for (const TexRecord<T>& rec : records[b * nT + t])
                for (int64_t c = 0; c < Q.Ct; ++c) gt[rec.idx * Q.Ct + c] += rec.w * gout[c * HW + rec.pixel];
          },
          sc.nt);
  }
}

template void buffers_forward_cpu<float>(const RenderParams&, const BufferParams&, double, int64_t, int64_t, int,
                                         const float*, const float*, const float*, const float*, const int64_t*,
                                         const double*, float*, float*);
template void buffers_forward_cpu<double>(const RenderParams&, const BufferParams&, double, int64_t, int64_t, int,
                                          const double*, const double*, const double*, const double*, const int64_t*,
                                          const double*, double*, double*);
template void buffers_backward_cpu<float>(const RenderParams&, const BufferParams&, double, int64_t, int64_t, int,
                                          const float*, const float*, const float*, const float*, const int64_t*,
                                          const float*, const float*, const float*, float*, float*, float*, float*);
template void buffers_backward_cpu<double>(const RenderParams&, const BufferParams&, double, int64_t, int64_t, int,
                                           const double*, const double*, const double*, const double*, const int64_t*,
                                           const double*, const double*, const double*, double*, double*, double*,
                                           double*);

}  // namespace relaxops
