// CPU kernels of bubble_sort.h: OpenMP over rows. The forward runs each row until its own P <= epsilon (its t_b),
// takes the batch's T = max t_b, runs the rows that stopped earlier on to T, then forms the While's mixture; the
// backward is bubble_backward_row per row. Work buffers are per-thread scratch reused across calls.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../common/cpu_scratch.h"
#include "bubble_sort.h"

namespace relaxops {
namespace {

// Below this many comparator steps (B n^2 / 2, ~10 ms of forward work) a call runs on one thread (see
// edit_distance_cpu.cpp: B = 64, n = 50 took 6 ms on one thread and 32 ms on two at load 6).
constexpr int64_t kParallelWork = 1 << 18;

inline bool parallel(const BubbleParams& P) { return P.B > 1 && P.B * P.n * P.n / 2 >= kParallelWork; }

template <typename T>
void fill_nan(T* p, int64_t count) {
  std::fill(p, p + count, std::numeric_limits<T>::quiet_NaN());
}

}  // namespace

template <typename T>
void bubble_sort_forward_cpu(const BubbleParams& P, const T* x, T* sorted, T* swaps, T* any_swap, T* states,
                             int32_t* trips) {
  bubble_check_params(P);
  const int64_t n = P.n, L = n + 3, S = P.passes * L;
  std::vector<int64_t> row_trips(size_t(P.B));  // -1: a non-finite row
#pragma omp parallel for schedule(dynamic) if (parallel(P))
  for (int64_t b = 0; b < P.B; ++b) {
    if (!bubble_row_finite(n, x + b * n)) {
      row_trips[b] = -1;
      continue;
    }
    T* init = thread_scratch<0, T>(L);
    bubble_initial_state(n, x + b * n, init);
    T prob = T(1);
    row_trips[b] = bubble_run_passes(P, init, states + b * S, 0, P.passes, true, &prob);
  }
  int64_t T_ = 0;
  for (int64_t b = 0; b < P.B; ++b) T_ = std::max(T_, row_trips[b]);
#pragma omp parallel for schedule(dynamic) if (parallel(P))
  for (int64_t b = 0; b < P.B; ++b) {
    if (row_trips[b] < 0) {
      fill_nan(sorted + b * n, n);
      swaps[b] = any_swap[b] = std::numeric_limits<T>::quiet_NaN();
      fill_nan(states + b * S, S);
      continue;
    }
    T* init = thread_scratch<0, T>(L);
    bubble_initial_state(n, x + b * n, init);
    T prob = T(1);
    bubble_run_passes(P, init, states + b * S, row_trips[b], T_, false, &prob);
    bubble_mixture(P, T_, init, states + b * S, sorted + b * n, swaps + b, any_swap + b);
  }
  trips[0] = int32_t(T_);
}

template <typename T>
void bubble_sort_backward_cpu(const BubbleParams& P, const T* grad_sorted, const T* grad_swaps, const T* grad_any,
                              const T* x, const T* states, const int32_t* trips, T* grad_x) {
  bubble_check_params(P);
  const int64_t T_ = trips[0];
  RELAXOPS_CHECK(T_ >= 0 && T_ <= P.passes, "bubble_sort_backward: trips must be in [0, min(max_iter, n)]");
  const int64_t n = P.n, L = n + 3, S = P.passes * L;
#pragma omp parallel for schedule(dynamic) if (parallel(P))
  for (int64_t b = 0; b < P.B; ++b) {
    if (!bubble_row_finite(n, x + b * n)) {
      fill_nan(grad_x + b * n, n);
      continue;
    }
    T* init = thread_scratch<0, T>(4 * L + 2 * (T_ + 1));
    T *next = init + L, *ga = next + L, *gb = ga + L, *prob = gb + L, *e = prob + T_ + 1;
    T* tape = thread_scratch<1, T>(kBubbleTape * n);
    bubble_initial_state(n, x + b * n, init);
    bubble_backward_row(P, T_, grad_sorted + b * n, grad_swaps[b], grad_any[b], init, states + b * S, next, ga, gb,
                        tape, prob, e, grad_x + b * n);
  }
}

#define RELAXOPS_INSTANTIATE_BUBBLE(T)                                                                          \
  template void bubble_sort_forward_cpu<T>(const BubbleParams&, const T*, T*, T*, T*, T*, int32_t*);            \
  template void bubble_sort_backward_cpu<T>(const BubbleParams&, const T*, const T*, const T*, const T*, const T*, \
                                            const int32_t*, T*);

RELAXOPS_INSTANTIATE_BUBBLE(float)
RELAXOPS_INSTANTIATE_BUBBLE(double)

}  // namespace relaxops
