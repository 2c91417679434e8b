// Linear assignment (maximum-weight perfect matching) of a batch of square score matrices, exact (spec training.md
// F.3, issue 18).
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
// CPU kernel (assignment_cpu.cpp): before the augmentations, Jonker-Volgenant's initialisation builds a partial
// matching that satisfies the invariant cheaply: column reduction (v[j] = min_i c[i][j], the row of the minimum
// takes the column if it is free), then augmenting row reduction (free rows bid for their cheapest column by
// lowering its v, as an auction; v only decreases, so a matched row's column stays the minimum of its c - v row
// and u[i] = min_j (c[i][j] - v[j]) is feasible). The number of augmenting-row-reduction steps is capped (with
// near-equal costs it could bid in tiny decrements for long); its result is only a starting point, so the cap
// never affects exactness. Items of the batch run in parallel (OpenMP).
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

// CPU kernel (assignment_cpu.cpp), OpenMP over items; `threads` as cpu_threads (0: OpenMP's default).
template <typename T>
void assignment_cpu(const AssignmentParams& P, const T* theta, int64_t* perm, int threads);

// CUDA launcher (assignment.cu): device pointers, queued on `stream`; `workspace` at least
// assignment_cuda_workspace(P) bytes.
inline int64_t assignment_cuda_workspace(const AssignmentParams& P) {
  // per item: u, v, shortest path (double, d each); path, row4col, col4row (int32, d each); scanned flags (2 d)
  return P.B * P.d * (3 * 8 + 3 * 4 + 2);
}
template <typename T>
void assignment_cuda(const AssignmentParams& P, const T* theta, int64_t* perm, void* workspace,
                     std::uintptr_t stream);

}  // namespace relaxops
