// Training kernels of the lookup-table layer on the CPU (math and layout in lut.h). One parallel loop per call over
// tasks (row, sample block): rows are neurons (forward, table gradient alone) or inputs (input gradient), a sample
// block is kBlock consecutive samples. Each output element (or per-block partial sum of the table gradient) is
// written by one task in a fixed order, so results do not depend on the thread count.
//
// The backward with the input gradient is one pass over the inputs: input c's CSR list holds the entry k j + 0 of
// every neuron j whose first input is c, and at that entry the task has the neuron's inputs and d loss / d z in
// hand, which is all the table gradient of j needs.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "../common/cpu_parallel.h"
#include "../common/cpu_scratch.h"
#include "lut.h"

namespace relaxops {
namespace {

constexpr int64_t kBlock = 256;             // samples per task
constexpr int64_t kParallelWork = 1 << 12;  // below this many (row, sample) pairs a call runs on one thread

int64_t num_blocks(int64_t B) { return (B + kBlock - 1) / kBlock; }

// The K inputs of neuron j at sample s.
template <typename T, int K>
inline void gather_inputs(int64_t B, int64_t n_out, int64_t j, int64_t s, const T* xt, const int64_t* idx, T* x) {
  for (int i = 0; i < K; ++i) x[i] = xt[idx[i * n_out + j] * B + s];
}

// z = u + noise_scale L (noise when seed >= 0).
template <typename T, int K>
inline T pre_activation(const T* q, const T* x, int64_t seed, double noise_scale, int64_t flat) {
  T z = lut_interp<T, K>(q, x);
  if (seed >= 0) z += T(noise_scale) * logic_logistic(logic_noise_bits(logic_hash32(uint32_t(seed)), flat), T(0));
  return z;
}

template <typename T, int K>
void forward_task(int64_t B, int64_t n_out, int64_t j, int64_t s0, int64_t s1, const T* xt, const int64_t* idx,
                  const T* table, int act, int64_t seed, double noise_scale, T* yt, T* st) {
  const T* q = table + (int64_t(1) << K) * j;
  T x[K];
  for (int64_t s = s0; s < s1; ++s) {
    gather_inputs<T, K>(B, n_out, j, s, xt, idx, x);
    const T z = pre_activation<T, K>(q, x, seed, noise_scale, s * n_out + j);
    yt[j * B + s] = lut_act(act, z);
    if (act == 2) st[j * B + s] = lut_sigmoid(z);
  }
}

// d loss / d z from d loss / d y = g and the saved sigmoid s (lut.h).
template <typename T>
inline T grad_z(int act, T g, T s) {
  return act == 0 ? g : g * s * (T(1) - s);
}

// The table gradient of neuron j over samples [s0, s1), written to out [M].
template <typename T, int K>
void table_task(int64_t B, int64_t n_out, int64_t j, int64_t s0, int64_t s1, const T* xt, const int64_t* idx, int act,
                const T* grad_yt, const T* sg, T* out) {
  constexpr int M = 1 << K;
  T acc[M] = {}, w[M], x[K];
  for (int64_t s = s0; s < s1; ++s) {
    gather_inputs<T, K>(B, n_out, j, s, xt, idx, x);
    const T gz = grad_z(act, grad_yt[j * B + s], act == 0 ? T(0) : sg[j * B + s]);
    lut_basis<T, K>(x, w);
    for (int t = 0; t < M; ++t) acc[t] += gz * w[t];
  }
  std::memcpy(out, acc, sizeof(acc));
}

// Input gradient of input c over samples [s0, s1) by the CSR gather; with kTable also the table gradient of every
// neuron met in slot 0, written to table_out[M (j nb + blk)].
template <typename T, int K, bool kTable>
void gather_task(int64_t B, int64_t n_out, int64_t c, int64_t s0, int64_t s1, int64_t nb, int64_t blk, const T* xt,
                 const int64_t* idx, const T* table, int act, const T* grad_yt, const T* sg, const int64_t* csr_start,
                 const int64_t* csr_entry, T* grad_xt, T* table_out) {
  constexpr int M = 1 << K;
  T* gx = grad_xt + c * B;
  std::fill(gx + s0, gx + s1, T(0));
  T x[K], w[M];
  for (int64_t e = csr_start[c]; e < csr_start[c + 1]; ++e) {
    const int64_t j = csr_entry[e] / K;
    const int i = int(csr_entry[e] % K);
    const T* q = table + M * j;
    const bool with_table = kTable && i == 0;
    T acc[M] = {};
    for (int64_t s = s0; s < s1; ++s) {
      gather_inputs<T, K>(B, n_out, j, s, xt, idx, x);
      const T gz = grad_z(act, grad_yt[j * B + s], act == 0 ? T(0) : sg[j * B + s]);
      gx[s] += gz * lut_partial<T, K>(q, x, i);
      if (with_table) {
        lut_basis<T, K>(x, w);
        for (int t = 0; t < M; ++t) acc[t] += gz * w[t];
      }
    }
    if (with_table) std::memcpy(table_out + M * (j * nb + blk), acc, sizeof(acc));
  }
}

inline bool indices_in_range(int64_t n_in, int64_t count, const int64_t* idx) {
  bool ok = true;
  for (int64_t e = 0; e < count; ++e) ok &= uint64_t(idx[e]) < uint64_t(n_in);
  return ok;
}

// csr is exactly the inverse index of idx (lut.h): start runs from 0 to k n_out without decreasing, and input c's
// entries are the e = k j + i with idx[i, j] == c, ascending (so the entries are a permutation of [0, k n_out)).
inline bool is_inverse_index(int64_t n_in, int64_t n_out, int k, const int64_t* idx, const int64_t* csr_start,
                             const int64_t* csr_entry) {
  const int64_t n = k * n_out;
  if (csr_start[0] != 0 || csr_start[n_in] != n) return false;
  for (int64_t c = 0; c < n_in; ++c) {
    if (csr_start[c + 1] < csr_start[c] || csr_start[c + 1] > n) return false;
    int64_t prev = -1;
    for (int64_t e = csr_start[c]; e < csr_start[c + 1]; ++e) {
      const int64_t v = csr_entry[e];
      if (v <= prev || v >= n || idx[(v % k) * n_out + v / k] != c) return false;
      prev = v;
    }
  }
  return true;
}

template <typename T, int K>
void forward_k(int64_t B, int64_t n_out, const T* xt, const int64_t* idx, const T* table, int act, int64_t seed,
               double noise_scale, T* yt, T* st) {
  const int64_t nb = num_blocks(B);
  parallel_items(
      n_out * nb,
      [&](int64_t t, int) {
        const int64_t j = t / nb, s0 = t % nb * kBlock;
        forward_task<T, K>(B, n_out, j, s0, std::min(B, s0 + kBlock), xt, idx, table, act, seed, noise_scale, yt, st);
      },
      threads_for(n_out * B, kParallelWork));
}

template <typename T, int K>
void backward_k(int64_t B, int64_t n_in, int64_t n_out, const T* xt, const int64_t* idx, const T* table, int act,
                const T* grad_yt, const T* sg, const int64_t* csr_start, const int64_t* csr_entry, T* grad_xt,
                T* grad_table) {
  constexpr int M = 1 << K;
  const int64_t nb = num_blocks(B);
  // Per-block table sums [n_out, nb, M], folded in block order below; one block: the output itself.
  T* partial = grad_table;
  if (grad_table != nullptr && nb > 1) partial = thread_scratch<0, T>(M * n_out * nb);
  if (grad_xt != nullptr) {
    parallel_items(
        n_in * nb,
        [&](int64_t t, int) {
          const int64_t c = t / nb, blk = t % nb, s0 = blk * kBlock, s1 = std::min(B, s0 + kBlock);
          if (grad_table != nullptr)
            gather_task<T, K, true>(B, n_out, c, s0, s1, nb, blk, xt, idx, table, act, grad_yt, sg, csr_start,
                                    csr_entry, grad_xt, partial);
          else
            gather_task<T, K, false>(B, n_out, c, s0, s1, nb, blk, xt, idx, table, act, grad_yt, sg, csr_start,
                                     csr_entry, grad_xt, nullptr);
        },
        threads_for(K * n_out * B, kParallelWork));
  } else {
    parallel_items(
        n_out * nb,
        [&](int64_t t, int) {
          const int64_t j = t / nb, blk = t % nb, s0 = blk * kBlock;
          table_task<T, K>(B, n_out, j, s0, std::min(B, s0 + kBlock), xt, idx, act, grad_yt, sg,
                           partial + M * (j * nb + blk));
        },
        threads_for(n_out * B, kParallelWork));
  }
  if (grad_table != nullptr && nb > 1) {
    for (int64_t j = 0; j < n_out; ++j)
      for (int t = 0; t < M; ++t) {
        T s = 0;
        for (int64_t blk = 0; blk < nb; ++blk) s += partial[M * (j * nb + blk) + t];
        grad_table[M * j + t] = s;
      }
  }
}

// f(std::integral_constant<int, k>) for k in [2, 6].
template <typename F>
void by_k(int k, F&& f) {
  switch (k) {
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 5: return f(std::integral_constant<int, 5>{});
    default: return f(std::integral_constant<int, 6>{});
  }
}

}  // namespace

template <typename T>
void logic_lut_forward_cpu(int64_t B, int64_t n_in, int64_t n_out, int k, const T* xt, const int64_t* idx,
                           const T* table, int act, int64_t seed, double noise_scale, T* yt, T* st) {
  RELAXOPS_CHECK(B >= 0 && n_out >= 0 && n_in >= (n_out > 0 ? 1 : 0) && k >= 2 && k <= kLutMaxK,
                 "logic_lut_forward: invalid sizes");
  RELAXOPS_CHECK(act >= 0 && act <= 2, "logic_lut_forward: act must be 0, 1 or 2");
  RELAXOPS_CHECK(indices_in_range(n_in, k * n_out, idx), "logic_lut_forward: indices must lie in [0, n_in)");
  if (B == 0 || n_out == 0) return;
  by_k(k,
       [&](auto kc) { forward_k<T, decltype(kc)::value>(B, n_out, xt, idx, table, act, seed, noise_scale, yt, st); });
}

template <typename T>
void logic_lut_backward_cpu(int64_t B, int64_t n_in, int64_t n_out, int k, const T* xt, const int64_t* idx,
                            const T* table, int act, const T* grad_yt, const T* s, const int64_t* csr_start,
                            const int64_t* csr_entry, T* grad_xt, T* grad_table) {
  RELAXOPS_CHECK(B >= 0 && n_out >= 0 && n_in >= (n_out > 0 ? 1 : 0) && k >= 2 && k <= kLutMaxK,
                 "logic_lut_backward: invalid sizes");
  RELAXOPS_CHECK(act >= 0 && act <= 2, "logic_lut_backward: act must be 0, 1 or 2");
  const int64_t M = int64_t(1) << k;
  if (B == 0 || n_out == 0) {  // empty batch sums; inputs read by no neuron
    if (grad_table != nullptr) std::fill(grad_table, grad_table + M * n_out, T(0));
    if (grad_xt != nullptr) std::fill(grad_xt, grad_xt + n_in * B, T(0));
    return;
  }
  if (grad_xt == nullptr && grad_table == nullptr) return;
  RELAXOPS_CHECK(indices_in_range(n_in, k * n_out, idx), "logic_lut_backward: indices must lie in [0, n_in)");
  if (grad_xt != nullptr)
    RELAXOPS_CHECK(is_inverse_index(n_in, n_out, k, idx, csr_start, csr_entry),
                   "logic_lut_backward: (csr_start, csr_entry) is not the inverse index of the indices");
  by_k(k, [&](auto kc) {
    backward_k<T, decltype(kc)::value>(B, n_in, n_out, xt, idx, table, act, grad_yt, s, csr_start, csr_entry, grad_xt,
                                       grad_table);
  });
}

template void logic_lut_forward_cpu<float>(int64_t, int64_t, int64_t, int, const float*, const int64_t*, const float*,
                                           int, int64_t, double, float*, float*);
template void logic_lut_forward_cpu<double>(int64_t, int64_t, int64_t, int, const double*, const int64_t*,
                                            const double*, int, int64_t, double, double*, double*);
template void logic_lut_backward_cpu<float>(int64_t, int64_t, int64_t, int, const float*, const int64_t*, const float*,
                                            int, const float*, const float*, const int64_t*, const int64_t*, float*,
                                            float*);
template void logic_lut_backward_cpu<double>(int64_t, int64_t, int64_t, int, const double*, const int64_t*,
                                             const double*, int, const double*, const double*, const int64_t*,
                                             const int64_t*, double*, double*);

}  // namespace relaxops
