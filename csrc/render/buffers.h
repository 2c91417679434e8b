// GenDR render buffers (docs/math/render.md, "Buffers" and "UV textures"): depth, barycentrics, per-vertex
// attributes and UV textures per fragment, aggregated by the hard depth test or the RGB softmax, with alpha; the
// per-fragment math and its derivatives, shared by the CPU (buffers_cpu.cpp) and CUDA (buffers.cu) kernels.
//
// Layouts (row-major, contiguous; N faces of B meshes packed, mesh b owning faces [offsets[b], offsets[b+1])):
//   attributes [N, 3, C]    per face corner values
//   face_uvs   [N, 3, 2]    (u, v) per face corner (read only when Ct > 0)
//   texture    [B, Tt, Ct]  each image's mip pyramid: level l (h_l x w_l texels, row 0 at the top, v up) at texel
//                           offset sum_{j<l} h_j w_j, row-major [h_l, w_l, Ct]
//   buffers    [B, K, H, W] K = C + Ct + 5 channels: attributes (C), texture (Ct), depth, barycentrics (3), alpha
//   aggr       [B, 2, H, W] as render.h's (softmax: (S, m); hard: (depth, packed face index, -1 for none))
//   background C + Ct + 4   the value of each non-alpha channel where no face contributes
//
// Per surviving fragment (fragment() of render.h): barycentrics b = wbar, or b_k = (wbar_k / z_k) zp with
// perspective correction; depth zp; attributes and uv interpolated with b; the texture sampled trilinearly at uv
// with a per-face level of detail. The Python reference (python/relaxops/render/reference.py, buffers_forward /
// buffers_backward) is the oracle: the formulas here follow it.
#pragma once

#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

#include "render.h"

namespace relaxops {

constexpr int kMaxLevels = 32;  // mip levels: enough for textures below 2^31 texels a side

// Buffer options: channel counts, barycentric mode, texture wrap (0 repeat, 1 clamp) and the pyramid's levels.
struct BufferParams {
  int64_t C, Ct, Tt;  // attribute channels, texture channels, texels of one image's pyramid
  bool persp;
  int wrap, L;
  int64_t h[kMaxLevels], w[kMaxLevels], off[kMaxLevels];
  HOST_DEVICE int64_t K() const { return C + Ct + 5; }
  HOST_DEVICE int64_t depth() const { return C + Ct; }  // channel of the depth; barycentrics follow, then alpha
};

// The buffer options from buf_ints = [perspective_correct, wrap, L, h_0, w_0, ..., h_{L-1}, w_{L-1}] and the sizes
// (C, Ct, Tt) of attributes [N, 3, C] and texture [B, Tt, Ct]; checks that the levels tile the Tt texels and that
// background has C + Ct + 4 values.
using BufferSizes = std::tuple<int64_t, int64_t, int64_t>;
inline BufferParams make_buffer_params(const std::vector<int64_t>& bi, const BufferSizes& sizes,
                                       const std::vector<double>& background) {
  RELAXOPS_CHECK(bi.size() >= 3, "render_buffers: buf_ints needs perspective_correct, wrap and L");
  const int64_t C = std::get<0>(sizes), Ct = std::get<1>(sizes), Tt = std::get<2>(sizes);
  BufferParams Q{};
  Q.C = C, Q.Ct = Ct, Q.Tt = Tt;
  RELAXOPS_CHECK(bi[0] == 0 || bi[0] == 1, "render_buffers: perspective_correct must be 0 or 1");
  RELAXOPS_CHECK(bi[1] == 0 || bi[1] == 1, "render_buffers: unknown texture wrap id (0 repeat, 1 clamp)");
  Q.persp = bi[0] == 1, Q.wrap = int(bi[1]);
  const int64_t big = int64_t(1) << 31;
  RELAXOPS_CHECK(C >= 0 && C < big && Ct >= 0 && Ct < big && Tt >= 0 && Tt < (int64_t(1) << 60) / (Ct > 0 ? Ct : 1),
                 "render_buffers: bad attribute or texture sizes");
  RELAXOPS_CHECK(bi[2] >= 0 && bi[2] <= kMaxLevels && int64_t(bi.size()) == 3 + 2 * bi[2],
                 "render_buffers: buf_ints must hold L <= 32 level sizes (h, w)");
  Q.L = int(bi[2]);
  RELAXOPS_CHECK((Ct > 0) == (Q.L > 0), "render_buffers: a texture needs at least one level, no texture none");
  int64_t total = 0;
  for (int l = 0; l < Q.L; ++l) {
    Q.h[l] = bi[3 + 2 * l], Q.w[l] = bi[4 + 2 * l];
    RELAXOPS_CHECK(Q.h[l] >= 1 && Q.h[l] < big && Q.w[l] >= 1 && Q.w[l] < big,
                   "render_buffers: texture level sizes must be in [1, 2^31)");
    Q.off[l] = total;
    total += Q.h[l] * Q.w[l];
    RELAXOPS_CHECK(total <= Tt, "render_buffers: the texture levels must sum to the texture's texels");
  }
  RELAXOPS_CHECK(total == Tt, "render_buffers: the texture levels must sum to the texture's texels");
  RELAXOPS_CHECK(int64_t(background.size()) == C + Ct + 4, "render_buffers: background needs C + Ct + 4 values");
  return Q;
}

// The 2 x 4 trilinear taps of a texture sample: texel index (into the image's pyramid), weight, and the weight's
// derivative with respect to u and v (the level of detail and texel indices held fixed).
template <typename T>
struct TexTaps {
  int64_t idx[8];
  T w[8], du[8], dv[8];
};

// What the buffers read of one surviving fragment.
template <typename T>
struct FragValues {
  T b[3];    // barycentrics (perspective-correct or wbar)
  T zp;      // depth
  T uv[2];   // interpolated (u, v) (Ct > 0)
  bool tex;  // uv finite: the taps are valid, else the texture values are NaN
  TexTaps<T> taps;
};

// Level of detail of a face (constant over it): rho, the larger texel footprint of a pixel step along a column
// or a row, from the face's affine d(u, v)/d(x, y) (unclipped barycentrics); lambda = clamp(log2 rho, 0, L - 1),
// 0 where rho is 0 or not finite.
template <typename T>
HOST_DEVICE inline T texture_lod(const RenderParams& P, const BufferParams& Q, const Face<T>& f, const T* uv) {
  T jux = 0, juy = 0, jvx = 0, jvy = 0;  // d(u, v)/d(x, y) = sum_k uv_k (dw_k/dx, dw_k/dy), dw_k/dx = adj[3k] / det
  for (int k = 0; k < 3; ++k) {
    const T wx = f.adj[3 * k] / f.det, wy = f.adj[3 * k + 1] / f.det;
    jux += uv[2 * k] * wx;
    juy += uv[2 * k] * wy;
    jvx += uv[2 * k + 1] * wx;
    jvy += uv[2 * k + 1] * wy;
  }
  // one pixel step is 2 / W in x and -2 / H in y; a unit of u spans w_0 texels of the base level, of v h_0
  const T du_c = jux * T(2.0 / double(P.W) * double(Q.w[0])), dv_c = jvx * T(2.0 / double(P.W) * double(Q.h[0]));
  const T du_r = -juy * T(2.0 / double(P.H) * double(Q.w[0])), dv_r = -jvy * T(2.0 / double(P.H) * double(Q.h[0]));
  const T rc = std::hypot(du_c, dv_c), rr = std::hypot(du_r, dv_r);
  const T rho = rc > rr ? rc : rr;
  if (!(rho > 0 && std::isfinite(rho))) return T(0);
  const T lam = std::log2(rho), top = T(Q.L - 1);
  return lam < 0 ? T(0) : (lam > top ? top : lam);
}

// Texel indices i0 = x0 and i1 = x0 + 1 of an integral coordinate x0 on a level of n texels, wrapped (repeat: mod
// n, non-negative; clamp: to [0, n - 1]); always in range.
template <typename T>
HOST_DEVICE inline void wrap_pair(T x0, int64_t n, int wrap, int64_t& i0, int64_t& i1) {
  if (wrap == 1) {
    const T c = x0 < T(-1) ? T(-1) : (x0 > T(n) ? T(n) : x0);
    const int64_t k = int64_t(c);
    i0 = k < 0 ? 0 : (k > n - 1 ? n - 1 : k);
    i1 = k + 1 < 0 ? 0 : (k + 1 > n - 1 ? n - 1 : k + 1);
  } else {
    T m = std::fmod(x0, T(n));
    if (m < 0) m += T(n);
    int64_t k = int64_t(m);
    k = k < 0 ? 0 : (k > n - 1 ? n - 1 : k);  // only through rounding of a huge level in float32
    i0 = k;
    i1 = k + 1 == n ? 0 : k + 1;
  }
}

// The trilinear taps at (u, v) with level of detail lam: levels l0 = floor(lam), l1 = min(l0 + 1, L - 1) with
// weights 1 - f, f (f = lam - l0); on level h x w: x = u w - 0.5, y = (1 - v) h - 0.5, the bilinear weights of
// (x0 | x0 + 1, y0 | y0 + 1) in the order (x0, y0), (x0 + 1, y0), (x0, y0 + 1), (x0 + 1, y0 + 1). False if u, v or
// a coordinate is not finite (no tap is read then).
template <typename T>
HOST_DEVICE inline bool texture_taps(const BufferParams& Q, T lam, T u, T v, TexTaps<T>& s) {
  const int l0 = int(std::floor(lam)), l1 = l0 + 1 < Q.L ? l0 + 1 : Q.L - 1;
  const T fl = lam - T(l0);
  for (int j = 0; j < 2; ++j) {
    const int l = j == 0 ? l0 : l1;
    const T lw = j == 0 ? 1 - fl : fl, wl = T(Q.w[l]), hl = T(Q.h[l]);
    const T x = u * wl - T(0.5), y = (1 - v) * hl - T(0.5);
    if (!(std::isfinite(x) && std::isfinite(y))) return false;
    const T x0 = std::floor(x), y0 = std::floor(y), fx = x - x0, fy = y - y0;
    int64_t ix0, ix1, iy0, iy1;
    wrap_pair(x0, Q.w[l], Q.wrap, ix0, ix1);
    wrap_pair(y0, Q.h[l], Q.wrap, iy0, iy1);
    const int64_t o = Q.off[l], row0 = o + iy0 * Q.w[l], row1 = o + iy1 * Q.w[l];
    int64_t* idx = s.idx + 4 * j;
    T *w = s.w + 4 * j, *du = s.du + 4 * j, *dv = s.dv + 4 * j;
    idx[0] = row0 + ix0, idx[1] = row0 + ix1, idx[2] = row1 + ix0, idx[3] = row1 + ix1;
    w[0] = lw * ((1 - fx) * (1 - fy)), w[1] = lw * (fx * (1 - fy)), w[2] = lw * ((1 - fx) * fy), w[3] = lw * (fx * fy);
    // dx/du = w_l, dy/dv = -h_l
    const T su = lw * wl, sv = -lw * hl;
    du[0] = -su * (1 - fy), du[1] = su * (1 - fy), du[2] = -su * fy, du[3] = su * fy;
    dv[0] = -sv * (1 - fx), dv[1] = -sv * fx, dv[2] = sv * (1 - fx), dv[3] = sv * fx;
  }
  return true;
}

// The fragment's barycentrics, depth, uv and texture taps. uv: the face's [3, 2] uvs (read when Ct > 0).
template <typename T>
HOST_DEVICE inline void fragment_values(const RenderParams& P, const BufferParams& Q, const Face<T>& f,
                                        const Fragment<T>& fr, const T* uv, FragValues<T>& v) {
  v.zp = fr.zp;
  for (int k = 0; k < 3; ++k) v.b[k] = Q.persp ? fr.wbar[k] / f.z[k] * fr.zp : fr.wbar[k];
  v.tex = false;
  if (Q.Ct > 0) {
    for (int i = 0; i < 2; ++i) v.uv[i] = v.b[0] * uv[i] + v.b[1] * uv[2 + i] + v.b[2] * uv[4 + i];
    v.tex = texture_taps(Q, texture_lod(P, Q, f, uv), v.uv[0], v.uv[1], v.taps);
  }
}

// Channel ch (< K - 1) of the fragment: attr points at the face's [3, C] attributes, tex at the image's [Tt, Ct]
// pyramid.
template <typename T>
HOST_DEVICE inline T channel_value(const BufferParams& Q, const FragValues<T>& v, const T* attr, const T* tex,
                                   int64_t ch) {
  if (ch < Q.C) return v.b[0] * attr[ch] + v.b[1] * attr[Q.C + ch] + v.b[2] * attr[2 * Q.C + ch];
  if (ch < Q.C + Q.Ct) {
    if (!v.tex) return T(NAN);
    const int64_t c = ch - Q.C;
    T s = 0;
    for (int j = 0; j < 8; ++j) s += v.taps.w[j] * tex[v.taps.idx[j] * Q.Ct + c];
    return s;
  }
  return ch == Q.depth() ? v.zp : v.b[ch - Q.depth() - 1];
}

// A pixel's running state: alpha and the aggregation state (softmax: S = s0, running max m = s1; hard: depth s0
// and packed face s1 of the winner). The softmax's weighted channel sums live in the output buffer (out: the
// pixel's channel 0, channel stride HW).
template <typename T>
struct BufferState {
  T A, s0, s1;
};

// Faces of one mesh: its face count (alpha `average`), attributes, uvs and the image's texture.
template <typename T>
struct MeshData {
  int64_t F;
  const T *attr, *uv, *tex;  // attr, uv: the packed face arrays; tex: this image's pyramid
};

// The state before any face; the softmax starts from the background alone (as render.h's pixel_start).
template <typename T>
HOST_DEVICE inline BufferState<T> buffer_start(const RenderParams& P, const BufferParams& Q, const T* bg, T* out,
                                               int64_t HW) {
  const PixelState<T> s = pixel_start<T>(P);
  if (P.rgb == 1)
    for (int64_t ch = 0; ch < Q.K() - 1; ++ch) out[ch * HW] = bg[ch];
  return {s.A, s.s0, s.s1};
}

// Folds packed face fi into the pixel's state.
template <typename T>
HOST_DEVICE inline void buffer_step(const RenderParams& P, const BufferParams& Q, const Face<T>& f, int64_t fi,
                                    const MeshData<T>& m, T px, T py, BufferState<T>& s, T* out, int64_t HW) {
  Fragment<T> fr;
  if (!fragment(P, f, px, py, fr)) return;
  s.A = fold_step(P, s.A, fr.D, m.F);
  if (!in_depth_range(P, fr.zp) || !(P.double_side || f.front)) return;
  if (P.rgb == 0) {  // the closest face passing the closed test; strict <: the lowest index wins ties
    if (fr.closed && fr.zp < s.s0) s.s0 = fr.zp, s.s1 = T(fi);
    return;
  }
  const T gam = T(P.gamma), zt = (T(P.far_z) - fr.zp) / (T(P.far_z) - T(P.near_z));
  T delta = 1;
  if (zt > s.s1) {
    delta = std::exp((s.s1 - zt) / gam);
    s.s1 = zt;
  }
  const T w = std::exp((zt - s.s1) / gam) * fr.D;
  FragValues<T> v;
  fragment_values(P, Q, f, fr, m.uv + 6 * fi, v);
  s.s0 = delta * s.s0 + w;
  const T* attr = m.attr + 3 * Q.C * fi;
  for (int64_t ch = 0; ch < Q.K() - 1; ++ch)
    out[ch * HW] = delta * out[ch * HW] + w * channel_value(Q, v, attr, m.tex, ch);
}

// The output channels from the final state: softmax: the sums over S; hard: the winner's values (face: the
// winner's Face, read only if s.s1 >= 0), or the background.
template <typename T>
HOST_DEVICE inline void buffer_finish(const RenderParams& P, const BufferParams& Q, const BufferState<T>& s,
                                      const Face<T>* face, const MeshData<T>& m, const T* bg, T px, T py, T* out,
                                      int64_t HW) {
  out[(Q.K() - 1) * HW] = s.A;
  if (P.rgb == 1) {
    for (int64_t ch = 0; ch < Q.K() - 1; ++ch) out[ch * HW] = out[ch * HW] / s.s0;
    return;
  }
  Fragment<T> fr;
  if (s.s1 < 0 || !fragment(P, *face, px, py, fr)) {
    for (int64_t ch = 0; ch < Q.K() - 1; ++ch) out[ch * HW] = bg[ch];
    return;
  }
  const int64_t fi = int64_t(s.s1);
  FragValues<T> v;
  fragment_values(P, Q, *face, fr, m.uv + 6 * fi, v);
  for (int64_t ch = 0; ch < Q.K() - 1; ++ch) out[ch * HW] = channel_value(Q, v, m.attr + 3 * Q.C * fi, m.tex, ch);
}

// Adds dL/dx, dL/dy of the vertices through the clipped barycentrics to g[9], from gw = dL/dwbar: wbar_k =
// c_k / max(sum c, 1e-5), c_k = clamp(w_k, 0, 1) (only 0 < w_k < 1 passes; the branch of the floor held fixed),
// w_k = n_k / det with n_k = adj[3k] px + adj[3k+1] py + adj[3k+2] (docs/math/render.md §2.1).
template <typename T>
HOST_DEVICE inline void barycentric_backward(const Face<T>& f, const Fragment<T>& fr, T px, T py, const T* gw, T* g) {
  T w[3], sum = 0;
  for (int k = 0; k < 3; ++k) {
    w[k] = (f.adj[3 * k] * px + f.adj[3 * k + 1] * py + f.adj[3 * k + 2]) / f.det;
    sum += w[k] < 0 ? T(0) : (w[k] > 1 ? T(1) : w[k]);
  }
  const bool floored = !(sum >= T(1e-5));
  const T S = floored ? T(1e-5) : sum;
  const T gbar = floored ? T(0) : gw[0] * fr.wbar[0] + gw[1] * fr.wbar[1] + gw[2] * fr.wbar[2];
  T gn[3], gdet = 0;  // dL/dn_k = dL/dw_k / det, dL/ddet = -sum_k dL/dw_k w_k / det
  for (int k = 0; k < 3; ++k) {
    const T gwk = w[k] > 0 && w[k] < 1 ? (gw[k] - gbar) / S : T(0);
    gn[k] = gwk / f.det;
    gdet -= gwk * w[k];
  }
  gdet = gdet / f.det;
  // vertex m is vertex i = k + 1 of n_k for k = m - 1 and vertex j = k + 2 of n_k for k = m + 1:
  // dn_k/dx_i = y_j - py, dn_k/dx_j = py - y_i, dn_k/dy_i = px - x_j, dn_k/dy_j = x_i - px;
  // ddet/dx_m = y_{m+1} - y_{m+2}, ddet/dy_m = x_{m+2} - x_{m+1}
  for (int m = 0; m < 3; ++m) {
    const int a = (m + 1) % 3, c = (m + 2) % 3;  // n_c has m as its vertex i, n_a as its vertex j
    g[3 * m] += gn[c] * (f.y[a] - py) + gn[a] * (py - f.y[c]) + gdet * (f.y[a] - f.y[c]);
    g[3 * m + 1] += gn[c] * (px - f.x[a]) + gn[a] * (f.x[c] - px) + gdet * (f.x[c] - f.x[a]);
  }
}

// The backward of one (pixel, face) pair. out, gout: the pixel's saved buffers and their upstream gradient (channel
// stride HW); s: its saved state (alpha, aggr). Writes the face's vertex gradient g[9] (x y z per vertex), its uv
// gradient guv[6], and `scale`: the gradient of the fragment's channel values is scale * gout (the attribute
// gradient is b_k scale gout_c, the texel gradient taps.w[j] scale gout_{C+c}); false if the pair contributes
// nothing. Exact through w (the clip branches and the 1e-5 floor of wbar's sum held fixed), zp and the
// perspective-correct b; the coverage D by render.h's coverage_backward.
template <typename T>
HOST_DEVICE inline bool buffer_pair_backward(const RenderParams& P, const BufferParams& Q, const Face<T>& f, int64_t fi,
                                             const MeshData<T>& m, T px, T py, const BufferState<T>& s, const T* out,
                                             const T* gout, int64_t HW, T* g, T* guv, T& scale, Fragment<T>& fr,
                                             FragValues<T>& v) {
  if (!fragment(P, f, px, py, fr) || !in_depth_range(P, fr.zp)) return false;
  for (int j = 0; j < 9; ++j) g[j] = 0;
  for (int j = 0; j < 6; ++j) guv[j] = 0;
  scale = 0;
  T G = gout[(Q.K() - 1) * HW] * fold_grad(P, s.A, fr.D, m.F);  // dL/dD
  T gzp = 0;                                                    // dL/dzp besides the values
  if (P.rgb == 0) {
    if (int64_t(s.s1) == fi) scale = 1;
  } else if (P.double_side || f.front) {
    const T gam = T(P.gamma), nearz = T(P.near_z), farz = T(P.far_z);
    const T zt = (farz - fr.zp) / (farz - nearz);
    scale = fr.D * std::exp((zt - s.s1) / gam) / s.s0;  // w_t = e_t / S
  }
  if (scale == 0) {  // alpha only
    coverage_backward(P, fr, G, g);
    return true;
  }
  fragment_values(P, Q, f, fr, m.uv + 6 * fi, v);
  const T* attr = m.attr + 3 * Q.C * fi;
  const T* uv = m.uv + 6 * fi;
  T gb[3] = {0, 0, 0}, gu = 0, gv = 0, gz = 0;  // dL/d(b, u, v, zp) through the values
  if (P.rgb == 1) {                             // dL/dw_t = sum_c g_c (V_t,c - V_c) feeds D and zp
    T grgb = 0;
    for (int64_t ch = 0; ch < Q.K() - 1; ++ch)
      grgb += gout[ch * HW] * (channel_value(Q, v, attr, m.tex, ch) - out[ch * HW]);
    grgb = scale * grgb;
    G = G + grgb / fr.D;
    gzp = grgb / T(P.gamma) / (T(P.near_z) - T(P.far_z));
  }
  for (int64_t c = 0; c < Q.C; ++c) {
    const T gc = scale * gout[c * HW];
    for (int k = 0; k < 3; ++k) gb[k] += gc * attr[k * Q.C + c];
  }
  if (v.tex) {
    for (int64_t c = 0; c < Q.Ct; ++c) {
      const T gc = scale * gout[(Q.C + c) * HW];
      T su = 0, sv = 0;
      for (int j = 0; j < 8; ++j) {
        const T t = m.tex[v.taps.idx[j] * Q.Ct + c];
        su += v.taps.du[j] * t;
        sv += v.taps.dv[j] * t;
      }
      gu += gc * su;
      gv += gc * sv;
    }
  }
  if (Q.Ct > 0)
    for (int k = 0; k < 3; ++k) {
      gb[k] += uv[2 * k] * gu + uv[2 * k + 1] * gv;
      guv[2 * k] = v.b[k] * gu;
      guv[2 * k + 1] = v.b[k] * gv;
    }
  gz = scale * gout[Q.depth() * HW] + gzp;
  for (int k = 0; k < 3; ++k) gb[k] += scale * gout[(Q.depth() + 1 + k) * HW];
  // q_k = wbar_k / z_k, zp = 1 / sum q, b_k = q_k zp (or wbar_k): dL/dq_j = -zp^2 gz + zp (gb_j - sum_k gb_k b_k)
  T gw[3];
  if (Q.persp) {
    const T bg = gb[0] * v.b[0] + gb[1] * v.b[1] + gb[2] * v.b[2];
    for (int j = 0; j < 3; ++j) {
      const T gq = -(fr.zp * fr.zp) * gz + fr.zp * (gb[j] - bg);
      gw[j] = gq / f.z[j];
      g[3 * j + 2] = -gq * fr.wbar[j] / (f.z[j] * f.z[j]);
    }
  } else {
    for (int j = 0; j < 3; ++j) {
      const T gq = -(fr.zp * fr.zp) * gz;
      gw[j] = gq / f.z[j] + gb[j];
      g[3 * j + 2] = -gq * fr.wbar[j] / (f.z[j] * f.z[j]);
    }
  }
  barycentric_backward(f, fr, px, py, gw, g);
  coverage_backward(P, fr, G, g);
  return true;
}

// Entry points: render.h's binning and fold (render_cpu.h, render_cuda.cuh) over packed faces (offsets [B + 1]: host
// memory for the CPU kernels, device memory for CUDA; checked by the caller); background: C + Ct + 4 values in host
// memory. The backward fills every gradient (zeros where nothing contributes).
template <typename T>
void buffers_forward_cpu(const RenderParams& P, const BufferParams& Q, double reach, int64_t tile_size,
                         int64_t max_entries, int threads, const T* face_vertices, const T* attributes,
                         const T* face_uvs, const T* texture, const int64_t* offsets, const double* background,
                         T* buffers, T* aggr);

template <typename T>
void buffers_backward_cpu(const RenderParams& P, const BufferParams& Q, double reach, int64_t tile_size,
                          int64_t max_entries, int threads, const T* face_vertices, const T* attributes,
                          const T* face_uvs, const T* texture, const int64_t* offsets, const T* buffers, const T* aggr,
                          const T* grad_buffers, T* grad_face_vertices, T* grad_attributes, T* grad_face_uvs,
                          T* grad_texture);

// CUDA (buffers.cu): one block per (image, tile), one thread per pixel; dtype 0 = float32, 1 = float64.
void buffers_forward_cuda(int dtype, const RenderParams& P, const BufferParams& Q, double reach, int64_t tile_size,
                          const void* face_vertices, const void* attributes, const void* face_uvs, const void* texture,
                          const int64_t* offsets, const double* background, void* buffers, void* aggr,
                          std::uintptr_t stream);
void buffers_backward_cuda(int dtype, const RenderParams& P, const BufferParams& Q, double reach, int64_t tile_size,
                           const void* face_vertices, const void* attributes, const void* face_uvs, const void* texture,
                           const int64_t* offsets, const void* buffers, const void* aggr, const void* grad_buffers,
                           void* grad_face_vertices, void* grad_attributes, void* grad_face_uvs, void* grad_texture,
                           std::uintptr_t stream);

}  // namespace relaxops
