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

// ---- layer sweeps ----------------------------------------------------------------------------------------
// A layer's comparators touch disjoint wires, so a sweep handles a layer in three loops: gather the two wires of
// its comparators into contiguous buffers (a[k] = wire cmin, b[k] = wire cmax of comparator c0 + k), the
// arithmetic on those buffers (vectorized: the relaxation is a template parameter, the row functions are SIMD
// clones, and the file is compiled without trapping math so that selects if-convert), and scatter them back.

// The sweeps below are inlined into each SIMD clone of the row functions (a call would leave the baseline target).
#if defined(__GNUC__)
#define SORTNET_SWEEP inline __attribute__((always_inline))
#else
#define SORTNET_SWEEP inline
#endif

namespace {

int64_t max_layer_size(const NetView& net) {
  int64_t m = 0;
  for (int64_t l = 0; l < net.num_layers; ++l) m = std::max<int64_t>(m, net.layer_ptr[l + 1] - net.layer_ptr[l]);
  return m;
}

template <typename T>
SORTNET_SWEEP void gather_pairs(const int32_t* ci, const int32_t* cj, int64_t m, const T* v, T* __restrict__ a,
                         T* __restrict__ b) {
  for (int64_t k = 0; k < m; ++k) a[k] = v[ci[k]];
  for (int64_t k = 0; k < m; ++k) b[k] = v[cj[k]];
}

template <typename T>
SORTNET_SWEEP void scatter_pairs(const int32_t* ci, const int32_t* cj, int64_t m, const T* a, const T* b, T* v) {
  for (int64_t k = 0; k < m; ++k) {
    v[ci[k]] = a[k];
    v[cj[k]] = b[k];
  }
}

// a, b <- alpha a + (1 - alpha) b, (1 - alpha) a + alpha b as b + alpha e, a - alpha e with e = a - b (the
// mixing of the matrix kernels); with diff != nullptr, stores e.
template <typename T>
SORTNET_SWEEP void mix_pairs(const T* __restrict__ alpha, int64_t m, T* __restrict__ a, T* __restrict__ b,
                      T* __restrict__ diff) {
  for (int64_t k = 0; k < m; ++k) {
    const T u = a[k], w = b[k], e = u - w;
    a[k] = w + alpha[k] * e;
    b[k] = u - alpha[k] * e;
    if (diff) diff[k] = e;
  }
}

// The values pass on a gathered layer: a, b hold x_i, x_j and become the relaxed min, max; d, alpha are stored.
template <int K, typename T>
SORTNET_SWEEP void relax_pairs(T s, T lambda, int64_t m, T* __restrict__ a, T* __restrict__ b, T* __restrict__ d,
                        T* __restrict__ alpha) {
  for (int64_t k = 0; k < m; ++k) {
    const T xi = a[k], xj = b[k];
    const T dk = relaxed_gap(xi, xj);
    const T ak = relax_alpha_k<K, T>(s, lambda, dk, nullptr);
    d[k] = dk;
    alpha[k] = ak;
    relaxed_minmax(ak, xi, xj, dk, a + k, b + k);
  }
}

// The fused reverse step of the rank backward on a gathered layer: positions va, vb mixed (as mix_pairs), the
// alpha gradient du (v_i - v_j), and the values backward of g (ga, gb) with it (relaxed_swap_backward).
template <int K, typename T>
SORTNET_SWEEP void rank_backward_pairs(T s, T lambda, int64_t m, const T* __restrict__ alpha, const T* __restrict__ d,
                                const T* __restrict__ du, T* __restrict__ va, T* __restrict__ vb,
                                T* __restrict__ ga, T* __restrict__ gb) {
  for (int64_t k = 0; k < m; ++k) {
    const T ak = alpha[k], dk = d[k];
    const T vi = va[k], vj = vb[k], e = vi - vj;
    va[k] = vj + ak * e;
    vb[k] = vi - ak * e;
    T slope;
    relax_alpha_k<K, T>(s, lambda, dk, &slope);
    const T gi = ga[k], gj = gb[k];
    const T dd = relaxed_gap_grad(du[k] * e, gi, gj, dk, slope);
    ga[k] = ak * gi + (T(1) - ak) * gj - dd;
    gb[k] = (T(1) - ak) * gi + ak * gj + dd;
  }
}

// The values pass of one row in place on v (item 1): d and alpha of every comparator; a, b: max_layer_size.
template <int K, typename T>
SORTNET_SWEEP void values_pass(const NetView& net, T s, T lambda, T* v, T* d, T* alpha, T* a, T* b) {
  for (int64_t l = 0; l < net.num_layers; ++l) {
    const int64_t c0 = net.layer_ptr[l], m = net.layer_ptr[l + 1] - c0;
    gather_pairs(net.cmin + c0, net.cmax + c0, m, v, a, b);
    relax_pairs<K, T>(s, lambda, m, a, b, d + c0, alpha + c0);
    scatter_pairs(net.cmin + c0, net.cmax + c0, m, a, b, v);
  }
}

}  // namespace

template <int K, typename T>
RELAXOPS_SIMD_CLONES void values_forward_row(const NetView& net, T s, T lambda, T* v, T* d, T* alpha, T* a, T* b) {
  values_pass<K, T>(net, s, lambda, v, d, alpha, a, b);
}

template <int K, typename T>
void values_forward_rows(const NetView& net, const RelaxParams& rp, int64_t B, const T* x, T* sorted, T* d,
                         T* alpha) {
  const int64_t n = net.n, C = net.num_comparators, m = max_layer_size(net);
#pragma omp parallel if (B * C >= kParallelWork)
  {
    T* wa = thread_scratch<12, T>(m);
    T* wb = thread_scratch<13, T>(m);
#pragma omp for schedule(static)
    for (int64_t b = 0; b < B; ++b) {
      std::copy(x + b * n, x + (b + 1) * n, sorted + b * n);
      values_forward_row<K, T>(net, T(rp.steepness), T(rp.art_lambda), sorted + b * n, d + b * C, alpha + b * C,
                               wa, wb);
    }
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

// ---- ranks (items 5 and 6 of sortnet.h) ---------------------------------------------------------------

namespace {

// Per-thread scratch of the rank kernels (reused across rows and calls): the row state v (values, then
// positions), u and g, the gathered layer buffers (m = max_layer_size), and per comparator alpha (the backward:
// also d and du; the forward keeps d of one layer only).
template <typename T>
struct RankScratch {
  T *v, *u, *a, *b, *ga, *gb, *d, *alpha, *du;
  RankScratch(int64_t n, int64_t m, int64_t C, bool backward)
      : v(thread_scratch<10, T>(n)),
        u(thread_scratch<11, T>(backward ? n : 0)),
        a(thread_scratch<12, T>(m)),
        b(thread_scratch<13, T>(m)),
        ga(thread_scratch<14, T>(backward ? m : 0)),
        gb(thread_scratch<15, T>(backward ? m : 0)),
        d(thread_scratch<16, T>(backward ? C : m)),
        alpha(thread_scratch<17, T>(C)),
        du(thread_scratch<18, T>(backward ? C : 0)) {}
};

// rank = P_1 ... P_L pos: pos = (1, ..., n) through the layers L..1.
template <typename T>
SORTNET_SWEEP void positions_reverse(const NetView& net, const T* alpha, T* r, T* a, T* b) {
  for (int64_t k = 0; k < net.n; ++k) r[k] = T(k + 1);
  for (int64_t l = net.num_layers - 1; l >= 0; --l) {
    const int64_t c0 = net.layer_ptr[l], m = net.layer_ptr[l + 1] - c0;
    gather_pairs(net.cmin + c0, net.cmax + c0, m, r, a, b);
    mix_pairs<T>(alpha + c0, m, a, b, nullptr);
    scatter_pairs(net.cmin + c0, net.cmax + c0, m, a, b, r);
  }
}

// One row (item 5): the values pass on a copy of x, keeping alpha, then the positions in reverse.
template <int K, typename T>
RELAXOPS_SIMD_CLONES void rank_forward_row(const NetView& net, T s, T lambda, const T* x, T* rank,
                                           const RankScratch<T>& w) {
  std::copy(x, x + net.n, w.v);
  for (int64_t l = 0; l < net.num_layers; ++l) {
    const int64_t c0 = net.layer_ptr[l], m = net.layer_ptr[l + 1] - c0;
    gather_pairs(net.cmin + c0, net.cmax + c0, m, w.v, w.a, w.b);
    relax_pairs<K, T>(s, lambda, m, w.a, w.b, w.d, w.alpha + c0);
    scatter_pairs(net.cmin + c0, net.cmax + c0, m, w.a, w.b, w.v);
  }
  positions_reverse(net, w.alpha, rank, w.a, w.b);
}

// One row of the backward (item 6): a forward sweep recomputes the values pass (d, alpha; cheaper than saving
// them: fresh [B, C] buffers cost more in page faults than the pass) and pushes u = grad_rank through each layer
// after it, storing u_i - u_j; then the fused reverse sweep of the positions v and the values backward on g.
template <int K, typename T>
RELAXOPS_SIMD_CLONES void rank_backward_row(const NetView& net, T s, T lambda, const T* x, const T* grad_rank, T* g,
                                            const RankScratch<T>& w) {
  const int64_t n = net.n, L = net.num_layers;
  std::copy(x, x + n, w.v);
  std::copy(grad_rank, grad_rank + n, w.u);
  for (int64_t l = 0; l < L; ++l) {
    const int64_t c0 = net.layer_ptr[l], m = net.layer_ptr[l + 1] - c0;
    gather_pairs(net.cmin + c0, net.cmax + c0, m, w.v, w.a, w.b);
    relax_pairs<K, T>(s, lambda, m, w.a, w.b, w.d + c0, w.alpha + c0);
    scatter_pairs(net.cmin + c0, net.cmax + c0, m, w.a, w.b, w.v);
    gather_pairs(net.cmin + c0, net.cmax + c0, m, w.u, w.ga, w.gb);
    mix_pairs<T>(w.alpha + c0, m, w.ga, w.gb, w.du + c0);
    scatter_pairs(net.cmin + c0, net.cmax + c0, m, w.ga, w.gb, w.u);
  }
  for (int64_t k = 0; k < n; ++k) w.v[k] = T(k + 1);
  std::fill(g, g + n, T(0));
  for (int64_t l = L - 1; l >= 0; --l) {
    const int64_t c0 = net.layer_ptr[l], m = net.layer_ptr[l + 1] - c0;
    gather_pairs(net.cmin + c0, net.cmax + c0, m, w.v, w.a, w.b);
    gather_pairs(net.cmin + c0, net.cmax + c0, m, g, w.ga, w.gb);
    rank_backward_pairs<K, T>(s, lambda, m, w.alpha + c0, w.d + c0, w.du + c0, w.a, w.b, w.ga, w.gb);
    scatter_pairs(net.cmin + c0, net.cmax + c0, m, w.a, w.b, w.v);
    scatter_pairs(net.cmin + c0, net.cmax + c0, m, w.ga, w.gb, g);
  }
}

template <int K, typename T>
void rank_forward_rows(const NetView& net, const RelaxParams& rp, int64_t B, const T* x, T* rank) {
  const int64_t n = net.n, C = net.num_comparators, m = max_layer_size(net);
#pragma omp parallel if (B * C >= kParallelWork)
  {
    const RankScratch<T> w(n, m, C, false);
#pragma omp for schedule(static)
    for (int64_t b = 0; b < B; ++b)
      rank_forward_row<K, T>(net, T(rp.steepness), T(rp.art_lambda), x + b * n, rank + b * n, w);
  }
}

template <int K, typename T>
void rank_backward_rows(const NetView& net, const RelaxParams& rp, int64_t B, const T* x, const T* grad_rank,
                        T* grad_x) {
  const int64_t n = net.n, C = net.num_comparators, m = max_layer_size(net);
#pragma omp parallel if (B * C >= kParallelWork)
  {
    const RankScratch<T> w(n, m, C, true);
#pragma omp for schedule(static)
    for (int64_t b = 0; b < B; ++b)
      rank_backward_row<K, T>(net, T(rp.steepness), T(rp.art_lambda), x + b * n, grad_rank + b * n,
                              grad_x + b * n, w);
  }
}

}  // namespace

template <typename T>
void sortnet_rank_forward_cpu(const NetView& net, const RelaxParams& rp, int64_t B, const T* x, T* rank) {
  check_network(net, B);
  switch (rp.kind) {
    case kLogistic: return rank_forward_rows<kLogistic, T>(net, rp, B, x, rank);
    case kLogisticPhi: return rank_forward_rows<kLogisticPhi, T>(net, rp, B, x, rank);
    case kGaussian: return rank_forward_rows<kGaussian, T>(net, rp, B, x, rank);
    case kReciprocal: return rank_forward_rows<kReciprocal, T>(net, rp, B, x, rank);
    case kCauchy: return rank_forward_rows<kCauchy, T>(net, rp, B, x, rank);
    default: return rank_forward_rows<kOptimal, T>(net, rp, B, x, rank);
  }
}

template <typename T>
void sortnet_rank_backward_cpu(const NetView& net, const RelaxParams& rp, int64_t B, const T* x,
                               const T* grad_rank, T* grad_x) {
  check_network(net, B);
  switch (rp.kind) {
    case kLogistic: return rank_backward_rows<kLogistic, T>(net, rp, B, x, grad_rank, grad_x);
    case kLogisticPhi: return rank_backward_rows<kLogisticPhi, T>(net, rp, B, x, grad_rank, grad_x);
    case kGaussian: return rank_backward_rows<kGaussian, T>(net, rp, B, x, grad_rank, grad_x);
    case kReciprocal: return rank_backward_rows<kReciprocal, T>(net, rp, B, x, grad_rank, grad_x);
    case kCauchy: return rank_backward_rows<kCauchy, T>(net, rp, B, x, grad_rank, grad_x);
    default: return rank_backward_rows<kOptimal, T>(net, rp, B, x, grad_rank, grad_x);
  }
}

#define RELAXOPS_INSTANTIATE(T)                                                                        \
  template void sortnet_values_forward_cpu<T>(const NetView&, const RelaxParams&, int64_t, const T*,   \
                                              T*, T*, T*);                                             \
  template void sortnet_values_backward_cpu<T>(const NetView&, const RelaxParams&, int64_t, const T*,  \
                                               const T*, const T*, const T*, T*);                      \
  template void sortnet_matrix_forward_cpu<T>(const NetView&, int64_t, int64_t, const T*, T*);         \
  template void sortnet_matrix_backward_cpu<T>(const NetView&, int64_t, int64_t, const T*, const T*, T*); \
  template void sortnet_rank_forward_cpu<T>(const NetView&, const RelaxParams&, int64_t, const T*, T*);   \
  template void sortnet_rank_backward_cpu<T>(const NetView&, const RelaxParams&, int64_t, const T*,       \
                                             const T*, T*);

RELAXOPS_INSTANTIATE(float)
RELAXOPS_INSTANTIATE(double)

}  // namespace relaxops
