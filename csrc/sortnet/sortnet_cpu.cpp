// CPU kernels of sortnet.h: one parallel loop per call (cpu_parallel.h) over rows (values), (row, column tile)
// work items (matrix) or row tiles (ranks), each item through every layer of the network.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "../common/cpu_parallel.h"
#include "../common/cpu_scratch.h"
#include "../common/cpu_simd.h"
#include "sortnet.h"

namespace relaxops {
namespace {

// Columns per tile: one AVX-512 register of floats; mixing two tile rows is a handful of vector ops.
constexpr int64_t kTile = 16;
// Per-thread scratch target for the backward trajectory (checkpoints + segment differences).
constexpr int64_t kScratchBytes = 1 << 20;
// Bound on the [rows, tiles, C] partial-sum buffer of the few-rows split of matrix_backward, and the (row,
// comparator) sums per parallel item of its reduction.
constexpr int64_t kPartialBytes = 64ll << 20;
constexpr int64_t kReduceItem = 1 << 14;
// Below this many comparator evaluations (times tile rows) a call runs on one thread: a parallel loop costs more
// than the work.
constexpr int64_t kParallelWork = 1 << 15;

// f(std::integral_constant<int, K>{}) for the relaxation K chosen at run time: the kernels are templated on K.
template <typename F>
void with_relaxation(int kind, F&& f) {
  switch (kind) {
    case kLogistic: return f(std::integral_constant<int, kLogistic>{});
    case kLogisticPhi: return f(std::integral_constant<int, kLogisticPhi>{});
    case kGaussian: return f(std::integral_constant<int, kGaussian>{});
    case kReciprocal: return f(std::integral_constant<int, kReciprocal>{});
    case kCauchy: return f(std::integral_constant<int, kCauchy>{});
    default: return f(std::integral_constant<int, kOptimal>{});
  }
}

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
RELAXOPS_SIMD_CLONES void apply_comparators(const NetView& net, const T* alpha, int64_t c0, int64_t c1, T* W,
                                            uint8_t* live, T* diffs, uint8_t* live_comp) {
  for (int64_t c = c0; c < c1; ++c) {
    const int32_t i = net.cmin[c], j = net.cmax[c];
    const bool active = live[i] | live[j];
    if (diffs) live_comp[c - c0] = active;
    if (!active) continue;
    live[i] = live[j] = 1;
    if (diffs)
      mix_rows<T, true>(W + i * kTile, W + j * kTile, alpha[c], diffs + (c - c0) * kTile);
    else
      mix_rows<T, false>(W + i * kTile, W + j * kTile, alpha[c], nullptr);
  }
}

// Reverse sweep over comparators [c0, c1): accumulate the alpha gradient, then mix H (P_l symmetric).
template <typename T>
RELAXOPS_SIMD_CLONES void reverse_comparators(const NetView& net, const T* alpha, int64_t c0, int64_t c1, T* H,
                                              const T* diffs, const uint8_t* live_comp, T* partial) {
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
void values_forward_rows(const NetView& net, const RelaxParams& rp, int64_t B, const T* x, T* sorted, T* d, T* alpha) {
  const int64_t n = net.n, C = net.num_comparators, m = max_layer_size(net);
  parallel_items(
      B,
      [&](int64_t b, int) {
        std::copy(x + b * n, x + (b + 1) * n, sorted + b * n);
        values_forward_row<K, T>(net, T(rp.steepness), T(rp.art_lambda), sorted + b * n, d + b * C, alpha + b * C,
                                 thread_scratch<12, T>(m), thread_scratch<13, T>(m));
      },
      threads_for(B * C, kParallelWork));
}

template <typename T>
void sortnet_values_forward_cpu(const NetView& net, const RelaxParams& rp, int64_t B, const T* x, T* sorted, T* d,
                                T* alpha) {
  check_network(net, B);
  with_relaxation(rp.kind, [&](auto k) { values_forward_rows<k.value, T>(net, rp, B, x, sorted, d, alpha); });
}

template <typename T>
void sortnet_values_backward_cpu(const NetView& net, const RelaxParams& rp, int64_t B, const T* grad_sorted,
                                 const T* grad_alpha, const T* d, const T* alpha, T* grad_x) {
  check_network(net, B);
  const int64_t n = net.n, C = net.num_comparators;
  parallel_items(
      B,
      [&](int64_t b, int) {
        T* g = grad_x + b * n;
        if (grad_sorted)
          std::copy(grad_sorted + b * n, grad_sorted + (b + 1) * n, g);
        else
          std::fill(g, g + n, T(0));
        const T* db = d + b * C;
        const T* ab = alpha + b * C;
        for (int64_t c = C - 1; c >= 0; --c)
          relaxed_swap_backward<T>(rp, g, net.cmin[c], net.cmax[c], db[c], ab[c],
                                   grad_alpha ? grad_alpha[b * C + c] : T(0));
      },
      threads_for(B * C, kParallelWork));
}

namespace {

// Row b's alphas in the order of `net`'s comparators: alpha itself, or with topk_layout its reversal (in scratch).
template <typename T>
const T* row_alpha(const T* alpha, int64_t b, int64_t C, bool topk_layout) {
  const T* ab = alpha + b * C;
  if (!topk_layout) return ab;
  T* rev = thread_scratch<9, T>(C);
  std::reverse_copy(ab, ab + C, rev);
  return rev;
}

// rows (top-k layout only, nullable): X / grad_X is [B, m], row rows[b] of row b's [n, m] matrix.
void check_rows(const NetView& net, int64_t B, bool topk_layout, const int64_t* rows) {
  if (rows == nullptr) return;
  RELAXOPS_CHECK(topk_layout, "sortnet: rows only with topk_layout");
  for (int64_t b = 0; b < B; ++b)
    RELAXOPS_CHECK(rows[b] >= 0 && rows[b] < net.n, "sortnet: rows must hold row indices in [0, n)");
}

}  // namespace

template <typename T>
void sortnet_matrix_forward_cpu(const NetView& net, int64_t B, int64_t col_begin, const T* alpha, T* X,
                                bool topk_layout, const int64_t* rows) {
  check_network(net, B);
  check_columns(net, col_begin);
  check_rows(net, B, topk_layout, rows);
  const int64_t n = net.n, C = net.num_comparators, m = n - col_begin, tiles = num_tiles(m);
  parallel_items(
      B * tiles,
      [&](int64_t item, int) {
        T* W = thread_scratch<0, T>(n * kTile);
        uint8_t* live = thread_scratch<1, uint8_t>(n);
        const int64_t b = item / tiles, t0 = (item % tiles) * kTile, col0 = col_begin + t0;
        init_identity_tile(W, live, n, col0);
        apply_comparators<T>(net, row_alpha(alpha, b, C, topk_layout), 0, C, W, live, nullptr, nullptr);
        T* Xb = X + b * m * (rows ? 1 : n);
        const int64_t cols = std::min(kTile, n - col0);
        if (rows) {  // X [B, m]
          for (int64_t cc = 0; cc < cols; ++cc) Xb[t0 + cc] = W[rows[b] * kTile + cc];
        } else if (topk_layout) {  // X [B, n, m]
          for (int64_t r = 0; r < n; ++r)
            for (int64_t cc = 0; cc < cols; ++cc) Xb[r * m + t0 + cc] = W[r * kTile + cc];
        } else {  // X [B, m, n]
          for (int64_t cc = 0; cc < cols; ++cc)
            for (int64_t r = 0; r < n; ++r) Xb[(t0 + cc) * n + r] = W[r * kTile + cc];
        }
      },
      threads_for(B * tiles * C, kParallelWork));
}

// Per-thread scratch of the matrix backward, and one tile's work: the alpha gradient of every comparator
// from the tile's columns, written to part[C].
template <typename T>
struct BackwardTile {
  const NetView& net;
  int64_t S, nseg, max_seg_comps;
  int64_t g_col, g_row;  // strides of grad_X's columns and rows: (n, 1), or (1, m) in the top-k layout

  // G: the tile's first column of grad_X (G[cc * g_col + r * g_row] = dl/dY[r][col0 + cc]); with row >= 0, only
  // that row of dl/dY is non-zero and G holds it (G[cc] = dl/dY[row][col0 + cc]).
  void run(const T* ab, const T* G, int64_t col0, T* part, int64_t row = -1) const {
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
    for (int64_t cc = 0; cc < kTile && col0 + cc < n; ++cc) {
      if (row >= 0)
        H[row * kTile + cc] = G[cc];
      else
        for (int64_t r = 0; r < n; ++r) H[r * kTile + cc] = G[cc * g_col + r * g_row];
    }
    // Checkpoints: the tile state before layer s*S.
    if (nseg > 1) {
      init_identity_tile(W, live, n, col0);
      for (int64_t s = 0; s < nseg; ++s) {
        std::copy(W, W + n * kTile, ckpt + s * n * kTile);
        std::copy(live, live + n, ckpt_live + s * n);
        if (s + 1 < nseg)
          apply_comparators<T>(net, ab, net.layer_ptr[s * S], net.layer_ptr[(s + 1) * S], W, live, nullptr, nullptr);
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
void sortnet_matrix_backward_cpu(const NetView& net, int64_t B, int64_t col_begin, const T* alpha, const T* grad_X,
                                 T* grad_alpha, bool topk_layout, const int64_t* rows) {
  check_network(net, B);
  check_columns(net, col_begin);
  check_rows(net, B, topk_layout, rows);
  const int64_t n = net.n, C = net.num_comparators, L = net.num_layers, m = n - col_begin, tiles = num_tiles(m);
  if (B == 0 || C == 0) return;
  const int64_t S = segment_layers<T>(net);
  const int64_t nseg = (L + S - 1) / S;
  int64_t max_seg_comps = 0;
  for (int64_t s = 0; s < nseg; ++s) {
    const int64_t l1 = std::min(L, (s + 1) * S);
    max_seg_comps = std::max<int64_t>(max_seg_comps, net.layer_ptr[l1] - net.layer_ptr[s * S]);
  }
  const BackwardTile<T> tile_work{net, S, nseg, max_seg_comps, topk_layout ? 1 : n, topk_layout ? m : 1};
  // tile t of row b: its first column of grad_X, and the one non-zero row of dl/dY (with rows)
  auto tile_grad = [&](int64_t b, int64_t t) { return grad_X + b * m * (rows ? 1 : n) + t * kTile * tile_work.g_col; };
  auto grad_row = [&](int64_t b) { return rows ? rows[b] : int64_t(-1); };
  // grad_alpha of comparator c of `net` in row b (the top-k layout reverses the comparators)
  auto out_index = [&](int64_t b, int64_t c) { return b * C + (topk_layout ? C - 1 - c : c); };
  const int threads = threads_for(B * tiles * C, kParallelWork) == 1 ? 1 : cpu_threads();
  // grad_alpha[b][c] = sum over tiles t = 0, 1, ... in this order, whichever way the work is split, so the
  // result does not depend on the thread count.
  if (B >= threads || B * tiles * C * int64_t(sizeof(T)) > kPartialBytes) {
    // rows in parallel; a row's tiles in order, summed in scratch
    parallel_items(
        B,
        [&](int64_t b, int) {
          const T* ab = row_alpha(alpha, b, C, topk_layout);
          T* sum = thread_scratch<10, T>(C);
          T* part = thread_scratch<2, T>(C);
          tile_work.run(ab, tile_grad(b, 0), col_begin, sum, grad_row(b));
          for (int64_t t = 1; t < tiles; ++t) {
            tile_work.run(ab, tile_grad(b, t), col_begin + t * kTile, part, grad_row(b));
            for (int64_t c = 0; c < C; ++c) sum[c] += part[c];
          }
          for (int64_t c = 0; c < C; ++c) grad_alpha[out_index(b, c)] = sum[c];
        },
        threads);
    return;
  }
  // Few rows: (row, tile) items in parallel, each writing its own partial sums, then reduced in tile order over
  // slices of the comparators (two parallel loops).
  T* partial = thread_scratch<8, T>(B * tiles * C);
  parallel_items(
      B * tiles,
      [&](int64_t item, int) {
        const int64_t b = item / tiles, t = item % tiles;
        tile_work.run(row_alpha(alpha, b, C, topk_layout), tile_grad(b, t), col_begin + t * kTile, partial + item * C,
                      grad_row(b));
      },
      threads);
  parallel_chunks(
      B * C, kReduceItem,
      [&](int64_t i0, int64_t i1, int) {
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t b = i / C, c = i % C;
          const T* part = partial + b * tiles * C + c;
          T acc = part[0];
          for (int64_t t = 1; t < tiles; ++t) acc += part[t * C];
          grad_alpha[out_index(b, c)] = acc;
        }
      },
      threads);
}

// ---- ranks (items 5 and 6 of sortnet.h): rows in tiles -----------------------------------------------------
// Every row runs the same comparators, so a tile holds W rows transposed, V[w * W + r] = row r's value on wire w:
// a comparator (i, j) then works on two contiguous W-vectors (no gathers, one index pair per W rows) and the lane
// loops below vectorize. Per comparator the tile keeps alpha (forward) or d, alpha, u_i - u_j (backward), W values
// each, in per-thread scratch reused across calls. A forward that needs a gradient saves d and alpha (where they
// fit), so the backward skips its values pass (about half its work); measurements in docs/math/sortnet.md §11.

namespace {

// Rows [0, rows) of x [rows, n] into the tile V [n][W]; missing lanes are 0 (ties: finite, discarded).
template <int W, typename T>
void load_tile(const T* x, int64_t n, int64_t rows, T* V) {
  for (int64_t w = 0; w < n; ++w)
    for (int r = 0; r < W; ++r) V[w * W + r] = r < rows ? x[r * n + w] : T(0);
}

template <int W, typename T>
void store_tile(const T* V, int64_t n, int64_t rows, T* out) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t w = 0; w < n; ++w) out[r * n + w] = V[w * W + r];
}

template <int W, typename T>
void positions_tile(int64_t n, T* V) {
  for (int64_t w = 0; w < n; ++w)
    for (int r = 0; r < W; ++r) V[w * W + r] = T(w + 1);
}

// One comparator of the values pass on W lanes (relax_pairs' arithmetic); with kD, d is stored too.
template <int K, int W, bool kD, typename T>
SORTNET_SWEEP void relax_lanes(T s, T lambda, T* __restrict__ vi, T* __restrict__ vj, T* __restrict__ d,
                               T* __restrict__ alpha) {
#pragma omp simd
  for (int r = 0; r < W; ++r) {
    const T xi = vi[r], xj = vj[r];
    const T dk = relaxed_gap(xi, xj);
    const T ak = relax_alpha_k<K, T>(s, lambda, dk, nullptr);
    if (kD) d[r] = dk;
    alpha[r] = ak;
    relaxed_minmax(ak, xi, xj, dk, vi + r, vj + r);
  }
}

// One comparator's mixing of W lanes: u_i, u_j <- alpha u_i + (1 - alpha) u_j, (1 - alpha) u_i + alpha u_j as
// u_j + alpha e, u_i - alpha e with e = u_i - u_j (the mixing of the matrix kernels); with kDiff, e is stored.
template <int W, bool kDiff, typename T>
SORTNET_SWEEP void mix_lanes(const T* __restrict__ alpha, T* __restrict__ ui, T* __restrict__ uj,
                             T* __restrict__ diff) {
#pragma omp simd
  for (int r = 0; r < W; ++r) {
    const T u = ui[r], w = uj[r], e = u - w;
    ui[r] = w + alpha[r] * e;
    uj[r] = u - alpha[r] * e;
    if (kDiff) diff[r] = e;
  }
}

// One comparator of the fused reverse sweep on W lanes: the positions v mixed, grad_alpha = du (v_i - v_j), and
// the values backward of g with it (relaxed_swap_backward).
template <int K, int W, typename T>
SORTNET_SWEEP void rank_backward_lanes(T s, T lambda, const T* __restrict__ alpha, const T* __restrict__ d,
                                       const T* __restrict__ du, T* __restrict__ vi, T* __restrict__ vj,
                                       T* __restrict__ gi_, T* __restrict__ gj_) {
#pragma omp simd
  for (int r = 0; r < W; ++r) {
    const T ak = alpha[r], dk = d[r];
    const T a = vi[r], b = vj[r], e = a - b;
    vi[r] = b + ak * e;
    vj[r] = a - ak * e;
    T slope;
    relax_alpha_k<K, T>(s, lambda, dk, &slope);
    const T gi = gi_[r], gj = gj_[r];
    const T dd = relaxed_gap_grad(du[r] * e, gi, gj, dk, slope);
    gi_[r] = ak * gi + (T(1) - ak) * gj - dd;
    gj_[r] = (T(1) - ak) * gi + ak * gj + dd;
  }
}

// Per-thread scratch of the rank kernels: tiles V, U, G [n][W] and d, alpha, du [C][W] (the forward: V, alpha).
// With saved streams (item 5's `saved`), d and alpha of tile t are its slices of the caller's buffer instead.
template <int W, typename T>
struct RankScratch {
  T *V, *U, *G, *d, *alpha, *du;
  RankScratch(int64_t n, int64_t C, bool backward, bool saved)
      : V(thread_scratch<10, T>(n * W)),
        U(thread_scratch<11, T>(backward ? n * W : 0)),
        G(thread_scratch<12, T>(backward ? n * W : 0)),
        d(thread_scratch<13, T>(backward && !saved ? C * W : 0)),
        alpha(thread_scratch<14, T>(saved ? 0 : C * W)),
        du(thread_scratch<15, T>(backward ? C * W : 0)) {}
  // The scratch with tile t's saved d, alpha ([tiles][2][C][W]) in place of its own, where there are some.
  RankScratch at_tile(T* saved, int64_t C, int64_t t) const {
    RankScratch s = *this;
    if (saved) {
      s.d = saved + 2 * t * C * W;
      s.alpha = s.d + C * W;
    }
    return s;
  }
};

// One tile (item 5): the values pass keeping alpha (kSave: and d, for the backward), then the positions 1..n
// through the comparators in reverse.
template <int K, int W, bool kSave, typename T>
RELAXOPS_SIMD_CLONES void rank_forward_tile(const NetView& net, T s, T lambda, const T* x, int64_t rows, T* rank,
                                            const RankScratch<W, T>& w) {
  const int64_t n = net.n, C = net.num_comparators;
  load_tile<W>(x, n, rows, w.V);
  for (int64_t c = 0; c < C; ++c)
    relax_lanes<K, W, kSave, T>(s, lambda, w.V + net.cmin[c] * W, w.V + net.cmax[c] * W, w.d + c * W, w.alpha + c * W);
  positions_tile<W>(n, w.V);
  for (int64_t l = net.num_layers - 1; l >= 0; --l)
    for (int64_t c = net.layer_ptr[l]; c < net.layer_ptr[l + 1]; ++c)
      mix_lanes<W, false, T>(w.alpha + c * W, w.V + net.cmin[c] * W, w.V + net.cmax[c] * W, nullptr);
  store_tile<W>(w.V, n, rows, rank);
}

// One tile of the backward (item 6): a forward sweep pushes u = grad_rank through each comparator, storing
// u_i - u_j, after recomputing the values pass (d, alpha) or, kSaved, reading the forward's; then the fused
// reverse sweep of the positions and the values backward.
template <int K, int W, bool kSaved, typename T>
RELAXOPS_SIMD_CLONES void rank_backward_tile(const NetView& net, T s, T lambda, const T* x, const T* grad_rank,
                                             int64_t rows, T* grad_x, const RankScratch<W, T>& w) {
  const int64_t n = net.n, C = net.num_comparators;
  if (!kSaved) load_tile<W>(x, n, rows, w.V);
  load_tile<W>(grad_rank, n, rows, w.U);
  for (int64_t c = 0; c < C; ++c) {
    const int64_t i = net.cmin[c] * W, j = net.cmax[c] * W;
    if (!kSaved) relax_lanes<K, W, true, T>(s, lambda, w.V + i, w.V + j, w.d + c * W, w.alpha + c * W);
    mix_lanes<W, true, T>(w.alpha + c * W, w.U + i, w.U + j, w.du + c * W);
  }
  positions_tile<W>(n, w.V);
  std::fill(w.G, w.G + n * W, T(0));
  for (int64_t l = net.num_layers - 1; l >= 0; --l) {
    for (int64_t c = net.layer_ptr[l]; c < net.layer_ptr[l + 1]; ++c) {
      const int64_t i = net.cmin[c] * W, j = net.cmax[c] * W;
      rank_backward_lanes<K, W, T>(s, lambda, w.alpha + c * W, w.d + c * W, w.du + c * W, w.V + i, w.V + j, w.G + i,
                                   w.G + j);
    }
  }
  store_tile<W>(w.G, n, rows, grad_x);
}

// Tile t of the forward or (grad_rank given) the backward; kSaved: with the saved d, alpha streams.
template <int K, int W, bool kSaved, typename T>
void rank_tile(const NetView& net, const RelaxParams& rp, int64_t B, int64_t t, const T* x, const T* grad_rank,
               T* saved, T* out, const RankScratch<W, T>& scratch) {
  const int64_t n = net.n, r0 = t * W, rows = std::min<int64_t>(W, B - r0);
  const RankScratch<W, T> w = scratch.at_tile(saved, net.num_comparators, t);
  const T s = T(rp.steepness), lambda = T(rp.art_lambda);
  if (grad_rank)
    rank_backward_tile<K, W, kSaved, T>(net, s, lambda, x + r0 * n, grad_rank + r0 * n, rows, out + r0 * n, w);
  else
    rank_forward_tile<K, W, kSaved, T>(net, s, lambda, x + r0 * n, rows, out + r0 * n, w);
}

// Rank calls below this many comparator evaluations (~0.1 ms) run on one thread: a parallel loop costs more there.
// Idle cores: B = 128, n = 100 (1.7e5) fwd+bwd 0.63 ms on one thread, 0.42 ms on two.
constexpr int64_t kRankParallelWork = 1 << 17;

// Tiles of W rows over the threads, each tile by one thread through every comparator (the backward from the last
// tile: the forward's last saved streams are still in cache).
template <int K, int W, bool kSaved, typename T>
void rank_tiles(const NetView& net, const RelaxParams& rp, int64_t B, const T* x, const T* grad_rank, T* saved,
                T* out) {
  const int64_t n = net.n, C = net.num_comparators, tiles = (B + W - 1) / W;
  const bool backward = grad_rank != nullptr;
  parallel_items(
      tiles,
      [&](int64_t t, int) {
        const RankScratch<W, T> w(n, C, backward, kSaved);
        rank_tile<K, W, kSaved, T>(net, rp, B, kSaved && backward ? tiles - 1 - t : t, x, grad_rank, saved, out, w);
      },
      threads_for(B * C, kRankParallelWork));
}

// Tiles of 16 rows: twice as fast per row as 8 (a comparator's fixed costs are shared by more lanes), no faster
// with 32 (measured, AVX-512 on 2 cores); one width for every batch, so that a row's result does not depend on the
// batch it comes in (the lane loops of different widths may contract to FMAs differently).
constexpr int kRankTile = 16;

template <typename T>
void rank_dispatch(const NetView& net, const RelaxParams& rp, int64_t B, const T* x, const T* grad_rank, T* saved,
                   T* out) {
  check_network(net, B);
  with_relaxation(rp.kind, [&](auto k) {
    if (saved)
      rank_tiles<k.value, kRankTile, true, T>(net, rp, B, x, grad_rank, saved, out);
    else
      rank_tiles<k.value, kRankTile, false, T>(net, rp, B, x, grad_rank, saved, out);
  });
}

}  // namespace

int64_t sortnet_rank_saved_numel_cpu(int64_t C, int64_t B) {
  return 2 * C * ((B + kRankTile - 1) / kRankTile) * kRankTile;
}

template <typename T>
void sortnet_rank_forward_cpu(const NetView& net, const RelaxParams& rp, int64_t B, const T* x, T* rank, T* saved) {
  rank_dispatch<T>(net, rp, B, x, nullptr, saved, rank);
}

template <typename T>
void sortnet_rank_backward_cpu(const NetView& net, const RelaxParams& rp, int64_t B, const T* x, const T* grad_rank,
                               const T* saved, T* grad_x) {
  rank_dispatch<T>(net, rp, B, x, grad_rank, const_cast<T*>(saved), grad_x);  // saved: read only
}

// ---- the top-k loss's preselection (sortnet.h) ------------------------------------------------------------

template <typename T>
void topk_preselect_forward_cpu(int64_t B, int64_t n, int64_t m, const T* x, const int64_t* target, T* values,
                                int64_t* index) {
  RELAXOPS_CHECK(B >= 0 && n >= 1 && m >= 1 && m <= n, "topk_preselect: m must be in [1, n]");
  for (int64_t b = 0; b < B; ++b)
    RELAXOPS_CHECK(target[b] >= 0 && target[b] < n, "topk_preselect: target must hold indices in [0, n)");
  parallel_items(
      B,
      [&](int64_t b, int) {
        const T* xb = x + b * n;
        const int64_t t = target[b];
        int64_t* cand = thread_scratch<11, int64_t>(n);
        int64_t c = 0;
        for (int64_t j = 0; j < n; ++j)
          if (j != t) cand[c++] = j;
        // descending, NaN first (as torch.topk), ties in index order
        std::partial_sort(cand, cand + (m - 1), cand + c, [xb](int64_t i, int64_t j) {
          const T u = xb[i], v = xb[j];
          if (u != u || v != v) return u != u && (v == v || i < j);
          return u > v || (u == v && i < j);
        });
        index[b * m] = t;
        values[b * m] = xb[t];
        for (int64_t r = 1; r < m; ++r) {
          index[b * m + r] = cand[r - 1];
          values[b * m + r] = xb[cand[r - 1]];
        }
      },
      threads_for(B * n, kParallelWork));
}

template <typename T>
void topk_preselect_backward_cpu(int64_t B, int64_t n, int64_t m, const T* grad_values, const int64_t* index,
                                 T* grad_x) {
  parallel_items(
      B,
      [&](int64_t b, int) {
        T* gb = grad_x + b * n;
        std::fill(gb, gb + n, T(0));
        for (int64_t r = 0; r < m; ++r) gb[index[b * m + r]] = grad_values[b * m + r];  // distinct indices
      },
      threads_for(B * n, kParallelWork));
}

template <typename T>
void label_softmax_forward_cpu(int64_t B, int64_t n, const T* x, const int64_t* index, T* p) {
  RELAXOPS_CHECK(B >= 0 && n >= 1, "label_softmax: invalid sizes");
  for (int64_t b = 0; b < B; ++b)
    RELAXOPS_CHECK(index[b] >= 0 && index[b] < n, "label_softmax: index must hold indices in [0, n)");
  parallel_items(
      B,
      [&](int64_t b, int) {
        const T* xb = x + b * n;
        T m = xb[0];
        for (int64_t j = 1; j < n; ++j) m = (xb[j] > m || xb[j] != xb[j]) ? xb[j] : m;  // NaN wins
        T s = 0;
        for (int64_t j = 0; j < n; ++j) s += std::exp(xb[j] - m);
        p[b] = std::exp(xb[index[b]] - m) / s;
      },
      threads_for(B * n, kParallelWork));
}

template <typename T>
void label_softmax_backward_cpu(int64_t B, int64_t n, const T* x, const int64_t* index, const T* p, const T* grad_p,
                                T* grad_x) {
  parallel_items(
      B,
      [&](int64_t b, int) {
        const T* xb = x + b * n;
        T* gb = grad_x + b * n;
        T m = xb[0];
        for (int64_t j = 1; j < n; ++j) m = (xb[j] > m || xb[j] != xb[j]) ? xb[j] : m;
        T s = 0;
        for (int64_t j = 0; j < n; ++j) s += (gb[j] = std::exp(xb[j] - m));
        const T gp = grad_p[b] * p[b];  // d p_i / d x_j = p_i ([j = i] - softmax_j)
        for (int64_t j = 0; j < n; ++j) gb[j] = -gp * (gb[j] / s);
        gb[index[b]] += gp;
      },
      threads_for(B * n, kParallelWork));
}

#define RELAXOPS_INSTANTIATE(T)                                                                                      \
  template void sortnet_values_forward_cpu<T>(const NetView&, const RelaxParams&, int64_t, const T*, T*, T*, T*);    \
  template void sortnet_values_backward_cpu<T>(const NetView&, const RelaxParams&, int64_t, const T*, const T*,      \
                                               const T*, const T*, T*);                                              \
  template void sortnet_matrix_forward_cpu<T>(const NetView&, int64_t, int64_t, const T*, T*, bool, const int64_t*); \
  template void sortnet_matrix_backward_cpu<T>(const NetView&, int64_t, int64_t, const T*, const T*, T*, bool,       \
                                               const int64_t*);                                                      \
  template void topk_preselect_forward_cpu<T>(int64_t, int64_t, int64_t, const T*, const int64_t*, T*, int64_t*);    \
  template void topk_preselect_backward_cpu<T>(int64_t, int64_t, int64_t, const T*, const int64_t*, T*);             \
  template void label_softmax_forward_cpu<T>(int64_t, int64_t, const T*, const int64_t*, T*);                        \
  template void label_softmax_backward_cpu<T>(int64_t, int64_t, const T*, const int64_t*, const T*, const T*, T*);   \
  template void sortnet_rank_forward_cpu<T>(const NetView&, const RelaxParams&, int64_t, const T*, T*, T*);          \
  template void sortnet_rank_backward_cpu<T>(const NetView&, const RelaxParams&, int64_t, const T*, const T*,        \
                                             const T*, T*);

RELAXOPS_INSTANTIATE(float)
RELAXOPS_INSTANTIATE(double)

}  // namespace relaxops
