// Training kernels of the logic layer on the CPU (math and layout in logic.h). Work is split into tasks of
// (row range, sample block): rows are neurons (forward, coefficient gradient) or inputs (input gradient), a
// sample block is a contiguous slice of at most kBlockBytes of each row, so every inner loop is a contiguous,
// vectorizable loop whose operands stay in L1, and small layers with large batches still have parallel work.
// Each output element (or per-block partial sum) is written by one task in a fixed order: results do not
// depend on the thread count.
//
// Backward with both gradients is one pass over the inputs: input c's CSR list holds entry 2 j (role 0) of
// every neuron j with a[j] == c, and at that entry the gather has g_j, xa = x_c and xb in hand, which is all the
// coefficient gradient of j needs; so g and x are read once per entry instead of once more by a separate pass.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

#include "../common/cpu_parallel.h"
#include "../common/cpu_scratch.h"
#include "../common/cpu_simd.h"
#include "logic.h"

namespace relaxops {
namespace {

constexpr int64_t kBlockBytes = 4096;             // bytes of one row per task (at most): 1024 floats, 512 doubles
constexpr int64_t kTaskWork = 1 << 14;            // row-samples per task (rows per task = kTaskWork / block)
constexpr int64_t kParallelWork = 1 << 15;        // below this many row-samples a call runs on one thread
constexpr int kLanes = 16;                        // accumulator lanes of the batch reductions
constexpr int kPrefetchLines = 8;                 // cache lines prefetched per row of an upcoming neuron or entry
constexpr int64_t kPrefetchAhead = 4;             // how many neurons or CSR entries ahead the rows are prefetched
constexpr int64_t kFarBytes = int64_t(16) << 20;  // operands of a backward beyond this: rows come from DRAM

// The batch split into nb blocks of at most kBlockBytes per row, as even as possible (block k = [k bs, k bs + len)).
template <typename T>
struct Blocks {
  static constexpr int64_t kBlock = kBlockBytes / int64_t(sizeof(T));
  int64_t B, bs, nb;
  explicit Blocks(int64_t B_) : B(B_) {
    const int64_t n = (B + kBlock - 1) / kBlock;
    bs = n > 0 ? (B + n - 1) / n : 1;
    nb = (B + bs - 1) / bs;
  }
  int64_t begin(int64_t k) const { return k * bs; }
  int64_t len(int64_t k) const { return std::min(bs, B - k * bs); }
  int64_t rows_per_task() const { return std::max<int64_t>(1, kTaskWork / bs); }
};

// The four batch sums g [1, xa, xb, xa xb] in kLanes lanes (lane l takes samples l mod kLanes), each folded by
// a fixed halving tree: a fixed order (deterministic), vectorizable, and error growth n / kLanes instead of n.
template <typename T>
struct CoefSums {
  T v[4][kLanes] = {};
  // kLanes samples.
  inline void add(const T* __restrict__ g, const T* __restrict__ xa, const T* __restrict__ xb) {
#pragma omp simd
    for (int l = 0; l < kLanes; ++l) {
      const T ga = g[l] * xa[l];
      v[0][l] += g[l];
      v[1][l] += ga;
      v[2][l] += g[l] * xb[l];
      v[3][l] += ga * xb[l];
    }
  }
  // m < kLanes samples, through zero-padded copies (g = 0 in the padding adds nothing).
  inline void add_tail(int64_t m, const T* g, const T* xa, const T* xb) {
    T pg[kLanes] = {}, pa[kLanes] = {}, pb[kLanes] = {};
    for (int64_t l = 0; l < m; ++l) {
      pg[l] = g[l];
      pa[l] = xa[l];
      pb[l] = xb[l];
    }
    add(pg, pa, pb);
  }
  // out[q] = ((l0 + l8) + (l4 + l12)) + ... : the halving tree, unrolled.
  inline void fold(T* out) const {
    static_assert(kLanes == 16, "fold is written for 16 lanes");
    for (int q = 0; q < 4; ++q) {
      T h[8], k[4];
      for (int l = 0; l < 8; ++l) h[l] = v[q][l] + v[q][l + 8];
      for (int l = 0; l < 4; ++l) k[l] = h[l] + h[l + 4];
      out[q] = (k[0] + k[2]) + (k[1] + k[3]);
    }
  }
};

// kLocality: 3 = into L1 (rows from L2/L3), 2 = into L2 (rows from DRAM: the L1's few miss buffers would cap the
// lines in flight).
template <int kLocality = 3>
inline void prefetch_row(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  const int64_t lines = std::min<int64_t>(kPrefetchLines, (bytes + 63) / 64);
  for (int64_t i = 0; i < lines; ++i) __builtin_prefetch(c + 64 * i, 0, kLocality);
}

// e^x for float x <= 0 (a softmax argument w - max, or -|z| of a sigmoid), in a form the compiler vectorizes (libm's
// expf is scalar): x = n ln2 + r with n = round(x / ln2) (adding and subtracting 1.5 2^23 rounds to an integer), |r| <=
// ln2 / 2 (ln2 in two parts, Cody-Waite), e^r = 1 + r + r^2 P(r) with Cephes' degree-5 P (relative error < 2e-7 on the
// range), times 2^n built in the exponent bits. x < -87 is taken as -87 (e^-87 = 1.6e-38: an absolute error
// below 1e-37 in a probability); NaN stays NaN.
inline float exp_nonpositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const int32_t bits = (int32_t(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return (p * r * r + r + 1.0f) * scale;
}
inline double exp_nonpositive(double x) { return std::exp(x); }

// sigmoid(z) from e^-|z| in the vectorizable form above (float: relative error below 1e-6).
template <typename T>
inline T sigmoid_simd(T z) {
  const T e = exp_nonpositive(z < T(0) ? z : -z), s = T(1) / (T(1) + e);
  return z >= T(0) ? s : e * s;
}

// y = c0 + c1 xa + c2 xb + c3 xa xb for rows [j0, j1), samples [s0, s0 + n). With an activation or noise
// (logic.h): y = act(u + noise_scale L(seed, s n_out + j)), and st = sigmoid(z) for sigmoid_st.
// The default instantiation is the plain layer.
template <typename T, int kAct = kLogicActNone, bool kNoise = false>
RELAXOPS_SIMD_CLONES void forward_task(int64_t B, int64_t j0, int64_t j1, int64_t s0, int64_t n, const T* xt,
                                       const int64_t* a, const int64_t* b, const T* coef, T* yt, int64_t n_out = 0,
                                       uint32_t seed_hash = 0, T noise_scale = 0, T* st = nullptr) {
  for (int64_t j = j0; j < j1; ++j) {
    if (j + kPrefetchAhead < j1) {
      prefetch_row(xt + a[j + kPrefetchAhead] * B + s0, n * int64_t(sizeof(T)));
      prefetch_row(xt + b[j + kPrefetchAhead] * B + s0, n * int64_t(sizeof(T)));
    }
    const T* __restrict__ xa = xt + a[j] * B + s0;
    const T* __restrict__ xb = xt + b[j] * B + s0;
    T* __restrict__ y = yt + j * B + s0;
    const T c0 = coef[4 * j], c1 = coef[4 * j + 1], c2 = coef[4 * j + 2], c3 = coef[4 * j + 3];
    if constexpr (kAct == kLogicActNone && !kNoise) {
#pragma omp simd
      for (int64_t s = 0; s < n; ++s) y[s] = c0 + c1 * xa[s] + (c2 + c3 * xa[s]) * xb[s];
    } else {
      T* __restrict__ sg = kAct == kLogicActSigmoidST ? st + j * B + s0 : nullptr;
      if constexpr (kAct == kLogicActSigmoidST && !kNoise) {  // the step, and the sigmoid saved for the backward
#pragma omp simd
        for (int64_t s = 0; s < n; ++s) {
          const T z = c0 + c1 * xa[s] + (c2 + c3 * xa[s]) * xb[s];
          y[s] = z > T(0) ? T(1) : T(0);
          sg[s] = sigmoid_simd(z);
        }
        continue;
      }
      for (int64_t s = 0; s < n; ++s) {
        const T z = logic_preact<kNoise>(c0 + c1 * xa[s] + (c2 + c3 * xa[s]) * xb[s], seed_hash, noise_scale,
                                         (s0 + s) * n_out + j);
        y[s] = logic_act<kAct>(z);
        if constexpr (kAct == kLogicActSigmoidST) sg[s] = logic_sigmoid(z);
      }
    }
  }
}

// out = sum_s g [1, xa, xb, xa xb] over n samples.
template <typename T>
inline void coef_sums(int64_t n, const T* g, const T* xa, const T* xb, T* out) {
  CoefSums<T> acc;
  int64_t s = 0;
  for (; s + kLanes <= n; s += kLanes) acc.add(g + s, xa + s, xb + s);
  if (s < n) acc.add_tail(n - s, g + s, xa + s, xb + s);
  acc.fold(out);
}

// Coefficient gradient of neurons [j0, j1) over samples [s0, s0 + n), written to out[4 (j nb + k)].
template <typename T>
RELAXOPS_SIMD_CLONES void coef_task(int64_t B, int64_t j0, int64_t j1, int64_t s0, int64_t n, int64_t nb, int64_t k,
                                    const T* xt, const int64_t* a, const int64_t* b, const T* grad_yt, T* out) {
  for (int64_t j = j0; j < j1; ++j) {
    if (j + kPrefetchAhead < j1) {
      prefetch_row(xt + a[j + kPrefetchAhead] * B + s0, n * int64_t(sizeof(T)));
      prefetch_row(xt + b[j + kPrefetchAhead] * B + s0, n * int64_t(sizeof(T)));
    }
    coef_sums(n, grad_yt + j * B + s0, xt + a[j] * B + s0, xt + b[j] * B + s0, out + 4 * (j * nb + k));
  }
}

// Input gradient of inputs [c0, c1) over samples [s0, s0 + n) by the CSR gather; with coef_out, also the
// coefficient gradient of every neuron met in role 0 (its A input is c), written to coef_out[4 (j nb + k)].
// other[i]: the other input of entry i's neuron (b[j] in role 0, a[j] in role 1), so that the rows an entry reads
// have addresses known from sequential arrays (no dependent random load before the prefetch). far: the operands
// (2 n_in + n_out rows) exceed kFarBytes, so rows come from DRAM and are prefetched into L2 only.
template <typename T, bool kCoef>
RELAXOPS_SIMD_CLONES void gather_task(int64_t B, int64_t c0, int64_t c1, int64_t s0, int64_t n, int64_t nb, int64_t k,
                                      const T* xt, const int64_t* other, const T* coef, const T* grad_yt,
                                      const int64_t* csr_start, const int64_t* csr_entry, bool far, T* grad_xt,
                                      T* coef_out) {
  const int64_t bytes = n * int64_t(sizeof(T));
  for (int64_t c = c0; c < c1; ++c) {
    T* __restrict__ gx = grad_xt + c * B + s0;
    const T* __restrict__ xc = xt + c * B + s0;
    std::fill(gx, gx + n, T(0));
    const int64_t e1 = csr_start[c + 1];
    for (int64_t i = csr_start[c]; i < e1; ++i) {
      // The rows of an entry kPrefetchAhead ahead (possibly of a later input) are requested while this one computes.
      if (i + kPrefetchAhead < csr_start[c1]) {
        const T* gn = grad_yt + (csr_entry[i + kPrefetchAhead] >> 1) * B + s0;
        const T* xn = xt + other[i + kPrefetchAhead] * B + s0;
        if (far) {
          prefetch_row<2>(gn, bytes);
          prefetch_row<2>(xn, bytes);
        } else {
          prefetch_row(gn, bytes);
          prefetch_row(xn, bytes);
        }
      }
      const int64_t j = csr_entry[i] >> 1;
      const T* __restrict__ g = grad_yt + j * B + s0;
      const T k3 = coef[4 * j + 3];
      if (csr_entry[i] & 1) {  // c is j's B input: d y / d xb = c2 + c3 xa
        const T k1 = coef[4 * j + 2];
        const T* __restrict__ xa = xt + other[i] * B + s0;
#pragma omp simd
        for (int64_t s = 0; s < n; ++s) gx[s] += g[s] * (k1 + k3 * xa[s]);
      } else if (!kCoef) {  // c is j's A input: d y / d xa = c1 + c3 xb
        const T k1 = coef[4 * j + 1];
        const T* __restrict__ xb = xt + other[i] * B + s0;
#pragma omp simd
        for (int64_t s = 0; s < n; ++s) gx[s] += g[s] * (k1 + k3 * xb[s]);
      } else {  // same, plus the coefficient sums with xa = x_c
        const T k1 = coef[4 * j + 1];
        const T* __restrict__ xb = xt + other[i] * B + s0;
#pragma omp simd
        for (int64_t s = 0; s < n; ++s) gx[s] += g[s] * (k1 + k3 * xb[s]);
        CoefSums<T> acc;
        int64_t s = 0;
        for (; s + kLanes <= n; s += kLanes) acc.add(g + s, xc + s, xb + s);
        if (s < n) acc.add_tail(n - s, g + s, xc + s, xb + s);
        acc.fold(coef_out + 4 * (j * nb + k));
      }
    }
  }
}

// Every connection in [0, n_in) (unsigned compares: one branch-free pass).
inline bool connections_in_range(int64_t n_in, int64_t n_out, const int64_t* a, const int64_t* b) {
  bool ok = true;
  for (int64_t j = 0; j < n_out; ++j) ok &= (uint64_t(a[j]) < uint64_t(n_in)) & (uint64_t(b[j]) < uint64_t(n_in));
  return ok;
}

// csr is exactly the inverse index of (a, b) (logic.h, item 3): start runs from 0 to 2 n_out without decreasing,
// and input c's entries are the e = 2 j + role whose input is c, ascending. Together these make the entries a
// permutation of [0, 2 n_out); a stale index (connections edited after it was built) fails the input test.
inline bool is_inverse_index(int64_t n_in, int64_t n_out, const int64_t* a, const int64_t* b, const int64_t* csr_start,
                             const int64_t* csr_entry) {
  if (csr_start[0] != 0 || csr_start[n_in] != 2 * n_out) return false;
  for (int64_t c = 0; c < n_in; ++c) {
    if (csr_start[c + 1] < csr_start[c] || csr_start[c + 1] > 2 * n_out) return false;
    int64_t prev = -1;
    for (int64_t i = csr_start[c]; i < csr_start[c + 1]; ++i) {
      const int64_t e = csr_entry[i];
      if (e <= prev || e >= 2 * n_out || ((e & 1) ? b : a)[e >> 1] != c) return false;
      prev = e;
    }
  }
  return true;
}

}  // namespace

template <typename T>
void logic_forward_cpu(int64_t B, int64_t n_in, int64_t n_out, const T* xt, const int64_t* a, const int64_t* b,
                       const T* coef, T* yt) {
  RELAXOPS_CHECK(B >= 0 && n_out >= 0 && n_in >= (n_out > 0 ? 1 : 0), "logic_forward: invalid sizes");
  RELAXOPS_CHECK(connections_in_range(n_in, n_out, a, b), "logic_forward: a and b must hold indices in [0, n_in)");
  if (B == 0 || n_out == 0) return;
  const Blocks<T> blk(B);
  const int64_t rows = blk.rows_per_task(), tasks = (n_out + rows - 1) / rows * blk.nb;
  parallel_items(
      tasks,
      [&](int64_t t, int) {
        const int64_t j0 = t / blk.nb * rows, k = t % blk.nb;
        forward_task<T>(B, j0, std::min(n_out, j0 + rows), blk.begin(k), blk.len(k), xt, a, b, coef, yt);
      },
      threads_for(n_out * B, kParallelWork));
}

template <typename T>
void logic_forward_act_cpu(int64_t B, int64_t n_in, int64_t n_out, const T* xt, const int64_t* a, const int64_t* b,
                           const T* coef, int act, int64_t seed, T noise_scale, T* yt, T* st) {
  RELAXOPS_CHECK(B >= 0 && n_out >= 0 && n_in >= (n_out > 0 ? 1 : 0), "logic_forward_act: invalid sizes");
  RELAXOPS_CHECK(connections_in_range(n_in, n_out, a, b), "logic_forward_act: a and b must hold indices in [0, n_in)");
  if (B == 0 || n_out == 0) return;
  const Blocks<T> blk(B);
  const int64_t rows = blk.rows_per_task(), tasks = (n_out + rows - 1) / rows * blk.nb;
  const uint32_t seed_hash = logic_hash32(uint32_t(seed));
  logic_with_act(act, seed >= 0, [&](auto kact, auto knoise) {
    parallel_items(
        tasks,
        [&](int64_t t, int) {
          const int64_t j0 = t / blk.nb * rows, k = t % blk.nb;
          forward_task<T, decltype(kact)::value, decltype(knoise)::value>(B, j0, std::min(n_out, j0 + rows),
                                                                          blk.begin(k), blk.len(k), xt, a, b, coef, yt,
                                                                          n_out, seed_hash, noise_scale, st);
        },
        threads_for(n_out * B, kParallelWork));
  });
}

template <typename T>
void logic_act_grad_cpu(int64_t n, const T* grad_yt, const T* sig, T* grad_u) {
  RELAXOPS_CHECK(n >= 0, "logic_act_grad: invalid size");
  parallel_chunks(
      n, 1 << 14,
      [&](int64_t i0, int64_t i1, int) {
#pragma omp simd
        for (int64_t i = i0; i < i1; ++i) grad_u[i] = grad_yt[i] * sig[i] * (T(1) - sig[i]);
      },
      threads_for(n, kParallelWork));
}

template <typename T>
void logic_backward_cpu(int64_t B, int64_t n_in, int64_t n_out, const T* xt, const int64_t* a, const int64_t* b,
                        const T* coef, const T* grad_yt, const int64_t* csr_start, const int64_t* csr_entry, T* grad_xt,
                        T* grad_coef) {
  RELAXOPS_CHECK(B >= 0 && n_out >= 0 && n_in >= (n_out > 0 ? 1 : 0), "logic_backward: invalid sizes");
  if (B == 0) {  // empty batch sums
    if (grad_coef != nullptr) std::fill(grad_coef, grad_coef + 4 * n_out, T(0));
    return;
  }
  if (n_out == 0) {  // no neuron reads any input
    if (grad_xt != nullptr) std::fill(grad_xt, grad_xt + n_in * B, T(0));
    return;
  }
  if (grad_xt == nullptr && grad_coef == nullptr) return;
  RELAXOPS_CHECK(connections_in_range(n_in, n_out, a, b), "logic_backward: a and b must hold indices in [0, n_in)");
  if (grad_xt != nullptr)
    RELAXOPS_CHECK(is_inverse_index(n_in, n_out, a, b, csr_start, csr_entry),
                   "logic_backward: (csr_start, csr_entry) is not the inverse index of (a, b)");

  const Blocks<T> blk(B);
  const int64_t nb = blk.nb, rows = blk.rows_per_task();
  // Per-block coefficient sums [n_out, nb, 4], folded in block order below; one block: the output itself.
  T* partial = grad_coef;
  if (grad_coef != nullptr && nb > 1) partial = thread_scratch<0, T>(4 * n_out * nb);

  if (grad_xt != nullptr) {
    int64_t* other = thread_scratch<1, int64_t>(2 * n_out);
    for (int64_t i = 0; i < 2 * n_out; ++i) {
      const int64_t j = csr_entry[i] >> 1;
      other[i] = (csr_entry[i] & 1) ? a[j] : b[j];
    }
    const int64_t tasks = (n_in + rows - 1) / rows * nb;
    const bool far = (2 * n_in + n_out) * B * int64_t(sizeof(T)) > kFarBytes;
    parallel_items(
        tasks,
        [&](int64_t t, int) {
          const int64_t c0 = t / nb * rows, c1 = std::min(n_in, c0 + rows), k = t % nb;
          if (grad_coef != nullptr)
            gather_task<T, true>(B, c0, c1, blk.begin(k), blk.len(k), nb, k, xt, other, coef, grad_yt, csr_start,
                                 csr_entry, far, grad_xt, partial);
          else
            gather_task<T, false>(B, c0, c1, blk.begin(k), blk.len(k), nb, k, xt, other, coef, grad_yt, csr_start,
                                  csr_entry, far, grad_xt, nullptr);
        },
        threads_for(2 * n_out * B, kParallelWork));
  } else {
    const int64_t tasks = (n_out + rows - 1) / rows * nb;
    parallel_items(
        tasks,
        [&](int64_t t, int) {
          const int64_t j0 = t / nb * rows, k = t % nb;
          coef_task<T>(B, j0, std::min(n_out, j0 + rows), blk.begin(k), blk.len(k), nb, k, xt, a, b, grad_yt, partial);
        },
        threads_for(n_out * B, kParallelWork));
  }

  if (grad_coef != nullptr && nb > 1) {
    for (int64_t j = 0; j < n_out; ++j) {
      T s[4] = {0, 0, 0, 0};
      for (int64_t k = 0; k < nb; ++k)
        for (int q = 0; q < 4; ++q) s[q] += partial[4 * (j * nb + k) + q];
      for (int q = 0; q < 4; ++q) grad_coef[4 * j + q] = s[q];
    }
  }
}

namespace {

// kLogicGateCoef in T (an int -> float conversion per use costs more than the softmax).
template <typename T>
struct GateCoefTable {
  T m[16][4];
  constexpr GateCoefTable() : m() {
    for (int i = 0; i < 16; ++i)
      for (int q = 0; q < 4; ++q) m[i][q] = T(kLogicGateCoef[i][q]);
  }
};
template <typename T>
inline constexpr GateCoefTable<T> kGateCoef{};

// Neurons are processed 16 at a time, one per SIMD lane: arrays [16 gates][16 lanes] hold them transposed, so
// every loop below runs over lanes (vectorized) and the per-neuron sums are lane-wise, not horizontal.
constexpr int kGroup = 16;

// p[i][l] = softmax over i of the logits w[16 (j0 + l) + i] of neuron j0 + l, for l < n (lanes >= n: w = 0).
template <typename T>
inline void group_softmax(const T* w, int64_t j0, int64_t n, T (&p)[16][kGroup]) {
  for (int i = 0; i < 16; ++i)
    for (int l = 0; l < kGroup; ++l) p[i][l] = l < n ? w[16 * (j0 + l) + i] : T(0);
  T m[kGroup], sum[kGroup];
#pragma omp simd
  for (int l = 0; l < kGroup; ++l) m[l] = p[0][l];
  for (int i = 1; i < 16; ++i)
#pragma omp simd
    for (int l = 0; l < kGroup; ++l) m[l] = p[i][l] > m[l] ? p[i][l] : m[l];
#pragma omp simd
  for (int l = 0; l < kGroup; ++l) sum[l] = 0;
  for (int i = 0; i < 16; ++i)
#pragma omp simd
    for (int l = 0; l < kGroup; ++l) sum[l] += (p[i][l] = exp_nonpositive(p[i][l] - m[l]));
#pragma omp simd
  for (int l = 0; l < kGroup; ++l) sum[l] = T(1) / sum[l];
  for (int i = 0; i < 16; ++i)
#pragma omp simd
    for (int l = 0; l < kGroup; ++l) p[i][l] *= sum[l];
}

}  // namespace

namespace {

// Neurons per parallel item of the coefficient kernels (4096 softmaxes of 16: ~60 us).
constexpr int64_t kCoefItem = 4096;

// The training coefficients of neurons [j0, j1) (j0 a multiple of kGroup).
template <typename T>
RELAXOPS_SIMD_CLONES void coef_range(const T* w, int64_t j0, int64_t j1, T* coef) {
  for (; j0 < j1; j0 += kGroup) {
    const int64_t n = std::min<int64_t>(kGroup, j1 - j0);
    T p[16][kGroup], c[4][kGroup] = {};
    group_softmax(w, j0, n, p);
    for (int i = 0; i < 16; ++i)
      for (int q = 0; q < 4; ++q)
#pragma omp simd
        for (int l = 0; l < kGroup; ++l) c[q][l] += p[i][l] * kGateCoef<T>.m[i][q];
    for (int64_t l = 0; l < n; ++l)
      for (int q = 0; q < 4; ++q) coef[4 * (j0 + l) + q] = c[q][l];
  }
}

// grad_w = J_softmax^T (M grad_coef) of neurons [j0, j1): with u_i = sum_q M[i][q] grad_coef[q],
// grad_w_i = p_i (u_i - sum_k p_k u_k).
template <typename T>
RELAXOPS_SIMD_CLONES void coef_backward_range(const T* w, const T* grad_coef, int64_t j0, int64_t j1, T* grad_w) {
  for (; j0 < j1; j0 += kGroup) {
    const int64_t n = std::min<int64_t>(kGroup, j1 - j0);
    T p[16][kGroup], gc[4][kGroup], u[16][kGroup], pu[kGroup] = {};
    group_softmax(w, j0, n, p);
    for (int q = 0; q < 4; ++q)
      for (int l = 0; l < kGroup; ++l) gc[q][l] = l < n ? grad_coef[4 * (j0 + l) + q] : T(0);
    for (int i = 0; i < 16; ++i) {
      const T* M = kGateCoef<T>.m[i];
#pragma omp simd
      for (int l = 0; l < kGroup; ++l) {
        u[i][l] = M[0] * gc[0][l] + M[1] * gc[1][l] + M[2] * gc[2][l] + M[3] * gc[3][l];
        pu[l] += p[i][l] * u[i][l];
      }
    }
    for (int64_t l = 0; l < n; ++l)
      for (int i = 0; i < 16; ++i) grad_w[16 * (j0 + l) + i] = p[i][l] * (u[i][l] - pu[l]);
  }
}

}  // namespace

template <typename T>
void logic_coef_cpu(int64_t n_out, const T* w, bool training, T* coef) {
  RELAXOPS_CHECK(n_out >= 0, "logic_coef: invalid sizes");
  if (!training) {  // the argmax gate's coefficients (first maximum; NaN counts as the maximum)
    for (int64_t j = 0; j < n_out; ++j) {
      const T* wj = w + 16 * j;
      int best = 0;
      for (int i = 1; i < 16 && !std::isnan(wj[best]); ++i)
        if (wj[i] > wj[best] || std::isnan(wj[i])) best = i;
      for (int q = 0; q < 4; ++q) coef[4 * j + q] = kGateCoef<T>.m[best][q];
    }
    return;
  }
  parallel_chunks(n_out, kCoefItem, [&](int64_t j0, int64_t j1, int) { coef_range(w, j0, j1, coef); });
}

template <typename T>
void logic_coef_backward_cpu(int64_t n_out, const T* w, const T* grad_coef, T* grad_w) {
  RELAXOPS_CHECK(n_out >= 0, "logic_coef_backward: invalid sizes");
  parallel_chunks(n_out, kCoefItem,
                  [&](int64_t j0, int64_t j1, int) { coef_backward_range(w, grad_coef, j0, j1, grad_w); });
}

namespace {

constexpr int64_t kTransposeTile = 32;  // 32 x 32 tiles: 4 KB of floats, read and written in L1

// The scalar transpose of the tile [r0, r1) x [c0, c1) (tile edges, double, CPUs without AVX2).
template <typename T>
void transpose_tile(int64_t rows, int64_t cols, int64_t r0, int64_t r1, int64_t c0, int64_t c1, const T* src, T* dst) {
  for (int64_t c = c0; c < c1; ++c)
    for (int64_t r = r0; r < r1; ++r) dst[c * rows + r] = src[r * cols + c];
}

#if defined(__GNUC__) && defined(__x86_64__)
#define RELAXOPS_TRANSPOSE_AVX2 1
// An 8 x 8 float block in registers: 8 row loads, 24 unpack / shuffle / lane permutes, 8 column stores.
__attribute__((target("avx2"))) inline void transpose8x8(const float* s, int64_t ss, float* d, int64_t ds) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(s + i * ss);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);  // rows i, i+1 interleaved, per 128-bit lane
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);  // 4-row columns, per 128-bit lane
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(d + i * ds, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(d + (i + 4) * ds, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}

// Tiles [t0, t1) of the transpose (tile t: rows (t % tr) K.., columns (t / tr) K..; consecutive tiles go down the
// rows, along dst rows).
__attribute__((target("avx2"))) void transpose_avx2(int64_t rows, int64_t cols, int64_t tr, int64_t t0, int64_t t1,
                                                    const float* src, float* dst) {
  constexpr int64_t K = kTransposeTile;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t c0 = (t / tr) * K, r0 = (t % tr) * K;
    const int64_t r1 = std::min(rows, r0 + K), c1 = std::min(cols, c0 + K);
    if (r1 - r0 == K && c1 - c0 == K) {
      for (int64_t c = c0; c < c1; c += 8)
        for (int64_t r = r0; r < r1; r += 8) transpose8x8(src + r * cols + c, cols, dst + c * rows + r, rows);
    } else {
      transpose_tile(rows, cols, r0, r1, c0, c1, src, dst);
    }
  }
}
#endif

constexpr int64_t kTransposeItem = 64;  // tiles per parallel item (256 KB of floats)

}  // namespace

template <typename T>
void logic_transpose_cpu(int64_t rows, int64_t cols, const T* src, T* dst) {
  RELAXOPS_CHECK(rows >= 0 && cols >= 0, "logic_transpose: invalid sizes");
  constexpr int64_t K = kTransposeTile;
  const int64_t tr = (rows + K - 1) / K, tc = (cols + K - 1) / K;
#ifdef RELAXOPS_TRANSPOSE_AVX2
  const bool avx2 = std::is_same_v<T, float> && __builtin_cpu_supports("avx2");
#endif
  parallel_chunks(tr * tc, kTransposeItem, [&](int64_t t0, int64_t t1, int) {
#ifdef RELAXOPS_TRANSPOSE_AVX2
    if constexpr (std::is_same_v<T, float>) {
      if (avx2) return transpose_avx2(rows, cols, tr, t0, t1, src, dst);
    }
#endif
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t c0 = (t / tr) * K, r0 = (t % tr) * K;
      transpose_tile(rows, cols, r0, std::min(rows, r0 + K), c0, std::min(cols, c0 + K), src, dst);
    }
  });
}

template void logic_coef_cpu<float>(int64_t, const float*, bool, float*);
template void logic_coef_cpu<double>(int64_t, const double*, bool, double*);
template void logic_coef_backward_cpu<float>(int64_t, const float*, const float*, float*);
template void logic_coef_backward_cpu<double>(int64_t, const double*, const double*, double*);
template void logic_transpose_cpu<float>(int64_t, int64_t, const float*, float*);
template void logic_transpose_cpu<double>(int64_t, int64_t, const double*, double*);
template void logic_forward_cpu<float>(int64_t, int64_t, int64_t, const float*, const int64_t*, const int64_t*,
                                       const float*, float*);
template void logic_forward_cpu<double>(int64_t, int64_t, int64_t, const double*, const int64_t*, const int64_t*,
                                        const double*, double*);
template void logic_forward_act_cpu<float>(int64_t, int64_t, int64_t, const float*, const int64_t*, const int64_t*,
                                           const float*, int, int64_t, float, float*, float*);
template void logic_forward_act_cpu<double>(int64_t, int64_t, int64_t, const double*, const int64_t*, const int64_t*,
                                            const double*, int, int64_t, double, double*, double*);
template void logic_act_grad_cpu<float>(int64_t, const float*, const float*, float*);
template void logic_act_grad_cpu<double>(int64_t, const double*, const double*, double*);
template void logic_backward_cpu<float>(int64_t, int64_t, int64_t, const float*, const int64_t*, const int64_t*,
                                        const float*, const float*, const int64_t*, const int64_t*, float*, float*);
template void logic_backward_cpu<double>(int64_t, int64_t, int64_t, const double*, const int64_t*, const int64_t*,
                                         const double*, const double*, const int64_t*, const int64_t*, double*,
                                         double*);

}  // namespace relaxops
