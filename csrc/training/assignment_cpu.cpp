// CPU kernel of assignment.h: per item Jonker-Volgenant's initialisation (column reduction, augmenting row
// reduction) and shortest augmenting paths for the rows left free, in double; OpenMP over the items. Work buffers
// are per-thread scratch reused across calls.
//
// The two O(d) scans that take the time (the two cheapest columns of a row in the row reduction; the relaxation
// and nearest column of a Dijkstra step) run on 4-lane vectors of doubles (GCC vector extensions: SSE2 pairs in
// the baseline clone, AVX2 / AVX-512 clones chosen at load time) without branches. Rows are padded to a multiple
// of 4 columns: padded columns cost +inf, have v = 0 and count as scanned, so they are never chosen. Vector lanes
// keep their own minima; the lanes are merged by (value, index), so the lowest index wins among equal values, as
// a scalar scan would.
#include <algorithm>
#include <cmath>
#include <limits>

#include "../common/cpu_scratch.h"
#include "../common/cpu_simd.h"
#include "../common/cpu_threads.h"
#include "assignment.h"

namespace relaxops {
namespace {

// Below this much work (items * d^2) a call runs on one thread: a parallel region can cost a scheduler time slice
// on shared cores, more than small batches take (2 shared cores at load 4: B = 256, d = 16 took 0.7 ms on one
// thread and 11 ms on two).
constexpr int64_t kParallelWork = 1 << 20;
constexpr int kLanes = 4;

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
    v4d low = vinf;
    v4l at = {w, w, w, w};
    v4l idx = {0, 1, 2, 3};
    const v4l step = {kLanes, kLanes, kLanes, kLanes};
    for (int64_t j = 0; j < w; j += kLanes) {
      const v4d p = load(pen + j);
      const v4d r = base + load(ci + j) - load(S.v + j) + p;
      v4d s = load(sp + j);
      const v4l upd = r < s;
      s = upd ? r : s;
      store(sp + j, s);
      storel(S.path + j, upd ? row : loadl(S.path + j));
      const v4d key = s + p;
      const v4l lt = key < low;
      low = lt ? key : low;
      at = lt ? idx : at;
      idx += step;
    }
    double best = low[0];
    int64_t jb = at[0];
    for (int l = 1; l < kLanes; ++l)
      if (low[l] < best || (low[l] == best && at[l] < jb)) best = low[l], jb = at[l];
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

// The two smallest values of c_i - v over the columns, (u1, j1) <= (u2, j2) by (value, index).
RELAXOPS_SIMD_CLONES void two_smallest(const double* ci, const double* v, int64_t w, double& u1, int32_t& j1,
                                       double& u2, int32_t& j2) {
  const double inf = std::numeric_limits<double>::infinity();
  v4d a1 = {inf, inf, inf, inf}, a2 = a1;
  v4l i1 = {w, w, w, w}, i2 = i1;
  v4l idx = {0, 1, 2, 3};
  const v4l step = {kLanes, kLanes, kLanes, kLanes};
  for (int64_t j = 0; j < w; j += kLanes) {
    const v4d h = load(ci + j) - load(v + j);
    const v4l lt1 = h < a1, lt2 = h < a2;
    a2 = lt1 ? a1 : (lt2 ? h : a2);
    i2 = lt1 ? i1 : (lt2 ? idx : i2);
    a1 = lt1 ? h : a1;
    i1 = lt1 ? idx : i1;
    idx += step;
  }
  // merge the lanes' candidates by (value, index)
  double val[2 * kLanes];
  int64_t ind[2 * kLanes];
  for (int l = 0; l < kLanes; ++l) val[l] = a1[l], ind[l] = i1[l], val[kLanes + l] = a2[l], ind[kLanes + l] = i2[l];
  int b1 = 0;
  for (int k = 1; k < 2 * kLanes; ++k)
    if (val[k] < val[b1] || (val[k] == val[b1] && ind[k] < ind[b1])) b1 = k;
  int b2 = b1 == 0 ? 1 : 0;
  for (int k = 0; k < 2 * kLanes; ++k)
    if (k != b1 && (val[k] < val[b2] || (val[k] == val[b2] && ind[k] < ind[b2]))) b2 = k;
  u1 = val[b1], j1 = int32_t(ind[b1]), u2 = val[b2], j2 = int32_t(ind[b2]);
}

// Solves one item; false (perm the identity) if a score is not finite.
template <typename T>
bool solve_item(int64_t d, const T* theta, int64_t* perm) {
  if (d == 0) return true;
  const double inf = std::numeric_limits<double>::infinity();
  const int64_t w = (d + kLanes - 1) / kLanes * kLanes;
  Scratch S;
  S.d = d, S.w = w;
  S.c = thread_scratch<0, double>(d * w);
  double* dbuf = thread_scratch<1, double>(d + 3 * w);
  S.u = dbuf, S.v = dbuf + d, S.sp = S.v + w, S.pen = S.sp + w;
  S.path = thread_scratch<3, int64_t>(w);
  int32_t* ibuf = thread_scratch<2, int32_t>(5 * d);
  S.row4col = ibuf, S.col4row = ibuf + d, S.free_rows = ibuf + 2 * d, S.srows = ibuf + 3 * d, S.scols = ibuf + 4 * d;
  double* c = S.c;
  bool finite = true;
  for (int64_t i = 0; i < d; ++i) {
    for (int64_t j = 0; j < d; ++j) {
      const double x = -double(theta[i * d + j]);
      c[i * w + j] = x;
      finite &= std::isfinite(x);
    }
    for (int64_t j = d; j < w; ++j) c[i * w + j] = inf;
  }
  if (!finite) {
    for (int64_t i = 0; i < d; ++i) perm[i] = i;
    return false;
  }

  // column reduction: v[j] = min_i c[i][j]; the row of the minimum takes column j if it has none yet (last column
  // first, as Jonker-Volgenant); u = 0 keeps every reduced cost >= 0 and the matched ones 0
  for (int64_t i = 0; i < d; ++i) S.col4row[i] = -1, S.u[i] = 0;
  for (int64_t j = 0; j < w; ++j) S.v[j] = j < d ? inf : 0.0;
  for (int64_t i = 0; i < d; ++i) {
    const double* ci = c + i * w;
    for (int64_t j = 0; j < d; ++j) S.v[j] = std::min(S.v[j], ci[j]);
  }
  for (int64_t j = d - 1; j >= 0; --j) {
    S.row4col[j] = -1;
    for (int64_t i = 0; i < d; ++i) {
      if (c[i * w + j] == S.v[j]) {
        if (S.col4row[i] < 0) {
          S.col4row[i] = int32_t(j);
          S.row4col[j] = int32_t(i);
        }
        break;  // the first row of the minimum only
      }
    }
  }
  int64_t nfree = 0;
  for (int64_t i = 0; i < d; ++i)
    if (S.col4row[i] < 0) S.free_rows[nfree++] = int32_t(i);

  // augmenting row reduction (two passes, capped): a free row takes its cheapest column j1 of c - v, lowering
  // v[j1] to make it as cheap as the second cheapest (u2); a row it displaces bids next. v only decreases, so every
  // matched row keeps its column as the minimum of its c - v row (u[i] = that minimum keeps the invariant).
  int64_t budget = 2 * d + 16;  // measured near best on uniform scores (d = 50, 100); only a starting point
  for (int pass = 0; pass < 2 && nfree > 0; ++pass) {
    int64_t k = 0, prev = nfree;
    nfree = 0;
    while (k < prev && budget > 0) {
      --budget;
      const int32_t i = S.free_rows[k++];
      double u1, u2;
      int32_t j1, j2;
      two_smallest(c + int64_t(i) * w, S.v, w, u1, j1, u2, j2);
      if (j2 >= d) u2 = inf;  // d == 1: no second column
      int32_t i0 = S.row4col[j1];
      if (u1 < u2) {
        if (u2 < inf) S.v[j1] -= u2 - u1;
      } else if (i0 >= 0) {  // a tie: take the other cheapest column instead of displacing a row
        j1 = j2;
        i0 = S.row4col[j1];
      }
      if (i0 >= 0) S.col4row[i0] = -1;
      S.col4row[i] = j1;
      S.row4col[j1] = i;
      if (i0 >= 0) {
        if (u1 < u2)
          S.free_rows[--k] = i0;  // the displaced row bids next
        else
          S.free_rows[nfree++] = i0;
      }
    }
    while (k < prev) S.free_rows[nfree++] = S.free_rows[k++];  // the budget ran out: still free
  }
  // u of the matched rows: their (tight) reduced costs are 0
  for (int64_t i = 0; i < d; ++i)
    S.u[i] = S.col4row[i] >= 0 ? c[i * w + S.col4row[i]] - S.v[S.col4row[i]] : 0.0;

  for (int64_t k = 0; k < nfree; ++k) augment(S.free_rows[k], S);
  for (int64_t i = 0; i < d; ++i) perm[i] = S.col4row[i];
  return true;
}

}  // namespace

template <typename T>
int64_t assignment_cpu(const AssignmentParams& P, const T* theta, int64_t* perm, T* onehot, int threads) {
  assignment_check_params(P);
  const int64_t d = P.d;
  const int nt = cpu_threads(threads);
  (void)nt;
  int64_t bad = 0;
#pragma omp parallel for schedule(dynamic) num_threads(nt) reduction(+ : bad) \
    if (P.B > 1 && P.B * d * d >= kParallelWork)
  for (int64_t b = 0; b < P.B; ++b) {
    int64_t* pb = perm + b * d;
    if (!solve_item(d, theta + b * d * d, pb)) ++bad;
    if (onehot) {
      T* ob = onehot + b * d * d;
      std::fill(ob, ob + d * d, T(0));
      for (int64_t i = 0; i < d; ++i) ob[i * d + pb[i]] = T(1);
    }
  }
  return bad;
}

template int64_t assignment_cpu<float>(const AssignmentParams&, const float*, int64_t*, float*, int);
template int64_t assignment_cpu<double>(const AssignmentParams&, const double*, int64_t*, double*, int);

}  // namespace relaxops
