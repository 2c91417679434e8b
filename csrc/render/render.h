// GenDR rasterizer (docs/math/render.md): the per-(pixel, face) math and the binning shared by the CPU and CUDA
// kernels, and their entry points.
//
// Layouts (row-major, contiguous):
//   face_vertices [N, 9]       packed faces of B meshes (mesh b: faces offsets[b] .. offsets[b + 1] - 1, drawn
//                              into image b); x0 y0 z0 x1 y1 z1 x2 y2 z2: x, y in NDC (y up), z camera depth
//   offsets       [B + 1]      int64: 0, non-decreasing, N (a padded [B, F] batch: offsets[b] = b F)
//   textures      [N, T, 3]    surface texels (T = R^2) or per-vertex colours (T = 3)
//   image         [B, 4, H, W] RGB + alpha, row 0 at the top; pixel (r, c) has the centre
//                              x = (2c + 1 - W) / W, y = (H - 1 - 2r) / H
//   aggr          [B, 2, H, W] softmax RGB: (S, m) of the streaming log-sum-exp; hard RGB: (depth, packed face
//                              index) of the closest covering face (face -1: none)
//
// A face covers a pixel with probability D = F(s x / tau) (x: distance to the boundary, or its square), culled
// (skipped for alpha, RGB and gradients) outside the bounding box grown by sqrt(eps tau), outside and farther
// than that, or where D <= 1e-6. Alpha is the left fold of a T-conorm over the surviving faces of the pixel's mesh
// in ascending index (or, for `average`, their summed D over the mesh's face count); RGB a hard depth test or a softmax
// over normalised inverse depth. The backward recomputes every fragment and applies the original kernel's gradient
// conventions (docs/math/render.md §5.2). The Python reference (python/relaxops/render/reference.py) is the oracle:
// the formulas here follow it operation by operation.
#pragma once

#include <cmath>
#include <cstdint>

#include "../common/common.h"

namespace relaxops {

enum RenderDist : int {
  kDistHard = 0,
  kDistUniform,
  kDistCubicHermite,
  kDistWigner,
  kDistGaussian,
  kDistLaplace,
  kDistLogistic,
  kDistGudermannian,
  kDistCauchy,
  kDistReciprocal,
  kDistGumbelMax,
  kDistGumbelMin,
  kDistExponential,
  kDistExponentialRev,
  kDistGamma,
  kDistGammaRev,
  kDistLevy,
  kDistLevyRev,
  kNumDistributions
};
enum TConorm : int {
  kAlphaHard = 0,
  kMax,
  kProbabilistic,
  kEinstein,
  kHamacher,
  kFrank,
  kYager,
  kAczelAlsina,
  kDombi,
  kSchweizerSklar,
  kAverage,  // not a T-conorm: the mean of the faces' D (fold_step)
  kNumTConorms
};

constexpr double kProbabilityThreshold = 1e-6;
constexpr double kDetMin = 1e-10;
constexpr double kDepthInit = 1e7;
constexpr double kClamp = 1e-6;
constexpr double kSaturation = 1e-8;
constexpr double kGammaThreshold = 15.0;
constexpr int kGammaSteps = 32;
constexpr double kLevyGuard = 1e-6;
constexpr double kPi = 3.14159265358979323846;

// Rasterizer options; ids as in relaxations.py. Derived on the host: margin = sqrt(eps tau), cull2 = eps tau,
// gamma_lg = lgamma(k), gamma_c0 = 1 / Gamma(k + 1), log_p = ln p (Frank: p itself underflows float32 below 1e-45).
struct RenderParams {
  int64_t B, N, H, W, T;  // N: the packed faces of all B meshes
  int dist, alpha, rgb, texture;
  bool squared, double_side;
  double tau, shape, shift, eps, p, rgb_eps, gamma, near_z, far_z;
  double bg[3];
  double margin, cull2, gamma_lg, gamma_c0, log_p;
};

// One face, preprocessed (docs/math/render.md §2.1): barycentrics w_k = (adj[3k] x + adj[3k+1] y + adj[3k+2]) / det.
template <typename T>
struct Face {
  T x[3], y[3], z[3];
  T adj[9];
  T det;
  T xmin, xmax, ymin, ymax;
  T reach;     // beyond this distance from the bounding box D <= 1e-6: the binning radius plus a rounding margin
  int obtuse;  // first vertex with an obtuse angle, -1 if none
  bool valid;  // |det| >= 1e-10
  bool front;  // clockwise on screen (det < 0)
};

// reach: the distance beyond which the distribution's D <= 1e-6 (RasterSettings.reach).
template <typename T>
HOST_DEVICE inline void face_setup(const T* v, double reach, Face<T>& f) {
  for (int k = 0; k < 3; ++k) {
    f.x[k] = v[3 * k];
    f.y[k] = v[3 * k + 1];
    f.z[k] = v[3 * k + 2];
  }
  for (int k = 0; k < 3; ++k) {
    const int i = (k + 1) % 3, j = (k + 2) % 3;
    f.adj[3 * k] = f.y[i] - f.y[j];
    f.adj[3 * k + 1] = f.x[j] - f.x[i];
    f.adj[3 * k + 2] = f.x[i] * f.y[j] - f.x[j] * f.y[i];
  }
  const T det = f.x[2] * (f.y[0] - f.y[1]) + f.x[0] * (f.y[1] - f.y[2]) + f.x[1] * (f.y[2] - f.y[0]);
  // a non-finite vertex, or one so far away that the face's area overflows, makes the face invalid (skipped
  // like a degenerate face)
  bool finite = std::isfinite(det);
  for (int k = 0; k < 9; ++k) finite = finite && std::isfinite(v[k]);
  f.valid = finite && !(std::fabs(det) < T(kDetMin));
  f.front = det < 0;
  f.det = det > 0 ? (det > T(kDetMin) ? det : T(kDetMin)) : (det < T(-kDetMin) ? det : T(-kDetMin));
  f.xmin = fmin(f.x[0], fmin(f.x[1], f.x[2]));
  f.xmax = fmax(f.x[0], fmax(f.x[1], f.x[2]));
  f.ymin = fmin(f.y[0], fmin(f.y[1], f.y[2]));
  f.ymax = fmax(f.y[0], fmax(f.y[1], f.y[2]));
  const double scale =
      fmax(fmax(fabs(double(f.xmin)), fabs(double(f.xmax))), fmax(fabs(double(f.ymin)), fabs(double(f.ymax))));
  f.reach = T(reach + 1e-5 + 1e-4 * reach + 1e-6 * scale);
  f.obtuse = -1;
  for (int k = 2; k >= 0; --k) {
    const int i = (k + 1) % 3, j = (k + 2) % 3;
    if ((f.x[i] - f.x[k]) * (f.x[j] - f.x[k]) + (f.y[i] - f.y[k]) * (f.y[j] - f.y[k]) < 0) f.obtuse = k;
  }
}

// P(k, z) for 0 < z <= 15: z^k e^-z sum_{i < 32} z^i / Gamma(k + i + 1).
template <typename T>
HOST_DEVICE inline T gamma_series(T k, T z, T c0) {
  T term = c0, total = c0;
  for (int i = 1; i < kGammaSteps; ++i) {
    term = term * z / (k + T(i));
    total = total + term;
  }
  return std::pow(z, k) * std::exp(-z) * total;
}

template <typename T>
HOST_DEVICE inline T gamma_density(T k, T z, T lg) {
  return z > 0 ? std::exp((k - 1) * std::log(z) - z - lg) : T(0);
}

template <typename T>
HOST_DEVICE inline T levy_density(T z) {
  return std::pow(z, T(-1.5)) * std::exp(T(-0.5) / z) / T(2.5066282746310002);
}

// D = F(u) and phi = f(u) / tau for u = sx / tau (docs/math/render.md §2.4; every branch as in relaxations.occlusion).
template <typename T>
HOST_DEVICE inline void occlusion(const RenderParams& P, T sx, T& F, T& phi) {
  const T tau = T(P.tau), k = T(P.shape), sh = T(P.shift);
  const T u = sx / tau, au = std::fabs(u);
  T f = 0;
  switch (P.dist) {
    case kDistUniform:
      F = u < -1 ? T(0) : (u < 1 ? (u + 1) / 2 : T(1));
      f = au < 1 ? T(0.5) : T(0);
      break;
    case kDistCubicHermite: {
      const T y = (u + 1) / 2;
      F = u < -1 ? T(0) : (u < 1 ? 3 * y * y - 2 * (y * y * y) : T(1));
      f = au <= 1 ? T(0.75) * (1 - u * u) : T(0);
      break;
    }
    case kDistWigner: {
      const T uc = u < -1 ? T(-1) : (u > 1 ? T(1) : u);
      F = u < -1 ? T(0) : (u < 1 ? T(0.5) + (uc * std::sqrt(1 - uc * uc) + std::asin(uc)) / T(kPi) : T(1));
      const T q = 1 - uc * uc;
      f = au <= 1 ? T(2 / kPi) * std::sqrt(q > 0 ? q : T(0)) : T(0);
      break;
    }
    case kDistGaussian:
      F = T(0.5) * std::erfc(-u / T(1.4142135623730951));
      f = std::exp(T(-0.5) * u * u) / T(2.5066282746310002);
      break;
    case kDistLaplace: {
      const T e = std::exp(-au) / 2;
      F = u < 0 ? e : 1 - e;
      f = e;
      break;
    }
    case kDistLogistic:
      F = 1 / (1 + std::exp(-u));
      f = F * (1 - F);
      break;
    case kDistGudermannian:
      F = std::atan(std::tanh(u / 2)) * T(2 / kPi) + T(0.5);
      f = 1 / (std::cosh(u) * T(kPi));
      break;
    case kDistCauchy:
      F = T(0.5) + std::atan(u) / T(kPi);
      f = 1 / (T(kPi) * (1 + u * u));
      break;
    case kDistReciprocal:
      F = T(0.5) + u / (2 * (1 + au));
      f = 1 / (2 * ((1 + au) * (1 + au)));
      break;
    case kDistGumbelMax:
      F = std::exp(-std::exp(-u));
      f = std::exp(-(u + std::exp(-u)));
      break;
    case kDistGumbelMin:
      F = -std::expm1(-std::exp(u));
      f = std::exp(u - std::exp(u));
      break;
    case kDistExponential: {
      const T z = u + sh;
      F = z < 0 ? T(0) : -std::expm1(-z);
      f = z < 0 ? T(0) : std::exp(-z);
      break;
    }
    case kDistExponentialRev: {
      const T z = u - sh;
      F = z > 0 ? T(1) : std::exp(z);
      f = z > 0 ? T(0) : std::exp(z);
      break;
    }
    case kDistGamma: {
      const T z = u + sh;
      F = z <= 0 ? T(0) : (z > T(kGammaThreshold) ? T(1) : gamma_series(k, z, T(P.gamma_c0)));
      f = gamma_density(k, z, T(P.gamma_lg));
      break;
    }
    case kDistGammaRev: {
      const T z = sh - u;
      F = u >= sh ? T(1) : (z > T(kGammaThreshold) ? T(0) : 1 - gamma_series(k, z, T(P.gamma_c0)));
      f = u < sh ? gamma_density(k, z, T(P.gamma_lg)) : T(0);
      break;
    }
    case kDistLevy: {
      const T z = u + sh;
      const bool ok = z * tau > T(kLevyGuard);
      F = ok ? std::erfc(std::sqrt(T(0.5) / z)) : T(0);
      f = ok ? levy_density(z) : T(0);
      break;
    }
    case kDistLevyRev: {
      const T z = sh - u;
      const bool ok = -z * tau < T(-kLevyGuard);
      F = -z * tau >= T(-kLevyGuard) ? T(1) : 1 - std::erfc(std::sqrt(T(0.5) / z));
      f = ok ? levy_density(z) : T(0);
      break;
    }
    default: F = NAN; f = NAN;
  }
  phi = f / tau;
}

// Frank's T-norm log_p(1 + (p^a - 1)(p^b - 1) / (p - 1)) from L = ln p, relatively accurate and finite for every
// p > 0, != 1 (docs/math/render.md §3.3): no power can overflow; for p < 1/e, where 1 + ... cancels, m - log1p(r) / u
// with u = -L, m = min(a, b), M = max(a, b), r = (1 - e^(-m u)) (1 - e^(-(1-M) u)) e^(-(M-m) u) / (1 - e^-u).
template <typename T>
HOST_DEVICE inline T frank_t_norm(T L, T a, T b) {
  if (L > -1) return std::log1p(std::expm1(a * L) * (std::expm1(b * L) / std::expm1(L))) / L;
  const T u = -L, m = a < b ? a : b, M = a < b ? b : a;
  const T r = std::expm1(-m * u) * std::expm1(-(1 - M) * u) * std::exp(-(M - m) * u) / -std::expm1(-u);
  return m - std::log1p(r) / u;
}

// a ⊥ b as coded by the original (through the dual T-norm of 1 - a, 1 - b; Frank through L = ln lam, see
// frank_t_norm); `hard`: the union of D > 0.5.
template <typename T>
HOST_DEVICE inline T t_conorm(int id, T lam, T L, T a, T b) {
  const T ac = 1 - a, bc = 1 - b;
  switch (id) {
    case kAlphaHard: return b > T(0.5) ? T(1) : a;
    case kMax: return a > b ? a : b;
    case kProbabilistic: return a + b - a * b;
    case kEinstein: return (a + b) / (1 + a * b);
    case kHamacher: {
      const T den = lam + (1 - lam) * (ac + bc - ac * bc);
      return 1 - ac * bc / (den > T(kClamp) ? den : T(kClamp));
    }
    // S(a, b) + T(a, b) = a + b (Frank's functional equation): a + b - T(a, b) does not cancel (T <= min(a, b));
    // where a + b >= 1 the dual 1 - T(1 - a, 1 - b) keeps S <= 1 and S(a, 1) = 1 exactly
    case kFrank: return a + b < 1 ? a + b - frank_t_norm(L, a, b) : 1 - frank_t_norm(L, ac, bc);
    case kYager: {
      const T q = 1 - std::pow(std::pow(a, lam) + std::pow(b, lam), 1 / lam);
      return 1 - (q > 0 ? q : T(0));
    }
    case kAczelAlsina:
      if (ac < T(kSaturation) || bc < T(kSaturation)) return T(1);
      return 1 - std::exp(-std::pow(std::pow(-std::log(ac), lam) + std::pow(-std::log(bc), lam), 1 / lam));
    case kDombi:
      if (ac < T(kSaturation) || bc < T(kSaturation)) return T(1);
      return 1 - 1 / (1 + std::pow(std::pow((1 - ac) / ac, lam) + std::pow((1 - bc) / bc, lam), 1 / lam));
    case kSchweizerSklar: return 1 - std::pow(std::pow(ac, lam) + std::pow(bc, lam) - 1, 1 / lam);
    default: return NAN;
  }
}

template <typename T>
HOST_DEVICE inline T clamp_min(T v, T lo) {
  return v > lo ? v : lo;
}

// dA / dD_f = g'(D_f) / g'(A) from the final alpha A (docs/math/render.md §3.1-§3.2, with the original's clamps).
template <typename T>
HOST_DEVICE inline T t_conorm_grad(int id, T lam, T L, T A, T D) {
  const T c = T(kClamp);
  switch (id) {
    case kAlphaHard: return T(1);
    case kMax: return D == A ? T(1) : T(0);
    case kProbabilistic: return (1 - A) / clamp_min(1 - D, c);
    case kEinstein: return (1 - A * A) / clamp_min(1 - D * D, c);
    case kHamacher: return (1 - A) * (1 + (lam - 1) * A) / clamp_min((1 - D) * (1 + (lam - 1) * D), c);
    // lam^(A-D) (lam^(1-A) - 1) / (q + copysign(c, q)), q = lam^(1-D) - 1, through L = ln lam: for L > 0 numerator
    // and denominator times lam^(D-1), for L < 0 both negated, so that no power overflows
    case kFrank:
      if (L > 0) return -std::expm1(-(1 - A) * L) / (c * std::exp(-(1 - D) * L) - std::expm1(-(1 - D) * L));
      return -std::exp((A - D) * L) * std::expm1((1 - A) * L) / (c - std::expm1((1 - D) * L));
    // yager, aczel_alsina, dombi: g(D)^(p-1) g(A)^(1-p) as one power of the ratio g(D) / g(A) <= 1 (A >= D; 1 where
    // rounding breaks that): the two factors alone under- and overflow for a large p (0 * inf in float32)
    case kYager:
      if (A == 1) return T(0);
      return D > 0 ? std::pow(A > D ? D / A : T(1), lam - 1) : T(0);
    case kAczelAlsina: {
      const T gd = -std::log1p(clamp_min(-D, -1 + c)), ga = -std::log1p(clamp_min(-A, -1 + c));
      return (1 - A) * std::pow(ga > gd ? gd / ga : T(1), lam - 1) / clamp_min(1 - D, c);
    }
    case kDombi: {
      const T cd = clamp_min(1 - D, c), ca = clamp_min(1 - A, c), qd = D / cd, qa = A / ca;
      return (1 - A) * (1 - A) * std::pow(qa > qd ? qd / qa : T(1), lam - 1) / (cd * cd);
    }
    case kSchweizerSklar: return std::pow(clamp_min(1 - D, c) / clamp_min(1 - A, c), lam - 1);
    default: return NAN;
  }
}

// One step of the alpha fold: A ⊥ D, or A + D / F for `average` (docs/math/render.md §3.4): the surviving faces'
// summed D over the face count F of the pixel's mesh (mesh_faces), culled faces counting 0.
template <typename T>
HOST_DEVICE inline T fold_step(const RenderParams& P, T A, T D, int64_t mesh_faces) {
  return P.alpha == kAverage ? A + D / T(mesh_faces) : t_conorm(P.alpha, T(P.p), T(P.log_p), A, D);
}

// dA / dD_f: 1 / F for every face under `average` (F = mesh_faces), t_conorm_grad otherwise.
template <typename T>
HOST_DEVICE inline T fold_grad(const RenderParams& P, T A, T D, int64_t mesh_faces) {
  return P.alpha == kAverage ? T(1) / T(mesh_faces) : t_conorm_grad(P.alpha, T(P.p), T(P.log_p), A, D);
}

// What a surviving (pixel, face) pair contributes; see fragment().
template <typename T>
struct Fragment {
  T D, phi, sign;  // coverage, f(u) / tau, +1 strictly inside else -1
  T dx, dy, r;     // Q - p (Q: nearest boundary point) and its length
  T t[3];          // boundary barycentrics of Q
  T wbar[3];       // clipped barycentrics (depth, texture)
  T zp;            // perspective-correct depth
  bool closed;     // closed inside test (hard RGB)
};

// Unclamped projection of (px, py) on the line through vertices a, b: t_a (t_b = 1 - t_a).
template <typename T>
HOST_DEVICE inline T edge_ta(const Face<T>& f, int a, int b, T px, T py) {
  const T ex = f.x[a] - f.x[b], ey = f.y[a] - f.y[b];
  return (ex * (px - f.x[b]) + ey * (py - f.y[b])) / (ex * ex + ey * ey);
}

template <typename T>
HOST_DEVICE inline T edge_d2(const Face<T>& f, int a, int b, T ta, T px, T py) {
  const T qx = ta * f.x[a] + (1 - ta) * f.x[b] - px, qy = ta * f.y[a] + (1 - ta) * f.y[b] - py;
  return qx * qx + qy * qy;
}

// The (pixel, face) fragment of docs/math/render.md §2.1-§2.3; false if the face is culled at this pixel, or if its
// barycentrics or distance overflow there (huge faces: every quantity of a surviving fragment is finite).
template <typename T>
HOST_DEVICE inline bool fragment(const RenderParams& P, const Face<T>& f, T px, T py, Fragment<T>& g) {
  // the bounding-box cull with margin sqrt(eps tau), tightened to the reach, past which the probability cull
  // would drop the face anyway
  const T m = T(P.margin) < f.reach ? T(P.margin) : f.reach;
  if (!f.valid || px > f.xmax + m || px < f.xmin - m || py > f.ymax + m || py < f.ymin - m) return false;
  T w[3];
  for (int k = 0; k < 3; ++k) w[k] = (f.adj[3 * k] * px + f.adj[3 * k + 1] * py + f.adj[3 * k + 2]) / f.det;
  if (!(std::isfinite(w[0]) && std::isfinite(w[1]) && std::isfinite(w[2]))) return false;
  g.closed = w[0] >= 0 && w[0] <= 1 && w[1] >= 0 && w[1] <= 1 && w[2] >= 0 && w[2] <= 1;
  if (P.dist == kDistHard) {
    g.D = g.closed ? T(1) : T(0);
    g.phi = g.sign = g.dx = g.dy = g.r = 0;
    g.t[0] = g.t[1] = g.t[2] = 0;
  } else {
    const bool strict = w[0] > 0 && w[0] < 1 && w[1] > 0 && w[1] < 1 && w[2] > 0 && w[2] < 1;
    const int ea[3] = {0, 1, 2}, eb[3] = {1, 2, 0};
    int e;
    T ta;
    if (strict) {  // nearest of the three lines; the first edge wins ties
      e = 0;
      ta = edge_ta(f, 0, 1, px, py);
      T best = edge_d2(f, 0, 1, ta, px, py);
      for (int c = 1; c < 3; ++c) {
        const T tc = edge_ta(f, ea[c], eb[c], px, py);
        const T d2 = edge_d2(f, ea[c], eb[c], tc, px, py);
        if (d2 < best) best = d2, e = c, ta = tc;
      }
    } else {  // the edge of the pixel's barycentric region, clamped to the segment
      auto pdot = [&](int k, int j) { return (px - f.x[k]) * (f.x[j] - f.x[k]) + (py - f.y[k]) * (f.y[j] - f.y[k]); };
      if (w[1] <= 0 && w[2] <= 0)
        e = (f.obtuse == 0 && pdot(0, 2) > 0) ? 2 : 0;
      else if (w[2] <= 0 && w[0] <= 0)
        e = (f.obtuse == 1 && pdot(1, 0) > 0) ? 0 : 1;
      else if (w[0] <= 0 && w[1] <= 0)
        e = (f.obtuse == 2 && pdot(2, 1) > 0) ? 1 : 2;
      else if (w[0] <= 0)
        e = 1;
      else if (w[1] <= 0)
        e = 2;
      else if (w[2] <= 0)
        e = 0;
      else {  // only through rounding: the nearest clamped edge
        e = -1;
        T best = 0;
        for (int c = 0; c < 3; ++c) {
          T tc = edge_ta(f, ea[c], eb[c], px, py);
          tc = tc < 0 ? T(0) : (tc > 1 ? T(1) : tc);
          const T d2 = edge_d2(f, ea[c], eb[c], tc, px, py);
          if (e < 0 || d2 < best) best = d2, e = c;
        }
      }
      ta = edge_ta(f, ea[e], eb[e], px, py);
      ta = ta < 0 ? T(0) : (ta > 1 ? T(1) : ta);
    }
    g.t[0] = g.t[1] = g.t[2] = 0;
    g.t[ea[e]] = ta;
    g.t[eb[e]] = 1 - ta;
    g.dx = g.t[0] * f.x[0] + g.t[1] * f.x[1] + g.t[2] * f.x[2] - px;
    g.dy = g.t[0] * f.y[0] + g.t[1] * f.y[1] + g.t[2] * f.y[2] - py;
    const T rho = g.dx * g.dx + g.dy * g.dy;
    if (!std::isfinite(rho) || (!strict && !(rho < T(P.cull2)))) return false;
    g.sign = strict ? T(1) : T(-1);
    g.r = std::sqrt(rho);
    occlusion(P, g.sign * (P.squared ? rho : g.r), g.D, g.phi);
  }
  if (!(g.D > T(kProbabilityThreshold))) return false;
  T sum = 0;
  for (int k = 0; k < 3; ++k) {
    g.wbar[k] = w[k] < 0 ? T(0) : (w[k] > 1 ? T(1) : w[k]);
    sum += g.wbar[k];
  }
  sum = clamp_min(sum, T(1e-5));
  T inv_z = 0;
  for (int k = 0; k < 3; ++k) {
    g.wbar[k] = g.wbar[k] / sum;
    inv_z += g.wbar[k] / f.z[k];
  }
  g.zp = 1 / inv_z;
  return true;
}

// Surface texel sampled at the clipped barycentrics (docs/math/render.md §4.3, index clamped to the
// face's R x R texels).
template <typename T>
HOST_DEVICE inline int64_t texel_index(const T* wbar, int64_t R) {
  int64_t ix = int64_t(std::floor(wbar[0] * T(R))), iy = int64_t(std::floor(wbar[1] * T(R)));
  ix = ix < R - 1 ? ix : R - 1;
  iy = iy < R - 1 ? iy : R - 1;
  const bool lower = (wbar[0] + wbar[1]) * T(R) - T(ix) - T(iy) <= 1;
  return lower ? iy * R + ix : (R - 1 - iy) * R + (R - 1 - ix);
}

// The face's colour at the fragment: tex points at the face's [T, 3] texels.
template <typename T>
HOST_DEVICE inline void sample_colour(const RenderParams& P, const T* tex, int64_t R, const Fragment<T>& g, T* C,
                                      int64_t& texel) {
  if (P.texture == 1) {
    texel = -1;
    for (int c = 0; c < 3; ++c) C[c] = g.wbar[0] * tex[c] + g.wbar[1] * tex[3 + c] + g.wbar[2] * tex[6 + c];
  } else {
    texel = texel_index(g.wbar, R);
    for (int c = 0; c < 3; ++c) C[c] = tex[3 * texel + c];
  }
}

template <typename T>
HOST_DEVICE inline bool in_depth_range(const RenderParams& P, T zp) {
  return zp >= T(P.near_z) && zp <= T(P.far_z);
}

// A pixel's running forward state: alpha, the RGB state (softmax: S = s0, running max m = s1 and the weighted
// colour sum rgb; hard: depth s0 and face s1 of the winner, its colour rgb). pixel_start is the state before
// any face, pixel_step folds one face in, pixel_image turns the state into the output colour.
template <typename T>
struct PixelState {
  T A, s0, s1, rgb[3];
};

// The softmax starts from the background alone. The original's state (m = eps, S = exp(eps / gamma)) weighs the
// background as a face at normalised depth 2 eps (docs/math/render.md §4.2, kept); it is started max-stabilised
// as m = 2 eps, S = 1 (the same weights; exp(eps / gamma) overflows for a small gamma).
template <typename T>
HOST_DEVICE inline PixelState<T> pixel_start(const RenderParams& P) {
  PixelState<T> s;
  s.A = 0;
  s.s0 = P.rgb == 0 ? T(kDepthInit) : T(1);
  s.s1 = P.rgb == 0 ? T(-1) : T(2 * P.rgb_eps);
  for (int k = 0; k < 3; ++k) s.rgb[k] = T(P.bg[k]);
  return s;
}

// Face fi (packed index; tex: its [T, 3] texels, R: texture resolution) of a mesh of mesh_faces faces at pixel
// (px, py).
template <typename T>
HOST_DEVICE inline void pixel_step(const RenderParams& P, const Face<T>& f, int64_t fi, int64_t mesh_faces,
                                   const T* tex, int64_t R, T px, T py, PixelState<T>& s) {
  Fragment<T> fr;
  if (!fragment(P, f, px, py, fr)) return;
  s.A = fold_step(P, s.A, fr.D, mesh_faces);
  if (!in_depth_range(P, fr.zp) || !(P.double_side || f.front)) return;
  int64_t texel;
  if (P.rgb == 0) {  // closest face passing the closed test; strict <: the lowest index wins ties
    if (!(fr.closed && fr.zp < s.s0)) return;
    s.s0 = fr.zp;
    s.s1 = T(fi);
    sample_colour(P, tex, R, fr, s.rgb, texel);
  } else {  // streaming softmax over normalised inverse depth (docs/math/render.md §4.2)
    const T gam = T(P.gamma), zt = (T(P.far_z) - fr.zp) / (T(P.far_z) - T(P.near_z));
    T delta = 1;
    if (zt > s.s1) {
      delta = std::exp((s.s1 - zt) / gam);
      s.s1 = zt;
    }
    const T w = std::exp((zt - s.s1) / gam) * fr.D;
    T C[3];
    sample_colour(P, tex, R, fr, C, texel);
    s.s0 = delta * s.s0 + w;
    for (int k = 0; k < 3; ++k) s.rgb[k] = delta * s.rgb[k] + w * C[k];
  }
}

template <typename T>
HOST_DEVICE inline T pixel_colour(const RenderParams& P, const PixelState<T>& s, int k) {
  return P.rgb == 1 ? s.rgb[k] / s.s0 : s.rgb[k];
}

// Adds G dD/dP_k to the x, y components of g[9] (x y z per vertex), G = dL/dD: docs/math/render.md §2.5, the
// boundary parameter t held fixed (0 for `hard`, phi = 0).
template <typename T>
HOST_DEVICE inline void coverage_backward(const RenderParams& P, const Fragment<T>& fr, T G, T* g) {
  G = G * fr.phi * fr.sign;
  G = P.squared ? 2 * G : G / clamp_min(fr.r, T(kClamp));
  for (int k = 0; k < 3; ++k) {
    g[3 * k] += G * fr.t[k] * fr.dx;
    g[3 * k + 1] += G * fr.t[k] * fr.dy;
  }
}

// The backward of one (pixel, face) pair (docs/math/render.md §5.2); fi: the packed face index, mesh_faces: its
// mesh's face count. q: the pixel's forward state (A, aggr, output colour I in rgb) and its upstream gradient (gA, gc).
// Writes the face's vertex gradient g[9] (x y z per vertex) and the gradient of its sampled colour tw[3] (texture: at
// `texel`, or spread over the vertices by fr.wbar); false if the pair contributes nothing.
template <typename T>
HOST_DEVICE inline bool pair_backward(const RenderParams& P, const Face<T>& f, int64_t fi, int64_t mesh_faces,
                                      const T* tex, int64_t R, T px, T py, const PixelState<T>& q, T gA, const T* gc,
                                      T* g, T* tw, int64_t& texel, Fragment<T>& fr) {
  if (!fragment(P, f, px, py, fr) || !in_depth_range(P, fr.zp)) return false;
  for (int j = 0; j < 9; ++j) g[j] = 0;
  tw[0] = tw[1] = tw[2] = 0;
  texel = -1;
  T G = gA * fold_grad(P, q.A, fr.D, mesh_faces);
  T C[3];
  if (P.rgb == 0) {  // hard RGB: the winner's texture only
    if (int64_t(q.s1) == fi) {
      sample_colour(P, tex, R, fr, C, texel);
      for (int k = 0; k < 3; ++k) tw[k] = gc[k];
    }
  } else if (P.double_side || f.front) {
    sample_colour(P, tex, R, fr, C, texel);
    const T gam = T(P.gamma), nearz = T(P.near_z), farz = T(P.far_z);
    const T zt = (farz - fr.zp) / (farz - nearz);
    const T wf = fr.D * std::exp((zt - q.s1) / gam) / q.s0;
    T grgb = 0;
    for (int k = 0; k < 3; ++k) {
      tw[k] = wf * gc[k];
      grgb += tw[k] * (C[k] - q.rgb[k]);
    }
    G = G + grgb / fr.D;
    const T gz = grgb / gam / (nearz - farz) * (fr.zp * fr.zp);
    for (int k = 0; k < 3; ++k) g[3 * k + 2] = gz * fr.wbar[k] / (f.z[k] * f.z[k]);
  }
  coverage_backward(P, fr, G, g);
  return true;
}

inline int64_t texture_res(int64_t T_) {
  int64_t R = int64_t(std::sqrt(double(T_)));
  while (R * R > T_) --R;
  while ((R + 1) * (R + 1) <= T_) ++R;
  return R;
}

HOST_DEVICE inline double clamp_min_max(double v, double lo, double hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Screen tiles of size x size pixels (the last row/column partial).
struct TileGrid {
  int64_t H, W, size, nx, ny;
  HOST_DEVICE int64_t count() const { return nx * ny; }
};

// Pixel rows/columns [r0, r1] x [c0, c1] whose centres lie in the face's bounding box grown by its reach;
// false if none.
template <typename T>
HOST_DEVICE inline bool pixel_range(const Face<T>& f, const TileGrid& g, int64_t& r0, int64_t& r1, int64_t& c0,
                                    int64_t& c1) {
  if (!f.valid) return false;
  const double xmin = f.xmin, xmax = f.xmax, ymin = f.ymin, ymax = f.ymax, R = f.reach;
  const double W = double(g.W), H = double(g.H);
  // centre x of column c: (2c + 1 - W) / W; centre y of row r: (H - 1 - 2r) / H
  const double fc0 = ceil(((xmin - R) * W + W - 1) / 2), fc1 = floor(((xmax + R) * W + W - 1) / 2);
  const double fr0 = ceil((H - 1 - (ymax + R) * H) / 2), fr1 = floor((H - 1 - (ymin - R) * H) / 2);
  if (!(fc0 <= fc1 && fr0 <= fr1) || fc1 < 0 || fr1 < 0 || fc0 > W - 1 || fr0 > H - 1) return false;
  c0 = int64_t(clamp_min_max(fc0, 0, W - 1));
  c1 = int64_t(clamp_min_max(fc1, 0, W - 1));
  r0 = int64_t(clamp_min_max(fr0, 0, H - 1));
  r1 = int64_t(clamp_min_max(fr1, 0, H - 1));
  return true;
}

// The tile grid of a pass; also checks the binning radius (a NaN or negative reach would drop faces).
inline TileGrid tile_grid(const RenderParams& P, double reach, int64_t tile_size) {
  RELAXOPS_CHECK(tile_size >= 1, "tile_size must be >= 1");
  RELAXOPS_CHECK(reach >= 0 && std::isfinite(reach), "render: reach must be finite and >= 0");
  return TileGrid{P.H, P.W, tile_size, (P.W + tile_size - 1) / tile_size, (P.H + tile_size - 1) / tile_size};
}

// Pixel centres: column c at x = (2c + 1 - W) / W, row r at y = (H - 1 - 2r) / H (as the reference computes them).
template <typename T>
HOST_DEVICE inline T pixel_x(const TileGrid& g, int64_t c) {
  return T(2 * c + 1 - g.W) / T(g.W);
}
template <typename T>
HOST_DEVICE inline T pixel_y(const TileGrid& g, int64_t r) {
  return T(2 * (g.H - 1 - r) + 1 - g.H) / T(g.H);
}

template <typename T>
HOST_DEVICE inline int64_t tiles_of(const Face<T>& f, const TileGrid& g) {
  int64_t r0, r1, c0, c1;
  if (!pixel_range(f, g, r0, r1, c0, c1)) return 0;
  return (r1 / g.size - r0 / g.size + 1) * (c1 / g.size - c0 / g.size + 1);
}

// Entry points. Faces are binned into tile_size x tile_size pixel tiles of their mesh's image by their bounding box
// grown by `reach` (plus a rounding margin); each tile folds its face list in ascending index. Work is split into
// chunks of packed faces of at most `max_entries` (face, tile) pairs, so memory stays O(B H W + N + max_entries)
// for any scene. offsets: [B + 1] in host memory, checked by the caller.
template <typename T>
void render_forward_cpu(const RenderParams& P, double reach, int64_t tile_size, int64_t max_entries, int threads,
                        const T* face_vertices, const T* textures, const int64_t* offsets, T* image, T* aggr);

template <typename T>
void render_backward_cpu(const RenderParams& P, double reach, int64_t tile_size, int64_t max_entries, int threads,
                         const T* face_vertices, const T* textures, const int64_t* offsets, const T* image,
                         const T* aggr, const T* grad_image, T* grad_face_vertices, T* grad_textures);

// CUDA (render.cu, binning in render_cuda.cuh): the same binning on the device (sorted (tile, face) pairs), one
// thread block per tile and one thread per pixel; no chunking (the pair lists are allocated at their exact size).
// dtype 0 = float32, 1 = float64; offsets: [B + 1] in device memory (checked by the caller); stream: a cudaStream_t.
void render_forward_cuda(int dtype, const RenderParams& P, double reach, int64_t tile_size, const void* face_vertices,
                         const void* textures, const int64_t* offsets, void* image, void* aggr, std::uintptr_t stream);
void render_backward_cuda(int dtype, const RenderParams& P, double reach, int64_t tile_size, const void* face_vertices,
                          const void* textures, const int64_t* offsets, const void* image, const void* aggr,
                          const void* grad_image, void* grad_face_vertices, void* grad_textures, std::uintptr_t stream);

}  // namespace relaxops
