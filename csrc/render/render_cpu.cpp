// GenDR rasterizer, C++ CPU kernels: tile binning + per-pixel fold over each tile's faces (see render.h).
//
// Binning: a face touches the pixel centres inside its bounding box grown by `reach`; the tiles of those
// centres get the face in their list (CSR: tile_start, tile_face; built per batch item in ascending face
// index, so every tile folds its faces in the original order). Faces are processed in chunks of whole faces
// whose (face, tile) entries fit `max_entries`; the forward carries each pixel's running state (alpha and
// the RGB state, kept in `image` and `aggr`) from one chunk to the next, so chunking changes nothing.
// Backward: one thread per tile accumulates each (face, tile) pair's gradient into its own slot of an entry
// buffer; each face then sums its slots in tile order (deterministic, no atomics).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../common/cpu_parallel.h"
#include "render.h"

namespace relaxops {
namespace {

constexpr int64_t kFaceItem = 1024;  // faces per parallel item of the per-face passes

// Face lists of the tiles of every batch item for faces [f0, f1). Entries are grouped by tile (tile_start,
// tile_face); with_faces also records, per face, its entries in tile order (face_start, face_entry).
struct Bins {
  std::vector<int64_t> tile_start, face_start, face_entry;
  std::vector<int32_t> tile_face;
};

template <typename T>
void bin_faces(const std::vector<Face<T>>& faces, const std::vector<int64_t>& ntiles, int64_t B, int64_t F, int64_t f0,
               int64_t f1, const TileGrid& g, bool with_faces, int nt, Bins& bins) {
  const int64_t nT = g.count(), nf = f1 - f0;
  bins.tile_start.assign(B * nT + 1, 0);
  if (with_faces) bins.face_start.assign(B * nf + 1, 0);
  parallel_items(
      B,
      [&](int64_t b, int) {
        for (int64_t f = f0; f < f1; ++f) {
          int64_t r0, r1, c0, c1;
          if (ntiles[b * F + f] == 0 || !pixel_range(faces[b * F + f], g, r0, r1, c0, c1)) continue;
          for (int64_t ty = r0 / g.size; ty <= r1 / g.size; ++ty)
            for (int64_t tx = c0 / g.size; tx <= c1 / g.size; ++tx) ++bins.tile_start[b * nT + ty * g.nx + tx + 1];
        }
      },
      nt);
  for (int64_t t = 0; t < B * nT; ++t) bins.tile_start[t + 1] += bins.tile_start[t];
  if (with_faces) {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t f = f0; f < f1; ++f) bins.face_start[b * nf + f - f0 + 1] = ntiles[b * F + f];
    for (int64_t i = 0; i < B * nf; ++i) bins.face_start[i + 1] += bins.face_start[i];
  }
  const int64_t total = bins.tile_start[B * nT];
  bins.tile_face.resize(total);
  if (with_faces) bins.face_entry.resize(total);
  parallel_items(
      B,
      [&](int64_t b, int) {
        std::vector<int64_t> cursor(bins.tile_start.begin() + b * nT, bins.tile_start.begin() + (b + 1) * nT);
        for (int64_t f = f0; f < f1; ++f) {
          int64_t r0, r1, c0, c1;
          if (ntiles[b * F + f] == 0 || !pixel_range(faces[b * F + f], g, r0, r1, c0, c1)) continue;
          int64_t k = with_faces ? bins.face_start[b * nf + f - f0] : 0;
          for (int64_t ty = r0 / g.size; ty <= r1 / g.size; ++ty)
            for (int64_t tx = c0 / g.size; tx <= c1 / g.size; ++tx) {
              const int64_t e = cursor[ty * g.nx + tx]++;
              bins.tile_face[e] = int32_t(f);
              if (with_faces) bins.face_entry[k++] = e;
            }
        }
      },
      nt);
}

// Preprocessed faces and their tile counts; chunks [f0, f1) of whole faces with at most max_entries
// (face, tile) pairs over the batch (at least one face per chunk).
template <typename T>
void prepare(const RenderParams& P, double reach, const TileGrid& g, int64_t max_entries, int nt,
             const T* face_vertices, std::vector<Face<T>>& faces, std::vector<int64_t>& ntiles,
             std::vector<int64_t>& chunks) {
  const int64_t BF = P.B * P.F;
  faces.resize(BF);
  ntiles.resize(BF);
  parallel_chunks(
      BF, kFaceItem,
      [&](int64_t i0, int64_t i1, int) {
        for (int64_t i = i0; i < i1; ++i) {
          face_setup(face_vertices + 9 * i, reach, faces[i]);
          ntiles[i] = tiles_of(faces[i], g);
        }
      },
      nt);
  chunks.assign(1, 0);
  int64_t used = 0;
  for (int64_t f = 0; f < P.F; ++f) {
    int64_t n = 0;
    for (int64_t b = 0; b < P.B; ++b) n += ntiles[b * P.F + f];
    if (used > 0 && used + n > max_entries) {
      chunks.push_back(f);
      used = 0;
    }
    used += n;
  }
  chunks.push_back(P.F);
}

// A scene ready for the tile passes: preprocessed faces, their tile counts and the face chunks.
template <typename T>
struct Scene {
  const RenderParams& P;
  TileGrid g;
  int nt;
  std::vector<Face<T>> faces;
  std::vector<int64_t> ntiles, chunks;
  Bins bins;

  Scene(const RenderParams& P_, double reach_, int64_t tile_size, int64_t max_entries, int nt_, const T* face_vertices)
      : P(P_), g(tile_grid(P_, reach_, tile_size)), nt(nt_) {
    prepare(P, reach_, g, max_entries, nt, face_vertices, faces, ntiles, chunks);
  }
  size_t num_chunks() const { return chunks.size() - 1; }
  void bin(size_t chunk, bool with_faces) {
    bin_faces(faces, ntiles, P.B, P.F, chunks[chunk], chunks[chunk + 1], g, with_faces, nt, bins);
  }
  // fn(b, i, px, py, e0, e1) for every pixel i (r * W + c) of batch item b whose tile lists the pairs
  // [e0, e1); tiles in parallel, each tile's pixels in one thread.
  template <typename Fn>
  void for_each_pixel(Fn&& fn) const {
    const int64_t nT = g.count();
    parallel_items(
        P.B * nT,
        [&](int64_t bt, int) {
          const int64_t e0 = bins.tile_start[bt], e1 = bins.tile_start[bt + 1];
          if (e0 == e1) return;
          const int64_t b = bt / nT, t = bt % nT, ty = t / g.nx, tx = t % g.nx;
          for (int64_t r = ty * g.size; r < std::min(P.H, (ty + 1) * g.size); ++r)
            for (int64_t c = tx * g.size; c < std::min(P.W, (tx + 1) * g.size); ++c)
              fn(b, r * P.W + c, pixel_x<T>(g, c), pixel_y<T>(g, r), e0, e1);
        },
        nt);
  }
};

}  // namespace

template <typename T>
void render_forward_cpu(const RenderParams& P, double reach, int64_t tile_size, int64_t max_entries, int threads,
                        const T* face_vertices, const T* textures, T* image, T* aggr) {
  Scene<T> sc(P, reach, tile_size, max_entries, threads, face_vertices);
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
      const Face<T>* fb = sc.faces.data() + b * P.F;
      T* im = image + b * 4 * HW + i;
      T* ag = aggr + b * 2 * HW + i;
      PixelState<T> s{im[3 * HW], ag[0], ag[HW], {im[0], im[HW], im[2 * HW]}};
      for (int64_t e = e0; e < e1; ++e) {
        const int64_t fi = sc.bins.tile_face[e];
        pixel_step(P, fb[fi], fi, textures + (b * P.F + fi) * P.T * 3, R, px, py, s);
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
                         const T* face_vertices, const T* textures, const T* image, const T* aggr, const T* grad_image,
                         T* grad_face_vertices, T* grad_textures) {
  Scene<T> sc(P, reach, tile_size, max_entries, threads, face_vertices);
  const int64_t HW = P.H * P.W, nT = sc.g.count(), R = texture_res(P.T), stride = 9 + 3 * P.T;
  std::fill(grad_face_vertices, grad_face_vertices + P.B * P.F * 9, T(0));
  std::fill(grad_textures, grad_textures + P.B * P.F * P.T * 3, T(0));
  std::vector<T> slots;
  for (size_t ci = 0; ci < sc.num_chunks(); ++ci) {
    const int64_t f0 = sc.chunks[ci], nf = sc.chunks[ci + 1] - f0;
    sc.bin(ci, true);
    const Bins& bins = sc.bins;
    slots.assign(size_t(bins.tile_start[P.B * nT] * stride), T(0));
    sc.for_each_pixel([&](int64_t b, int64_t i, T px, T py, int64_t e0, int64_t e1) {
      const Face<T>* fb = sc.faces.data() + b * P.F;
      const T* im = image + b * 4 * HW + i;
      const T* gi = grad_image + b * 4 * HW + i;
      const PixelState<T> q{im[3 * HW], aggr[b * 2 * HW + i], aggr[b * 2 * HW + HW + i], {im[0], im[HW], im[2 * HW]}};
      const T gc[3] = {gi[0], gi[HW], gi[2 * HW]};
      for (int64_t e = e0; e < e1; ++e) {  // this tile's slots are this thread's alone
        const int64_t fi = bins.tile_face[e];
        T gv[9], tw[3];
        int64_t texel;
        Fragment<T> fr;
        if (!pair_backward(P, fb[fi], fi, textures + (b * P.F + fi) * P.T * 3, R, px, py, q, gi[3 * HW], gc, gv, tw,
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
    parallel_chunks(
        P.B * nf, kFaceItem,
        [&](int64_t i0, int64_t i1, int) {
          for (int64_t i = i0; i < i1; ++i) {
            const int64_t b = i / nf, f = f0 + i % nf;
            T* gf = grad_face_vertices + (b * P.F + f) * 9;
            T* gt = grad_textures + (b * P.F + f) * P.T * 3;
            for (int64_t k = bins.face_start[i]; k < bins.face_start[i + 1]; ++k) {
              const T* slot = slots.data() + bins.face_entry[k] * stride;
              for (int j = 0; j < 9; ++j) gf[j] += slot[j];
              for (int64_t j = 0; j < 3 * P.T; ++j) gt[j] += slot[9 + j];
            }
          }
        },
        sc.nt);
  }
}

template void render_forward_cpu<float>(const RenderParams&, double, int64_t, int64_t, int, const float*, const float*,
                                        float*, float*);
template void render_forward_cpu<double>(const RenderParams&, double, int64_t, int64_t, int, const double*,
                                         const double*, double*, double*);
template void render_backward_cpu<float>(const RenderParams&, double, int64_t, int64_t, int, const float*, const float*,
                                         const float*, const float*, const float*, float*, float*);
template void render_backward_cpu<double>(const RenderParams&, double, int64_t, int64_t, int, const double*,
                                          const double*, const double*, const double*, const double*, double*, double*);

}  // namespace relaxops
