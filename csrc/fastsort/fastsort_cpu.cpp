// CPU kernels of fastsort.h: parallel over rows; per row a sort of (value, index) pairs, the in-place PAV and one
// output pass. Work buffers are per-thread scratch reused across calls (no allocation per call).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "../common/cpu_parallel.h"
#include "../common/cpu_scratch.h"
#include "fastsort.h"

namespace relaxops {
namespace {

// Below this many elements (~15 ms of work) a call runs on one thread. Rows are handed out one at a time: a thread
// that shares its core with another process does fewer of them.
constexpr int64_t kParallelWork = 1 << 20;
// From this row length on, rows without NaN are sorted by LSD radix sort (below, std::sort is faster).
constexpr int64_t kRadixMin = 192;

template <typename T>
struct SortKey {
  T v;
  int32_t i;  // n < 2^31 (fastsort_check_params): 8-byte keys for float
};

// Ascending, NaN last, ties by index: a strict total order on any row, equal to torch.sort(stable=True).
template <typename T>
inline bool key_less_nan_last(const SortKey<T>& a, const SortKey<T>& b) {
  const bool an = a.v != a.v, bn = b.v != b.v;
  if (an || bn) return an == bn ? a.i < b.i : bn;
  return a.v < b.v || (a.v == b.v && a.i < b.i);
}

// LSD radix sort of a NaN-free row by sgn x, 11-bit digits (3 passes for float, 6 for double; a pass whose digit is
// the same for every key is skipped). Starting from index order, each pass is stable: ties stay by index, as
// key_less. The keys are the IEEE bits made order-preserving as unsigned integers (v + 0 maps -0 to +0, which
// compare equal).
template <typename T>
using KeyBits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;

template <typename T>
inline KeyBits<T> sortable_bits(T v) {
  using U = KeyBits<T>;
  v = v + T(0);
  U u;
  std::memcpy(&u, &v, sizeof(u));
  const U sign = U(1) << (sizeof(U) * 8 - 1);
  return (u & sign) ? ~u : (u | sign);
}

template <typename T>
struct RadixItem {
  KeyBits<T> key;
  int32_t i;
};

template <typename T>
void radix_sort_row(const T* x, T sgn, int64_t n, int64_t* perm, double* y) {
  using U = KeyBits<T>;
  constexpr int kBits = 11, kBuckets = 1 << kBits, kPasses = (int(sizeof(U)) * 8 + kBits - 1) / kBits;
  RadixItem<T>* a = thread_scratch<3, RadixItem<T>>(n);
  RadixItem<T>* b = thread_scratch<4, RadixItem<T>>(n);
  uint32_t* hist = thread_scratch<5, uint32_t>(kPasses * kBuckets);
  std::fill(hist, hist + kPasses * kBuckets, 0u);
  for (int64_t c = 0; c < n; ++c) {
    const U k = sortable_bits(sgn * x[c]);
    a[c] = {k, int32_t(c)};
    for (int p = 0; p < kPasses; ++p) ++hist[p * kBuckets + int((k >> (p * kBits)) & (kBuckets - 1))];
  }
  for (int p = 0; p < kPasses; ++p) {
    uint32_t* h = hist + p * kBuckets;
    const int shift = p * kBits;
    if (h[int((a[0].key >> shift) & (kBuckets - 1))] == uint32_t(n)) continue;
    uint32_t total = 0;
    for (int d = 0; d < kBuckets; ++d) {
      const uint32_t count = h[d];
      h[d] = total;
      total += count;
    }
    for (int64_t c = 0; c < n; ++c) b[h[int((a[c].key >> shift) & (kBuckets - 1))]++] = a[c];
    std::swap(a, b);
  }
  for (int64_t j = 0; j < n; ++j) {
    perm[j] = a[j].i;
    y[j] = double(sgn * x[a[j].i]);
  }
}

// Bottom-up merge sort of distinct 64-bit keys whose merges are free of data-dependent branches (a conditional
// move per element): std::sort's comparisons mispredict about half the time on random rows, which costs more than
// its instructions on short rows. Runs of 4 are sorted first by a branch-free network. Returns the buffer that
// holds the result (a or tmp).
inline uint64_t* merge_sort(uint64_t* a, uint64_t* tmp, int64_t n) {
  auto cswap = [](uint64_t& u, uint64_t& v) {
    const uint64_t lo = u < v ? u : v, hi = u < v ? v : u;
    u = lo;
    v = hi;
  };
  int64_t c = 0;
  for (; c + 4 <= n; c += 4) {
    cswap(a[c], a[c + 1]);
    cswap(a[c + 2], a[c + 3]);
    cswap(a[c], a[c + 2]);
    cswap(a[c + 1], a[c + 3]);
    cswap(a[c + 1], a[c + 2]);
  }
  std::sort(a + c, a + n);
  for (int64_t w = 4; w < n; w *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * w) {
      const int64_t mid = std::min(lo + w, n), hi = std::min(lo + 2 * w, n);
      int64_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) {
        const uint64_t u = a[i], v = a[j];
        const bool right = v < u;
        tmp[k++] = right ? v : u;
        j += right;
        i += !right;
      }
      while (i < mid) tmp[k++] = a[i++];
      while (j < hi) tmp[k++] = a[j++];
    }
    std::swap(a, tmp);
  }
  return a;
}

// A short NaN-free row by (sortable bits, index): float keys and the index packed in one 64-bit integer, merge
// sorted; double keys with std::sort.
template <typename T>
void small_sort_row(const T* x, T sgn, int64_t n, int64_t* perm, double* y) {
  if constexpr (sizeof(T) == 4) {
    uint64_t* keys = thread_scratch<0, uint64_t>(n);
    uint64_t* tmp = thread_scratch<6, uint64_t>(n);
    for (int64_t c = 0; c < n; ++c) keys[c] = (uint64_t(sortable_bits(sgn * x[c])) << 32) | uint64_t(c);
    const uint64_t* sorted = merge_sort(keys, tmp, n);
    for (int64_t j = 0; j < n; ++j) perm[j] = int64_t(sorted[j] & 0xFFFFFFFFu);
  } else {
    RadixItem<T>* keys = thread_scratch<0, RadixItem<T>>(n);
    for (int64_t c = 0; c < n; ++c) keys[c] = {sortable_bits(sgn * x[c]), int32_t(c)};
    std::sort(keys, keys + n, [](const RadixItem<T>& a, const RadixItem<T>& b) {
      return a.key < b.key || (a.key == b.key && a.i < b.i);
    });
    for (int64_t j = 0; j < n; ++j) perm[j] = keys[j].i;
  }
  for (int64_t j = 0; j < n; ++j) y[j] = double(sgn * x[perm[j]]);
}

// chunks = 0: the sequential PAV; else the chunked PAV of the GPU's long rows with `chunks` chunks (test entry).
template <typename T>
void forward_row(const FastSortParams& P, int64_t n, const T* x, T* out, int64_t* perm, int32_t* block,
                 int chunks = 0) {
  const T sgn = P.descending ? T(-1) : T(1);
  bool nan = false;
  for (int64_t c = 0; c < n; ++c) nan |= x[c] != x[c];
  double* y = thread_scratch<1, double>(n);
  if (nan) {
    SortKey<T>* keys = thread_scratch<0, SortKey<T>>(n);
    for (int64_t c = 0; c < n; ++c) keys[c] = {sgn * x[c], int32_t(c)};
    std::sort(keys, keys + n, key_less_nan_last<T>);
    for (int64_t j = 0; j < n; ++j) {
      perm[j] = keys[j].i;
      y[j] = double(keys[j].v);
    }
  } else if (n >= kRadixMin) {
    radix_sort_row(x, sgn, n, perm, y);
  } else {
    small_sort_row(x, sgn, n, perm, y);
  }
  if (chunks == 0)
    fastsort_forward_row(P, n, nan, y, perm, out, block, thread_scratch<2, double>(n));
  else
    fastsort_forward_row_chunked(P, n, nan, y, perm, out, block, thread_scratch<2, double>(n), chunks,
                                 thread_scratch<7, int64_t>(2 * chunks));
}

// The row of x (stride n) of length L <= n: the forward of its first L entries, then the pads.
template <typename T>
void forward_padded_row(const FastSortParams& P, int64_t n, int64_t L, const T* x, T* out, int64_t* perm,
                        int32_t* block, int chunks = 0) {
  forward_row(P, L, x, out, perm, block, chunks);
  for (int64_t j = L; j < n; ++j) {
    fastsort_write_pad(j, out, block);
    perm[j] = j;
  }
}

constexpr const char* kMalformed =
    "fastsort_backward: perm must hold indices in [0, L) and block the run starts of a partition (block[0] = 0, "
    "block[j] in {j, block[j - 1]}) over the first L = lengths[b] (or n) positions of each row";

// Every row length lies in [0, n] (lengths null: every row full). The work of the rows: their total length.
inline int64_t checked_total_length(int64_t B, int64_t n, const int64_t* lengths) {
  if (lengths == nullptr) return B * n;
  int64_t total = 0;
  for (int64_t b = 0; b < B; ++b) {
    RELAXOPS_CHECK(lengths[b] >= 0 && lengths[b] <= n, "fastsort: lengths must lie in [0, n]");
    total += lengths[b];
  }
  return total;
}

}  // namespace

template <typename T>
void fastsort_forward_cpu(const FastSortParams& P, int64_t B, int64_t n, const int64_t* lengths, const T* x, T* out,
                          int64_t* perm, int32_t* block) {
  fastsort_check_params(P, B, n);
  const int64_t work = checked_total_length(B, n, lengths);
  parallel_items(
      B,
      [&](int64_t b, int) {
        const int64_t o = b * n;
        forward_padded_row(P, n, fastsort_row_length(lengths, b, n), x + o, out + o, perm + o, block + o);
      },
      threads_for(work, kParallelWork));
}

template <typename T>
void fastsort_backward_cpu(const FastSortParams& P, int64_t B, int64_t n, const int64_t* lengths, const T* grad_out,
                           const T* out, const T* x, const int64_t* perm, const int32_t* block, T* grad_x) {
  fastsort_check_params(P, B, n);
  const int64_t work = checked_total_length(B, n, lengths);
  parallel_items(
      B,
      [&](int64_t b, int) {
        const int64_t o = b * n, L = fastsort_row_length(lengths, b, n);
        RELAXOPS_CHECK(fastsort_valid_row(L, perm + o, block + o), kMalformed);
        fastsort_backward_row(P, L, grad_out + o, out + o, x + o, perm + o, block + o, grad_x + o);
        std::fill(grad_x + o + L, grad_x + o + n, T(0));
      },
      threads_for(work, kParallelWork));
}

template <typename T>
void fastsort_forward_chunked_cpu(const FastSortParams& P, int64_t B, int64_t n, const int64_t* lengths, const T* x,
                                  T* out, int64_t* perm, int32_t* block, int chunks) {
  fastsort_check_params(P, B, n);
  checked_total_length(B, n, lengths);
  RELAXOPS_CHECK(chunks >= 1 && chunks <= 4096, "fastsort_forward_chunked: chunks must be in [1, 4096]");
  for (int64_t b = 0; b < B; ++b)
    forward_padded_row(P, n, fastsort_row_length(lengths, b, n), x + b * n, out + b * n, perm + b * n, block + b * n,
                       chunks);
}

template <typename T>
void fastsort_backward_chunked_cpu(const FastSortParams& P, int64_t B, int64_t n, const int64_t* lengths,
                                   const T* grad_out, const T* out, const T* x, const int64_t* perm,
                                   const int32_t* block, T* grad_x, int chunks) {
  fastsort_check_params(P, B, n);
  checked_total_length(B, n, lengths);
  RELAXOPS_CHECK(chunks >= 1 && chunks <= 4096, "fastsort_backward_chunked: chunks must be in [1, 4096]");
  FastSortSums* head = thread_scratch<8, FastSortSums>(chunks);
  FastSortSums* tail = thread_scratch<9, FastSortSums>(chunks);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t o = b * n, L = fastsort_row_length(lengths, b, n);
    std::fill(grad_x + o + L, grad_x + o + n, T(0));
    int flags = 0;
    for (int k = 0; k < chunks; ++k) flags |= fastsort_chunk_check(P, L, chunks, k, x + o, perm + o, block + o);
    RELAXOPS_CHECK(!(flags & 1), kMalformed);
    if (flags & 2) {
      for (int64_t c = 0; c < L; ++c) grad_x[o + c] = T(NAN);
      continue;
    }
    for (int k = 0; k < chunks; ++k)
      fastsort_chunk_sums(P, L, chunks, k, grad_out + o, out + o, x + o, perm + o, block + o, grad_x + o, head, tail);
    for (int k = 0; k < chunks; ++k) fastsort_chunk_totals(L, chunks, k, block + o, head, tail);
    for (int k = 0; k < chunks; ++k)
      fastsort_chunk_crossing_grads(P, L, chunks, k, grad_out + o, out + o, x + o, perm + o, block + o, grad_x + o,
                                    head, tail);
  }
}

#define RELAXOPS_INSTANTIATE_FASTSORT(T)                                                                               \
  template void fastsort_forward_cpu<T>(const FastSortParams&, int64_t, int64_t, const int64_t*, const T*, T*,         \
                                        int64_t*, int32_t*);                                                           \
  template void fastsort_backward_cpu<T>(const FastSortParams&, int64_t, int64_t, const int64_t*, const T*, const T*,  \
                                         const T*, const int64_t*, const int32_t*, T*);                                \
  template void fastsort_forward_chunked_cpu<T>(const FastSortParams&, int64_t, int64_t, const int64_t*, const T*, T*, \
                                                int64_t*, int32_t*, int);                                              \
  template void fastsort_backward_chunked_cpu<T>(const FastSortParams&, int64_t, int64_t, const int64_t*, const T*,    \
                                                 const T*, const T*, const int64_t*, const int32_t*, T*, int);

RELAXOPS_INSTANTIATE_FASTSORT(float)
RELAXOPS_INSTANTIATE_FASTSORT(double)

}  // namespace relaxops
