// Packed inference engine, generic in the SIMD word vector V (a GCC vector of uint64 lanes). Included by
// packed_cpu.cpp (portable), packed_cpu_avx2.cpp and packed_cpu_avx512.cpp, each compiled with its own flags and
// RELAXOPS_PACKED_NS naming its namespace; packed_cpu.cpp dispatches at run time.
//
// Work is split into blocks of BW = NV * lanes consecutive words (64 * BW samples). A block is copied (or packed
// from bytes) into the first rows of a per-thread arena [num_slots][BW] that stays in L2, the program's steps run
// on the arena, and the block's outputs are written out or counted (GroupSum). In a step, the entries of one op
// form a run: 16 branch-free loops of
//   arena[dst[i]][:] = OP(arena[src_a[i]][:], arena[src_b[i]][:]).
// Group counts: each class's g output rows (negated where the output is a negated node; constant outputs are
// counted apart) are summed per bit position by a carry-save (Harley-Seal) adder into bit planes P[0..nplanes),
// count = sum_d bit(P[d]) 2^d, then unpacked per sample.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

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

// One run of entries with the same op: NV vectors of kLanes words per entry, in the arena.
template <int kOp, int kLanes, int NV>
inline void gate_run(const int32_t* src_a, const int32_t* src_b, const int32_t* dst, int64_t begin, int64_t end,
                     uint64_t* arena) {
  constexpr int64_t BW = int64_t(NV) * kLanes;
  for (int64_t i = begin; i < end; ++i) {
    const uint64_t* pa = arena + int64_t(src_a[i]) * BW;
    const uint64_t* pb = arena + int64_t(src_b[i]) * BW;
    uint64_t* po = arena + int64_t(dst[i]) * BW;
    for (int v = 0; v < NV; ++v) {
      const V<kLanes> a = load<kLanes>(pa + v * kLanes), b = load<kLanes>(pb + v * kLanes);
      store<kLanes>(po + v * kLanes, apply_gate<kOp>(a, b));
    }
  }
}

template <int kLanes, int NV, int... kOps>
inline void step_runs(const int64_t* op_start, const PackedProgram& prog, uint64_t* arena,
                      std::integer_sequence<int, kOps...>) {
  (gate_run<kOps, kLanes, NV>(prog.src_a, prog.src_b, prog.dst, op_start[kOps], op_start[kOps + 1], arena), ...);
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

// Counts of the g rows rows[i] of buf [.][BW] (negated where neg[i] = 1), plus `ones`, per sample of words
// [w0, w0 + nw) (nw <= BW), into counts[s * k + c] for s < B.
template <int kLanes, int NV>
inline void count_class(const uint64_t* buf, const int32_t* rows, const uint8_t* neg, int64_t g, int32_t ones,
                        int64_t w0, int64_t nw, int64_t B, int64_t k, int64_t c, int32_t* counts) {
  constexpr int64_t BW = int64_t(NV) * kLanes;
  constexpr int kMaxPlanes = 40;
  int nplanes = 3;
  while ((int64_t(1) << nplanes) <= g) ++nplanes;
  for (int v = 0; v < NV; ++v) {
    V<kLanes> P[kMaxPlanes];
    for (int d = 0; d < nplanes; ++d) P[d] = V<kLanes>{} ^ V<kLanes>{};
    const V<kLanes> zero = V<kLanes>{} ^ V<kLanes>{};
    auto row = [&](int64_t i) { return load<kLanes>(buf + rows[i] * BW + v * kLanes) ^ (zero - uint64_t(neg[i])); };
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
      for (int q = 0; q < 8; ++q) acc[q] = (U32x8{} ^ U32x8{}) + uint32_t(ones);
      for (int d = 0; d < nplanes; ++d)
        for (int q = 0; q < 8; ++q) acc[q] += spread.lane[(planes[d][l] >> (8 * q)) & 0xFF] << d;
      const int64_t s_end = std::min<int64_t>(64, B - w * 64);
      for (int64_t bit = 0; bit < s_end; ++bit) counts[(w * 64 + bit) * k + c] = int32_t(acc[bit >> 3][bit & 7]);
    }
  }
}

typedef uint64_t U64x8 __attribute__((vector_size(64)));

// Packs a tile of 64 samples x 64 features of a uint8 0/1 matrix (row stride D; ns samples and nf features
// valid, the rest read as 0) into out[f] = bit j for sample j of feature f.
// 1. R[q] = OR_j x[8 q + j][:] << j over the 8 samples of group q: byte f of R[q] holds the bits of samples
//    8q..8q+7 of feature f (a byte is 0 or 1, so shifting its 64-bit lane by j < 8 stays inside the byte).
// 2. Per 64-bit lane m (features 8m..8m+7), the 8 x 8 byte matrix (R[q] byte i) is transposed by three rounds of
//    block swaps, after which lane m of R[i] is the word of feature 8 m + i.
inline void pack_tile(const uint8_t* x, int64_t D, int64_t ns, int64_t nf, uint64_t out[64]) {
  alignas(64) uint8_t pad[64][64];
  if (ns < 64 || nf < 64) {
    std::memset(pad, 0, sizeof(pad));
    for (int64_t j = 0; j < ns; ++j) std::memcpy(pad[j], x + j * D, nf);
    x = &pad[0][0];
    D = 64;
  }
  U64x8 R[8];
  for (int q = 0; q < 8; ++q) {
    R[q] = U64x8{} ^ U64x8{};
    for (int j = 0; j < 8; ++j) {
      U64x8 row;
      std::memcpy(&row, x + (8 * q + j) * D, sizeof(row));
      R[q] |= row << j;
    }
  }
  constexpr uint64_t kMask[3] = {0x00000000FFFFFFFFull, 0x0000FFFF0000FFFFull, 0x00FF00FF00FF00FFull};
  for (int r = 0, j = 4; r < 3; ++r, j >>= 1) {  // swap the off-diagonal (j x j)-byte blocks
    for (int q = 0; q < 8; ++q) {
      if (q & j) continue;
      const U64x8 t = ((R[q] >> (8 * j)) ^ R[q + j]) & kMask[r];
      R[q] ^= t << (8 * j);
      R[q + j] ^= t;
    }
  }
  for (int i = 0; i < 8; ++i)
    for (int m = 0; m < 8; ++m) out[8 * m + i] = R[i][m];
}

// Packs samples [64 w0, 64 (w0 + nw)) of the uint8 0/1 matrix x [B, D] into buf [D][BW] (zeros past B).
template <int kLanes, int NV>
inline void pack_block(const uint8_t* x, int64_t B, int64_t D, int64_t w0, int64_t nw, uint64_t* buf) {
  constexpr int64_t BW = int64_t(NV) * kLanes;
  if (nw < BW) std::memset(buf, 0, sizeof(uint64_t) * D * BW);
  uint64_t tile[64];
  for (int64_t wi = 0; wi < nw; ++wi) {
    const int64_t s0 = (w0 + wi) * 64;
    const int64_t ns = std::min<int64_t>(64, B - s0);
    for (int64_t d0 = 0; d0 < D; d0 += 64) {
      const int64_t nf = std::min<int64_t>(64, D - d0);
      pack_tile(x + s0 * D + d0, D, ns, nf, tile);
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

// The engine: blocks of BW words over the batch, in parallel. Input: in_words [num_inputs, W] or in_bool
// [B, num_inputs]. Output: out_words [num_outputs, W] (if non-null) and/or counts [B, k] (if non-null).
template <int kLanes, int NV>
void run_blocks(const PackedProgram& prog, int64_t B, const uint64_t* in_words, const uint8_t* in_bool,
                uint64_t* out_words, int64_t k, int32_t* counts, int num_threads) {
  constexpr int64_t BW = int64_t(NV) * kLanes;
  const int64_t W = packed_words(B), D0 = prog.num_inputs, DL = prog.num_outputs;
  // Per class (outputs [c g, (c + 1) g)): the rows to count, whether negated, and the constant-one outputs.
  std::vector<int32_t> rows, ones(counts != nullptr ? k : 0);
  std::vector<uint8_t> neg;
  std::vector<int64_t> class_start(1, 0);
  for (int64_t c = 0; c < int64_t(ones.size()); ++c) {
    for (int64_t d = c * (DL / k); d < (c + 1) * (DL / k); ++d) {
      if (prog.out_kind[d] < 2) {
        rows.push_back(prog.out_slot[d]);
        neg.push_back(prog.out_kind[d]);
      }
      ones[c] += prog.out_kind[d] == 3;
    }
    class_start.push_back(int64_t(rows.size()));
  }
  const int64_t blocks = (W + BW - 1) / BW;
  const int threads = cpu_threads(num_threads);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t w0 = blk * BW, nw = std::min(BW, W - w0);
    uint64_t* arena = huge_scratch<0>(prog.num_slots * BW);
    if (in_bool != nullptr) {
      pack_block<kLanes, NV>(in_bool, B, D0, w0, nw, arena);
    } else {
      for (int64_t d = 0; d < D0; ++d) {
        std::memcpy(arena + d * BW, in_words + d * W + w0, sizeof(uint64_t) * nw);
        std::memset(arena + d * BW + nw, 0, sizeof(uint64_t) * (BW - nw));
      }
    }
    for (int64_t s = 0; s < prog.num_steps; ++s)
      step_runs<kLanes, NV>(prog.op_start + 16 * s, prog, arena, std::make_integer_sequence<int, 16>{});
    if (out_words != nullptr) {
      for (int64_t d = 0; d < DL; ++d) {
        const uint64_t* src = arena + int64_t(prog.out_slot[d]) * BW;
        const uint8_t kind = prog.out_kind[d];
        for (int64_t w = 0; w < nw; ++w)
          out_words[d * W + w0 + w] = kind >= 2 ? uint64_t(0) - (kind & 1) : src[w] ^ (uint64_t(0) - kind);
      }
    }
    if (counts != nullptr)
      for (int64_t c = 0; c < k; ++c)
        count_class<kLanes, NV>(arena, rows.data() + class_start[c], neg.data() + class_start[c],
                                class_start[c + 1] - class_start[c], ones[c], w0, nw, B, k, c, counts);
  }
}

// Group count of words [D, W] (no gates): blocks copied into a [D][BW] buffer, then counted.
template <int kLanes, int NV>
void group_count_blocks(const uint64_t* words, int64_t B, int64_t D, int64_t k, int32_t* counts, int num_threads) {
  constexpr int64_t BW = int64_t(NV) * kLanes;
  const int64_t W = packed_words(B), blocks = (W + BW - 1) / BW, g = D / k;
  std::vector<int32_t> rows(D);
  for (int64_t d = 0; d < D; ++d) rows[d] = int32_t(d);
  const std::vector<uint8_t> neg(D, 0);
  const int threads = cpu_threads(num_threads);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t w0 = blk * BW, nw = std::min(BW, W - w0);
    uint64_t* buf = thread_scratch<0, uint64_t>(D * BW);
    for (int64_t d = 0; d < D; ++d) {
      std::memcpy(buf + d * BW, words + d * W + w0, sizeof(uint64_t) * nw);
      std::memset(buf + d * BW + nw, 0, sizeof(uint64_t) * (BW - nw));
    }
    for (int64_t c = 0; c < k; ++c)
      count_class<kLanes, NV>(buf, rows.data() + c * g, neg.data() + c * g, g, 0, w0, nw, B, k, c, counts);
  }
}

// Entry points of this SIMD level. NV: 2 vectors per entry (whole 64-byte lines for AVX2) when the arena takes at
// most 1 MiB, else 1.
template <int kLanes>
void forward(const PackedProgram& prog, int64_t B, const uint64_t* in_words, const uint8_t* in_bool,
             uint64_t* out_words, int64_t k, int32_t* counts, int num_threads) {
  if (prog.num_slots * 2 * kLanes * 8 <= (1 << 20))
    run_blocks<kLanes, 2>(prog, B, in_words, in_bool, out_words, k, counts, num_threads);
  else
    run_blocks<kLanes, 1>(prog, B, in_words, in_bool, out_words, k, counts, num_threads);
}

template <int kLanes>
void group_count(const uint64_t* words, int64_t B, int64_t D, int64_t k, int32_t* counts, int num_threads) {
  group_count_blocks<kLanes, 1>(words, B, D, k, counts, num_threads);
}

// Non-template entry points of this translation unit (declared in packed_cpu.cpp).
void forward_entry(const PackedProgram& prog, int64_t B, const uint64_t* in_words, const uint8_t* in_bool,
                   uint64_t* out_words, int64_t k, int32_t* counts, int num_threads) {
  forward<RELAXOPS_PACKED_LANES>(prog, B, in_words, in_bool, out_words, k, counts, num_threads);
}
void group_count_entry(const uint64_t* words, int64_t B, int64_t D, int64_t k, int32_t* counts, int num_threads) {
  group_count<RELAXOPS_PACKED_LANES>(words, B, D, k, counts, num_threads);
}

}  // namespace RELAXOPS_PACKED_NS
}  // namespace relaxops
