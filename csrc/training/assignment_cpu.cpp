// CPU kernel of assignment.h: per item Jonker-Volgenant's column reduction, then shortest augmenting paths for the
// rows left free, in double; parallel over the items. Work buffers are per-thread scratch reused across calls.
// (Jonker-Volgenant's augmenting row reduction is left out: with the vectorised search below it does not pay,
// docs/math/training.md §9.)
//
// The O(d) scan that takes the time (the relaxation and nearest column of a Dijkstra step) runs on 4-lane vectors of
// doubles (GCC vector extensions: SSE2 pairs in the baseline clone, AVX2 / AVX-512 clones chosen at load time) without
// branches. Rows are padded to a multiple of 8 columns: padded columns cost +inf, have v = 0 and count as scanned, so
// they are never chosen. Vector lanes keep their own minima; the lanes are merged by (value, index), so the lowest
// index wins among equal values, as a scalar scan would.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "../common/cpu_parallel.h"
#include "../common/cpu_scratch.h"
#include "../common/cpu_simd.h"
#include "assignment.h"

namespace relaxops {
namespace {

// Below this much work (items * d^2) a call runs on one thread: a parallel region can cost a scheduler time slice
// on shared cores, more than a small batch takes; batches from d = 16, B = 256 up use the threads (measurements:
// docs/math/training.md §9).
constexpr int64_t kParallelWork = 1 << 16;
constexpr int kLanes = 4;
constexpr int kBlock = 2 * kLanes;  // rows are padded to a multiple of this

typedef double v4d __attribute__((vector_size(kLanes * sizeof(double))));
typedef int64_t v4l __attribute__((vector_size(kLanes * sizeof(int64_t))));

struct Scratch {
  int64_t d, w;      // size and padded row length (a multiple of kLanes)
  double* c;         // [d, w] costs -theta, +inf in the padding
  double* u;         // [d] row potentials
  double* v;         // [w] column potentials (0 in the padding)
  double* sp;        // [w] shortest path lengths of the current search
  double* pen;       // [w] 0 for a column not yet scanned by the current search, +inf once scanned (and padding)
  int64_t* path;     // [w] predecessor row of each column on the search tree
  int32_t* row4col;  // [d]
  int32_t* col4row;  // [d]
  int32_t* free_rows;
  int32_t* srows;  // [d] rows scanned by the current search
  int32_t* scols;  // [d] columns scanned by the current search
};

inline v4d load(const double* p) {
  v4d x;
  __builtin_memcpy(&x, p, sizeof(x));
  return x;
}
inline void store(double* p, v4d x) { __builtin_memcpy(p, &x, sizeof(x)); }
inline v4l loadl(const int64_t* p) {
  v4l x;
  __builtin_memcpy(&x, p, sizeof(x));
  return x;
}
inline void storel(int64_t* p, v4l x) { __builtin_memcpy(p, &x, sizeof(x)); }

// (m0, a0) = the lane-wise smaller of (m0, a0) and (m1, a1) by (value, index).
inline void lane_min(v4d& m0, v4l& a0, v4d m1, v4l a1) {
  const v4l take1 = (m1 < m0) | ((m1 == m0) & (a1 < a0));
  m0 = take1 ? m1 : m0;
  a0 = take1 ? a1 : a0;
}

// Lane 0 of (m0, a0) becomes the smallest (value, index) of the 8 lanes of (m0, a0) and (m1, a1), without
// branches (two rounds of swapped lanes).
inline void argmin_merge(v4d& m0, v4l& a0, v4d m1, v4l a1) {
  lane_min(m0, a0, m1, a1);
  const v4l half = {2, 3, 0, 1}, pair = {1, 0, 3, 2};
  lane_min(m0, a0, __builtin_shuffle(m0, half), __builtin_shuffle(a0, half));
  lane_min(m0, a0, __builtin_shuffle(m0, pair), __builtin_shuffle(a0, pair));
}

// Shortest augmenting path from the free row f; keeps the invariant of assignment.h and matches f. Each step
// relaxes the columns from the row just reached (r = dist + reduced cost; a scanned column gets r + inf, so it is
// never updated) and takes the nearest unscanned column (the lowest index among equal distances).
RELAXOPS_SIMD_CLONES void augment(int32_t f, const Scratch& S) {
  const double inf = std::numeric_limits<double>::infinity();
  const int64_t d = S.d, w = S.w;
  double* sp = S.sp;
  double* pen = S.pen;
  for (int64_t j = 0; j < w; ++j) {
    sp[j] = inf;
    pen[j] = j < d ? 0.0 : inf;
  }
  int64_t nsr = 0, nsc = 0;
  double min_val = 0;  // distance of the last scanned column
  int32_t i = f, sink = -1;
  const v4d vinf = {inf, inf, inf, inf};
  while (sink < 0) {
    S.srows[nsr++] = i;
    const double* ci = S.c + int64_t(i) * w;
    const double b = min_val - S.u[i];
    const v4d base = {b, b, b, b};
    const v4l row = {i, i, i, i};
    // two running minima (columns j and j + 4 of each block of 8): half the dependency chain of one
    v4d low0 = vinf, low1 = vinf;
    v4l at0 = {w, w, w, w}, at1 = at0;
    v4l idx0 = {0, 1, 2, 3}, idx1 = {4, 5, 6, 7};
    const v4l step = {kBlock, kBlock, kBlock, kBlock};
    for (int64_t j = 0; j < w; j += kBlock) {
      const v4d p0 = load(pen + j), p1 = load(pen + j + kLanes);
      const v4d r0 = base + load(ci + j) - load(S.v + j) + p0;
      const v4d r1 = base + load(ci + j + kLanes) - load(S.v + j + kLanes) + p1;
      v4d s0 = load(sp + j), s1 = load(sp + j + kLanes);
      const v4l upd0 = r0 < s0, upd1 = r1 < s1;
      s0 = upd0 ? r0 : s0;
      s1 = upd1 ? r1 : s1;
      store(sp + j, s0);
      store(sp + j + kLanes, s1);
      storel(S.path + j, upd0 ? row : loadl(S.path + j));
      storel(S.path + j + kLanes, upd1 ? row : loadl(S.path + j + kLanes));
      const v4d key0 = s0 + p0, key1 = s1 + p1;
      const v4l lt0 = key0 < low0, lt1 = key1 < low1;
      low0 = lt0 ? key0 : low0;
      at0 = lt0 ? idx0 : at0;
      low1 = lt1 ? key1 : low1;
      at1 = lt1 ? idx1 : at1;
      idx0 += step;
      idx1 += step;
    }
    double best;
    int64_t jb;
    if (w > 16) {  // shuffles for rows wider than 16, branches below (measured: docs/math/training.md §9)
      argmin_merge(low0, at0, low1, at1);
      best = low0[0], jb = at0[0];
    } else {
      best = low0[0], jb = at0[0];
      for (int l = 0; l < kLanes; ++l) {
        if (low0[l] < best || (low0[l] == best && at0[l] < jb)) best = low0[l], jb = at0[l];
        if (low1[l] < best || (low1[l] == best && at1[l] < jb)) best = low1[l], jb = at1[l];
      }
    }
    // best is finite: every score is, and an unscanned column is left while f is unmatched
    min_val = best;
    const int32_t jm = int32_t(jb);
    pen[jm] = inf;
    S.scols[nsc++] = jm;
    if (S.row4col[jm] < 0)
      sink = jm;
    else
      i = S.row4col[jm];
  }
  // potentials: u[f] += min_val, scanned rows and columns by (min_val - their distance)
  S.u[f] += min_val;
  for (int64_t k = 1; k < nsr; ++k) {
    const int32_t r = S.srows[k];
    S.u[r] += min_val - sp[S.col4row[r]];
  }
  for (int64_t k = 0; k < nsc; ++k) {
    const int32_t j = S.scols[k];
    S.v[j] -= min_val - sp[j];
  }
  // flip the matching along the path sink -> f
  int32_t j = sink;
  for (;;) {
    const int32_t r = int32_t(S.path[j]);
    S.row4col[j] = r;
    std::swap(S.col4row[r], j);
    if (r == f) break;
  }
}

// v[j] = min_i c[i][j] over the d rows and arg[j] the first row of that minimum, for all w columns (the padding
// gets +inf: the caller resets it).
RELAXOPS_SIMD_CLONES void column_minima(const double* c, int64_t d, int64_t w, double* v, int64_t* arg) {
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < w; j += kLanes) {
    // even and odd rows in two running minima (half the dependency chain), merged by (value, row)
    v4d m0 = {inf, inf, inf, inf}, m1 = m0;
    v4l a0 = {0, 0, 0, 0}, a1 = a0;
    int64_t i = 0;
    for (; i + 1 < d; i += 2) {
      const v4d x0 = load(c + i * w + j), x1 = load(c + (i + 1) * w + j);
      const v4l lt0 = x0 < m0, lt1 = x1 < m1;
      const v4l r0 = {i, i, i, i}, r1 = r0 + 1;
      m0 = lt0 ? x0 : m0;
      a0 = lt0 ? r0 : a0;
      m1 = lt1 ? x1 : m1;
      a1 = lt1 ? r1 : a1;
    }
    if (i < d) {
      const v4d x0 = load(c + i * w + j);
      const v4l lt0 = x0 < m0, r0 = {i, i, i, i};
      m0 = lt0 ? x0 : m0;
      a0 = lt0 ? r0 : a0;
    }
    const v4l take1 = (m1 < m0) | ((m1 == m0) & (a1 < a0));
    store(v + j, take1 ? m1 : m0);
    storel(arg + j, take1 ? a1 : a0);
  }
}

// min over the columns j != skip of c_i[j] - v[j] (the padding is +inf).
RELAXOPS_SIMD_CLONES double row_min_except(const double* ci, const double* v, int64_t w, int64_t skip) {
  const double inf = std::numeric_limits<double>::infinity();
  v4d m = {inf, inf, inf, inf};
  v4l idx = {0, 1, 2, 3};
  const v4l step = {kLanes, kLanes, kLanes, kLanes};
  const v4l sk = {skip, skip, skip, skip};
  const v4d vinf = m;
  for (int64_t j = 0; j < w; j += kLanes) {
    v4d h = load(ci + j) - load(v + j);
    h = idx == sk ? vinf : h;
    m = h < m ? h : m;
    idx += step;
  }
  double out = m[0];
  for (int l = 1; l < kLanes; ++l) out = m[l] < out ? m[l] : out;
  return out;
}

// Whether all n (a multiple of kLanes) values are finite: x - x is 0 for a finite x, NaN for +-inf and NaN.
RELAXOPS_SIMD_CLONES bool all_finite(const double* x, int64_t n) {
  v4l ok = {-1, -1, -1, -1};
  for (int64_t k = 0; k < n; k += kLanes) {
    const v4d y = load(x + k);
    ok &= (y - y) == 0;
  }
  return (ok[0] & ok[1] & ok[2] & ok[3]) != 0;
}

// Solves one item; false (perm the identity) if a score is not finite.
template <typename T>
bool solve_item(int64_t d, const T* theta, int64_t* perm) {
  if (d == 0) return true;
  const double inf = std::numeric_limits<double>::infinity();
  const int64_t w = (d + kBlock - 1) / kBlock * kBlock;
  Scratch S;
  S.d = d, S.w = w;
  S.c = thread_scratch<0, double>(d * w);
  double* dbuf = thread_scratch<1, double>(d + 3 * w);
  S.u = dbuf, S.v = dbuf + d, S.sp = S.v + w, S.pen = S.sp + w;
  S.path = thread_scratch<3, int64_t>(w);
  int32_t* ibuf = thread_scratch<2, int32_t>(5 * d);
  S.row4col = ibuf, S.col4row = ibuf + d, S.free_rows = ibuf + 2 * d, S.srows = ibuf + 3 * d, S.scols = ibuf + 4 * d;
  double* c = S.c;
  for (int64_t i = 0; i < d; ++i) {
    for (int64_t j = 0; j < d; ++j) c[i * w + j] = -double(theta[i * d + j]);
    for (int64_t j = d; j < w; ++j) c[i * w + j] = 0;
  }
  if (!all_finite(c, d * w)) {
    for (int64_t i = 0; i < d; ++i) perm[i] = i;
    return false;
  }
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = d; j < w; ++j) c[i * w + j] = inf;

  // column reduction: v[j] = min_i c[i][j]; the row of the minimum takes column j if it has none yet (last column
  // first, as Jonker-Volgenant); u = 0 keeps every reduced cost >= 0 and the matched ones 0
  for (int64_t i = 0; i < d; ++i) S.col4row[i] = -1, S.u[i] = 0;
  column_minima(c, d, w, S.v, S.path);  // path: free until the first search
  for (int64_t j = d; j < w; ++j) S.v[j] = 0;
  for (int64_t j = d - 1; j >= 0; --j) {
    const int32_t i = int32_t(S.path[j]);
    S.row4col[j] = -1;
    if (S.col4row[i] < 0) {
      S.col4row[i] = int32_t(j);
      S.row4col[j] = i;
    }
  }
  int64_t nfree = 0;
  for (int64_t i = 0; i < d; ++i)
    if (S.col4row[i] < 0) S.free_rows[nfree++] = int32_t(i);
  // reduction transfer (Jonker-Volgenant): a matched row i moves its slack to its column j1: u[i] = min over the
  // other columns of c - v, v[j1] = c[i][j1] - u[i]. Row i stays tight on j1 with reduced costs >= 0 elsewhere;
  // v[j1] only decreases (u[i] >= 0 as c[i][j1] - v[j1] = 0 was its minimum), so other rows stay feasible. Matched
  // columns become dearer to the free rows, whose searches then end sooner at free columns. It pays
  // from d = 32 on (docs/math/training.md §9).
  if (nfree > 0 && d >= 32) {
    for (int64_t i = 0; i < d; ++i) {
      const int32_t j1 = S.col4row[i];
      if (j1 < 0) continue;
      const double mu = row_min_except(c + i * w, S.v, w, j1);
      S.u[i] = mu;
      S.v[j1] = c[i * w + j1] - mu;
    }
  }

  for (int64_t k = 0; k < nfree; ++k) augment(S.free_rows[k], S);
  for (int64_t i = 0; i < d; ++i) perm[i] = S.col4row[i];
  return true;
}

}  // namespace

template <typename T>
int64_t assignment_cpu(const AssignmentParams& P, const T* theta, int64_t* perm, T* onehot, int threads) {
  assignment_check_params(P);
  const int64_t d = P.d;
  std::atomic<int64_t> bad{0};
  parallel_items(
      P.B,
      [&](int64_t b, int) {
        int64_t* pb = perm + b * d;
        if (!solve_item(d, theta + b * d * d, pb)) bad.fetch_add(1, std::memory_order_relaxed);
        if (onehot) {
          T* ob = onehot + b * d * d;
          std::fill(ob, ob + d * d, T(0));
          for (int64_t i = 0; i < d; ++i) ob[i * d + pb[i]] = T(1);
        }
      },
      P.B * d * d >= kParallelWork ? threads : 1);
  return bad.load();
}

template int64_t assignment_cpu<float>(const AssignmentParams&, const float*, int64_t*, float*, int);
template int64_t assignment_cpu<double>(const AssignmentParams&, const double*, int64_t*, double*, int);

}  // namespace relaxops
