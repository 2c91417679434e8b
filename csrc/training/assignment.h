// Linear assignment (maximum-weight perfect matching) of a batch of square score matrices, exact
// (docs/math/training.md §6.3).
//
// Input theta [B, d, d] (row-major, contiguous, T = float or double; the Python side converts float16/bfloat16
// to float32, which is exact). Output perm int64 [B, d]: perm[b, i] = j iff row i is matched to column j, the
// matching maximising sum_i theta[b, i, perm[b, i]]. Scores must be finite (checked by the Python wrapper).
//
// Method: the minimum-cost assignment of c = -theta by the shortest augmenting path algorithm with dual potentials
// (Hungarian method in the Jonker-Volgenant form), all arithmetic in double:
//   invariant  c[i][j] - u[i] - v[j] >= 0 for all i, j (dual feasibility), = 0 on matched edges (tightness);
//   each free row f is matched by a Dijkstra search over the columns with the reduced costs as edge lengths
//   (non-negative, so Dijkstra is valid) to the nearest free column; the potentials are then shifted by the
//   distances (which keeps the invariant) and the matching is flipped along the path (one more matched row).
// When every row is matched, the invariant is complementary slackness of the LP relaxation, whose optimum is
// integral (the assignment polytope is the Birkhoff polytope), so the matching is optimal: exact up to the
// rounding of double sums (scores are converted to double exactly; integer scores below 2^52 / d are exact).
//
// CPU kernel (assignment_cpu.cpp): before the augmentations, Jonker-Volgenant's column reduction builds a partial
// matching that satisfies the invariant cheaply (v[j] = min_i c[i][j], u = 0; the row of a column's minimum takes
// the column if it has none yet: its reduced cost is 0); about a third of the rows are left to augment on uniform
// scores. Items of the batch run in parallel.
//
// CUDA kernel (assignment.cu): one block per item, no initialisation, the Dijkstra relaxation and the minimum
// over the columns parallel over the block's threads, the rest on one thread; the same invariant, so exact.
//
// Ties (several optimal matchings): each kernel is deterministic, but the reference, the CPU and the CUDA kernel
// may return different optimal matchings (the objective is the same).
#pragma once

#include <cstdint>

#include "../common/common.h"

namespace relaxops {

struct AssignmentParams {
  int64_t B, d;
};

inline void assignment_check_params(const AssignmentParams& P) {
  RELAXOPS_CHECK(P.B >= 0 && P.d >= 0, "assignment: need B, d >= 0");
  RELAXOPS_CHECK(P.d < (int64_t(1) << 24), "assignment: d must be below 2^24");
}

// CPU kernel (assignment_cpu.cpp), parallel over items on `threads` threads (0: cpu_parallel.h's default). If `onehot`
// is not null it receives the permutation matrices [B, d, d] (every entry written). The scores are checked while
// they are read (no separate pass): returns the number of items with a non-finite score, whose perm is the
// identity (the caller raises).
template <typename T>
int64_t assignment_cpu(const AssignmentParams& P, const T* theta, int64_t* perm, T* onehot, int threads);

// CUDA launcher (assignment.cu): device pointers, queued on `stream`; `workspace` at least
// assignment_cuda_workspace(P) bytes.
inline int64_t assignment_cuda_workspace(const AssignmentParams& P) {
  // per item: u, v, shortest path (double, d each); path, row4col, col4row (int32, d each); scanned flags (2 d)
  return P.B * P.d * (3 * 8 + 3 * 4 + 2);
}
template <typename T>
void assignment_cuda(const AssignmentParams& P, const T* theta, int64_t* perm, void* workspace, std::uintptr_t stream);

}  // namespace relaxops
