// The relaxed conditional swap, written once for CPU and CUDA.
//
// A comparator (i, j) sends the relaxed min to wire i and the relaxed max to wire j with
//   alpha = f(d),  d = x_j - x_i,  x_i' = alpha x_i + (1 - alpha) x_j,  x_j' = (1 - alpha) x_i + alpha x_j.
// f(0) = 1/2 and f(-z) = 1 - f(z) for every relaxation. Formulas are those of the original diffsort
// code (v = s d); python/relaxops/sortnet/relaxations.py mirrors them and owns the name -> id table.
#pragma once

#include <cmath>

#include "common.h"
#if !defined(__CUDACC__)
#include "cpu_exp.h"
#endif

namespace relaxops {

#if !defined(__CUDACC__)
using std::atan;
using std::erfc;
using std::exp;
using std::fabs;
using std::pow;
#endif

enum Relaxation : int {
  kLogistic = 0,
  kLogisticPhi = 1,  // ART: sigmoid(s d / (|d| + eps)^lambda), eps inside the power as in the code
  kGaussian = 2,
  kReciprocal = 3,  // code steepness s = 4 * thesis beta
  kCauchy = 4,
  kOptimal = 5,
  kNumRelaxations = 6,
};

struct RelaxParams {
  int kind;
  double steepness;
  double art_lambda;
};

constexpr double kArtEps = 1e-10;
constexpr double kInvPi = 0.318309886183790671538;
constexpr double kInvSqrt2 = 0.707106781186547524401;
constexpr double kInvSqrt2Pi = 0.398942280401432677940;

// exp in the relaxations: for float on the CPU the branch-free fast_exp (~1 ulp), so that the lane loops over
// comparators vectorize; the library exp for double and on the GPU.
HOST_DEVICE inline float relax_exp(float v) {
#if defined(__CUDACC__)
  return exp(v);
#else
  return fast_exp(v);
#endif
}
HOST_DEVICE inline double relax_exp(double v) { return exp(v); }

// pow(x, y) for the ART scale (x >= 1e-10 or +inf), the same way: exp(y log x) from fast_exp and fast_log for
// float on the CPU (a few ulp), the library pow otherwise.
HOST_DEVICE inline float relax_pow(float x, float y) {
#if defined(__CUDACC__)
  return pow(x, y);
#else
  return fast_exp(y * fast_log(x));
#endif
}
HOST_DEVICE inline double relax_pow(double x, double y) { return pow(x, y); }

// Logistic sigmoid without overflow: exp of a non-positive argument only; f(0) = 1/2 exactly.
template <typename T>
HOST_DEVICE inline T stable_sigmoid(T v) {
  const T e = relax_exp(-fabs(v));
  return v >= T(0) ? T(1) / (T(1) + e) : e / (T(1) + e);
}

// atan for float without branches (selects only, so loops over it vectorize) and with one division: atan(a) =
// pi/2 + atan(-1/a) for a > tan(3pi/8), pi/4 + atan((a - 1)/(a + 1)) for a > tan(pi/8), so that the odd Taylor
// polynomial to z^15 runs on |z| <= tan(pi/8) (truncation < 5e-8 relative). Max error ~1.6e-7 absolute.
HOST_DEVICE inline float atan_float(float v) {
  const float a = fabs(v);
  const bool big = a > 2.41421356f, mid = a > 0.41421356f;
  const float z = (big ? -1.0f : (mid ? a - 1.0f : a)) / (big ? a : (mid ? a + 1.0f : 1.0f));
  const float z2 = z * z;
  float p = -1.0f / 15;
  p = p * z2 + 1.0f / 13;
  p = p * z2 - 1.0f / 11;
  p = p * z2 + 1.0f / 9;
  p = p * z2 - 1.0f / 7;
  p = p * z2 + 1.0f / 5;
  p = p * z2 - 1.0f / 3;
  p = p * z2 + 1.0f;
  const float r = z * p + (big ? 1.57079633f : (mid ? 0.78539816f : 0.0f));
  return v < 0.0f ? -r : r;
}
HOST_DEVICE inline float relax_atan(float v) { return atan_float(v); }
HOST_DEVICE inline double relax_atan(double v) { return atan(v); }

// erfc: for float on the CPU the branch-free fast_erfc (2.8e-7 absolute), the library erfc otherwise.
HOST_DEVICE inline float relax_erfc(float v) {
#if defined(__CUDACC__)
  return erfc(v);
#else
  return fast_erfc(v);
#endif
}
HOST_DEVICE inline double relax_erfc(double v) { return erfc(v); }

// alpha = f(d) and, if slope != nullptr, f'(d), for relaxation K (s = steepness, lambda = art_lambda).
// Computed in T (float for fp32/fp16/bf16 data).
template <int K, typename T>
HOST_DEVICE inline T relax_alpha_k(T s, T lambda, T d, T* slope) {
  const T v = s * d;
  const T a = fabs(v);
  T alpha, dalpha;
  if constexpr (K == kLogistic) {
    alpha = stable_sigmoid(v);
    dalpha = s * alpha * (T(1) - alpha);
  } else if constexpr (K == kLogisticPhi) {
    const T ad = fabs(d);
    const T scale = relax_pow(ad + T(kArtEps), -lambda);
    alpha = stable_sigmoid(s * (d * scale));  // |d scale| <= |d|^(1 - lambda): s d alone may overflow
    dalpha = s * alpha * (T(1) - alpha) * scale * (T(1) - lambda * ad / (ad + T(kArtEps)));
  } else if constexpr (K == kGaussian) {
    alpha = T(0.5) * relax_erfc(-v * T(kInvSqrt2));
    dalpha = s * relax_exp(T(-0.5) * v * v) * T(kInvSqrt2Pi);
  } else if constexpr (K == kReciprocal) {
    // v / (2 + |v|) as sign(v) (1 - 2 / (2 + |v|)): finite for v = +-inf.
    const T sgn = v > T(0) ? T(1) : (v < T(0) ? T(-1) : T(0));
    const T q = T(2) + a;
    alpha = T(0.5) + T(0.5) * sgn * (T(1) - T(2) / q);
    dalpha = s / (q * q);
  } else if constexpr (K == kCauchy) {
    alpha = relax_atan(v) * T(kInvPi) + T(0.5);
    dalpha = s * T(kInvPi) / (T(1) + v * v);
  } else {  // kOptimal: v + 1/2 on [-1/4, 1/4], tails 1 - 1/(16 v) and -1/(16 v)
    const T tail = T(1) / (T(16) * (a + T(kArtEps)));
    alpha = v > T(0.25) ? T(1) - tail : (v < T(-0.25) ? tail : v + T(0.5));
    dalpha = a > T(0.25) ? s * T(16) * tail * tail : s;
  }
  // An infinite gap (an infinite input, or a difference that overflows) is a hard comparison: alpha = 0 or 1,
  // f'(d) = 0, the limit of every f except ART with lambda = 1 (sigmoid(+-s)), which is made hard there too so
  // that +-inf always sort to the ends; the formulas above give NaN for ART (inf * 0).
  if (fabs(d) == T(INFINITY)) {
    alpha = d > T(0) ? T(1) : T(0);
    dalpha = T(0);
  }
  if (slope) *slope = dalpha;
  return alpha;
}

// The same with the relaxation chosen at run time.
template <typename T>
HOST_DEVICE inline T relax_alpha(const RelaxParams& p, T d, T* slope) {
  const T s = T(p.steepness), lambda = T(p.art_lambda);
  switch (p.kind) {
    case kLogistic: return relax_alpha_k<kLogistic>(s, lambda, d, slope);
    case kLogisticPhi: return relax_alpha_k<kLogisticPhi>(s, lambda, d, slope);
    case kGaussian: return relax_alpha_k<kGaussian>(s, lambda, d, slope);
    case kReciprocal: return relax_alpha_k<kReciprocal>(s, lambda, d, slope);
    case kCauchy: return relax_alpha_k<kCauchy>(s, lambda, d, slope);
    default: return relax_alpha_k<kOptimal>(s, lambda, d, slope);
  }
}

}  // namespace relaxops
