// The thread pool of cpu_parallel.h.
//
// One job at a time. A job is published under the mutex (its function, item count, seats, a new id) and its items
// are claimed with a compare-and-swap on one 64-bit word (job id << 32 | next item): a worker that wakes late, or
// after the job has ended, fails the compare (other id, or no item left) and never calls a finished job's
// function. The caller returns once every item is done (`done_` == n), so a claimed item's function and context
// are alive while it runs.
#include "cpu_parallel.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define RELAXOPS_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define RELAXOPS_PAUSE() asm volatile("yield")
#else
#define RELAXOPS_PAUSE() ((void)0)
#endif

namespace relaxops {
namespace {

std::atomic<int> g_threads{0};  // 0: not set, the hardware's count

// How long an idle worker, or a caller whose items are all claimed, spins before it sleeps: long enough to catch
// the next kernel of the same op (tens of microseconds apart) without a wake-up, short against a scheduler slice.
constexpr auto kSpin = std::chrono::microseconds(50);

thread_local bool t_in_pool = false;  // this thread runs an item of a parallel loop

class Pool {
 public:
  Pool() : pid_(getpid()) {}

  // false: the pool is busy (another caller's job); the caller then runs its items itself.
  bool run(int64_t n, int threads, detail::ItemFn fn, void* ctx) {
    bool expected = false;
    if (t_in_pool || n >= (int64_t(1) << 32) || !busy_.compare_exchange_strong(expected, true)) return false;
    int workers = threads - 1;
    uint64_t id;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      try {
        while (int(threads_.size()) < workers) threads_.emplace_back([this] { work(); });
      } catch (const std::system_error&) {  // no more threads: run with those there are
        workers = int(threads_.size());
      }
      fn_ = fn;
      ctx_ = ctx;
      n_ = n;
      seats_ = workers;
      next_tid_ = 1;
      done_.store(0, std::memory_order_relaxed);
      error_ = nullptr;
      id = ++job_;
      word_.store(id << 32, std::memory_order_release);
      published_.store(id, std::memory_order_release);
    }
    if (sleeping_.load(std::memory_order_acquire) > 0) wake_.notify_all();
    t_in_pool = true;
    claim_items(id, n, fn, ctx, 0);
    t_in_pool = false;
    // Wait for the items that workers claimed: spin, then sleep until the last one is done.
    const auto until = std::chrono::steady_clock::now() + kSpin;
    while (done_.load(std::memory_order_acquire) < n && std::chrono::steady_clock::now() < until) RELAXOPS_PAUSE();
    if (done_.load(std::memory_order_acquire) < n) {
      std::unique_lock<std::mutex> lock(mutex_);
      finished_.wait(lock, [&] { return done_.load(std::memory_order_acquire) >= n; });
    }
    std::exception_ptr error;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      error = error_;
      error_ = nullptr;
      seats_ = 0;
    }
    busy_.store(false, std::memory_order_release);
    if (error) std::rethrow_exception(error);
    return true;
  }

  bool forked() const { return getpid() != pid_; }

 private:
  // Claim and run items of job `id` until none is left; count each finished item in done_.
  void claim_items(uint64_t id, int64_t n, detail::ItemFn fn, void* ctx, int tid) {
    uint64_t w = word_.load(std::memory_order_acquire);
    for (;;) {
      if ((w >> 32) != id || int64_t(w & 0xffffffffu) >= n) return;
      if (!word_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
      const int64_t item = int64_t(w & 0xffffffffu);
      try {
        fn(ctx, item, tid);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) error_ = std::current_exception();
      }
      if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == n) {
        std::lock_guard<std::mutex> lock(mutex_);  // the caller checks done_ under the mutex before it sleeps
        finished_.notify_one();
      }
      w = word_.load(std::memory_order_acquire);
    }
  }

  void work() {
    t_in_pool = true;
    uint64_t seen = 0;
    for (;;) {
      // Wait for a job newer than the last one seen: spin, then sleep.
      const auto until = std::chrono::steady_clock::now() + kSpin;
      while (published_.load(std::memory_order_acquire) == seen && std::chrono::steady_clock::now() < until)
        RELAXOPS_PAUSE();
      uint64_t id;
      int64_t n;
      detail::ItemFn fn;
      void* ctx;
      int tid;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        if (published_.load(std::memory_order_relaxed) == seen) {
          sleeping_.fetch_add(1, std::memory_order_acq_rel);
          wake_.wait(lock, [&] { return published_.load(std::memory_order_relaxed) != seen; });
          sleeping_.fetch_sub(1, std::memory_order_acq_rel);
        }
        seen = id = published_.load(std::memory_order_relaxed);
        if (seats_ == 0) continue;  // the job has all the threads it asked for, or has ended
        --seats_;
        tid = next_tid_++;
        n = n_;
        fn = fn_;
        ctx = ctx_;
      }
      claim_items(id, n, fn, ctx, tid);
    }
  }

  const pid_t pid_;
  std::atomic<bool> busy_{false};
  std::mutex mutex_;
  std::condition_variable wake_, finished_;
  std::vector<std::thread> threads_;
  std::atomic<int> sleeping_{0};
  std::atomic<uint64_t> published_{0};  // id of the newest job
  std::atomic<uint64_t> word_{0};       // id << 32 | next item of the current job
  std::atomic<int64_t> done_{0};        // finished items of the current job
  // the current job, under mutex_
  uint64_t job_ = 0;
  int64_t n_ = 0;
  detail::ItemFn fn_ = nullptr;
  void* ctx_ = nullptr;
  int seats_ = 0, next_tid_ = 1;
  std::exception_ptr error_;
};

// The process's pool, created at first use. A forked child gets a new one: the parent's threads do not exist
// there (the old pool is left alone, never destroyed: its threads' objects belong to the parent). Never destroyed
// at exit either: its threads sleep in it until the process ends.
std::atomic<Pool*> g_pool{nullptr};

Pool& pool() {
  Pool* p = g_pool.load(std::memory_order_acquire);
  while (p == nullptr || p->forked()) {
    Pool* fresh = new Pool();  // starts no thread until its first job
    if (g_pool.compare_exchange_strong(p, fresh, std::memory_order_acq_rel)) return *fresh;
    delete fresh;  // another thread installed one first: p is now that one
  }
  return *p;
}

// The CPUs this process may run on (its affinity mask), as torch counts them.
int available_cpus() {
#ifdef __linux__
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
#endif
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace

int cpu_threads() {
  const int t = g_threads.load(std::memory_order_relaxed);
  return t > 0 ? t : available_cpus();
}

void set_cpu_threads(int threads) { g_threads.store(std::max(threads, 1), std::memory_order_relaxed); }

namespace detail {

void run_items(int64_t n, int threads, ItemFn fn, void* ctx) {
  if (!pool().run(n, std::min<int64_t>(threads, n), fn, ctx))
    for (int64_t i = 0; i < n; ++i) fn(ctx, i, 0);
}

}  // namespace detail
}  // namespace relaxops
