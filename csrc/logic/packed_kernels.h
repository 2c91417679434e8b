// Packed inference engine, generic in the SIMD word vector V (a GCC vector of uint64 lanes). Included by
// packed_cpu.cpp (portable), packed_cpu_avx2.cpp and packed_cpu_avx512.cpp, each compiled with its own flags and
// RELAXOPS_PACKED_NS naming its namespace; packed_cpu.cpp dispatches at run time.
//
// Work is split into blocks of BW = NV * lanes consecutive words (64 * BW samples). A block is copied (or packed
// from bytes) into a buffer [widths[0]][BW], then every layer runs on per-thread ping-pong buffers
// [max width][BW] that stay in L2, and the block's results are written out (last-layer words) or counted
// (GroupSum). In a layer, the plan's entries of one op form a run: 16 branch-free loops of
//   out[dst[i]][:] = OP(in[src_a[i]][:], in[src_b[i]][:]).
// Group counts: each class's g words are summed per bit position by a carry-save (Harley-Seal) adder into
// bit planes P[0..nplanes), count = sum_d bit(P[d]) 2^d, then unpacked per sample.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "../common/cpu_scratch.h"
#include "../common/cpu_threads.h"
#include "packed.h"

#if !defined(RELAXOPS_PACKED_NS) || !defined(RELAXOPS_PACKED_LANES)
#error "define RELAXOPS_PACKED_NS and RELAXOPS_PACKED_LANES before including packed_kernels.h"
#endif

namespace relaxops {
namespace RELAXOPS_PACKED_NS {

template <int kLanes>
struct Vec {
  typedef uint64_t type __attribute__((vector_size(8 * kLanes)));
};
template <>
struct Vec<1> {
  typedef uint64_t type;
};

template <int kLanes>
using V = typename Vec<kLanes>::type;

template <int kLanes>
inline V<kLanes> load(const uint64_t* p) {
  V<kLanes> v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
template <int kLanes>
inline void store(uint64_t* p, V<kLanes> v) {
  std::memcpy(p, &v, sizeof(v));
}

// Gate kOp on vectors (the table of packed.h's logic_gate_word with constants built from a, so it works for
// vector types too).
template <int kOp, typename T>
inline T apply_gate(T a, T b) {
  if constexpr (kOp == 0) return a ^ a;
  else if constexpr (kOp == 1) return a & b;
  else if constexpr (kOp == 2) return a & ~b;
  else if constexpr (kOp == 3) return a;
  else if constexpr (kOp == 4) return ~a & b;
  else if constexpr (kOp == 5) return b;
  else if constexpr (kOp == 6) return a ^ b;
  else if constexpr (kOp == 7) return a | b;
  else if constexpr (kOp == 8) return ~(a | b);
  else if constexpr (kOp == 9) return ~(a ^ b);
  else if constexpr (kOp == 10) return ~b;
  else if constexpr (kOp == 11) return a | ~b;
  else if constexpr (kOp == 12) return ~a;
  else if constexpr (kOp == 13) return ~a | b;
  else if constexpr (kOp == 14) return ~(a & b);
  else return ~(a ^ a);
}

// One run of entries with the same op: NV vectors of kLanes words per entry. kSeq: dst[i] == i (the layer writes
// in plan order), so the destination needs no index load.
template <int kOp, int kLanes, int NV, bool kSeq>
inline void gate_run(const int32_t* src_a, const int32_t* src_b, const int32_t* dst, int64_t begin, int64_t end,
                     const uint64_t* in, uint64_t* out) {
  constexpr int64_t BW = int64_t(NV) * kLanes;
  for (int64_t i = begin; i < end; ++i) {
    const uint64_t* pa = in + int64_t(src_a[i]) * BW;
    const uint64_t* pb = in + int64_t(src_b[i]) * BW;
    uint64_t* po = out + (kSeq ? i : int64_t(dst[i])) * BW;
    for (int v = 0; v < NV; ++v) {
      const V<kLanes> a = load<kLanes>(pa + v * kLanes), b = load<kLanes>(pb + v * kLanes);
      store<kLanes>(po + v * kLanes, apply_gate<kOp>(a, b));
    }
  }
}

template <int kLanes, int NV, bool kSeq, int... kOps>
inline void layer_runs(const int64_t* op_start, const int32_t* src_a, const int32_t* src_b, const int32_t* dst,
                       const uint64_t* in, uint64_t* out, std::integer_sequence<int, kOps...>) {
  (gate_run<kOps, kLanes, NV, kSeq>(src_a, src_b, dst, op_start[kOps], op_start[kOps + 1], in, out), ...);
}

typedef uint32_t U32x8 __attribute__((vector_size(32)));

// lane[byte][j] = bit j of byte. Built on first use, so only the SIMD level that runs executes its constructor.
struct SpreadTable {
  U32x8 lane[256];
  SpreadTable() {
    for (int b = 0; b < 256; ++b)
      for (int j = 0; j < 8; ++j) lane[b][j] = uint32_t((b >> j) & 1);
  }
};

// Counts of the rows [row0, row0 + g) of buf [rows][BW], per sample of words [w0, w0 + nw) (nw <= BW), into
// counts[s * k + c] for s < B.
template <int kLanes, int NV>
inline void count_class(const uint64_t* buf, int64_t row0, int64_t g, int64_t w0, int64_t nw, int64_t B, int64_t k,
                        int64_t c, int32_t* counts) {
  constexpr int64_t BW = int64_t(NV) * kLanes;
  constexpr int kMaxPlanes = 40;
  int nplanes = 3;
  while ((int64_t(1) << nplanes) <= g) ++nplanes;
  for (int v = 0; v < NV; ++v) {
    V<kLanes> P[kMaxPlanes];
    for (int d = 0; d < nplanes; ++d) P[d] = V<kLanes>{} ^ V<kLanes>{};
    auto row = [&](int64_t i) { return load<kLanes>(buf + (row0 + i) * BW + v * kLanes); };
    auto csa = [](V<kLanes>& hi, V<kLanes>& lo, V<kLanes> a, V<kLanes> b, V<kLanes> c) {
      const V<kLanes> u = a ^ b;
      hi = (a & b) | (u & c);
      lo = u ^ c;
    };
    auto ripple = [&](V<kLanes> carry, int from) {  // adds carry * 2^from
      for (int d = from; d < nplanes; ++d) {
        const V<kLanes> t = P[d] & carry;
        P[d] ^= carry;
        carry = t;
      }
    };
    int64_t i = 0;
    for (; i + 8 <= g; i += 8) {  // Harley-Seal: P[0..2] are the ones, twos and fours of the adder
      V<kLanes> twos_a, twos_b, fours_a, fours_b, eights;
      csa(twos_a, P[0], P[0], row(i), row(i + 1));
      csa(twos_b, P[0], P[0], row(i + 2), row(i + 3));
      csa(fours_a, P[1], P[1], twos_a, twos_b);
      csa(twos_a, P[0], P[0], row(i + 4), row(i + 5));
      csa(twos_b, P[0], P[0], row(i + 6), row(i + 7));
      csa(fours_b, P[1], P[1], twos_a, twos_b);
      csa(eights, P[2], P[2], fours_a, fours_b);
      ripple(eights, 3);
    }
    for (; i < g; ++i) ripple(row(i), 0);
    uint64_t planes[kMaxPlanes][kLanes];
    for (int d = 0; d < nplanes; ++d) store<kLanes>(planes[d], P[d]);
    for (int l = 0; l < kLanes; ++l) {
      const int64_t w = w0 + v * kLanes + l;
      if (w >= w0 + nw) break;
      // count of sample 8 q + j = sum_d 2^d bit(8 q + j, P[d]): 8 samples at a time, spreading a byte of each
      // plane into 8 uint32 lanes through a table.
      static const SpreadTable spread;
      U32x8 acc[8];
      for (int q = 0; q < 8; ++q) acc[q] = U32x8{} ^ U32x8{};
      for (int d = 0; d < nplanes; ++d)
        for (int q = 0; q < 8; ++q) acc[q] += spread.lane[(planes[d][l] >> (8 * q)) & 0xFF] << d;
      const int64_t s_end = std::min<int64_t>(64, B - w * 64);
      for (int64_t bit = 0; bit < s_end; ++bit) counts[(w * 64 + bit) * k + c] = int32_t(acc[bit >> 3][bit & 7]);
    }
  }
}

// 64 x 64 bit transpose in place: bit c of a[r] <-> bit r of a[c] (halves of rows swapped block by block).
inline void transpose64(uint64_t a[64]) {
  uint64_t m = 0x00000000FFFFFFFFull;
  for (int j = 32; j != 0; j >>= 1, m ^= m << j) {
    for (int r = 0; r < 64; r = ((r | j) + 1) & ~j) {
      const uint64_t t = ((a[r] >> j) ^ a[r | j]) & m;
      a[r] ^= t << j;
      a[r | j] ^= t;
    }
  }
}

// Bits of 8 bytes holding 0 or 1: bit f = byte f.
inline uint64_t byte_bits8(const uint8_t* p) {
  uint64_t r;
  std::memcpy(&r, p, 8);
  return (r * 0x0102040810204080ull) >> 56;
}

// Bits of 64 bytes holding 0 or 1 (bit f = byte f), n <= 64 of them valid.
inline uint64_t byte_bits64(const uint8_t* p, int64_t n) {
  uint64_t bits = 0;
  if (n == 64) {
#if defined(__AVX2__)
    for (int h = 0; h < 2; ++h) {  // byte values 0/1: shifting 16-bit lanes by 7 moves each into its sign bit
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * h));
      bits |= uint64_t(uint32_t(_mm256_movemask_epi8(_mm256_slli_epi16(v, 7)))) << (32 * h);
    }
#else
    for (int q = 0; q < 8; ++q) bits |= byte_bits8(p + 8 * q) << (8 * q);
#endif
    return bits;
  }
  for (int64_t f = 0; f < n; ++f) bits |= uint64_t(p[f] & 1) << f;
  return bits;
}

// Packs samples [64 w0, 64 (w0 + nw)) of the uint8 0/1 matrix x [B, D] into buf [D][BW] (zeros past B): per 64
// samples and 64 features, one row of feature bits per sample, then a bit transpose.
template <int kLanes, int NV>
inline void pack_block(const uint8_t* x, int64_t B, int64_t D, int64_t w0, int64_t nw, uint64_t* buf) {
  constexpr int64_t BW = int64_t(NV) * kLanes;
  std::memset(buf, 0, sizeof(uint64_t) * D * BW);
  uint64_t tile[64];
  for (int64_t wi = 0; wi < nw; ++wi) {
    const int64_t s0 = (w0 + wi) * 64;
    const int64_t ns = std::min<int64_t>(64, B - s0);
    for (int64_t d0 = 0; d0 < D; d0 += 64) {
      const int64_t nf = std::min<int64_t>(64, D - d0);
      for (int64_t j = 0; j < 64; ++j) tile[j] = j < ns ? byte_bits64(x + (s0 + j) * D + d0, nf) : 0;
      transpose64(tile);
      for (int64_t f = 0; f < nf; ++f) buf[(d0 + f) * BW + wi] = tile[f];
    }
  }
}

// Per-thread buffers of the engine, on transparent huge pages where the OS allows: the gates read random rows of
// ~0.5 MiB buffers, which on 4 KiB pages misses the first-level TLB on most loads.
template <int kSlot>
uint64_t* huge_scratch(int64_t words) {
  struct Buffer {
    void* p = nullptr;
    size_t bytes = 0;
    ~Buffer() { std::free(p); }
  };
  thread_local Buffer buf;
  const size_t bytes = size_t(std::max<int64_t>(words, 1)) * sizeof(uint64_t);
  if (buf.bytes < bytes) {
    std::free(buf.p);
    constexpr size_t kHuge = size_t(2) << 20;
    const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
    buf.p = std::aligned_alloc(kHuge, rounded);
    RELAXOPS_CHECK(buf.p != nullptr, "packed inference: out of memory for the layer buffers");
#ifdef MADV_HUGEPAGE
    madvise(buf.p, rounded, MADV_HUGEPAGE);
#endif
    buf.bytes = rounded;
  }
  return static_cast<uint64_t*>(buf.p);
}

// The engine: blocks of BW words over the batch, in parallel. Input: in_words [widths[0], W] or in_bool
// [B, widths[0]]. Output: out_words [widths[L], W] (if non-null) and/or counts [B, k] (if non-null).
template <int kLanes, int NV>
void run_blocks(const PackedPlan& plan, int64_t B, const uint64_t* in_words, const uint8_t* in_bool,
                uint64_t* out_words, int64_t k, int32_t* counts, int num_threads) {
  constexpr int64_t BW = int64_t(NV) * kLanes;
  const int64_t W = packed_words(B), L = plan.num_layers, D0 = plan.widths[0], DL = plan.widths[L];
  int64_t max_width = 0;
  for (int64_t l = 1; l <= L; ++l) max_width = std::max(max_width, plan.widths[l]);
  std::vector<int64_t> offset(L + 1, 0);
  std::vector<char> sequential(L, 1);
  for (int64_t l = 0; l < L; ++l) {
    offset[l + 1] = offset[l] + plan.widths[l + 1];
    for (int64_t i = 0; i < plan.widths[l + 1] && sequential[l]; ++i) sequential[l] = plan.dst[offset[l] + i] == i;
  }
  const int64_t blocks = (W + BW - 1) / BW;
  const int threads = cpu_threads(num_threads);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t w0 = blk * BW, nw = std::min(BW, W - w0);
    uint64_t* input = thread_scratch<0, uint64_t>(D0 * BW);
    uint64_t* ping = huge_scratch<0>(2 * max_width * BW);  // ping-pong halves of one huge-page buffer
    uint64_t* pong = ping + max_width * BW;
    if (in_bool != nullptr) {
      pack_block<kLanes, NV>(in_bool, B, D0, w0, nw, input);
    } else {
      for (int64_t d = 0; d < D0; ++d) {
        std::memcpy(input + d * BW, in_words + d * W + w0, sizeof(uint64_t) * nw);
        std::memset(input + d * BW + nw, 0, sizeof(uint64_t) * (BW - nw));
      }
    }
    const uint64_t* cur = input;
    for (int64_t l = 0; l < L; ++l) {
      uint64_t* next = (l % 2 == 0) ? ping : pong;
      const int64_t o = offset[l];
      if (sequential[l])
        layer_runs<kLanes, NV, true>(plan.op_start + 17 * l, plan.src_a + o, plan.src_b + o, plan.dst + o, cur, next,
                                     std::make_integer_sequence<int, 16>{});
      else
        layer_runs<kLanes, NV, false>(plan.op_start + 17 * l, plan.src_a + o, plan.src_b + o, plan.dst + o, cur,
                                      next, std::make_integer_sequence<int, 16>{});
      cur = next;
    }
    if (out_words != nullptr)
      for (int64_t d = 0; d < DL; ++d) std::memcpy(out_words + d * W + w0, cur + d * BW, sizeof(uint64_t) * nw);
    if (counts != nullptr)
      for (int64_t c = 0; c < k; ++c) count_class<kLanes, NV>(cur, c * (DL / k), DL / k, w0, nw, B, k, c, counts);
  }
}

// Group count of words [D, W] (no layers): blocks copied into a [D][BW] buffer, then counted.
template <int kLanes, int NV>
void group_count_blocks(const uint64_t* words, int64_t B, int64_t D, int64_t k, int32_t* counts, int num_threads) {
  constexpr int64_t BW = int64_t(NV) * kLanes;
  const int64_t W = packed_words(B), blocks = (W + BW - 1) / BW;
  const int threads = cpu_threads(num_threads);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t w0 = blk * BW, nw = std::min(BW, W - w0);
    uint64_t* buf = thread_scratch<0, uint64_t>(D * BW);
    for (int64_t d = 0; d < D; ++d) {
      std::memcpy(buf + d * BW, words + d * W + w0, sizeof(uint64_t) * nw);
      std::memset(buf + d * BW + nw, 0, sizeof(uint64_t) * (BW - nw));
    }
    for (int64_t c = 0; c < k; ++c) count_class<kLanes, NV>(buf, c * (D / k), D / k, w0, nw, B, k, c, counts);
  }
}

// Entry points of this SIMD level. NV: 2 vectors per entry (whole 64-byte lines for AVX2) when the two ping-pong
// buffers of the widest layer take at most 1 MiB, else 1.
template <int kLanes>
void forward(const PackedPlan& plan, int64_t B, const uint64_t* in_words, const uint8_t* in_bool,
             uint64_t* out_words, int64_t k, int32_t* counts, int num_threads) {
  int64_t max_width = 0;
  for (int64_t l = 0; l <= plan.num_layers; ++l) max_width = std::max(max_width, plan.widths[l]);
  if (2 * max_width * 2 * kLanes * 8 <= (1 << 20))
    run_blocks<kLanes, 2>(plan, B, in_words, in_bool, out_words, k, counts, num_threads);
  else
    run_blocks<kLanes, 1>(plan, B, in_words, in_bool, out_words, k, counts, num_threads);
}

template <int kLanes>
void group_count(const uint64_t* words, int64_t B, int64_t D, int64_t k, int32_t* counts, int num_threads) {
  group_count_blocks<kLanes, 1>(words, B, D, k, counts, num_threads);
}

// Non-template entry points of this translation unit (declared in packed_cpu.cpp).
void forward_entry(const PackedPlan& plan, int64_t B, const uint64_t* in_words, const uint8_t* in_bool,
                   uint64_t* out_words, int64_t k, int32_t* counts, int num_threads) {
  forward<RELAXOPS_PACKED_LANES>(plan, B, in_words, in_bool, out_words, k, counts, num_threads);
}
void group_count_entry(const uint64_t* words, int64_t B, int64_t D, int64_t k, int32_t* counts, int num_threads) {
  group_count<RELAXOPS_PACKED_LANES>(words, B, D, k, counts, num_threads);
}

}  // namespace RELAXOPS_PACKED_NS
}  // namespace relaxops
