// The relaxed conditional swap, written once for CPU and CUDA.
//
// A comparator (i, j) sends the relaxed min to wire i and the relaxed max to wire j with
//   alpha = f(d),  d = x_j - x_i,  x_i' = alpha x_i + (1 - alpha) x_j,  x_j' = (1 - alpha) x_i + alpha x_j.
// f(0) = 1/2 and f(-z) = 1 - f(z) for every relaxation. Formulas are those of the original diffsort
// code (v = s d); python/relaxops/sortnet/relaxations.py mirrors them and owns the name -> id table.
#pragma once

#include <cmath>

#include "common.h"

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
  kReciprocal = 3,   // code steepness s = 4 * thesis beta
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

// Logistic sigmoid without overflow: exp of a non-positive argument only; f(0) = 1/2 exactly.
template <typename T>
HOST_DEVICE inline T stable_sigmoid(T v) {
  if (v >= T(0)) return T(1) / (T(1) + exp(-v));
  T e = exp(v);
  return e / (T(1) + e);
}

// alpha = f(d) and, if slope != nullptr, f'(d). Computed in T (float for fp32/fp16/bf16 data).
template <typename T>
HOST_DEVICE inline T relax_alpha(const RelaxParams& p, T d, T* slope) {
  const T s = T(p.steepness);
  const T v = s * d;
  const T a = fabs(v);
  T alpha, dalpha;
  switch (p.kind) {
    case kLogistic:
      alpha = stable_sigmoid(v);
      dalpha = s * alpha * (T(1) - alpha);
      break;
    case kLogisticPhi: {
      const T ad = fabs(d);
      const T scale = pow(ad + T(kArtEps), T(-p.art_lambda));
      alpha = stable_sigmoid(v * scale);
      dalpha = s * alpha * (T(1) - alpha) * scale * (T(1) - T(p.art_lambda) * ad / (ad + T(kArtEps)));
      break;
    }
    case kGaussian:
      alpha = T(0.5) * erfc(-v * T(kInvSqrt2));
      dalpha = s * exp(T(-0.5) * v * v) * T(kInvSqrt2Pi);
      break;
    case kReciprocal: {
      // v / (2 + |v|) as sign(v) (1 - 2 / (2 + |v|)): finite for v = +-inf.
      const T sgn = v > T(0) ? T(1) : (v < T(0) ? T(-1) : T(0));
      const T q = T(2) + a;
      alpha = T(0.5) + T(0.5) * sgn * (T(1) - T(2) / q);
      dalpha = s / (q * q);
      break;
    }
    case kCauchy:
      alpha = atan(v) * T(kInvPi) + T(0.5);
      dalpha = s * T(kInvPi) / (T(1) + v * v);
      break;
    default: {  // kOptimal: v + 1/2 on [-1/4, 1/4], tails 1 - 1/(16 v) and -1/(16 v)
      const T tail = T(1) / (T(16) * (a + T(kArtEps)));
      if (v > T(0.25)) alpha = T(1) - tail;
      else if (v < T(-0.25)) alpha = tail;
      else alpha = v + T(0.5);
      dalpha = a > T(0.25) ? s * T(16) * tail * tail : s;
      break;
    }
  }
  if (slope) *slope = dalpha;
  return alpha;
}

}  // namespace relaxops
