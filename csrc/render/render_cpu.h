// GenDR rasterizer, the CPU binning shared by the CPU kernels of the render family (render_cpu.cpp and any kernel
// with the same per-pixel fold over a pixel's faces, its own state per pixel).
//
// Faces are packed (docs/math/render.md, "Mixed meshes in a batch"): faces [N], mesh b owns the packed faces
// [offsets[b], offsets[b + 1]) and is drawn into image b. Binning: a face touches the pixel centres inside its
// bounding box grown by `reach`; the tiles of those centres (in its mesh's image) get the face in their list
// (CSR: tile_start over (b, tile), tile_face; built in ascending packed index, so every tile folds its mesh's faces
// in the original order). Faces are processed in chunks of whole faces (ranges of packed indices) whose
// (face, tile) entries fit `max_entries`: a forward carries each pixel's running state from one chunk to the next,
// so chunking changes nothing. A backward gives every (face, tile) entry its own gradient slot (one thread per
// tile writes it) and sums each face's slots in tile order (for_each_face): deterministic, no atomics.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "../common/cpu_parallel.h"
#include "render.h"

namespace relaxops {

constexpr int64_t kFaceItem = 1024;  // faces per parallel item of the per-face passes

// Face lists of the tiles of every batch item for the packed faces [f0, f1). Entries are grouped by (b, tile)
// (tile_start [B * tiles + 1], tile_face: packed face index); with_faces also records, per face f of the chunk,
// its entries in tile order (face_entry[face_start[f - f0] .. face_start[f - f0 + 1])).
struct Bins {
  std::vector<int64_t> tile_start, face_start, face_entry;
  std::vector<int32_t> tile_face;
};

template <typename T>
void bin_faces(const std::vector<Face<T>>& faces, const std::vector<int64_t>& ntiles, const int64_t* offsets, int64_t B,
               int64_t f0, int64_t f1, const TileGrid& g, bool with_faces, int nt, Bins& bins) {
  const int64_t nT = g.count(), nf = f1 - f0;
  bins.tile_start.assign(B * nT + 1, 0);
  if (with_faces) bins.face_start.assign(nf + 1, 0);
  // mesh b's faces in this chunk
  auto range = [&](int64_t b, int64_t& lo, int64_t& hi) {
    lo = std::max(f0, offsets[b]);
    hi = std::min(f1, offsets[b + 1]);
  };
  parallel_items(
      B,
      [&](int64_t b, int) {
        int64_t lo, hi;
        range(b, lo, hi);
        for (int64_t f = lo; f < hi; ++f) {
          int64_t r0, r1, c0, c1;
          if (ntiles[f] == 0 || !pixel_range(faces[f], g, r0, r1, c0, c1)) continue;
          for (int64_t ty = r0 / g.size; ty <= r1 / g.size; ++ty)
            for (int64_t tx = c0 / g.size; tx <= c1 / g.size; ++tx) ++bins.tile_start[b * nT + ty * g.nx + tx + 1];
        }
      },
      nt);
  for (int64_t t = 0; t < B * nT; ++t) bins.tile_start[t + 1] += bins.tile_start[t];
  if (with_faces) {
    for (int64_t f = f0; f < f1; ++f) bins.face_start[f - f0 + 1] = bins.face_start[f - f0] + ntiles[f];
  }
  const int64_t total = bins.tile_start[B * nT];
  bins.tile_face.resize(total);
  if (with_faces) bins.face_entry.resize(total);
  parallel_items(
      B,
      [&](int64_t b, int) {
        int64_t lo, hi;
        range(b, lo, hi);
        if (lo >= hi) return;
        std::vector<int64_t> cursor(bins.tile_start.begin() + b * nT, bins.tile_start.begin() + (b + 1) * nT);
        for (int64_t f = lo; f < hi; ++f) {
          int64_t r0, r1, c0, c1;
          if (ntiles[f] == 0 || !pixel_range(faces[f], g, r0, r1, c0, c1)) continue;
          int64_t k = with_faces ? bins.face_start[f - f0] : 0;
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

// Preprocessed packed faces [N] and their tile counts; chunks [f0, f1) of whole faces with at most max_entries
// (face, tile) pairs (at least one face per chunk).
template <typename T>
void prepare(const RenderParams& P, double reach, const TileGrid& g, int64_t max_entries, int nt,
             const T* face_vertices, std::vector<Face<T>>& faces, std::vector<int64_t>& ntiles,
             std::vector<int64_t>& chunks) {
  faces.resize(P.N);
  ntiles.resize(P.N);
  parallel_chunks(
      P.N, kFaceItem,
      [&](int64_t i0, int64_t i1, int) {
        for (int64_t i = i0; i < i1; ++i) {
          face_setup(face_vertices + 9 * i, reach, faces[i]);
          ntiles[i] = tiles_of(faces[i], g);
        }
      },
      nt);
  chunks.assign(1, 0);
  int64_t used = 0;
  for (int64_t f = 0; f < P.N; ++f) {
    if (used > 0 && used + ntiles[f] > max_entries) {
      chunks.push_back(f);
      used = 0;
    }
    used += ntiles[f];
  }
  chunks.push_back(P.N);
}

// A scene ready for the tile passes: preprocessed packed faces, their tile counts, the face chunks and the mesh
// offsets (host memory, [B + 1], checked by the caller: 0 first, non-decreasing, N last).
template <typename T>
struct Scene {
  const RenderParams& P;
  const int64_t* offsets;
  TileGrid g;
  int nt;
  std::vector<Face<T>> faces;
  std::vector<int64_t> ntiles, chunks;
  Bins bins;
  size_t chunk = 0;  // the chunk binned last

  Scene(const RenderParams& P_, const int64_t* offsets_, double reach_, int64_t tile_size, int64_t max_entries, int nt_,
        const T* face_vertices)
      : P(P_), offsets(offsets_), g(tile_grid(P_, reach_, tile_size)), nt(nt_) {
    prepare(P, reach_, g, max_entries, nt, face_vertices, faces, ntiles, chunks);
  }
  size_t num_chunks() const { return chunks.size() - 1; }
  // the face count of mesh b (what `average` alpha divides by)
  int64_t mesh_faces(int64_t b) const { return offsets[b + 1] - offsets[b]; }
  void bin(size_t c, bool with_faces) {
    chunk = c;
    bin_faces(faces, ntiles, offsets, P.B, chunks[c], chunks[c + 1], g, with_faces, nt, bins);
  }
  // fn(b, i, px, py, e0, e1) for every pixel i (r * W + c) of image b whose tile lists the entries [e0, e1)
  // (bins.tile_face[e]: packed face index, ascending); tiles in parallel, each tile's pixels in one thread.
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
  // fn(f, k0, k1) for every packed face f of the chunk binned last (with_faces), its entries
  // bins.face_entry[k0 .. k1) in tile order; faces in parallel.
  template <typename Fn>
  void for_each_face(Fn&& fn) const {
    const int64_t f0 = chunks[chunk], nf = chunks[chunk + 1] - f0;
    parallel_chunks(
        nf, kFaceItem,
        [&](int64_t i0, int64_t i1, int) {
          for (int64_t i = i0; i < i1; ++i) fn(f0 + i, bins.face_start[i], bins.face_start[i + 1]);
        },
        nt);
  }
};

}  // namespace relaxops
