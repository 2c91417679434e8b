// CPU training kernels of the convolutional logic layer (math, node order and layouts in conv.h).
//
// Work unit: one output row (oy) of one (batch item, output channel). The L leaf rows of that output row are
// gathered into a [2L - 1, Wo] buffer (zero padding applied once, at the gather), then the tree is evaluated
// node by node on whole rows, so the inner loops run over ox: contiguous and vectorizable. The backward
// recomputes the rows of every node and sweeps the tree from the root down on the same rows.
#include <algorithm>
#include <cstring>
#include <vector>

#include "../common/cpu_parallel.h"
#include "../common/cpu_scratch.h"
#include "conv.h"
#include "logic.h"

namespace relaxops {
namespace {

// Output columns [lo, hi) whose input column ox sw - pw + dx lies in [0, W).
inline void valid_cols(const LogicConvParams& p, int64_t dx, int64_t& lo, int64_t& hi) {
  const int64_t off = dx - p.pw;  // ix = ox sw + off
  lo = off >= 0 ? 0 : (-off + p.sw - 1) / p.sw;
  hi = (p.W - 1 - off) < 0 ? 0 : (p.W - 1 - off) / p.sw + 1;
  lo = std::min(lo, p.Wo);
  hi = std::max(lo, std::min(hi, p.Wo));
}

// row [Wo] = leaf (c, dy, dx) of output row oy of batch item b (zeros outside the input).
template <typename T>
inline void gather_leaf_row(const LogicConvParams& p, const T* x, int64_t b, int64_t oy, const int64_t* leaf, T* row) {
  const int64_t c = leaf[0], dy = leaf[1], dx = leaf[2];
  const int64_t iy = oy * p.sh - p.ph + dy;
  if (iy < 0 || iy >= p.H) {
    std::fill(row, row + p.Wo, T(0));
    return;
  }
  int64_t lo, hi;
  valid_cols(p, dx, lo, hi);
  const T* src = x + ((b * p.C_in + c) * p.H + iy) * p.W + (dx - p.pw);
  std::fill(row, row + lo, T(0));
  if (p.sw == 1) {
    std::memcpy(row + lo, src + lo, size_t(hi - lo) * sizeof(T));
  } else {
    for (int64_t ox = lo; ox < hi; ++ox) row[ox] = src[ox * p.sw];
  }
  std::fill(row + hi, row + p.Wo, T(0));
}

// v [2L - 1, Wo]: leaves gathered, then every node row v[L + n] = c0 + c1 a + (c2 + c3 a) b; with an activation
// or noise (logic.h) v[L + n] = act(z), z = that + noise_scale L(seed, i) (i: the node output's flat index), and z
// is kept in zv [L - 1, Wo] when zv is not null (for the backward).
template <typename T, int kAct = kLogicActNone, bool kNoise = false>
inline void tree_rows(const LogicConvParams& p, const T* x, int64_t b, int64_t k, int64_t oy, const int64_t* leaves,
                      const T* coef, T* v, uint32_t seed_hash = 0, T noise_scale = 0, T* zv = nullptr) {
  const int64_t L = p.L, Wo = p.Wo;
  for (int64_t l = 0; l < L; ++l) gather_leaf_row(p, x, b, oy, leaves + 3 * (k * L + l), v + l * Wo);
  const T* ck = coef + 4 * k * (L - 1);
  for (int64_t n = 0; n < L - 1; ++n) {
    const T c0 = ck[4 * n], c1 = ck[4 * n + 1], c2 = ck[4 * n + 2], c3 = ck[4 * n + 3];
    const T* __restrict__ va = v + 2 * n * Wo;
    const T* __restrict__ vb = va + Wo;
    T* __restrict__ out = v + (L + n) * Wo;
    if constexpr (kAct == kLogicActNone && !kNoise) {
#pragma omp simd
      for (int64_t ox = 0; ox < Wo; ++ox) out[ox] = c0 + c1 * va[ox] + (c2 + c3 * va[ox]) * vb[ox];
    } else {
      const int64_t i0 = (((b * p.C_out + k) * p.Ho + oy) * Wo) * (L - 1) + n;  // index of (ox = 0, node n)
      for (int64_t ox = 0; ox < Wo; ++ox) {
        const T z = logic_preact<kNoise>(c0 + c1 * va[ox] + (c2 + c3 * va[ox]) * vb[ox], seed_hash, noise_scale,
                                         i0 + ox * (L - 1));
        if (zv != nullptr) zv[n * Wo + ox] = z;
        out[ox] = logic_act<kAct>(z);
      }
    }
  }
}

bool leaves_in_range(const LogicConvParams& p, const int64_t* leaves) {
  bool ok = true;
  for (int64_t i = 0; i < p.C_out * p.L; ++i)
    ok &= (uint64_t(leaves[3 * i]) < uint64_t(p.C_in)) & (uint64_t(leaves[3 * i + 1]) < uint64_t(p.kh)) &
          (uint64_t(leaves[3 * i + 2]) < uint64_t(p.kw));
  return ok;
}

// csr is exactly the inverse index of the leaves' channels (conv.h).
bool is_conv_inverse_index(const LogicConvParams& p, const int64_t* leaves, const int64_t* start,
                           const int64_t* entry) {
  const int64_t n = p.C_out * p.L;
  if (start[0] != 0 || start[p.C_in] != n) return false;
  for (int64_t c = 0; c < p.C_in; ++c) {
    if (start[c + 1] < start[c] || start[c + 1] > n) return false;
    int64_t prev = -1;
    for (int64_t i = start[c]; i < start[c + 1]; ++i) {
      const int64_t e = entry[i];
      if (e <= prev || e >= n || leaves[3 * e] != c) return false;
      prev = e;
    }
  }
  return true;
}

}  // namespace

namespace {

template <typename T, int kAct, bool kNoise>
void conv_forward(const LogicConvParams& p, const T* x, const int64_t* leaves, const T* coef, uint32_t seed_hash,
                  T noise_scale, T* y) {
  RELAXOPS_CHECK(leaves_in_range(p, leaves), "logic_conv_forward: leaves must hold (c, dy, dx) in range");
  const int64_t tasks = p.B * p.C_out, L = p.L, Wo = p.Wo, P = p.Ho * p.Wo;
  if (tasks == 0) return;
  parallel_items(
      tasks,
      [&](int64_t t, int) {
        const int64_t b = t / p.C_out, k = t % p.C_out;
        T* v = thread_scratch<0, T>((2 * L - 1) * Wo);
        for (int64_t oy = 0; oy < p.Ho; ++oy) {
          tree_rows<T, kAct, kNoise>(p, x, b, k, oy, leaves, coef, v, seed_hash, noise_scale);
          std::memcpy(y + (b * p.C_out + k) * P + oy * Wo, v + (2 * L - 2) * Wo, size_t(Wo) * sizeof(T));
        }
      },
      threads_for(tasks * P * L, (1 << 15)));
}

// The backward; with an activation, each node's gradient is first multiplied by act'(z) (z recomputed with the
// tree, kept in a fourth scratch row block), which turns it into the gradient of the node's bilinear form.
template <typename T, int kAct, bool kNoise>
void conv_backward(const LogicConvParams& p, const T* x, const int64_t* leaves, const T* coef, uint32_t seed_hash,
                   T noise_scale, const T* grad_y, const int64_t* csr_start, const int64_t* csr_entry, T* grad_x,
                   T* grad_coef) {
  constexpr bool kPlain = kAct == kLogicActNone && !kNoise;
  const int64_t L = p.L, Wo = p.Wo, P = p.Ho * p.Wo, N = p.C_out * (L - 1);
  if (grad_x == nullptr && grad_coef == nullptr) return;
  RELAXOPS_CHECK(leaves_in_range(p, leaves), "logic_conv_backward: leaves must hold (c, dy, dx) in range");
  if (grad_x != nullptr)
    RELAXOPS_CHECK(is_conv_inverse_index(p, leaves, csr_start, csr_entry),
                   "logic_conv_backward: (csr_start, csr_entry) is not the inverse index of the leaves");
  if (p.B == 0) {
    if (grad_coef != nullptr) std::fill(grad_coef, grad_coef + 4 * N, T(0));
    return;
  }
  // Coefficient sums per batch item [B, C_out, L - 1, 4], folded over the batch in order at the end.
  std::vector<T> partial(grad_coef != nullptr ? size_t(4 * N * p.B) : 0);
  parallel_items(
      p.B,
      [&](int64_t b, int) {
        T* v = thread_scratch<0, T>((2 * L - 1) * Wo);
        T* gv = thread_scratch<1, T>((2 * L - 1) * Wo);
        // Leaf gradients of this batch item [C_out, L, Ho, Wo] (only when the input gradient is wanted).
        T* leaf_grad = grad_x != nullptr ? thread_scratch<2, T>(p.C_out * L * P) : nullptr;
        T* zv = kPlain ? nullptr : thread_scratch<3, T>((L - 1) * Wo);
        for (int64_t k = 0; k < p.C_out; ++k) {
          T* sums = grad_coef != nullptr ? partial.data() + 4 * ((b * p.C_out + k) * (L - 1)) : nullptr;
          if (sums != nullptr) std::fill(sums, sums + 4 * (L - 1), T(0));
          const T* ck = coef + 4 * k * (L - 1);
          for (int64_t oy = 0; oy < p.Ho; ++oy) {
            tree_rows<T, kAct, kNoise>(p, x, b, k, oy, leaves, coef, v, seed_hash, noise_scale, zv);
            std::memcpy(gv + (2 * L - 2) * Wo, grad_y + (b * p.C_out + k) * P + oy * Wo, size_t(Wo) * sizeof(T));
            for (int64_t n = L - 2; n >= 0; --n) {
              const T c1 = ck[4 * n + 1], c2 = ck[4 * n + 2], c3 = ck[4 * n + 3];
              const T* __restrict__ va = v + 2 * n * Wo;
              const T* __restrict__ vb = va + Wo;
              if constexpr (kAct != kLogicActNone)
                for (int64_t ox = 0; ox < Wo; ++ox) gv[(L + n) * Wo + ox] *= logic_act_grad<kAct>(zv[n * Wo + ox]);
              const T* __restrict__ g = gv + (L + n) * Wo;
              T* __restrict__ ga = gv + 2 * n * Wo;
              T* __restrict__ gb = ga + Wo;
#pragma omp simd
              for (int64_t ox = 0; ox < Wo; ++ox) {
                ga[ox] = g[ox] * (c1 + c3 * vb[ox]);
                gb[ox] = g[ox] * (c2 + c3 * va[ox]);
              }
              if (sums != nullptr) {
                T s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
                for (int64_t ox = 0; ox < Wo; ++ox) {
                  const T ga_ = g[ox] * va[ox];
                  s0 += g[ox];
                  s1 += ga_;
                  s2 += g[ox] * vb[ox];
                  s3 += ga_ * vb[ox];
                }
                sums[4 * n] += s0;
                sums[4 * n + 1] += s1;
                sums[4 * n + 2] += s2;
                sums[4 * n + 3] += s3;
              }
            }
            if (leaf_grad != nullptr)
              for (int64_t l = 0; l < L; ++l)
                std::memcpy(leaf_grad + (k * L + l) * P + oy * Wo, gv + l * Wo, size_t(Wo) * sizeof(T));
          }
        }
        if (grad_x == nullptr) return;
        // The gather: input channel c of item b sums, entry by entry in CSR order, the leaf gradients of the leaves
        // reading c at the (at most one) output position that sees each input element.
        for (int64_t c = 0; c < p.C_in; ++c) {
          T* gx = grad_x + (b * p.C_in + c) * p.H * p.W;
          std::fill(gx, gx + p.H * p.W, T(0));
          for (int64_t i = csr_start[c]; i < csr_start[c + 1]; ++i) {
            const int64_t e = csr_entry[i], dy = leaves[3 * e + 1], dx = leaves[3 * e + 2];
            const T* lg = leaf_grad + e * P;  // e = k L + l
            int64_t lo, hi;
            valid_cols(p, dx, lo, hi);
            for (int64_t oy = 0; oy < p.Ho; ++oy) {
              const int64_t iy = oy * p.sh - p.ph + dy;
              if (iy < 0 || iy >= p.H) continue;
              T* __restrict__ dst = gx + iy * p.W + (dx - p.pw);
              const T* __restrict__ src = lg + oy * Wo;
              if (p.sw == 1) {
#pragma omp simd
                for (int64_t ox = lo; ox < hi; ++ox) dst[ox] += src[ox];
              } else {
                for (int64_t ox = lo; ox < hi; ++ox) dst[ox * p.sw] += src[ox];
              }
            }
          }
        }
      },
      threads_for(p.B * p.C_out * P * L, (1 << 14)));
  if (grad_coef != nullptr) {
    for (int64_t i = 0; i < 4 * N; ++i) grad_coef[i] = 0;
    for (int64_t b = 0; b < p.B; ++b) {
      const T* src = partial.data() + 4 * N * b;
#pragma omp simd
      for (int64_t i = 0; i < 4 * N; ++i) grad_coef[i] += src[i];
    }
  }
}

}  // namespace

template <typename T>
void logic_conv_forward_cpu(const LogicConvParams& p, const T* x, const int64_t* leaves, const T* coef, T* y) {
  conv_forward<T, kLogicActNone, false>(p, x, leaves, coef, 0, T(0), y);
}

template <typename T>
void logic_conv_backward_cpu(const LogicConvParams& p, const T* x, const int64_t* leaves, const T* coef,
                             const T* grad_y, const int64_t* csr_start, const int64_t* csr_entry, T* grad_x,
                             T* grad_coef) {
  conv_backward<T, kLogicActNone, false>(p, x, leaves, coef, 0, T(0), grad_y, csr_start, csr_entry, grad_x, grad_coef);
}

template <typename T>
void logic_conv_forward_act_cpu(const LogicConvParams& p, const T* x, const int64_t* leaves, const T* coef, int act,
                                int64_t seed, T noise_scale, T* y) {
  logic_with_act(act, seed >= 0, [&](auto kact, auto knoise) {
    conv_forward<T, decltype(kact)::value, decltype(knoise)::value>(p, x, leaves, coef, logic_hash32(uint32_t(seed)),
                                                                    noise_scale, y);
  });
}

template <typename T>
void logic_conv_backward_act_cpu(const LogicConvParams& p, const T* x, const int64_t* leaves, const T* coef, int act,
                                 int64_t seed, T noise_scale, const T* grad_y, const int64_t* csr_start,
                                 const int64_t* csr_entry, T* grad_x, T* grad_coef) {
  logic_with_act(act, seed >= 0, [&](auto kact, auto knoise) {
    conv_backward<T, decltype(kact)::value, decltype(knoise)::value>(
        p, x, leaves, coef, logic_hash32(uint32_t(seed)), noise_scale, grad_y, csr_start, csr_entry, grad_x, grad_coef);
  });
}

template void logic_conv_forward_act_cpu<float>(const LogicConvParams&, const float*, const int64_t*, const float*, int,
                                                int64_t, float, float*);
template void logic_conv_forward_act_cpu<double>(const LogicConvParams&, const double*, const int64_t*, const double*,
                                                 int, int64_t, double, double*);
template void logic_conv_backward_act_cpu<float>(const LogicConvParams&, const float*, const int64_t*, const float*,
                                                 int, int64_t, float, const float*, const int64_t*, const int64_t*,
                                                 float*, float*);
template void logic_conv_backward_act_cpu<double>(const LogicConvParams&, const double*, const int64_t*, const double*,
                                                  int, int64_t, double, const double*, const int64_t*, const int64_t*,
                                                  double*, double*);
template void logic_conv_forward_cpu<float>(const LogicConvParams&, const float*, const int64_t*, const float*, float*);
template void logic_conv_forward_cpu<double>(const LogicConvParams&, const double*, const int64_t*, const double*,
                                             double*);
template void logic_conv_backward_cpu<float>(const LogicConvParams&, const float*, const int64_t*, const float*,
                                             const float*, const int64_t*, const int64_t*, float*, float*);
template void logic_conv_backward_cpu<double>(const LogicConvParams&, const double*, const int64_t*, const double*,
                                              const double*, const int64_t*, const int64_t*, double*, double*);

}  // namespace relaxops
