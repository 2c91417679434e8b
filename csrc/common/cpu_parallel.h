// Parallel loops of the CPU kernels: on PyTorch's OpenMP threads while they start on time, else on relaxops' own
// thread pool.
//
// Why not OpenMP alone: its threads spin for milliseconds at every barrier and between regions (libgomp's default),
// and a region ends only when every thread of its team has arrived. On a shared CPU (DataLoader workers, other
// processes) the thread waited for is often not running, so each region costs a scheduler slice or more: kernels
// ran 2-70x slower on 2 threads than on 1 beside 4 busy processes. The pool here:
//  - hands out items from one shared counter: a thread that the OS preempts holds at most the item it is on,
//    and the others take the rest;
//  - never waits for a worker that has not started: the caller runs items itself, and waits only for items
//    that have been claimed and not finished;
//  - spins briefly (tens of microseconds, enough for the next kernel of the same op) and then sleeps, in the
//    workers and in the caller;
//  - uses the thread count that Python sets from torch.get_num_threads() before each call (set_cpu_threads);
//  - runs a loop on PyTorch's own OpenMP threads instead while they start on time (an idle machine: two sets of
//    threads would share the cores, torch's spinning after each of its ops), and on its own threads for a while
//    once one of them starts late (cpu_parallel.cpp);
//  - runs a call serially when the pool is busy (a concurrent caller, or a call from inside a parallel loop), and
//    rebuilds itself in a forked child (DataLoader workers).
// A kernel needs one parallel loop per call where it can: items are whole rows or row tiles through every layer,
// never a barrier per layer.
#pragma once

#include <cstdint>
#include <type_traits>

namespace relaxops {

// The thread count of the next parallel loops (>= 1), as set from Python (torch.get_num_threads()).
int cpu_threads();
void set_cpu_threads(int threads);
// Whether loops may run on PyTorch's OpenMP threads (default: yes, when found in the process and on time).
void set_use_torch_threads(bool use);
bool torch_threads_found();

namespace detail {
using ItemFn = void (*)(void* ctx, int64_t item, int tid);
// Calls fn(ctx, i, tid) for every i in [0, n) on up to `threads` threads (the caller is tid 0).
void run_items(int64_t n, int threads, ItemFn fn, void* ctx);
}  // namespace detail

// body(i, tid) for every i in [0, n), on up to `threads` threads (0: cpu_threads()); tid in [0, threads) is unique
// among the threads of this call at any time (per-thread buffers). Items are handed out one at a time in
// increasing order. An exception thrown by body is rethrown here once the claimed items have finished.
template <typename F>
void parallel_items(int64_t n, F&& body, int threads = 0) {
  if (threads <= 0) threads = cpu_threads();
  if (n <= 0) return;
  if (threads == 1 || n == 1) {
    for (int64_t i = 0; i < n; ++i) body(i, 0);
    return;
  }
  using Body = std::remove_reference_t<F>;
  detail::run_items(
      n, threads, [](void* ctx, int64_t i, int tid) { (*static_cast<Body*>(ctx))(i, tid); },
      const_cast<void*>(static_cast<const void*>(&body)));
}

// body(begin, end, tid) over [0, n) in chunks of `grain` items (the last may be shorter).
template <typename F>
void parallel_chunks(int64_t n, int64_t grain, F&& body, int threads = 0) {
  if (grain < 1) grain = 1;
  parallel_items((n + grain - 1) / grain,
                 [&](int64_t c, int tid) { body(c * grain, c * grain + grain < n ? c * grain + grain : n, tid); },
                 threads);
}

// 1 below `threshold` units of work (a parallel loop would cost more than it saves), else 0 (cpu_threads()).
inline int threads_for(int64_t work, int64_t threshold) { return work >= threshold ? 0 : 1; }

}  // namespace relaxops
