// CPU kernels of sortnet.h: OpenMP over rows (values) or over (row, column tile) work items (matrix).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "../common/cpu_scratch.h"
#include "../common/cpu_simd.h"
#include "sortnet.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace relaxops {
namespace {

// Columns per tile: one AVX-512 register of floats; mixing two tile rows is a handful of vector ops.
constexpr int64_t kTile = 16;
// Per-thread scratch target for the backward trajectory (checkpoints + segment differences).
constexpr int64_t kScratchBytes = 1 << 20;
// Bound on the [rows, tiles, C] partial-sum buffer of the few-rows split of matrix_backward.
constexpr int64_t kPartialBytes = 64ll << 20;
// Below this many comparator evaluations (times tile rows) a call runs on one thread: a parallel region
// costs more than the work, and stalls badly when the cores are oversubscribed.
constexpr int64_t kParallelWork = 1 << 15;

// One tile row as a GCC/clang vector: each target clone lowers it to its own register width.
template <typename T>
struct TileRow {
  typedef T type __attribute__((vector_size(kTile * sizeof(T))));
};

template <typename V, typename T>
inline V load_row(const T* p) {
  V r;
  std::memcpy(&r, p, sizeof(r));
  return r;
}
template <typename V, typename T>
inline void store_row(T* p, const V& r) {
  std::memcpy(p, &r, sizeof(r));
}

// Sum of W values by a fixed halving tree (lo half + hi half, recursively): vector adds instead of a
// serial chain of W - 1 dependent additions, and the same order on every call.
template <typename T, int64_t W>
struct TreeSum {
  typedef T Half __attribute__((vector_size(W / 2 * sizeof(T))));
  static T run(const T* a) {
    Half lo, hi;
    std::memcpy(&lo, a, sizeof(Half));
    std::memcpy(&hi, a + W / 2, sizeof(Half));
    const Half s = lo + hi;
    T b[W / 2];
    std::memcpy(b, &s, sizeof(Half));
    return TreeSum<T, W / 2>::run(b);
  }
};
template <typename T>
struct TreeSum<T, 1> {
  static T run(const T* a) { return a[0]; }
};

// Mix rows i, j of a tile with the 2x2 block [[a, 1-a], [1-a, a]]; optionally store Y_i - Y_j.
template <typename T, bool kStoreDiff>
inline void mix_rows(T* wi, T* wj, T a, T* diff_out) {
  using V = typename TileRow<T>::type;
  const V u = load_row<V>(wi), v = load_row<V>(wj);
  const V diff = u - v;
  store_row<V>(wi, v + a * diff);  // a u + (1 - a) v
  store_row<V>(wj, u - a * diff);  // (1 - a) u + a v
  if (kStoreDiff) store_row<V>(diff_out, diff);
}

// Apply comparators [c0, c1) to the tile W[n][kTile]. live[r] != 0 marks rows that may be non-zero: Y
// starts as (a slice of) the identity, and mixing two all-zero rows leaves them zero, so such comparators
// are skipped exactly (early layers of a tile touch few rows). With diffs, records Y_i - Y_j of each live
// comparator and live_comp[c - c0] (0: both rows were zero, the difference is zero).
template <typename T>
RELAXOPS_SIMD_CLONES void apply_comparators(const NetView& net, const T* alpha, int64_t c0, int64_t c1,
                                            T* W, uint8_t* live, T* diffs, uint8_t* live_comp) {
  for (int64_t c = c0; c < c1; ++c) {
    const int32_t i = net.cmin[c], j = net.cmax[c];
    const bool active = live[i] | live[j];
    if (diffs) live_comp[c - c0] = active;
    if (!active) continue;
    live[i] = live[j] = 1;
    if (diffs) mix_rows<T, true>(W + i * kTile, W + j * kTile, alpha[c], diffs + (c - c0) * kTile);
    else mix_rows<T, false>(W + i * kTile, W + j * kTile, alpha[c], nullptr);
  }
}

// Reverse sweep over comparators [c0, c1): accumulate the alpha gradient, then mix H (P_l symmetric).
template <typename T>
RELAXOPS_SIMD_CLONES void reverse_comparators(const NetView& net, const T* alpha, int64_t c0, int64_t c1,
                                              T* H, const T* diffs, const uint8_t* live_comp, T* partial) {
  using V = typename TileRow<T>::type;
  for (int64_t c = c1 - 1; c >= c0; --c) {
    T* hi = H + net.cmin[c] * kTile;
    T* hj = H + net.cmax[c] * kTile;
    const V u = load_row<V>(hi), v = load_row<V>(hj);
    const V dh = u - v;
    const T a = alpha[c];
    store_row<V>(hi, v + a * dh);
    store_row<V>(hj, u - a * dh);
    T acc = 0;
    if (live_comp[c - c0]) {
      const V prod = dh * load_row<V>(diffs + (c - c0) * kTile);
      T p[kTile];
      std::memcpy(p, &prod, sizeof(p));
      acc = TreeSum<T, kTile>::run(p);
    }
    partial[c] = acc;
  }
}

// Y^(0) = I restricted to columns [col0, col0 + kTile); only those rows are live.
template <typename T>
void init_identity_tile(T* W, uint8_t* live, int64_t n, int64_t col0) {
  std::memset(W, 0, sizeof(T) * n * kTile);
  std::memset(live, 0, n);
  for (int64_t cc = 0; cc < kTile && col0 + cc < n; ++cc) {
    W[(col0 + cc) * kTile + cc] = T(1);
    live[col0 + cc] = 1;
  }
}

int64_t num_tiles(int64_t n) { return (n + kTile - 1) / kTile; }

// Segment length of the backward trajectory: everything if it fits the scratch target, else ~sqrt(2L).
template <typename T>
int64_t segment_layers(const NetView& net) {
  const int64_t L = std::max<int64_t>(net.num_layers, 1);
  if (net.num_comparators * kTile * int64_t(sizeof(T)) <= kScratchBytes) return L;
  return std::max<int64_t>(1, int64_t(std::ceil(std::sqrt(2.0 * L))));
}

// The invariants every CPU kernel relies on to stay in bounds (the tables are host arrays; O(L + C)):
// layer_ptr runs from 0 to C without decreasing, every wire is in [0, n), B >= 0.
void check_network(const NetView& net, int64_t B) {
  RELAXOPS_CHECK(net.n >= 1 && net.n <= INT32_MAX, "sortnet: n must be in [1, 2^31)");
  RELAXOPS_CHECK(net.num_layers >= 0 && net.num_comparators >= 0, "sortnet: negative network size");
  RELAXOPS_CHECK(B >= 0, "sortnet: negative batch size");
  RELAXOPS_CHECK(net.layer_ptr && ((net.cmin && net.cmax) || net.num_comparators == 0),
                 "sortnet: missing network table");
  RELAXOPS_CHECK(net.layer_ptr[0] == 0 && net.layer_ptr[net.num_layers] == net.num_comparators,
                 "sortnet: layer_ptr must run from 0 to num_comparators");
  for (int64_t l = 0; l < net.num_layers; ++l)
    RELAXOPS_CHECK(net.layer_ptr[l] <= net.layer_ptr[l + 1], "sortnet: layer_ptr must not decrease");
  for (int64_t c = 0; c < net.num_comparators; ++c)
    RELAXOPS_CHECK(net.cmin[c] >= 0 && net.cmin[c] < net.n && net.cmax[c] >= 0 && net.cmax[c] < net.n,
                   "sortnet: comparator wires must be in [0, n)");
}

void check_columns(const NetView& net, int64_t col_begin) {
  RELAXOPS_CHECK(col_begin >= 0 && col_begin < net.n, "sortnet: col_begin must be in [0, n)");
}

}  // namespace

// One row through the network, layer by layer: gather the gaps of the layer's comparators, evaluate alpha
// for all of them in one loop (relaxation fixed at compile time, so it vectorizes where the math does),
// then mix.
template <int K, typename T>
void values_forward_row(const NetView& net, T s, T lambda, T* v, T* d, T* alpha) {
  for (int64_t l = 0; l < net.num_layers; ++l) {
    const int64_t c0 = net.layer_ptr[l], c1 = net.layer_ptr[l + 1];
    for (int64_t c = c0; c < c1; ++c) d[c] = relaxed_gap(v[net.cmin[c]], v[net.cmax[c]]);
    for (int64_t c = c0; c < c1; ++c) alpha[c] = relax_alpha_k<K, T>(s, lambda, d[c], nullptr);
    for (int64_t c = c0; c < c1; ++c) {
      const int32_t i = net.cmin[c], j = net.cmax[c];
      relaxed_minmax(alpha[c], v[i], v[j], d[c], v + i, v + j);
    }
  }
}

template <int K, typename T>
void values_forward_rows(const NetView& net, const RelaxParams& rp, int64_t B, const T* x, T* sorted, T* d,
                         T* alpha) {
  const int64_t n = net.n, C = net.num_comparators;
#pragma omp parallel for schedule(static) if (B * C >= kParallelWork)
  for (int64_t b = 0; b < B; ++b) {
    std::copy(x + b * n, x + (b + 1) * n, sorted + b * n);
    values_forward_row<K, T>(net, T(rp.steepness), T(rp.art_lambda), sorted + b * n, d + b * C, alpha + b * C);
  }
}

template <typename T>
void sortnet_values_forward_cpu(const NetView& net, const RelaxParams& rp, int64_t B, const T* x,
                                T* sorted, T* d, T* alpha) {
  check_network(net, B);
  switch (rp.kind) {
    case kLogistic: return values_forward_rows<kLogistic, T>(net, rp, B, x, sorted, d, alpha);
    case kLogisticPhi: return values_forward_rows<kLogisticPhi, T>(net, rp, B, x, sorted, d, alpha);
    case kGaussian: return values_forward_rows<kGaussian, T>(net, rp, B, x, sorted, d, alpha);
    case kReciprocal: return values_forward_rows<kReciprocal, T>(net, rp, B, x, sorted, d, alpha);
    case kCauchy: return values_forward_rows<kCauchy, T>(net, rp, B, x, sorted, d, alpha);
    default: return values_forward_rows<kOptimal, T>(net, rp, B, x, sorted, d, alpha);
  }
}

template <typename T>
void sortnet_values_backward_cpu(const NetView& net, const RelaxParams& rp, int64_t B,
                                 const T* grad_sorted, const T* grad_alpha, const T* d, const T* alpha,
                                 T* grad_x) {
  check_network(net, B);
  const int64_t n = net.n, C = net.num_comparators;
#pragma omp parallel for schedule(static) if (B * C >= kParallelWork)
  for (int64_t b = 0; b < B; ++b) {
    T* g = grad_x + b * n;
    if (grad_sorted) std::copy(grad_sorted + b * n, grad_sorted + (b + 1) * n, g);
    else std::fill(g, g + n, T(0));
    const T* db = d + b * C;
    const T* ab = alpha + b * C;
    for (int64_t c = C - 1; c >= 0; --c)
      relaxed_swap_backward<T>(rp, g, net.cmin[c], net.cmax[c], db[c], ab[c],
                               grad_alpha ? grad_alpha[b * C + c] : T(0));
  }
}

template <typename T>
void sortnet_matrix_forward_cpu(const NetView& net, int64_t B, int64_t col_begin, const T* alpha, T* X) {
  check_network(net, B);
  check_columns(net, col_begin);
  const int64_t n = net.n, C = net.num_comparators, m = n - col_begin, tiles = num_tiles(m);
#pragma omp parallel if (B * tiles * C >= kParallelWork)
  {
    T* W = thread_scratch<0, T>(n * kTile);
    uint8_t* live = thread_scratch<1, uint8_t>(n);
#pragma omp for schedule(static)
    for (int64_t item = 0; item < B * tiles; ++item) {
      const int64_t b = item / tiles, t0 = (item % tiles) * kTile, col0 = col_begin + t0;
      init_identity_tile(W, live, n, col0);
      apply_comparators<T>(net, alpha + b * C, 0, C, W, live, nullptr, nullptr);
      T* Xb = X + b * m * n;
      for (int64_t cc = 0; cc < kTile && col0 + cc < n; ++cc)
        for (int64_t r = 0; r < n; ++r) Xb[(t0 + cc) * n + r] = W[r * kTile + cc];
    }
  }
}

// Per-thread scratch of the matrix backward, and one tile's work: the alpha gradient of every comparator
// from the tile's columns, written to part[C].
template <typename T>
struct BackwardTile {
  const NetView& net;
  int64_t S, nseg, max_seg_comps;

  // G: the tile's rows of grad_X (G[cc * n + r] = dl/dY[r][col0 + cc]).
  void run(const T* ab, const T* G, int64_t col0, T* part) const {
    const int64_t n = net.n, L = net.num_layers;
    T* W = thread_scratch<0, T>(n * kTile);
    T* H = thread_scratch<3, T>(n * kTile);
    uint8_t* live = thread_scratch<1, uint8_t>(n);
    uint8_t* live_comp = thread_scratch<4, uint8_t>(max_seg_comps);
    T* ckpt = thread_scratch<5, T>(nseg > 1 ? nseg * n * kTile : 0);
    uint8_t* ckpt_live = thread_scratch<6, uint8_t>(nseg > 1 ? nseg * n : 0);
    T* diffs = thread_scratch<7, T>(max_seg_comps * kTile);
    // H = dl/dY^(L) on this tile (zero beyond n).
    std::fill(H, H + n * kTile, T(0));
    for (int64_t cc = 0; cc < kTile && col0 + cc < n; ++cc)
      for (int64_t r = 0; r < n; ++r) H[r * kTile + cc] = G[cc * n + r];
    // Checkpoints: the tile state before layer s*S.
    if (nseg > 1) {
      init_identity_tile(W, live, n, col0);
      for (int64_t s = 0; s < nseg; ++s) {
        std::copy(W, W + n * kTile, ckpt + s * n * kTile);
        std::copy(live, live + n, ckpt_live + s * n);
        if (s + 1 < nseg)
          apply_comparators<T>(net, ab, net.layer_ptr[s * S], net.layer_ptr[(s + 1) * S], W, live, nullptr,
                               nullptr);
      }
    }
    for (int64_t s = nseg - 1; s >= 0; --s) {
      const int64_t c0 = net.layer_ptr[s * S], c1 = net.layer_ptr[std::min(L, (s + 1) * S)];
      if (nseg > 1) {
        std::copy(ckpt + s * n * kTile, ckpt + (s + 1) * n * kTile, W);
        std::copy(ckpt_live + s * n, ckpt_live + (s + 1) * n, live);
      } else {
        init_identity_tile(W, live, n, col0);
      }
      apply_comparators<T>(net, ab, c0, c1, W, live, diffs, live_comp);
      reverse_comparators<T>(net, ab, c0, c1, H, diffs, live_comp, part);
    }
  }
};

template <typename T>
void sortnet_matrix_backward_cpu(const NetView& net, int64_t B, int64_t col_begin, const T* alpha,
                                 const T* grad_X, T* grad_alpha) {
  check_network(net, B);
  check_columns(net, col_begin);
  const int64_t n = net.n, C = net.num_comparators, L = net.num_layers, m = n - col_begin, tiles = num_tiles(m);
  if (B == 0 || C == 0) return;
  const int64_t S = segment_layers<T>(net);
  const int64_t nseg = (L + S - 1) / S;
  int64_t max_seg_comps = 0;
  for (int64_t s = 0; s < nseg; ++s) {
    const int64_t l1 = std::min(L, (s + 1) * S);
    max_seg_comps = std::max<int64_t>(max_seg_comps, net.layer_ptr[l1] - net.layer_ptr[s * S]);
  }
  const BackwardTile<T> tile_work{net, S, nseg, max_seg_comps};
  const bool parallel = B * tiles * C >= kParallelWork;
  int threads = 1;
#ifdef _OPENMP
  if (parallel) threads = omp_get_max_threads();
#endif
  // grad_alpha[b][c] = sum over tiles t = 0, 1, ... in this order, whichever way the work is split, so the
  // result does not depend on the thread count.
  if (B >= threads || B * tiles * C * int64_t(sizeof(T)) > kPartialBytes) {
    // rows in parallel; a row's tiles in order, added straight into grad_alpha
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t b = 0; b < B; ++b) {
      T* out = grad_alpha + b * C;
      T* part = thread_scratch<2, T>(C);
      tile_work.run(alpha + b * C, grad_X + b * m * n, col_begin, out);
      for (int64_t t = 1; t < tiles; ++t) {
        tile_work.run(alpha + b * C, grad_X + (b * m + t * kTile) * n, col_begin + t * kTile, part);
        for (int64_t c = 0; c < C; ++c) out[c] += part[c];
      }
    }
    return;
  }
  // Few rows: (row, tile) items in parallel, each writing its own partial sums, then reduced in tile order.
  T* partial = thread_scratch<8, T>(B * tiles * C);
#pragma omp parallel if (parallel)
  {
#pragma omp for schedule(static)
    for (int64_t item = 0; item < B * tiles; ++item) {
      const int64_t b = item / tiles, t = item % tiles;
      tile_work.run(alpha + b * C, grad_X + (b * m + t * kTile) * n, col_begin + t * kTile, partial + item * C);
    }
#pragma omp for schedule(static)
    for (int64_t b = 0; b < B; ++b) {
      T* out = grad_alpha + b * C;
      const T* part = partial + b * tiles * C;
      std::copy(part, part + C, out);
      for (int64_t t = 1; t < tiles; ++t)
        for (int64_t c = 0; c < C; ++c) out[c] += part[t * C + c];
    }
  }
}

#define RELAXOPS_INSTANTIATE(T)                                                                        \
  template void sortnet_values_forward_cpu<T>(const NetView&, const RelaxParams&, int64_t, const T*,   \
                                              T*, T*, T*);                                             \
  template void sortnet_values_backward_cpu<T>(const NetView&, const RelaxParams&, int64_t, const T*,  \
                                               const T*, const T*, const T*, T*);                      \
  template void sortnet_matrix_forward_cpu<T>(const NetView&, int64_t, int64_t, const T*, T*);         \
  template void sortnet_matrix_backward_cpu<T>(const NetView&, int64_t, int64_t, const T*, const T*, T*);

RELAXOPS_INSTANTIATE(float)
RELAXOPS_INSTANTIATE(double)

}  // namespace relaxops
