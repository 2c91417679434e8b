// CPU kernel of assignment.h: per item Jonker-Volgenant's initialisation (column reduction, augmenting row
// reduction) and shortest augmenting paths for the rows left free, in double; OpenMP over the items. Work buffers
// are per-thread scratch reused across calls.
#include <algorithm>
#include <cmath>
#include <limits>

#include "../common/cpu_scratch.h"
#include "../common/cpu_threads.h"
#include "assignment.h"

namespace relaxops {
namespace {

// Below this much work (items * d^2) a call runs on one thread: a parallel region can cost a scheduler time slice
// on shared cores, more than small batches take (2 shared cores at load 4: B = 256, d = 16 took 0.7 ms on one
// thread and 11 ms on two).
constexpr int64_t kParallelWork = 1 << 20;

struct Scratch {
  double* c;      // [d, d] costs -theta
  double* u;      // [d] row potentials
  double* v;      // [d] column potentials
  double* sp;     // [d] shortest path lengths of the current search
  int32_t* path;  // [d] predecessor row of each column on the search tree
  int32_t* row4col;
  int32_t* col4row;
  int32_t* free_rows;
  int32_t* todo;      // [d] columns not yet scanned by the current search (compact)
  int32_t* srows;     // [d] rows scanned by the current search
  int32_t* scols;     // [d] columns scanned by the current search
};

// Shortest augmenting path from the free row f; keeps the invariant of assignment.h and matches f.
void augment(int64_t d, int32_t f, const Scratch& S) {
  const double inf = std::numeric_limits<double>::infinity();
  double* sp = S.sp;
  int32_t* todo = S.todo;
  for (int64_t j = 0; j < d; ++j) {
    sp[j] = inf;
    todo[j] = int32_t(j);
  }
  int64_t ntodo = d, nsr = 0, nsc = 0;
  double min_val = 0;  // distance of the last scanned column
  int32_t i = f, sink = -1;
  while (sink < 0) {
    S.srows[nsr++] = i;
    const double* ci = S.c + int64_t(i) * d;
    const double base = min_val - S.u[i];
    double lowest = inf;
    int64_t at = -1;
    for (int64_t k = 0; k < ntodo; ++k) {
      const int32_t j = todo[k];
      const double r = base + ci[j] - S.v[j];
      if (r < sp[j]) {
        sp[j] = r;
        S.path[j] = i;
      }
      // the nearest column; among equals a free one (the search ends there), else the first in the list
      if (sp[j] < lowest || (sp[j] == lowest && S.row4col[j] < 0 && S.row4col[todo[at]] >= 0)) {
        lowest = sp[j];
        at = k;
      }
    }
    // lowest is finite: every score is, and the list is not empty while a free column exists
    min_val = lowest;
    const int32_t j = todo[at];
    todo[at] = todo[--ntodo];
    S.scols[nsc++] = j;
    if (S.row4col[j] < 0)
      sink = j;
    else
      i = S.row4col[j];
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
    const int32_t r = S.path[j];
    S.row4col[j] = r;
    std::swap(S.col4row[r], j);
    if (r == f) break;
  }
}

template <typename T>
void solve_item(int64_t d, const T* theta, int64_t* perm) {
  if (d == 0) return;
  Scratch S;
  S.c = thread_scratch<0, double>(d * d);
  double* dbuf = thread_scratch<1, double>(3 * d);
  S.u = dbuf, S.v = dbuf + d, S.sp = dbuf + 2 * d;
  int32_t* ibuf = thread_scratch<2, int32_t>(7 * d);
  S.path = ibuf, S.row4col = ibuf + d, S.col4row = ibuf + 2 * d, S.free_rows = ibuf + 3 * d;
  S.todo = ibuf + 4 * d, S.srows = ibuf + 5 * d, S.scols = ibuf + 6 * d;
  double* c = S.c;
  for (int64_t k = 0; k < d * d; ++k) c[k] = -double(theta[k]);
  const double inf = std::numeric_limits<double>::infinity();

  // column reduction: v[j] = min_i c[i][j]; the row of the minimum takes column j if it has none yet (last column
  // first, as Jonker-Volgenant); u = 0 keeps every reduced cost >= 0 and the matched ones 0
  for (int64_t i = 0; i < d; ++i) S.col4row[i] = -1, S.u[i] = 0;
  for (int64_t j = 0; j < d; ++j) S.v[j] = inf;
  for (int64_t i = 0; i < d; ++i) {
    const double* ci = c + i * d;
    for (int64_t j = 0; j < d; ++j) S.v[j] = std::min(S.v[j], ci[j]);
  }
  for (int64_t j = d - 1; j >= 0; --j) {
    S.row4col[j] = -1;
    for (int64_t i = 0; i < d; ++i) {
      if (c[i * d + j] == S.v[j]) {
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
  int64_t budget = 2 * d + 16;  // measured best near 2 d on uniform scores (d = 50, 100)
  for (int pass = 0; pass < 2 && nfree > 0; ++pass) {
    int64_t k = 0, prev = nfree;
    nfree = 0;
    while (k < prev && budget > 0) {
      --budget;
      const int32_t i = S.free_rows[k++];
      const double* ci = c + int64_t(i) * d;
      double u1 = inf, u2 = inf;
      int32_t j1 = -1, j2 = -1;
      for (int64_t j = 0; j < d; ++j) {
        const double h = ci[j] - S.v[j];
        if (h < u2) {
          if (h < u1) {
            u2 = u1, j2 = j1;
            u1 = h, j1 = int32_t(j);
          } else {
            u2 = h, j2 = int32_t(j);
          }
        }
      }
      int32_t i0 = S.row4col[j1];
      if (u1 < u2) {
        if (u2 < inf) S.v[j1] -= u2 - u1;  // d == 1: no second column, nothing to lower
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
    S.u[i] = S.col4row[i] >= 0 ? c[i * d + S.col4row[i]] - S.v[S.col4row[i]] : 0.0;

  for (int64_t k = 0; k < nfree; ++k) augment(d, S.free_rows[k], S);
  for (int64_t i = 0; i < d; ++i) perm[i] = S.col4row[i];
}

}  // namespace

template <typename T>
void assignment_cpu(const AssignmentParams& P, const T* theta, int64_t* perm, int threads) {
  assignment_check_params(P);
  const int64_t d = P.d;
  const int nt = cpu_threads(threads);
  (void)nt;
#pragma omp parallel for schedule(dynamic) num_threads(nt) if (P.B > 1 && P.B * d * d >= kParallelWork)
  for (int64_t b = 0; b < P.B; ++b) solve_item(d, theta + b * d * d, perm + b * d);
}

template void assignment_cpu<float>(const AssignmentParams&, const float*, int64_t*, int);
template void assignment_cpu<double>(const AssignmentParams&, const double*, int64_t*, int);

}  // namespace relaxops
