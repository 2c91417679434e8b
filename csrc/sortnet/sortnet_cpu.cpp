// CPU kernels of sortnet.h: one parallel loop per call (cpu_parallel.h) over rows (values), (row, column tile)
// work items (matrix) or row tiles (ranks), each item through every layer of the network.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
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

// Apply comparators [c0, c1) of the row's network to the tile W[n][kTile]. live[r] != 0 marks rows that may be
// non-zero: Y starts as (a slice of) the identity, and mixing two all-zero rows leaves them zero, so such
// comparators are skipped exactly (early layers of a tile touch few rows), as are comparators that are not part of
// the row's network (RowNet::takes). With diffs, records Y_i - Y_j of each live comparator and live_comp[c - c0]
// (0: both rows were zero or the comparator is not the row's, the difference is not used).
template <typename T>
RELAXOPS_SIMD_CLONES void apply_comparators(const RowNet& rn, const T* alpha, int64_t c0, int64_t c1, T* W,
                                            uint8_t* live, T* diffs, uint8_t* live_comp) {
  const NetView& net = rn.net;
  for (int64_t c = c0; c < c1; ++c) {
    const int32_t i = net.cmin[c], j = net.cmax[c];
    const bool active = (live[i] | live[j]) && i < rn.wires && j < rn.wires;
    if (diffs) live_comp[c - c0] = active;
    if (!active) continue;
    live[i] = live[j] = 1;
    if (diffs)
      mix_rows<T, true>(W + i * kTile, W + j * kTile, alpha[c], diffs + (c - c0) * kTile);
    else
      mix_rows<T, false>(W + i * kTile, W + j * kTile, alpha[c], nullptr);
  }
}

// Reverse sweep over comparators [c0, c1): accumulate the alpha gradient, then mix H (P_l symmetric); comparators
// that are not the row's leave H unchanged and get 0.
template <typename T>
RELAXOPS_SIMD_CLONES void reverse_comparators(const RowNet& rn, const T* alpha, int64_t c0, int64_t c1, T* H,
                                              const T* diffs, const uint8_t* live_comp, T* partial) {
  using V = typename TileRow<T>::type;
  const NetView& net = rn.net;
  for (int64_t c = c1 - 1; c >= c0; --c) {
    if (!rn.takes(c)) {
      partial[c] = 0;
      continue;
    }
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

// The tile of output columns t0 .. t0 + kTile - 1 of a row: its Y-columns col0 + cc for cc in [cc0, cc1) (the
// row's columns, RowSpec), none elsewhere.
struct TileCols {
  int64_t col0, cc0, cc1;
};
inline TileCols tile_cols(const RowNet& rn, int64_t t0) {
  const int64_t first = rn.wires - rn.cols;  // the row's first Y-column, at output column out_first
  return {t0 - rn.out_first + first, std::max<int64_t>(0, rn.out_first - t0),
          std::min<int64_t>(kTile, rn.out_first + rn.cols - t0)};
}

// Y^(0) = I restricted to the tile's Y-columns; only those rows are live.
template <typename T>
void init_identity_tile(T* W, uint8_t* live, int64_t n, const TileCols& tc) {
  std::memset(W, 0, sizeof(T) * n * kTile);
  std::memset(live, 0, n);
  for (int64_t cc = tc.cc0; cc < tc.cc1; ++cc) {
    W[(tc.col0 + cc) * kTile + cc] = T(1);
    live[tc.col0 + cc] = 1;
  }
}

int64_t num_tiles(int64_t n) { return (n + kTile - 1) / kTile; }

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

// The networks and row specs of a call (check_network for each; every RowSpec within its network and the row).
void check_rows(const Rows& rows, int64_t B) {
  if (rows.spec == nullptr) {
    check_network(rows.net, B);
    RELAXOPS_CHECK(rows.C == rows.net.num_comparators, "sortnet: C must be the network's comparator count");
    return;
  }
  RELAXOPS_CHECK(rows.net.n >= 1 && rows.net.n <= INT32_MAX && B >= 0, "sortnet: n must be in [1, 2^31)");
  RELAXOPS_CHECK(rows.num_nets >= 1 && rows.nets, "sortnet: a row spec needs at least one network");
  for (int64_t g = 0; g < rows.num_nets; ++g) {
    check_network(rows.nets[g], B);
    RELAXOPS_CHECK(rows.nets[g].n <= rows.net.n && rows.nets[g].num_comparators <= rows.C,
                   "sortnet: a row network must fit the rows (n) and the alpha stride (C)");
  }
  for (int64_t b = 0; b < B; ++b) {
    const RowSpec& s = rows.spec[b];
    RELAXOPS_CHECK(s.group >= 0 && s.group < rows.num_nets, "sortnet: row spec group out of range");
    const NetView& g = rows.nets[s.group];
    RELAXOPS_CHECK(s.wires >= 0 && s.wires <= g.n && 0 <= s.layer_begin && s.layer_begin <= s.layer_end &&
                       s.layer_end <= g.num_layers && 0 <= s.cols && s.cols <= s.wires && s.out_first >= 0,
                   "sortnet: row spec out of range (wires in [0, n], layers in [0, L], cols in [0, wires])");
  }
}

// col_begin of the matrix kernels, and every row's columns within the m = n - col_begin output columns.
void check_columns(const Rows& rows, int64_t B, int64_t col_begin) {
  RELAXOPS_CHECK(col_begin >= 0 && col_begin < rows.n(), "sortnet: col_begin must be in [0, n)");
  if (rows.spec)
    for (int64_t b = 0; b < B; ++b)
      RELAXOPS_CHECK(rows.spec[b].out_first + rows.spec[b].cols <= rows.n() - col_begin,
                     "sortnet: a row's columns must lie in the m = n - col_begin output columns");
}

int64_t max_layer_size(const NetView& net) {
  int64_t m = 0;
  for (int64_t l = 0; l < net.num_layers; ++l) m = std::max<int64_t>(m, net.layer_ptr[l + 1] - net.layer_ptr[l]);
  return m;
}

int64_t max_layer_size(const Rows& rows) {
  if (rows.spec == nullptr) return max_layer_size(rows.net);
  int64_t m = 0;
  for (int64_t g = 0; g < rows.num_nets; ++g) m = std::max(m, max_layer_size(rows.nets[g]));
  return m;
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

// Per-row work buffers of the values pass: a, b (the layer's two wires), and for masked rows the layer's
// comparators that are the row's (idx) and their d, alpha before they are scattered (dq, aq); max_layer_size each.
template <typename T>
struct PassScratch {
  T *a, *b, *dq, *aq;
  int32_t* idx;
};

// The values pass of one row in place on v (item 1) over its layers: d and alpha of every comparator. kMasked: the
// row's network is a part of the layers (RowNet::takes): a layer's comparators of the row are gathered first (the
// arithmetic then runs on them alone, vectorized), the others store d = alpha = 0.
template <int K, bool kMasked, typename T>
SORTNET_SWEEP void values_pass(const RowNet& rn, T s, T lambda, T* v, T* d, T* alpha, const PassScratch<T>& w) {
  const NetView& net = rn.net;
  for (int64_t l = rn.l0; l < rn.l1; ++l) {
    const int64_t c0 = net.layer_ptr[l], m = net.layer_ptr[l + 1] - c0;
    const int32_t *ci = net.cmin + c0, *cj = net.cmax + c0;
    if (!kMasked) {
      gather_pairs(ci, cj, m, v, w.a, w.b);
      relax_pairs<K, T>(s, lambda, m, w.a, w.b, d + c0, alpha + c0);
      scatter_pairs(ci, cj, m, w.a, w.b, v);
      continue;
    }
    int64_t q = 0;
    for (int64_t k = 0; k < m; ++k) {
      if (ci[k] < rn.wires && cj[k] < rn.wires) {
        w.idx[q++] = int32_t(k);
      } else {
        d[c0 + k] = alpha[c0 + k] = T(0);
      }
    }
    for (int64_t t = 0; t < q; ++t) {
      w.a[t] = v[ci[w.idx[t]]];
      w.b[t] = v[cj[w.idx[t]]];
    }
    relax_pairs<K, T>(s, lambda, q, w.a, w.b, w.dq, w.aq);
    for (int64_t t = 0; t < q; ++t) {
      const int64_t k = w.idx[t];
      v[ci[k]] = w.a[t];
      v[cj[k]] = w.b[t];
      d[c0 + k] = w.dq[t];
      alpha[c0 + k] = w.aq[t];
    }
  }
}

}  // namespace

template <int K, bool kMasked, typename T>
RELAXOPS_SIMD_CLONES void values_forward_row(const RowNet& rn, T s, T lambda, T* v, T* d, T* alpha,
                                             const PassScratch<T>& w) {
  values_pass<K, kMasked, T>(rn, s, lambda, v, d, alpha, w);
}

template <int K, typename T>
void values_forward_rows(const Rows& rows, const RelaxParams& rp, int64_t B, const T* x, T* sorted, T* d, T* alpha) {
  const int64_t n = rows.n(), C = rows.C, m = max_layer_size(rows);
  parallel_items(
      B,
      [&](int64_t b, int) {
        const RowNet rn = rows.row(b);
        T* v = sorted + b * n;
        std::copy(x + b * n, x + b * n + rn.wires, v);  // the pads are never read: 0 in sorted
        std::fill(v + rn.wires, v + n, T(0));
        T *db = d + b * C, *ab = alpha + b * C;
        std::fill(db, db + rn.c0, T(0));  // comparators that are not the row's: 0
        std::fill(ab, ab + rn.c0, T(0));
        std::fill(db + rn.c1, db + C, T(0));
        std::fill(ab + rn.c1, ab + C, T(0));
        const T s = T(rp.steepness), lambda = T(rp.art_lambda);
        const PassScratch<T> w{thread_scratch<12, T>(m), thread_scratch<13, T>(m), thread_scratch<14, T>(m),
                               thread_scratch<15, T>(m), thread_scratch<16, int32_t>(m)};
        if (rn.wires < rn.net.n)
          values_forward_row<K, true, T>(rn, s, lambda, v, db, ab, w);
        else
          values_forward_row<K, false, T>(rn, s, lambda, v, db, ab, w);
      },
      threads_for(B * C, kParallelWork));
}

template <typename T>
void sortnet_values_forward_cpu(const Rows& rows, const RelaxParams& rp, int64_t B, const T* x, T* sorted, T* d,
                                T* alpha) {
  check_rows(rows, B);
  with_relaxation(rp.kind, [&](auto k) { values_forward_rows<k.value, T>(rows, rp, B, x, sorted, d, alpha); });
}

template <typename T>
void sortnet_values_backward_cpu(const Rows& rows, const RelaxParams& rp, int64_t B, const T* grad_sorted,
                                 const T* grad_alpha, const T* d, const T* alpha, T* grad_x) {
  check_rows(rows, B);
  const int64_t n = rows.n(), C = rows.C;
  parallel_items(
      B,
      [&](int64_t b, int) {
        const RowNet rn = rows.row(b);
        T* g = grad_x + b * n;
        if (grad_sorted)
          std::copy(grad_sorted + b * n, grad_sorted + b * n + rn.wires, g);
        else
          std::fill(g, g + rn.wires, T(0));
        std::fill(g + rn.wires, g + n, T(0));  // pads: no gradient (no comparator of the row touches them)
        const T* db = d + b * C;
        const T* ab = alpha + b * C;
        for (int64_t c = rn.c1 - 1; c >= rn.c0; --c)
          if (rn.takes(c))
            relaxed_swap_backward<T>(rp, g, rn.net.cmin[c], rn.net.cmax[c], db[c], ab[c],
                                     grad_alpha ? grad_alpha[b * C + c] : T(0));
      },
      threads_for(B * C, kParallelWork));
}

namespace {

// Row b's alphas in the order of its network's comparators: alpha itself, or with topk_layout the reversal of its
// C_g = rn.net.num_comparators (in scratch).
template <typename T>
const T* row_alpha(const T* alpha, int64_t b, int64_t C, const RowNet& rn, bool topk_layout) {
  const T* ab = alpha + b * C;
  if (!topk_layout) return ab;
  const int64_t Cg = rn.net.num_comparators;
  T* rev = thread_scratch<9, T>(Cg);
  std::reverse_copy(ab, ab + Cg, rev);
  return rev;
}

// label_rows (top-k layout only, nullable): X / grad_X is [B, m], row label_rows[b] of row b's [n, m] matrix.
void check_label_rows(const Rows& rows, int64_t B, bool topk_layout, const int64_t* label_rows) {
  if (label_rows == nullptr) return;
  RELAXOPS_CHECK(topk_layout, "sortnet: rows only with topk_layout");
  for (int64_t b = 0; b < B; ++b)
    RELAXOPS_CHECK(label_rows[b] >= 0 && label_rows[b] < rows.n(), "sortnet: rows must hold row indices in [0, n)");
}

}  // namespace

template <typename T>
void sortnet_matrix_forward_cpu(const Rows& rows, int64_t B, int64_t col_begin, const T* alpha, T* X, bool topk_layout,
                                const int64_t* label_rows) {
  check_rows(rows, B);
  check_columns(rows, B, col_begin);
  check_label_rows(rows, B, topk_layout, label_rows);
  const int64_t n = rows.n(), C = rows.C, m = n - col_begin, tiles = num_tiles(m);
  parallel_items(
      B * tiles,
      [&](int64_t item, int) {
        T* W = thread_scratch<0, T>(n * kTile);
        uint8_t* live = thread_scratch<1, uint8_t>(n);
        const int64_t b = item / tiles, t0 = (item % tiles) * kTile;
        const RowNet rn = rows.row(b, m);
        init_identity_tile(W, live, n, tile_cols(rn, t0));
        apply_comparators<T>(rn, row_alpha(alpha, b, C, rn, topk_layout), rn.c0, rn.c1, W, live, nullptr, nullptr);
        // W is 0 outside the row's columns and on its pad wires: the pads of X are 0
        T* Xb = X + b * m * (label_rows ? 1 : n);
        const int64_t cols = std::min(kTile, m - t0);
        if (label_rows) {  // X [B, m]
          for (int64_t cc = 0; cc < cols; ++cc) Xb[t0 + cc] = W[label_rows[b] * kTile + cc];
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

// Per-thread scratch of the matrix backward, and one tile's work: the alpha gradient of the row's comparators
// [c0, c1) from the tile's columns, written to part[c0 .. c1).
template <typename T>
struct BackwardTile {
  int64_t n;
  int64_t g_col, g_row;  // strides of grad_X's columns and rows: (n, 1), or (1, m) in the top-k layout

  // G: the tile's first column of grad_X (G[cc * g_col + r * g_row] = dl/dY[r][col0 + cc]); with row >= 0, only
  // that row of dl/dY is non-zero and G holds it (G[cc] = dl/dY[row][col0 + cc]). The row's layers run in segments
  // of S layers (all of them if their trajectory fits the scratch target, else ~sqrt(2 L)).
  void run(const RowNet& rn, const T* ab, const T* G, int64_t t0, T* part, int64_t row = -1) const {
    const NetView& net = rn.net;
    const TileCols tc = tile_cols(rn, t0);
    const int64_t L = rn.l1 - rn.l0;
    if (tc.cc0 >= tc.cc1 || L == 0) {  // no column of the row in this tile: no gradient
      std::fill(part + rn.c0, part + rn.c1, T(0));
      return;
    }
    const int64_t S = (rn.c1 - rn.c0) * kTile * int64_t(sizeof(T)) <= kScratchBytes
                          ? L
                          : std::max<int64_t>(1, int64_t(std::ceil(std::sqrt(2.0 * L))));
    const int64_t nseg = (L + S - 1) / S;
    auto seg_begin = [&](int64_t s) { return net.layer_ptr[rn.l0 + s * S]; };
    auto seg_end = [&](int64_t s) { return net.layer_ptr[rn.l0 + std::min(L, (s + 1) * S)]; };
    int64_t max_seg_comps = 0;
    for (int64_t s = 0; s < nseg; ++s) max_seg_comps = std::max<int64_t>(max_seg_comps, seg_end(s) - seg_begin(s));
    T* W = thread_scratch<0, T>(n * kTile);
    T* H = thread_scratch<3, T>(n * kTile);
    uint8_t* live = thread_scratch<1, uint8_t>(n);
    uint8_t* live_comp = thread_scratch<4, uint8_t>(max_seg_comps);
    T* ckpt = thread_scratch<5, T>(nseg > 1 ? nseg * n * kTile : 0);
    uint8_t* ckpt_live = thread_scratch<6, uint8_t>(nseg > 1 ? nseg * n : 0);
    T* diffs = thread_scratch<7, T>(max_seg_comps * kTile);
    // H = dl/dY^(L) on the tile's columns of the row and its real wires (zero elsewhere: pads take no part).
    std::fill(H, H + n * kTile, T(0));
    for (int64_t cc = tc.cc0; cc < tc.cc1; ++cc) {
      if (row >= 0) {
        if (row < rn.wires) H[row * kTile + cc] = G[cc];
      } else {
        for (int64_t r = 0; r < rn.wires; ++r) H[r * kTile + cc] = G[cc * g_col + r * g_row];
      }
    }
    // Checkpoints: the tile state before segment s.
    if (nseg > 1) {
      init_identity_tile(W, live, n, tc);
      for (int64_t s = 0; s < nseg; ++s) {
        std::copy(W, W + n * kTile, ckpt + s * n * kTile);
        std::copy(live, live + n, ckpt_live + s * n);
        if (s + 1 < nseg) apply_comparators<T>(rn, ab, seg_begin(s), seg_end(s), W, live, nullptr, nullptr);
      }
    }
    for (int64_t s = nseg - 1; s >= 0; --s) {
      if (nseg > 1) {
        std::copy(ckpt + s * n * kTile, ckpt + (s + 1) * n * kTile, W);
        std::copy(ckpt_live + s * n, ckpt_live + (s + 1) * n, live);
      } else {
        init_identity_tile(W, live, n, tc);
      }
      apply_comparators<T>(rn, ab, seg_begin(s), seg_end(s), W, live, diffs, live_comp);
      reverse_comparators<T>(rn, ab, seg_begin(s), seg_end(s), H, diffs, live_comp, part);
    }
  }
};

template <typename T>
void sortnet_matrix_backward_cpu(const Rows& rows, int64_t B, int64_t col_begin, const T* alpha, const T* grad_X,
                                 T* grad_alpha, bool topk_layout, const int64_t* label_rows) {
  check_rows(rows, B);
  check_columns(rows, B, col_begin);
  check_label_rows(rows, B, topk_layout, label_rows);
  const int64_t n = rows.n(), C = rows.C, m = n - col_begin, tiles = num_tiles(m);
  if (B == 0 || C == 0) return;
  const BackwardTile<T> tile_work{n, topk_layout ? 1 : n, topk_layout ? m : 1};
  // tile t of row b: its first column of grad_X, and the one non-zero row of dl/dY (with label rows)
  auto tile_grad = [&](int64_t b, int64_t t) {
    return grad_X + b * m * (label_rows ? 1 : n) + t * kTile * tile_work.g_col;
  };
  auto grad_row = [&](int64_t b) { return label_rows ? label_rows[b] : int64_t(-1); };
  // grad_alpha of row b from the sums of its network's comparators (the top-k layout reverses them); 0 for the
  // comparators that are not the row's
  auto store = [&](int64_t b, const RowNet& rn, auto&& sum_of) {
    T* ga = grad_alpha + b * C;
    const int64_t Cg = rn.net.num_comparators;
    std::fill(ga, ga + C, T(0));
    for (int64_t c = rn.c0; c < rn.c1; ++c) ga[topk_layout ? Cg - 1 - c : c] = sum_of(c);
  };
  const int threads = threads_for(B * tiles * C, kParallelWork) == 1 ? 1 : cpu_threads();
  // grad_alpha[b][c] = sum over tiles t = 0, 1, ... in this order, whichever way the work is split, so the
  // result does not depend on the thread count.
  if (B >= threads || B * tiles * C * int64_t(sizeof(T)) > kPartialBytes) {
    // rows in parallel; a row's tiles in order, summed in scratch
    parallel_items(
        B,
        [&](int64_t b, int) {
          const RowNet rn = rows.row(b, m);
          const T* ab = row_alpha(alpha, b, C, rn, topk_layout);
          T* sum = thread_scratch<10, T>(C);
          T* part = thread_scratch<2, T>(C);
          tile_work.run(rn, ab, tile_grad(b, 0), 0, sum, grad_row(b));
          for (int64_t t = 1; t < tiles; ++t) {
            tile_work.run(rn, ab, tile_grad(b, t), t * kTile, part, grad_row(b));
            for (int64_t c = rn.c0; c < rn.c1; ++c) sum[c] += part[c];
          }
          store(b, rn, [&](int64_t c) { return sum[c]; });
        },
        threads);
    return;
  }
  // Few rows: (row, tile) items in parallel, each writing its own partial sums, then reduced in tile order over
  // the rows (two parallel loops).
  T* partial = thread_scratch<8, T>(B * tiles * C);
  parallel_items(
      B * tiles,
      [&](int64_t item, int) {
        const int64_t b = item / tiles, t = item % tiles;
        const RowNet rn = rows.row(b, m);
        tile_work.run(rn, row_alpha(alpha, b, C, rn, topk_layout), tile_grad(b, t), t * kTile, partial + item * C,
                      grad_row(b));
      },
      threads);
  // grad_alpha[b][o] for output slot o: comparator c = o (the top-k layout: C_g - 1 - o) of row b's network
  parallel_chunks(
      B * C, kReduceItem,
      [&](int64_t i0, int64_t i1, int) {
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t b = i / C, o = i % C;
          const RowNet rn = rows.row(b, m);
          const int64_t c = topk_layout ? rn.net.num_comparators - 1 - o : o;
          T acc = 0;
          if (c >= rn.c0 && c < rn.c1) {
            const T* part = partial + b * tiles * C + c;
            acc = part[0];
            for (int64_t t = 1; t < tiles; ++t) acc += part[t * C];
          }
          grad_alpha[i] = acc;
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

// The rows of a tile: `count` rows idx[0 ..] (W at most) of one network. Lane r runs comparators [c0[r], c1[r]) of
// it that have both wires below wires[r] (its RowSpec); the tile sweeps rn's layers [l0, l1), the union of its
// lanes' (lanes beyond count run nothing), skipping the comparators with a wire at or above every lane's (wmax).
// masked: some lane runs less than the whole sweep on all wires, so the lane loops select per lane (kMasked); full
// rows never do.
template <int W>
struct TileRows {
  const int64_t* idx;
  int64_t count;
  RowNet rn;
  int64_t wires[W], c0[W], c1[W];
  int64_t wmax;
  bool masked;
  // The sweep skips comparator c: no lane has both its wires.
  bool skips(int64_t c) const { return rn.net.cmin[c] >= wmax || rn.net.cmax[c] >= wmax; }
};

template <int W>
TileRows<W> tile_rows(const Rows& rows, const int64_t* idx, int64_t count) {
  TileRows<W> t{idx, count, rows.row(idx[0]), {}, {}, {}, 0, false};
  for (int r = 0; r < W; ++r) {
    const RowNet rn = r < count ? rows.row(idx[r]) : RowNet{t.rn.net, 0, 0, 0, 0, 0, 0, 0};
    t.wires[r] = rn.wires;
    t.c0[r] = rn.c0;
    t.c1[r] = rn.c1;
    if (r < count) {
      t.rn.l0 = std::min(t.rn.l0, rn.l0);
      t.rn.l1 = std::max(t.rn.l1, rn.l1);
      t.wmax = std::max(t.wmax, rn.wires);
    }
  }
  t.rn.c0 = t.rn.net.layer_ptr[t.rn.l0];
  t.rn.c1 = t.rn.net.layer_ptr[t.rn.l1];
  for (int r = 0; r < count; ++r) t.masked |= t.c0[r] != t.rn.c0 || t.c1[r] != t.rn.c1 || t.wires[r] < rows.n();
  return t;
}

// Lane r takes comparator c (wires i, j): on[r] = 1, else 0 (in T: the lane loops then select at T's width).
template <int W, typename T>
SORTNET_SWEEP void lane_mask(const TileRows<W>& t, int64_t c, int64_t i, int64_t j, T* __restrict__ on) {
#pragma omp simd
  for (int r = 0; r < W; ++r) on[r] = c >= t.c0[r] && c < t.c1[r] && i < t.wires[r] && j < t.wires[r] ? T(1) : T(0);
}

// The tile's rows of x [B, n] into V [n][W]; pads and missing lanes are 0 (ties: finite, discarded).
template <int W, typename T>
void load_tile(const T* x, int64_t n, const TileRows<W>& t, T* V) {
  for (int64_t w = 0; w < n; ++w)
    for (int r = 0; r < W; ++r) V[w * W + r] = r < t.count && w < t.wires[r] ? x[t.idx[r] * n + w] : T(0);
}

// V into the tile's rows of out [B, n]; 0 on the pads.
template <int W, typename T>
void store_tile(const T* V, int64_t n, const TileRows<W>& t, T* out) {
  for (int64_t r = 0; r < t.count; ++r)
    for (int64_t w = 0; w < n; ++w) out[t.idx[r] * n + w] = w < t.wires[r] ? V[w * W + r] : T(0);
}

template <int W, typename T>
void positions_tile(int64_t n, T* V) {
  for (int64_t w = 0; w < n; ++w)
    for (int r = 0; r < W; ++r) V[w * W + r] = T(w + 1);
}

// One comparator of the values pass on W lanes (relax_pairs' arithmetic); with kD, d is stored too. kMasked: lanes
// without the comparator (on[r] false) pass through exactly and store d = alpha = 0.
template <int K, int W, bool kD, bool kMasked, typename T>
SORTNET_SWEEP void relax_lanes(T s, T lambda, const T* __restrict__ on, T* __restrict__ vi, T* __restrict__ vj,
                               T* __restrict__ d, T* __restrict__ alpha) {
#pragma omp simd
  for (int r = 0; r < W; ++r) {
    const bool o = !kMasked || on[r] != T(0);
    const T xi = vi[r], xj = vj[r];
    const T dk = o ? relaxed_gap(xi, xj) : T(0);
    const T ak = relax_alpha_k<K, T>(s, lambda, dk, nullptr);
    if (kD) d[r] = dk;
    alpha[r] = o ? ak : T(0);
    relaxed_minmax(o ? ak : T(1), xi, xj, dk, vi + r, vj + r);
  }
}

// One comparator's mixing of W lanes: u_i, u_j <- alpha u_i + (1 - alpha) u_j, (1 - alpha) u_i + alpha u_j as
// u_j + alpha e, u_i - alpha e with e = u_i - u_j (the mixing of the matrix kernels); with kDiff, e is stored.
// kMasked: lanes without the comparator keep u_i, u_j (and store e = 0).
template <int W, bool kDiff, bool kMasked, typename T>
SORTNET_SWEEP void mix_lanes(const T* __restrict__ on, const T* __restrict__ alpha, T* __restrict__ ui,
                             T* __restrict__ uj, T* __restrict__ diff) {
#pragma omp simd
  for (int r = 0; r < W; ++r) {
    const bool o = !kMasked || on[r] != T(0);
    const T u = ui[r], w = uj[r], e = u - w;
    ui[r] = o ? w + alpha[r] * e : u;
    uj[r] = o ? u - alpha[r] * e : w;
    if (kDiff) diff[r] = o ? e : T(0);
  }
}

// One comparator of the fused reverse sweep on W lanes: the positions v mixed, grad_alpha = du (v_i - v_j), and
// the values backward of g with it (relaxed_swap_backward). kMasked: lanes without the comparator keep v and g.
template <int K, int W, bool kMasked, typename T>
SORTNET_SWEEP void rank_backward_lanes(T s, T lambda, const T* __restrict__ on, const T* __restrict__ alpha,
                                       const T* __restrict__ d, const T* __restrict__ du, T* __restrict__ vi,
                                       T* __restrict__ vj, T* __restrict__ gi_, T* __restrict__ gj_) {
#pragma omp simd
  for (int r = 0; r < W; ++r) {
    const bool o = !kMasked || on[r] != T(0);
    const T ak = alpha[r], dk = d[r];
    const T a = vi[r], b = vj[r], e = a - b;
    vi[r] = o ? b + ak * e : a;
    vj[r] = o ? a - ak * e : b;
    T slope;
    relax_alpha_k<K, T>(s, lambda, dk, &slope);
    const T gi = gi_[r], gj = gj_[r];
    const T dd = relaxed_gap_grad(du[r] * e, gi, gj, dk, slope);
    gi_[r] = o ? ak * gi + (T(1) - ak) * gj - dd : gi;
    gj_[r] = o ? (T(1) - ak) * gi + ak * gj + dd : gj;
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
template <int K, int W, bool kSave, bool kMasked, typename T>
RELAXOPS_SIMD_CLONES void rank_forward_tile(int64_t n, const TileRows<W>& t, T s, T lambda, const T* x, T* rank,
                                            const RankScratch<W, T>& w) {
  const NetView& net = t.rn.net;
  T on[W];
  load_tile<W>(x, n, t, w.V);
  for (int64_t c = t.rn.c0; c < t.rn.c1; ++c) {
    if (kMasked && t.skips(c)) continue;
    if (kMasked) lane_mask<W, T>(t, c, net.cmin[c], net.cmax[c], on);
    relax_lanes<K, W, kSave, kMasked, T>(s, lambda, on, w.V + net.cmin[c] * W, w.V + net.cmax[c] * W, w.d + c * W,
                                         w.alpha + c * W);
  }
  positions_tile<W>(n, w.V);
  for (int64_t l = t.rn.l1 - 1; l >= t.rn.l0; --l)
    for (int64_t c = net.layer_ptr[l]; c < net.layer_ptr[l + 1]; ++c) {
      if (kMasked && t.skips(c)) continue;
      if (kMasked) lane_mask<W, T>(t, c, net.cmin[c], net.cmax[c], on);
      mix_lanes<W, false, kMasked, T>(on, w.alpha + c * W, w.V + net.cmin[c] * W, w.V + net.cmax[c] * W, nullptr);
    }
  store_tile<W>(w.V, n, t, rank);
}

// One tile of the backward (item 6): a forward sweep pushes u = grad_rank through each comparator, storing
// u_i - u_j, after recomputing the values pass (d, alpha) or, kSaved, reading the forward's; then the fused
// reverse sweep of the positions and the values backward.
template <int K, int W, bool kSaved, bool kMasked, typename T>
RELAXOPS_SIMD_CLONES void rank_backward_tile(int64_t n, const TileRows<W>& t, T s, T lambda, const T* x,
                                             const T* grad_rank, T* grad_x, const RankScratch<W, T>& w) {
  const NetView& net = t.rn.net;
  T on[W];
  if (!kSaved) load_tile<W>(x, n, t, w.V);
  load_tile<W>(grad_rank, n, t, w.U);
  for (int64_t c = t.rn.c0; c < t.rn.c1; ++c) {
    if (kMasked && t.skips(c)) continue;
    const int64_t i = net.cmin[c] * W, j = net.cmax[c] * W;
    if (kMasked) lane_mask<W, T>(t, c, net.cmin[c], net.cmax[c], on);
    if (!kSaved) relax_lanes<K, W, true, kMasked, T>(s, lambda, on, w.V + i, w.V + j, w.d + c * W, w.alpha + c * W);
    mix_lanes<W, true, kMasked, T>(on, w.alpha + c * W, w.U + i, w.U + j, w.du + c * W);
  }
  positions_tile<W>(n, w.V);
  std::fill(w.G, w.G + n * W, T(0));
  for (int64_t l = t.rn.l1 - 1; l >= t.rn.l0; --l) {
    for (int64_t c = net.layer_ptr[l]; c < net.layer_ptr[l + 1]; ++c) {
      if (kMasked && t.skips(c)) continue;
      const int64_t i = net.cmin[c] * W, j = net.cmax[c] * W;
      if (kMasked) lane_mask<W, T>(t, c, net.cmin[c], net.cmax[c], on);
      rank_backward_lanes<K, W, kMasked, T>(s, lambda, on, w.alpha + c * W, w.d + c * W, w.du + c * W, w.V + i, w.V + j,
                                            w.G + i, w.G + j);
    }
  }
  store_tile<W>(w.G, n, t, grad_x);
}

// Tile t of the forward or (grad_rank given) the backward; kSaved: with the saved d, alpha streams.
template <int K, int W, bool kSaved, bool kMasked, typename T>
void rank_tile(int64_t n, int64_t C, const TileRows<W>& rows, const RelaxParams& rp, int64_t t, const T* x,
               const T* grad_rank, T* saved, T* out, const RankScratch<W, T>& scratch) {
  const RankScratch<W, T> w = scratch.at_tile(saved, C, t);
  const T s = T(rp.steepness), lambda = T(rp.art_lambda);
  if (grad_rank)
    rank_backward_tile<K, W, kSaved, kMasked, T>(n, rows, s, lambda, x, grad_rank, out, w);
  else
    rank_forward_tile<K, W, kSaved, kMasked, T>(n, rows, s, lambda, x, out, w);
}

// Rank calls below this many comparator evaluations (~0.1 ms) run on one thread: a parallel loop costs more there.
// Idle cores: B = 128, n = 100 (1.7e5) fwd+bwd 0.63 ms on one thread, 0.42 ms on two.
constexpr int64_t kRankParallelWork = 1 << 17;

// The rows in tile order and each tile's first row: full rows in their order, W a tile; with a RowSpec, sorted by
// (group, layer_end, wires) and cut where the group changes, so that a tile's rows share their network and mostly
// their sweep (ceil(B / W) + num_nets - 1 tiles at most; the forward and backward cut the same tiles).
template <int W>
void rank_tile_order(const Rows& rows, int64_t B, std::vector<int64_t>& order, std::vector<int64_t>& start) {
  order.resize(B);
  for (int64_t b = 0; b < B; ++b) order[b] = b;
  start.clear();
  if (rows.spec) {
    const RowSpec* sp = rows.spec;
    std::sort(order.begin(), order.end(), [sp](int64_t a, int64_t b) {
      return std::make_tuple(sp[a].group, sp[a].layer_end, sp[a].wires, a) <
             std::make_tuple(sp[b].group, sp[b].layer_end, sp[b].wires, b);
    });
  }
  for (int64_t b = 0; b < B; ++b)
    if (start.empty() || b - start.back() == W ||
        (rows.spec && rows.spec[order[b]].group != rows.spec[order[start.back()]].group))
      start.push_back(b);
  start.push_back(B);
}

// Tiles of W rows over the threads, each tile by one thread through every comparator (the backward from the last
// tile: the forward's last saved streams are still in cache).
template <int K, int W, bool kSaved, typename T>
void rank_tiles(const Rows& rows, const RelaxParams& rp, int64_t B, const T* x, const T* grad_rank, T* saved, T* out) {
  const int64_t n = rows.n(), C = rows.C;
  std::vector<int64_t> order, start;
  rank_tile_order<W>(rows, B, order, start);
  const int64_t tiles = int64_t(start.size()) - 1;
  const bool backward = grad_rank != nullptr;
  parallel_items(
      tiles,
      [&](int64_t item, int) {
        const RankScratch<W, T> w(n, C, backward, kSaved);
        const int64_t t = kSaved && backward ? tiles - 1 - item : item;
        const TileRows<W> tr = tile_rows<W>(rows, order.data() + start[t], start[t + 1] - start[t]);
        if (tr.masked)
          rank_tile<K, W, kSaved, true, T>(n, C, tr, rp, t, x, grad_rank, saved, out, w);
        else
          rank_tile<K, W, kSaved, false, T>(n, C, tr, rp, t, x, grad_rank, saved, out, w);
      },
      threads_for(B * C, kRankParallelWork));
}

// Tiles of 16 rows: twice as fast per row as 8 (a comparator's fixed costs are shared by more lanes), no faster
// with 32 (measured, AVX-512 on 2 cores); one width for every batch, so that a row's result does not depend on the
// batch it comes in (the lane loops of different widths may contract to FMAs differently).
constexpr int kRankTile = 16;

template <typename T>
void rank_dispatch(const Rows& rows, const RelaxParams& rp, int64_t B, const T* x, const T* grad_rank, T* saved,
                   T* out) {
  check_rows(rows, B);
  if (B == 0) return;
  with_relaxation(rp.kind, [&](auto k) {
    if (saved)
      rank_tiles<k.value, kRankTile, true, T>(rows, rp, B, x, grad_rank, saved, out);
    else
      rank_tiles<k.value, kRankTile, false, T>(rows, rp, B, x, grad_rank, saved, out);
  });
}

}  // namespace

int64_t sortnet_rank_saved_numel_cpu(int64_t C, int64_t B, int64_t num_nets) {
  return 2 * C * ((B + kRankTile - 1) / kRankTile + std::max<int64_t>(num_nets, 1) - 1) * kRankTile;
}

template <typename T>
void sortnet_rank_forward_cpu(const Rows& rows, const RelaxParams& rp, int64_t B, const T* x, T* rank, T* saved) {
  rank_dispatch<T>(rows, rp, B, x, nullptr, saved, rank);
}

template <typename T>
void sortnet_rank_backward_cpu(const Rows& rows, const RelaxParams& rp, int64_t B, const T* x, const T* grad_rank,
                               const T* saved, T* grad_x) {
  rank_dispatch<T>(rows, rp, B, x, grad_rank, const_cast<T*>(saved), grad_x);  // saved: read only
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

#define RELAXOPS_INSTANTIATE(T)                                                                                        \
  template void sortnet_values_forward_cpu<T>(const Rows&, const RelaxParams&, int64_t, const T*, T*, T*, T*);         \
  template void sortnet_values_backward_cpu<T>(const Rows&, const RelaxParams&, int64_t, const T*, const T*, const T*, \
                                               const T*, T*);                                                          \
  template void sortnet_matrix_forward_cpu<T>(const Rows&, int64_t, int64_t, const T*, T*, bool, const int64_t*);      \
  template void sortnet_matrix_backward_cpu<T>(const Rows&, int64_t, int64_t, const T*, const T*, T*, bool,            \
                                               const int64_t*);                                                        \
  template void topk_preselect_forward_cpu<T>(int64_t, int64_t, int64_t, const T*, const int64_t*, T*, int64_t*);      \
  template void topk_preselect_backward_cpu<T>(int64_t, int64_t, int64_t, const T*, const int64_t*, T*);               \
  template void label_softmax_forward_cpu<T>(int64_t, int64_t, const T*, const int64_t*, T*);                          \
  template void label_softmax_backward_cpu<T>(int64_t, int64_t, const T*, const int64_t*, const T*, const T*, T*);     \
  template void sortnet_rank_forward_cpu<T>(const Rows&, const RelaxParams&, int64_t, const T*, T*, T*);               \
  template void sortnet_rank_backward_cpu<T>(const Rows&, const RelaxParams&, int64_t, const T*, const T*, const T*,   \
                                             T*);

RELAXOPS_INSTANTIATE(float)
RELAXOPS_INSTANTIATE(double)

}  // namespace relaxops
