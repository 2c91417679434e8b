// CPU kernels of bubble_sort.h: OpenMP over groups of kLanes rows run in lockstep (a row's comparators form one
// latency-bound chain of exp, division and multiply-adds; interleaving rows lets the core overlap the chains). The
// forward runs each group until all its rows have P <= epsilon (t_b <= the group's count <= T: those passes are
// needed anyway), takes the batch's T = the largest count, runs the groups on to T, then forms each row's mixture;
// the backward is bubble_backward_rows per group. The last group repeats its last row in the spare lanes (same
// inputs, same writes). Work buffers are per-thread scratch reused across calls.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../common/cpu_parallel.h"
#include "../common/cpu_scratch.h"
#include "bubble_sort.h"

namespace relaxops {
namespace {

constexpr int kLanes = 4;

// Below this many comparator steps (B n^2 / 2, ~10 ms of work) a call runs on one thread: a parallel region costs
// up to a scheduler time slice when other processes share the cores (edit_distance_cpu.cpp).
constexpr int64_t kParallelWork = 1 << 19;

inline bool parallel(const BubbleParams& P) { return P.B > kLanes && P.B * P.n * P.n / 2 >= kParallelWork; }

inline int64_t lane_row(const BubbleParams& P, int64_t g, int l) { return std::min(P.B - 1, g * kLanes + l); }

template <typename T>
void fill_nan(T* p, int64_t count) {
  std::fill(p, p + count, std::numeric_limits<T>::quiet_NaN());
}

// State 0 of the group's rows into init (kLanes (n + 3)); prob[l] = 1, or NaN for a non-finite row (it keeps no
// group running).
template <typename T>
void group_start(const BubbleParams& P, int64_t g, const T* x, T* init, const T** inits, T** states, T* states_base,
                 T* prob) {
  const int64_t n = P.n, L = n + 3;
  for (int l = 0; l < kLanes; ++l) {
    const int64_t b = lane_row(P, g, l);
    bubble_initial_state(n, x + b * n, init + l * L);
    inits[l] = init + l * L;
    states[l] = states_base + b * P.passes * L;
    prob[l] = bubble_row_finite(n, x + b * n) ? T(1) : std::numeric_limits<T>::quiet_NaN();
  }
}

}  // namespace

template <typename T>
void bubble_sort_forward_cpu(const BubbleParams& P, const T* x, T* sorted, T* swaps, T* any_swap, T* states,
                             int32_t* trips) {
  bubble_check_params(P);
  const int64_t n = P.n, L = n + 3, S = P.passes * L, groups = (P.B + kLanes - 1) / kLanes;
  std::vector<int64_t> group_trips(static_cast<size_t>(groups));
  parallel_items(
      groups,
      [&](int64_t g, int) {
        const T* inits[kLanes];
        T* st[kLanes];
        T prob[kLanes];
        group_start(P, g, x, thread_scratch<0, T>(kLanes * L), inits, st, states, prob);
        group_trips[g] = bubble_run_passes<kLanes>(P, inits, st, 0, P.passes, true, prob);
      },
      parallel(P) ? 0 : 1);
  int64_t T_ = 0;
  for (int64_t g = 0; g < groups; ++g) T_ = std::max(T_, group_trips[g]);
  parallel_items(
      groups,
      [&](int64_t g, int) {
        const T* inits[kLanes];
        T* st[kLanes];
        T prob[kLanes];
        T* init = thread_scratch<0, T>(kLanes * L);
        group_start(P, g, x, init, inits, st, states, prob);
        bubble_run_passes<kLanes>(P, inits, st, group_trips[g], T_, false, prob);
        for (int l = 0; l < kLanes && g * kLanes + l < P.B; ++l) {
          const int64_t b = g * kLanes + l;
          if (bubble_row_finite(n, x + b * n)) {
            bubble_mixture(P, T_, inits[l], states + b * S, sorted + b * n, swaps + b, any_swap + b);
          } else {
            fill_nan(sorted + b * n, n);
            swaps[b] = any_swap[b] = std::numeric_limits<T>::quiet_NaN();
            fill_nan(states + b * S, S);
          }
        }
      },
      parallel(P) ? 0 : 1);
  trips[0] = int32_t(T_);
}

template <typename T>
void bubble_sort_backward_cpu(const BubbleParams& P, const T* grad_sorted, const T* grad_swaps, const T* grad_any,
                              const T* x, const T* states, const int32_t* trips, T* grad_x) {
  bubble_check_params(P);
  const int64_t T_ = trips[0];
  RELAXOPS_CHECK(T_ >= 0 && T_ <= P.passes, "bubble_sort_backward: trips must be in [0, min(max_iter, n)]");
  const int64_t n = P.n, L = n + 3, S = P.passes * L, groups = (P.B + kLanes - 1) / kLanes;
  const int64_t per = 4 * L + 2 * (T_ + 1) + kBubbleTape * n;  // per lane: init, next, ga, gb, prob, e, tape
  parallel_items(
      groups,
      [&](int64_t g, int) {
        T* scratch = thread_scratch<0, T>(kLanes * per);
        const T *gv[kLanes], *init[kLanes], *st[kLanes];
        T gw[kLanes], gy[kLanes];
        T *next[kLanes], *ga[kLanes], *gb[kLanes], *tape[kLanes], *prob[kLanes], *e[kLanes], *gx[kLanes];
        for (int l = 0; l < kLanes; ++l) {
          const int64_t b = lane_row(P, g, l);
          T* w = scratch + l * per;
          bubble_initial_state(n, x + b * n, w);
          init[l] = w, next[l] = w + L, ga[l] = w + 2 * L, gb[l] = w + 3 * L, prob[l] = w + 4 * L;
          e[l] = prob[l] + T_ + 1, tape[l] = e[l] + T_ + 1;
          gv[l] = grad_sorted + b * n, gw[l] = grad_swaps[b], gy[l] = grad_any[b];
          st[l] = states + b * S, gx[l] = grad_x + b * n;
        }
        bubble_backward_rows<kLanes>(P, T_, gv, gw, gy, init, st, next, ga, gb, tape, prob, e, gx);
        for (int l = 0; l < kLanes && g * kLanes + l < P.B; ++l) {
          const int64_t b = g * kLanes + l;
          if (!bubble_row_finite(n, x + b * n)) fill_nan(grad_x + b * n, n);
        }
      },
      parallel(P) ? 0 : 1);
}

#define RELAXOPS_INSTANTIATE_BUBBLE(T)                                                                             \
  template void bubble_sort_forward_cpu<T>(const BubbleParams&, const T*, T*, T*, T*, T*, int32_t*);               \
  template void bubble_sort_backward_cpu<T>(const BubbleParams&, const T*, const T*, const T*, const T*, const T*, \
                                            const int32_t*, T*);

RELAXOPS_INSTANTIATE_BUBBLE(float)
RELAXOPS_INSTANTIATE_BUBBLE(double)

}  // namespace relaxops
