// The thread pool of cpu_parallel.h.
//
// One job at a time. A job is published under the mutex (its function, item count, seats, a new id) and its items
// are claimed with a compare-and-swap on one 64-bit word (job id << 32 | next item): a worker that wakes late, or
// after the job has ended, fails the compare (other id, or no item left) and never calls a finished job's
// function. The caller returns once every item is done (`done_` == n), so a claimed item's function and context
// are alive while it runs.
#include "cpu_parallel.h"

#include <dlfcn.h>
#ifdef __linux__
#include <link.h>
#endif
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
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

// PyTorch's OpenMP threads. torch runs its own CPU ops on libgomp's team, whose threads spin for milliseconds after
// each op; threads of a second pool would then share the cores with them (a training step with torch ops between
// the kernels measured 1.5x slower on 2 threads). So on an idle machine a loop runs on that same team, found in
// the process at run time (relaxops does not link libgomp): GOMP_parallel is the call a `#pragma omp parallel`
// compiles to. A team thread that starts late shows that the cores are shared: the loops then run on the pool
// for a while (kTeamPause), where no thread waits for one that has not started.
struct Team {
  void (*parallel)(void (*)(void*), void*, unsigned, unsigned) = nullptr;
  int (*thread_num)() = nullptr;
  int (*in_parallel)() = nullptr;
};
// A team thread's start, measured on this 2-core VM: idle 0-2 us (p50-p90); beside busy processes, milliseconds.
constexpr auto kLate = std::chrono::microseconds(300);
constexpr auto kTeamPause = std::chrono::seconds(1);
const pid_t g_load_pid = getpid();         // a forked child (torch runs it single-threaded) never uses the team
std::atomic<int64_t> g_team_off_until{0};  // steady_clock ticks
std::atomic<bool> g_use_team{true};

void* loaded_libgomp() {
  void* h = dlopen("libgomp.so.1", RTLD_NOW | RTLD_NOLOAD);
#ifdef __linux__
  if (h == nullptr)  // a renamed copy (a repaired wheel's libgomp-<hash>.so.1)
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* out) {
          if (info->dlpi_name && std::strstr(info->dlpi_name, "/libgomp"))
            *static_cast<void**>(out) = dlopen(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD);
          return *static_cast<void**>(out) ? 1 : 0;
        },
        &h);
#endif
  return h;
}

// The team, once libgomp is loaded (torch loads it before relaxops' kernels run); null members: none.
const Team* team() {
  static std::atomic<const Team*> found{nullptr};
  if (getpid() != g_load_pid) return nullptr;
  const Team* t = found.load(std::memory_order_acquire);
  if (t != nullptr) return t->parallel ? t : nullptr;
  auto* fresh = new Team();
  if (void* h = loaded_libgomp()) {
    fresh->parallel = reinterpret_cast<decltype(Team::parallel)>(dlsym(h, "GOMP_parallel"));
    fresh->thread_num = reinterpret_cast<decltype(Team::thread_num)>(dlsym(h, "omp_get_thread_num"));
    fresh->in_parallel = reinterpret_cast<decltype(Team::in_parallel)>(dlsym(h, "omp_in_parallel"));
    if (!fresh->thread_num || !fresh->in_parallel) fresh->parallel = nullptr;
  }
  const Team* expected = nullptr;
  if (!found.compare_exchange_strong(expected, fresh, std::memory_order_acq_rel)) {
    delete fresh;
    fresh = const_cast<Team*>(expected);
  }
  return fresh->parallel ? fresh : nullptr;
}

// One loop on the team: items from a shared counter, the caller is thread 0; records how late the others started.
struct TeamJob {
  int64_t n;
  detail::ItemFn fn;
  void* ctx;
  int (*thread_num)();
  std::chrono::steady_clock::time_point start;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> late{0};  // the latest start of a team thread, in steady_clock ticks after `start`
  std::mutex mutex;
  std::exception_ptr error;
};

void team_items(void* p) {
  auto& job = *static_cast<TeamJob*>(p);
  const int tid = job.thread_num();
  if (tid != 0) {
    const int64_t late = (std::chrono::steady_clock::now() - job.start).count();
    int64_t seen = job.late.load(std::memory_order_relaxed);
    while (late > seen && !job.late.compare_exchange_weak(seen, late, std::memory_order_relaxed)) {
    }
  }
  const bool outer = t_in_pool;
  t_in_pool = true;
  for (int64_t i; (i = job.next.fetch_add(1, std::memory_order_relaxed)) < job.n;) {
    try {
      job.fn(job.ctx, i, tid);
    } catch (...) {
      std::lock_guard<std::mutex> lock(job.mutex);
      if (!job.error) job.error = std::current_exception();
    }
  }
  t_in_pool = outer;
}

// true: the loop ran on the team (or threw); false: use the pool.
bool run_on_team(int64_t n, int threads, detail::ItemFn fn, void* ctx) {
  const Team* t = team();
  const auto now = std::chrono::steady_clock::now();
  if (t == nullptr || !g_use_team.load(std::memory_order_relaxed) ||
      now.time_since_epoch().count() < g_team_off_until.load(std::memory_order_relaxed) || t->in_parallel())
    return false;
  TeamJob job{n, fn, ctx, t->thread_num, now};
  t->parallel(team_items, &job, unsigned(threads), 0);
  if (job.late.load(std::memory_order_relaxed) > std::chrono::steady_clock::duration(kLate).count())
    g_team_off_until.store((std::chrono::steady_clock::now() + kTeamPause).time_since_epoch().count(),
                           std::memory_order_relaxed);
  if (job.error) std::rethrow_exception(job.error);
  return true;
}

class Pool {
 public:
  Pool() : pid_(getpid()) {}

  // false: the pool is busy (another caller's job); the caller then runs its items itself.
  bool run(int64_t n, int threads, detail::ItemFn fn, void* ctx) {
    bool expected = false;
    if (t_in_pool || n >= (int64_t(1) << 32) || !busy_.compare_exchange_strong(expected, true)) return false;
    try {
      if (run_on_team(n, threads, fn, ctx)) {
        busy_.store(false, std::memory_order_release);
        return true;
      }
    } catch (...) {
      busy_.store(false, std::memory_order_release);
      throw;
    }
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

void set_use_torch_threads(bool use) { g_use_team.store(use, std::memory_order_relaxed); }

bool torch_threads_found() { return team() != nullptr; }

namespace detail {

void run_items(int64_t n, int threads, ItemFn fn, void* ctx) {
  if (!pool().run(n, std::min<int64_t>(threads, n), fn, ctx))
    for (int64_t i = 0; i < n; ++i) fn(ctx, i, 0);
}

}  // namespace detail
}  // namespace relaxops
