// Differentiable comparator networks: sorting, and top-k through the column range of the matrix kernels.
//
// Network tables (int32, built by python/relaxops/sortnet/networks.py):
//   layer_ptr[L+1]  comparators of layer l are c in [layer_ptr[l], layer_ptr[l+1])
//   cmin[C], cmax[C] wire receiving the min / the max of comparator c (direction = order of the pair)
// Every comparator c mixes wires i = cmin[c], j = cmax[c] with alpha_c = f(x_j - x_i) (common/relax.h);
// untouched wires pass through exactly. Layers are applied in order; comparators of one layer touch
// disjoint wires, so they may run in any order or in parallel.
//
// The op is split into four kernels, each batch-parallel over rows b (all buffers row-major, contiguous):
//
// 1. values_forward(x[B,n]) -> sorted[B,n], d[B,C], alpha[B,C]
//      d_c = x_j - x_i at the time comparator c runs, alpha_c = f(d_c). O(C) per row.
// 2. values_backward(grad_sorted[B,n] | null, grad_alpha[B,C] | null, d, alpha) -> grad_x[B,n]
//      Reverse sweep over layers with g = dl/dx^(l):
//        dalpha = grad_alpha_c - (g_i - g_j) d_c          (external alpha gradient + value path)
//        g_i, g_j <- alpha g_i + (1-alpha) g_j, (1-alpha) g_i + alpha g_j   (P_l is symmetric)
//        g_j += dalpha f'(d_c);  g_i -= dalpha f'(d_c)
// 3. matrix_forward(alpha[B,C], col_begin) -> X[B,m,n], m = n - col_begin
//      Rows col_begin.. of P^T (P = P_L ... P_1), i.e. columns col_begin.. of Y = P. With col_begin = 0,
//      X = P^T (code convention: X[c, r] = weight of input c at ascending output position r). A work item owns
//      a tile of TILE columns of Y = P_l ... P_1 (Y[r, c] for the tile's c, stored W[r][cc], contiguous in
//      cc), starts from the identity and mixes rows i, j of the tile for every comparator; the tile is then
//      stored transposed, i.e. as TILE contiguous rows of X. O(C n) per column tile, no dense product.
//      Top-k (rows n-k.. of P, docs/math/sortnet.md §6): run this on the REVERSED network (comparators in reverse
//      order, alpha reversed accordingly) with col_begin = n - k. Since every P_l is symmetric, the reversed product is
//      P^T, so X[r', c] = P[n - k + r', c]: the top-k rows of P, O(C k) per row.
// 4. matrix_backward(alpha[B,C], col_begin, grad_X[B,m,n]) -> grad_alpha[B,C]
//      grad_alpha_c = sum_cols (H_i - H_j)(Y_i - Y_j) with H = dl/dY after comparator c (initialised to
//      grad_X^T) and Y the state before it. Per column tile: the forward trajectory is recomputed in
//      segments of S layers from checkpoints stored every S layers, keeping the differences Y_i - Y_j of
//      the segment's comparators; the reverse sweep then accumulates and mixes H. Each tile writes its own
//      partial sums, reduced over tiles in a fixed order (deterministic for any thread count).
//      Memory per tile: (L/S + 1) n TILE + (comparators of a segment) TILE values.
// 5. rank_forward(x[B,n]) -> rank[B,n], and on the CPU optionally saved[2 C per row] (d, alpha for 6)
//      The values pass of 1 (alpha kept in per-thread or workspace memory, or saved), then the soft ranks
//      rank = X pos = P^T pos = P_1 P_2 ... P_L pos, pos = (1, 2, ..., n): rank_c = sum_r (r + 1) P[r, c], the
//      expected ascending 1-based position of input c. pos goes through the comparators in REVERSE order with
//      the 2x2 mixing of the values (every P_l is symmetric): O(C) per row, never a matrix. Networks have no
//      virtual wires (bitonic drops the comparators of its padding), so pos has exactly n entries.
// 6. rank_backward(x[B,n], grad_rank[B,n]) -> grad_x[B,n]
//      With u^(0) = grad_rank, u^(l) = P_l u^(l-1) (forward order) and v^(l) = P_{l+1} ... P_L pos (the reverse
//      pass before layer l), rank = P_1 ... P_l v^(l) gives dl/dP_l = u^(l-1) v^(l)^T, and the 2x2 block
//      [[a, 1-a], [1-a, a]] of comparator (i, j) gives
//        grad_alpha = (u_i - u_j)(v_i - v_j)      (u = u^(l-1), v = v^(l)).
//      A forward sweep recomputes the values pass (d, alpha) or reads the saved one, and stores u_i - u_j per
//      comparator (3 C values per row being processed); the reverse sweep then recomputes v from pos and runs the
//      values backward of 2 with grad_sorted = 0 and that grad_alpha, fused. Saved between forward and backward:
//      x (O(n) per row), or on the CPU d and alpha too (2 C per row: the backward then skips the values pass,
//      which is about half of its work).
#pragma once

#include <cstdint>
#include <tuple>

#include "../common/relax.h"

namespace relaxops {

// Non-finite inputs (the same rule in every backend): equal values tie at d = 0, also two equal infinities
// (where v_j - v_i is NaN); an infinite gap is a hard comparison (common/relax.h), and a hard comparison
// passes both wires through, so +-inf sort to the ends without forming 0 * inf; NaN propagates.

// The gap d = x_j - x_i of a comparator (0 for equal values).
template <typename T>
HOST_DEVICE inline T relaxed_gap(T xi, T xj) {
  return xi == xj ? T(0) : xj - xi;
}

// The relaxed (min, max) of comparator (i, j): a x_i + (1 - a) x_j and (1 - a) x_i + a x_j, written with the gap
// as x_j - a d and x_i + a d (shift invariant, exact at ties, as the reference); a = 0 or 1 passes the wires
// through exactly, also infinite ones (0 * inf is not formed).
template <typename T>
HOST_DEVICE inline void relaxed_minmax(T a, T xi, T xj, T d, T* lo, T* hi) {
  *lo = a == T(0) ? xj : (a == T(1) ? xi : xj - a * d);
  *hi = a == T(0) ? xi : (a == T(1) ? xj : xi + a * d);
}

// The gap's share of the alpha gradient, (grad_alpha - (g_i - g_j) d) f'(d); 0 where f'(d) = 0, its limit for
// an infinite gap (f'(d) d -> 0 for every f), where the product would be inf * 0.
template <typename T>
HOST_DEVICE inline T relaxed_gap_grad(T grad_alpha, T gi, T gj, T d, T slope) {
  return slope == T(0) ? T(0) : (grad_alpha - (gi - gj) * d) * slope;
}

// One relaxed comparator (i, j) on the row values v: stores the gap d = v_j - v_i and alpha = f(d), then
// mixes (the CUDA values kernel; the CPU one does the same arithmetic split into per-layer loops).
template <typename T>
HOST_DEVICE inline void relaxed_swap_forward(const RelaxParams& rp, T* v, int64_t i, int64_t j, T* d, T* alpha) {
  const T xi = v[i], xj = v[j];
  const T dc = relaxed_gap(xi, xj);
  const T a = relax_alpha<T>(rp, dc, nullptr);
  *d = dc;
  *alpha = a;
  relaxed_minmax(a, xi, xj, dc, v + i, v + j);
}

// Its adjoint on g = dl/dv (item 2 below), with grad_alpha the external gradient of this alpha.
template <typename T>
HOST_DEVICE inline void relaxed_swap_backward(const RelaxParams& rp, T* g, int64_t i, int64_t j, T d, T a,
                                              T grad_alpha) {
  const T gi = g[i], gj = g[j];
  T slope;
  relax_alpha<T>(rp, d, &slope);
  const T dd = relaxed_gap_grad(grad_alpha, gi, gj, d, slope);
  g[i] = a * gi + (T(1) - a) * gj - dd;
  g[j] = (T(1) - a) * gi + a * gj + dd;
}

struct NetView {
  int64_t n;
  int64_t num_layers;
  int64_t num_comparators;
  const int32_t* layer_ptr;
  const int32_t* cmin;
  const int32_t* cmax;
};
// The Python side writes NetViews as int64 [G, 6] (networks.RowNetworks.table).
static_assert(sizeof(NetView) == 6 * sizeof(int64_t), "NetView must be six 64-bit fields");

// Rows of their own lengths (padded rows; docs/math/sortnet.md, "Any dimension, padded rows"). Row b runs network
// nets[group] of the call's table on its first `wires` entries: comparator c of that network takes part iff it
// lies in layers [layer_begin, layer_end) and both its wires are < wires; any other comparator is not part of the
// row's network (its d and alpha are 0, its alpha gradient is 0). The entries wires.. of the row are pads: never
// read, 0 in every output, no gradient. The matrix kernels compute the row's `cols` Y-columns wires - cols ..
// wires - 1 into output columns out_first .. (the sort: all wires from 0; the top-k: its k, right-aligned).
// (bitonic and odd_even: every row names the network for n, and its layer prefix and wire bound select the
// network for its length; other networks: one group per distinct length and k.)
struct RowSpec {
  int64_t group, wires, layer_begin, layer_end, cols, out_first;
};

// What one row runs: its network, wire bound, layers [l0, l1) = comparators [c0, c1), and matrix columns.
struct RowNet {
  NetView net;
  int64_t wires, l0, l1, c0, c1, cols, out_first;
  // Comparator c (in [c0, c1)) is part of the row's network.
  HOST_DEVICE bool takes(int64_t c) const { return net.cmin[c] < wires && net.cmax[c] < wires; }
};

// The rows of a call: without spec, every row runs all of `net` on all its n entries (what the kernels did before
// rows had lengths); with spec (B entries), row b runs spec[b] on nets (num_nets networks, each with n <= net.n)
// and only net.n, the row length, is read from `net`. C: the row stride of d and alpha (>= every network's C).
// nets and spec are host memory for the CPU kernels, device memory for the CUDA kernels.
struct Rows {
  NetView net;
  int64_t num_nets;
  const NetView* nets;
  const RowSpec* spec;
  int64_t C;

  HOST_DEVICE int64_t n() const { return net.n; }
  // Row b's network; full rows: all of `net`, matrix columns [n - m .. n) into output columns 0.. (m given).
  HOST_DEVICE RowNet row(int64_t b, int64_t m = 0) const {
    if (spec == nullptr) return {net, net.n, 0, net.num_layers, 0, net.num_comparators, m, 0};
    const RowSpec& s = spec[b];
    const NetView& g = nets[s.group];
    return {g,      s.wires,    s.layer_begin, s.layer_end, g.layer_ptr[s.layer_begin], g.layer_ptr[s.layer_end],
            s.cols, s.out_first};
  }
};

// The Rows of a call from the bindings' row-network group (num_nets, nets, spec, C), after the network group:
// num_nets = 0 and spec = 0 for full rows of `net` (C must then be its comparator count), else the row networks.
inline Rows make_rows(const NetView& net, const std::tuple<int64_t, std::uintptr_t, std::uintptr_t, int64_t>& g) {
  const auto [num_nets, nets, spec, C] = g;
  RELAXOPS_CHECK((num_nets == 0) == (spec == 0) && (num_nets == 0 || nets != 0),
                 "sortnet: row networks need num_nets >= 1, their table and the row spec (or none of them)");
  RELAXOPS_CHECK(C >= 0 && (num_nets > 0 || C == net.num_comparators),
                 "sortnet: C must be the network's comparator count for full rows");
  return {net, num_nets, reinterpret_cast<const NetView*>(nets), reinterpret_cast<const RowSpec*>(spec), C};
}

template <typename T>
void sortnet_values_forward_cpu(const Rows& rows, const RelaxParams& rp, int64_t B, const T* x, T* sorted, T* d,
                                T* alpha);
template <typename T>
void sortnet_values_backward_cpu(const Rows& rows, const RelaxParams& rp, int64_t B, const T* grad_sorted,
                                 const T* grad_alpha, const T* d, const T* alpha, T* grad_x);
// topk_layout (the CPU kernels): alpha [B, C] belongs to the network that the row's network reverses (alpha[b][c] is
// comparator C_g - 1 - c of the row's network, C_g its comparator count: the top-k matrix runs the forward's alphas
// from the last layer back), and X / grad_X is [B, n, m] (columns last: the top-k matrix) instead of [B, m, n];
// grad_alpha is in alpha's order. rows (nullable, top-k layout only): X / grad_X is [B, m], row rows[b] of each
// [n, m] matrix (the top-k loss reads the label's row only). Full rows: the Y-columns col_begin.. (m = n -
// col_begin); with a RowSpec, the row's own columns into m = n - col_begin output columns.
template <typename T>
void sortnet_matrix_forward_cpu(const Rows& rows, int64_t B, int64_t col_begin, const T* alpha, T* X, bool topk_layout,
                                const int64_t* label_rows);
template <typename T>
void sortnet_matrix_backward_cpu(const Rows& rows, int64_t B, int64_t col_begin, const T* alpha, const T* grad_X,
                                 T* grad_alpha, bool topk_layout, const int64_t* label_rows);
// The top-k loss's preselection of x [B, n]: values [B, m] = x[b, target[b]] followed by the m - 1 largest other
// entries of row b in descending order (NaN first, ties in index order), index [B, m] their columns; the
// backward scatters grad_values into grad_x [B, n] (zero elsewhere).
template <typename T>
void topk_preselect_forward_cpu(int64_t B, int64_t n, int64_t m, const T* x, const int64_t* target, T* values,
                                int64_t* index);
template <typename T>
void topk_preselect_backward_cpu(int64_t B, int64_t n, int64_t m, const T* grad_values, const int64_t* index,
                                 T* grad_x);
// p[b] = softmax(x[b])[index[b]] of x [B, n] (the top-k loss's top-1 term; NaN in a row gives NaN), and its
// backward grad_x[b][j] = grad_p[b] p[b] ([j = index[b]] - softmax(x[b])[j]).
template <typename T>
void label_softmax_forward_cpu(int64_t B, int64_t n, const T* x, const int64_t* index, T* p);
template <typename T>
void label_softmax_backward_cpu(int64_t B, int64_t n, const T* x, const int64_t* index, const T* p, const T* grad_p,
                                T* grad_x);
// saved (nullable): the forward writes the values pass's d, alpha there ([2 C] values per row, in the kernel's
// own layout, sortnet_rank_saved_numel_cpu values in all) and the backward reads them instead of recomputing.
// With a RowSpec, rows of one group go into tiles together (num_nets - 1 more tiles at most).
int64_t sortnet_rank_saved_numel_cpu(int64_t C, int64_t B, int64_t num_nets);
template <typename T>
void sortnet_rank_forward_cpu(const Rows& rows, const RelaxParams& rp, int64_t B, const T* x, T* rank, T* saved);
template <typename T>
void sortnet_rank_backward_cpu(const Rows& rows, const RelaxParams& rp, int64_t B, const T* x, const T* grad_rank,
                               const T* saved, T* grad_x);

}  // namespace relaxops

// CUDA launchers (sortnet.cu). All pointers are device pointers; work is queued on `stream`
// (a cudaStream_t as an integer) on the device that owns the data; each launch is checked and a failure
// throws std::runtime_error naming the kernel.
//   values_*: one block per row, the row in shared memory (in place in the output buffer if too large).
//   matrix_forward: one block per (row, tile of 8 columns); the tile in shared memory, else in place in X.
//   rank_*: one block per row, the row in shared memory (rank_backward: three rows) or, if too large, in the
//     output row and a caller-allocated device workspace of T, which also holds alpha of every comparator
//     (rank_forward: B * C elements) or d, alpha, u_i - u_j and a row (rank_backward: B * (3 C + n)).
//   matrix_backward: blocks loop over (row, group of tiles); checkpoints, segment differences, tiles that
//     do not fit in shared memory and the [B, groups, C] partial sums live in a caller-allocated device
//     workspace of sortnet_matrix_backward_workspace_bytes_cuda<T>(net, B, col_begin) bytes (a function of n,
//     L, C, B and col_begin only; net's pointers are not read; with a RowSpec: n, the most layers of a row's
//     network and the alpha stride C). Partials are reduced over groups in a fixed order.
//   With a RowSpec, nets and spec are device arrays; the kernels trust them (the Python ops check lengths and k,
//   and build them).
namespace relaxops {

template <typename T>
void sortnet_values_forward_cuda(const Rows& rows, const RelaxParams& rp, int64_t B, const T* x, T* sorted, T* d,
                                 T* alpha, std::uintptr_t stream);
template <typename T>
void sortnet_values_backward_cuda(const Rows& rows, const RelaxParams& rp, int64_t B, const T* grad_sorted,
                                  const T* grad_alpha, const T* d, const T* alpha, T* grad_x, std::uintptr_t stream);
template <typename T>
void sortnet_matrix_forward_cuda(const Rows& rows, int64_t B, int64_t col_begin, const T* alpha, T* X,
                                 std::uintptr_t stream);
template <typename T>
void sortnet_rank_forward_cuda(const Rows& rows, const RelaxParams& rp, int64_t B, const T* x, T* rank, T* workspace,
                               int64_t workspace_elements, std::uintptr_t stream);
template <typename T>
void sortnet_rank_backward_cuda(const Rows& rows, const RelaxParams& rp, int64_t B, const T* x, const T* grad_rank,
                                T* grad_x, T* workspace, int64_t workspace_elements, std::uintptr_t stream);
template <typename T>
int64_t sortnet_matrix_backward_workspace_bytes_cuda(const NetView& net, int64_t B, int64_t col_begin);
template <typename T>
void sortnet_matrix_backward_cuda(const Rows& rows, int64_t B, int64_t col_begin, const T* alpha, const T* grad_X,
                                  T* grad_alpha, void* workspace, int64_t workspace_bytes, std::uintptr_t stream);

// Runtime queries for the binding (sortnet.cu holds the module's only CUDA runtime calls). No device or
// no driver: cuda_device_count() == 0, no exception.
int cuda_device_count();
std::string cuda_device_name(int device);
int cuda_runtime_version();
int cuda_driver_version();

}  // namespace relaxops
