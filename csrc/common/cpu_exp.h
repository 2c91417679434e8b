// Branch-free exp and log for the vectorized loops of the CPU kernels (baselines, otsort, the relaxations).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace relaxops {

template <typename To, typename From>
inline To bits_as(From v) {
  To t;
  std::memcpy(&t, &v, sizeof(t));
  return t;
}

// exp without branches or calls, so the column loops vectorize: v = k ln2 + r with k rounded by adding
// 1.5 * 2^m (the sum's low mantissa bits are k), r reduced with a two-part ln2 (Cody-Waite), exp(r) by its
// Taylor polynomial (|r| <= 0.35: degree 7 in float, 13 in double, truncation below 0.05 ulp), 2^k built in
// the exponent bits. Arguments below -87 (float) / -708 (double) give 0, above 88 / 709 inf; NaN stays NaN.
// The range handling masks the result's bits: clamping the argument to constants instead lets GCC
// specialise the clamped paths into branches, and a select on the float result would not be if-converted
// (the multiply may trap), either way the loop would not vectorize.
inline float fast_exp(float v) {
  const float y = v * 1.44269504088896341f + 12582912.0f;
  const float kf = y - 12582912.0f;
  const float r = (v - kf * 0.693359375f) - kf * -2.12194440e-4f;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float out = p * bits_as<float>((bits_as<uint32_t>(y) - 0x4B400000u + 127u) << 23);
  const uint32_t keep = (v < -87.0f) | (v > 88.0f) ? 0u : ~0u, overflow = v > 88.0f ? 0x7F800000u : 0u;
  return bits_as<float>((bits_as<uint32_t>(out) & keep) | overflow);
}

inline double fast_exp(double v) {
  const double y = v * 1.4426950408889634074 + 6755399441055744.0;
  const double kf = y - 6755399441055744.0;
  const double r = (v - kf * 6.93147180369123816490e-01) - kf * 1.90821492927058770002e-10;
  constexpr double inv_fact[14] = {
      1.0,        1.0,         1.0 / 2,      1.0 / 6,       1.0 / 24,       1.0 / 120,       1.0 / 720,
      1.0 / 5040, 1.0 / 40320, 1.0 / 362880, 1.0 / 3628800, 1.0 / 39916800, 1.0 / 479001600, 1.0 / 6227020800.0};
  double p = inv_fact[13];
  for (int d = 12; d >= 0; --d) p = p * r + inv_fact[d];
  const double out = p * bits_as<double>((bits_as<uint64_t>(y) - 0x4338000000000000ull + 1023u) << 52);
  const uint64_t keep = (v < -708.0) | (v > 709.0) ? 0u : ~uint64_t(0);
  const uint64_t overflow = v > 709.0 ? 0x7FF0000000000000ull : 0u;
  return bits_as<double>((bits_as<uint64_t>(out) & keep) | overflow);
}

// exp(v) for v <= 0, in sums of terms known to be <= 1 (the optimal-transport sweeps): the reduction of fast_exp
// with a degree-6 polynomial (|r| <= ln2 / 2: truncation below 1.2e-7 relative, about 1 ulp) and no overflow path.
// A positive v (rounding) is taken as +0 by clearing its bits with its sign (integer ops: a float select would
// keep the loop from vectorizing), so the result is <= 1; arguments below -87 give 0. NaN is not propagated (a
// NaN with the sign bit clear gives 1): callers handle non-finite rows before.
inline float fast_exp_nonpos(float v) {
  v = bits_as<float>(bits_as<uint32_t>(v) & uint32_t(bits_as<int32_t>(v) >> 31));
  const float y = v * 1.44269504088896341f + 12582912.0f;
  const float kf = y - 12582912.0f;
  const float r = (v - kf * 0.693359375f) - kf * -2.12194440e-4f;
  float p = 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float out = p * bits_as<float>((bits_as<uint32_t>(y) - 0x4B400000u + 127u) << 23);
  return bits_as<float>(bits_as<uint32_t>(out) & (v < -87.0f ? 0u : ~0u));
}

// log for positive normal floats without branches or calls (the ART scale (|d| + 1e-10)^-lambda in the lane
// loops): x = m 2^e with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s), s = (m - 1)/(m + 1), |s| <= 0.172, by its
// odd series to s^9 (truncation < 1e-9). +inf and NaN are returned as they are; zero, negative and subnormal
// arguments are outside its domain.
inline float fast_log(float x) {
  const uint32_t b = bits_as<uint32_t>(x), mant = b & 0x7FFFFFu;
  const uint32_t hi = mant > 0x3504F3u ? 1u : 0u;  // m above sqrt(2): take m / 2 and e + 1
  const float m = bits_as<float>(mant | (hi ? 0x3F000000u : 0x3F800000u));
  const float e = float(int32_t(b >> 23) - 127 + int32_t(hi));
  const float s = (m - 1.0f) / (m + 1.0f), s2 = s * s;
  float p = 1.0f / 9;
  p = p * s2 + 1.0f / 7;
  p = p * s2 + 1.0f / 5;
  p = p * s2 + 1.0f / 3;
  p = p * s2 + 1.0f;
  const float r = e * 0.693147181f + 2.0f * s * p;
  return x < INFINITY ? r : x;
}

// erfc for float without branches or calls (the gaussian relaxation's lane loops; std::erfc is a library call
// that keeps them scalar, ~15x slower): for a = |x|, erfc(a) = t exp(g(u) - a^2) with t = 1 / (1 + a / 2),
// u = 1 - t in [0, 1) and g(u) = log(erfcx(a) / t) smooth on it, by a degree-10 polynomial (weighted least
// squares towards minimax on Chebyshev nodes against scipy's erfcx in float64: g to 8.6e-8); erfc(x) = 2 -
// erfc(a) for x < 0. Max error 2.8e-7 absolute (near x = 0, from the float rounding of t and u), 1.6e-6
// relative for x < 4; 0 beyond x ~ 9.2 where erfc underflows float; +-inf give 0 and 2, NaN stays NaN.
inline float fast_erfc(float x) {
  const float a = std::fabs(x), t = 1.0f / (1.0f + 0.5f * a), u = 1.0f - t;
  float p = 1.124096010e-02f;
  p = p * u - 2.278138846e-01f;
  p = p * u + 8.384442329e-01f;
  p = p * u - 1.209414363e+00f;
  p = p * u + 7.235892415e-01f;
  p = p * u - 2.635399699e-01f;
  p = p * u + 2.703990638e-01f;
  p = p * u + 1.508669108e-01f;
  p = p * u - 3.025066555e-01f;
  p = p * u - 1.256777883e+00f;
  p = p * u + 8.601256951e-08f;
  const float r = t * fast_exp(p - a * a);
  return x < 0.0f ? 2.0f - r : r;
}

inline double fast_exp_nonpos(double v) {
  return fast_exp(bits_as<double>(bits_as<uint64_t>(v) & uint64_t(bits_as<int64_t>(v) >> 63)));
}

}  // namespace relaxops
