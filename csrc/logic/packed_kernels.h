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
#include <type_traits>
#include <utility>
#include <vector>

#include "../common/cpu_scratch.h"
#include "../common/cpu_parallel.h"
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
  if constexpr (kOp == 0)
    return a ^ a;
  else if constexpr (kOp == 1)
    return a & b;
  else if constexpr (kOp == 2)
    return a & ~b;
  else if constexpr (kOp == 3)
    return a;
  else if constexpr (kOp == 4)
    return ~a & b;
  else if constexpr (kOp == 5)
    return b;
  else if constexpr (kOp == 6)
    return a ^ b;
  else if constexpr (kOp == 7)
    return a | b;
  else if constexpr (kOp == 8)
    return ~(a | b);
  else if constexpr (kOp == 9)
    return ~(a ^ b);
  else if constexpr (kOp == 10)
    return ~b;
  else if constexpr (kOp == 11)
    return a | ~b;
  else if constexpr (kOp == 12)
    return ~a;
  else if constexpr (kOp == 13)
    return ~a | b;
  else if constexpr (kOp == 14)
    return ~(a & b);
  else
    return ~(a ^ a);
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

// One run of fused entries: the inner gate's result stays in registers (one load and one store fewer per pair).
template <int kIn, int kOut, int kLanes, int NV>
inline void fused_run(const PackedProgram& prog, int64_t begin, int64_t end, uint64_t* arena) {
  constexpr int64_t BW = int64_t(NV) * kLanes;
  for (int64_t i = begin; i < end; ++i) {
    const uint64_t* pa = arena + int64_t(prog.src_a[i]) * BW;
    const uint64_t* pb = arena + int64_t(prog.src_b[i]) * BW;
    const uint64_t* pc = arena + int64_t(prog.src_c[i]) * BW;
    uint64_t* po = arena + int64_t(prog.dst[i]) * BW;
    for (int v = 0; v < NV; ++v) {
      const V<kLanes> a = load<kLanes>(pa + v * kLanes), b = load<kLanes>(pb + v * kLanes);
      const V<kLanes> c = load<kLanes>(pc + v * kLanes);
      store<kLanes>(po + v * kLanes, apply_gate<kOut>(apply_gate<kIn>(a, b), c));
    }
  }
}

// The kPackedRuns runs of a step (run_start = its op_start): 16 plain, then 100 fused.
template <int kLanes, int NV, int... kOps, int... kPairs>
inline void step_runs(const int64_t* run_start, const PackedProgram& prog, uint64_t* arena,
                      std::integer_sequence<int, kOps...>, std::integer_sequence<int, kPairs...>) {
  (gate_run<kOps, kLanes, NV>(prog.src_a, prog.src_b, prog.dst, run_start[kOps], run_start[kOps + 1], arena), ...);
  (fused_run<kFusableOps[kPairs / 10], kFusableOps[kPairs % 10], kLanes, NV>(prog, run_start[16 + kPairs],
                                                                             run_start[17 + kPairs], arena),
   ...);
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

// Vectors of this level's width (8 kLanes bytes, kLanes >= 2: whole 16-byte lanes) as bytes, 16- and 32-bit
// elements for the packing's interleaves; V<kLanes> is the 64-bit view.
template <int kLanes>
struct PackVec {
  typedef uint8_t u8 __attribute__((vector_size(8 * kLanes)));
  typedef uint16_t u16 __attribute__((vector_size(8 * kLanes)));
  typedef uint32_t u32 __attribute__((vector_size(8 * kLanes)));
};

// shuffle(a, b, index(0), ..., index(N - 1)): element i of the result is element index(i) of the concatenation a:b
// (compile-time indices, so that the compiler emits single unpack / permute instructions).
template <typename T, typename F, size_t... I>
inline T shuffle2(T a, T b, F, std::index_sequence<I...>) {
#if defined(__clang__)
  return __builtin_shufflevector(a, b, F::index(I)...);
#else
  typedef std::remove_reference_t<decltype(a[0])> E;
  typedef std::make_unsigned_t<std::conditional_t<
      sizeof(E) == 1, int8_t,
      std::conditional_t<sizeof(E) == 2, int16_t, std::conditional_t<sizeof(E) == 4, int32_t, int64_t> > > >
      M;
  typedef M Mask __attribute__((vector_size(sizeof(T))));
  return __builtin_shuffle(a, b, Mask{M(F::index(I))...});
#endif
}

// Interleave of the low (kHi = 0) or high halves of a and b within each 16-byte lane (x86's unpacklo / unpackhi).
template <typename T, int kHi>
struct InterleaveIndex {
  static constexpr int kN = sizeof(T) / sizeof(T{}[0]), kPer = 16 / sizeof(T{}[0]);
  static constexpr int index(size_t i) {
    return int(i) / kPer * kPer + kHi * kPer / 2 + int(i) % kPer / 2 + (i % 2 ? kN : 0);
  }
};
template <int kHi, typename T>
inline T interleave(T a, T b) {
  constexpr int n = sizeof(T) / sizeof(a[0]);
  return shuffle2(a, b, InterleaveIndex<T, kHi>{}, std::make_index_sequence<n>{});
}

// Block swap of words for transpose_words: v[r] takes b's lanes c - j where c & j, v[r + j] a's lanes c + j where
// !(c & j).
template <int kLanes, int kJ, int kUpper>
struct SwapIndex {
  static constexpr int index(size_t c) {
    return kUpper ? (c & kJ ? int(c) + kLanes : int(c) + kJ) : (c & kJ ? int(c) - kJ + kLanes : int(c));
  }
};
// In-place transpose of the kLanes x kLanes matrix of words (row r = v[r]): log2(kLanes) rounds of swaps of the
// off-diagonal (j x j) blocks, one two-source shuffle per vector and round.
template <int kLanes, int kJ = kLanes / 2>
inline void transpose_words(V<kLanes>* v) {
  if constexpr (kJ >= 1) {
    for (int r = 0; r < kLanes; ++r) {
      if (r & kJ) continue;
      const V<kLanes> a = v[r], b = v[r + kJ];
      v[r] = shuffle2(a, b, SwapIndex<kLanes, kJ, 0>{}, std::make_index_sequence<kLanes>{});
      v[r + kJ] = shuffle2(a, b, SwapIndex<kLanes, kJ, 1>{}, std::make_index_sequence<kLanes>{});
    }
    transpose_words<kLanes, kJ / 2>(v);
  }
}

// Packing, step 1, for 8 rows (samples) of a uint8 0/1 matrix (row stride D, D features; rows >= nrows read as 0):
// R[c] = OR_j row_j[c F : (c + 1) F] << j for the ceil(D / F) chunks c of F = 8 kLanes features, so that byte f of
// R[c] holds the 8 samples' bits of feature c F + f (a byte is 0 or 1, so shifting its 64-bit lane by j < 8 stays
// inside the byte). The rows are read sequentially (8 streams the hardware prefetchers follow); features past D
// read as 0.
template <int kLanes>
inline void pack_rows(const uint8_t* x, int64_t D, int64_t nrows, typename PackVec<kLanes>::u8* R) {
  constexpr int64_t F = 8 * kLanes;
  const int64_t full = D / F;
  if (nrows == 8) {
    for (int64_t c = 0; c < full; ++c) {
      V<kLanes> row[8];
      for (int j = 0; j < 8; ++j) row[j] = load<kLanes>(reinterpret_cast<const uint64_t*>(x + j * D + c * F));
      R[c] = (typename PackVec<kLanes>::u8)((row[0] | (row[1] << 1)) | ((row[2] << 2) | (row[3] << 3)) |
                                            ((row[4] << 4) | (row[5] << 5)) | ((row[6] << 6) | (row[7] << 7)));
    }
  } else {
    for (int64_t c = 0; c < full; ++c) {
      V<kLanes> acc = V<kLanes>{} ^ V<kLanes>{};
      for (int j = 0; j < nrows; ++j) acc |= load<kLanes>(reinterpret_cast<const uint64_t*>(x + j * D + c * F)) << j;
      R[c] = (typename PackVec<kLanes>::u8)acc;
    }
  }
  if (full * F < D) {  // the last, partial chunk: through a zero-padded copy (no read past a row)
    V<kLanes> acc = V<kLanes>{} ^ V<kLanes>{};
    for (int j = 0; j < nrows; ++j) {
      V<kLanes> v = V<kLanes>{} ^ V<kLanes>{};
      std::memcpy(&v, x + j * D + full * F, D - full * F);
      acc |= v << j;
    }
    R[full] = (typename PackVec<kLanes>::u8)acc;
  }
}

// Packing, step 2: the bytes f of R[0..7] (step 1 of the 8 groups of 8 samples of a word) are the word of feature
// f. Three rounds of interleaves (8-, 16-, then 32-bit elements of pairs of vectors, within 16-byte lanes: 24 unpack
// instructions) gather them into 8 vectors C[h]: word l of C[h] is the word of feature 16 (l / 2) + 2 h + l % 2.
template <int kLanes>
inline void interleave_tile(const typename PackVec<kLanes>::u8* const R[8], V<kLanes> C[8]) {
  typedef PackVec<kLanes> P;
  typename P::u16 A[8];  // A[2 k + h1]: bytes of (R[2k], R[2k+1]) of features 8 h1 + e of each lane
  for (int k = 0; k < 4; ++k) {
    A[2 * k] = (typename P::u16)interleave<0>(*R[2 * k], *R[2 * k + 1]);
    A[2 * k + 1] = (typename P::u16)interleave<1>(*R[2 * k], *R[2 * k + 1]);
  }
  typename P::u32 Bq[8];  // Bq[4 k + 2 h1 + h2]: (R[4k..4k+3]) of features 8 h1 + 4 h2 + e
  for (int k = 0; k < 2; ++k)
    for (int h1 = 0; h1 < 2; ++h1) {
      Bq[4 * k + 2 * h1] = (typename P::u32)interleave<0>(A[4 * k + h1], A[4 * k + 2 + h1]);
      Bq[4 * k + 2 * h1 + 1] = (typename P::u32)interleave<1>(A[4 * k + h1], A[4 * k + 2 + h1]);
    }
  for (int h = 0; h < 4; ++h) {  // C[2 h + h3]: R[0..7] of features 2 (2 h + h3) + p
    C[2 * h] = (V<kLanes>)interleave<0>(Bq[h], Bq[4 + h]);
    C[2 * h + 1] = (V<kLanes>)interleave<1>(Bq[h], Bq[4 + h]);
  }
}

// Packs samples [64 w0, 64 (w0 + nw)) of the uint8 0/1 matrix x [B, D] into buf [D][BW] (zeros past B): step 1
// for the block's rows into a per-thread staging buffer (BW x 8 x ceil(D / F) vectors, in L2), then per chunk of F
// features step 2, kLanes words at a time, whose kLanes x kLanes matrices (word, feature) are transposed so that
// each feature's kLanes words are one vector store.
template <int kLanes, int NV>
inline void pack_block(const uint8_t* x, int64_t B, int64_t D, int64_t w0, int64_t nw, uint64_t* buf) {
  constexpr int64_t BW = int64_t(NV) * kLanes, F = 8 * kLanes;
  static_assert(kLanes >= 2, "packing works on whole 16-byte lanes");
  typedef typename PackVec<kLanes>::u8 U8;
  const int64_t chunks = (D + F - 1) / F;
  U8* R = thread_scratch<4, U8>(BW * 8 * chunks + 1);  // R[(wi * 8 + q) * chunks + c], aligned to its vector size
  R = reinterpret_cast<U8*>((reinterpret_cast<std::uintptr_t>(R) + sizeof(U8) - 1) / sizeof(U8) * sizeof(U8));
  for (int64_t wi = 0; wi < BW; ++wi) {
    const int64_t s0 = (w0 + wi) * 64, ns = wi < nw ? std::min<int64_t>(64, B - s0) : 0;
    for (int q = 0; q < 8; ++q)
      pack_rows<kLanes>(x + (s0 + 8 * q) * D, D, std::clamp<int64_t>(ns - 8 * q, 0, 8), R + (wi * 8 + q) * chunks);
  }
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t nf = std::min(F, D - c * F);
    for (int64_t g = 0; g < BW; g += kLanes) {
      V<kLanes> C[kLanes][8];
      for (int64_t wi = g; wi < g + kLanes; ++wi) {
        const U8* rows[8];
        for (int q = 0; q < 8; ++q) rows[q] = R + (wi * 8 + q) * chunks + c;
        interleave_tile<kLanes>(rows, C[wi - g]);
      }
      for (int h = 0; h < 8; ++h) {
        V<kLanes> T[kLanes];
        for (int r = 0; r < kLanes; ++r) T[r] = C[r][h];
        transpose_words<kLanes>(T);  // T[l]: words g..g+kLanes-1 of feature 16 (l / 2) + 2 h + l % 2
        for (int l = 0; l < kLanes; ++l) {
          const int64_t f = 16 * (l / 2) + 2 * h + l % 2;
          if (f < nf) store<kLanes>(buf + (c * F + f) * BW + g, T[l]);
        }
      }
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
  parallel_items(
      blocks,
      [&](int64_t blk, int) {
        const int64_t w0 = blk * BW, nw = std::min(BW, W - w0);
        uint64_t* arena = huge_scratch<0>(prog.num_slots * BW);
        if (in_bool != nullptr) {
          pack_block<kLanes, NV>(in_bool, B, D0, w0, nw, arena);
        } else {
          for (int64_t d = 0; d < D0; ++d)  // a row of BW words: inline copies, not two library calls per row
            for (int64_t w = 0; w < BW; ++w) arena[d * BW + w] = w < nw ? in_words[d * W + w0 + w] : 0;
        }
        for (int64_t s = 0; s < prog.num_steps; ++s)
          step_runs<kLanes, NV>(prog.op_start + kPackedRuns * s, prog, arena, std::make_integer_sequence<int, 16>{},
                                std::make_integer_sequence<int, 100>{});
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
      },
      num_threads);
}

// Group count of words [D, W] (no gates): blocks copied into a [D][BW] buffer, then counted.
template <int kLanes, int NV>
void group_count_blocks(const uint64_t* words, int64_t B, int64_t D, int64_t k, int32_t* counts, int num_threads) {
  constexpr int64_t BW = int64_t(NV) * kLanes;
  const int64_t W = packed_words(B), blocks = (W + BW - 1) / BW, g = D / k;
  std::vector<int32_t> rows(D);
  for (int64_t d = 0; d < D; ++d) rows[d] = int32_t(d);
  const std::vector<uint8_t> neg(D, 0);
  parallel_items(
      blocks,
      [&](int64_t blk, int) {
        const int64_t w0 = blk * BW, nw = std::min(BW, W - w0);
        uint64_t* buf = thread_scratch<0, uint64_t>(D * BW);
        for (int64_t d = 0; d < D; ++d) {
          std::memcpy(buf + d * BW, words + d * W + w0, sizeof(uint64_t) * nw);
          std::memset(buf + d * BW + nw, 0, sizeof(uint64_t) * (BW - nw));
        }
        for (int64_t c = 0; c < k; ++c)
          count_class<kLanes, NV>(buf, rows.data() + c * g, neg.data() + c * g, g, 0, w0, nw, B, k, c, counts);
      },
      num_threads);
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
