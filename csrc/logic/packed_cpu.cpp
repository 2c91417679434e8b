// Packed inference on the CPU (contracts in packed.h): argument checks, run-time SIMD dispatch, pack / unpack.
// The portable engine (2-word vectors: SSE2 on x86-64, NEON on ARM) lives in this translation unit; AVX2 and
// AVX-512 ones in packed_cpu_avx2.cpp / packed_cpu_avx512.cpp.
#define RELAXOPS_PACKED_NS packed_portable
#define RELAXOPS_PACKED_LANES 2
#include "packed_kernels.h"

#include <string>

#include "../common/cpu_simd.h"

namespace relaxops {

#if RELAXOPS_X86_SIMD
namespace packed_avx2 {
void forward_entry(const PackedProgram&, int64_t, const uint64_t*, const uint8_t*, uint64_t*, int64_t, int32_t*, int);
void group_count_entry(const uint64_t*, int64_t, int64_t, int64_t, int32_t*, int);
}  // namespace packed_avx2
namespace packed_avx512 {
void forward_entry(const PackedProgram&, int64_t, const uint64_t*, const uint8_t*, uint64_t*, int64_t, int32_t*, int);
void group_count_entry(const uint64_t*, int64_t, int64_t, int64_t, int32_t*, int);
}  // namespace packed_avx512
#endif

int logic_simd_best() {
#if RELAXOPS_X86_SIMD
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512vpopcntdq"))
    return 2;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi2")) return 1;
#endif
  return 0;
}

namespace {

constexpr int64_t kPackItem = 64;  // words per parallel item of pack and unpack (4096 samples; even)

int resolve_simd(int simd) {
  const int best = logic_simd_best();
  if (simd < 0) return best;
  RELAXOPS_CHECK(simd <= 2, "simd must be -1 (best), 0 (portable), 1 (AVX2) or 2 (AVX-512)");
  RELAXOPS_CHECK(simd <= best, "simd level " + std::to_string(simd) +
                                   " is not supported by this CPU or build (best: " + std::to_string(best) + ")");
  return simd;
}

// The largest value of n int32 as unsigned (a negative index reads as >= 2^31): a vectorized max-reduction, so that
// checking a program's slots costs a small fraction of running it on one block.
RELAXOPS_SIMD_CLONES uint32_t max_unsigned(const int32_t* a, int64_t n) {
  uint32_t m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, uint32_t(a[i]));
  return m;
}

// The invariants of a program that keep the engine inside its arena: sizes, runs, and every slot index.
void check_program(const PackedProgram& prog) {
  RELAXOPS_CHECK(prog.op_start != nullptr, "packed program: null op_start");
  RELAXOPS_CHECK(prog.num_inputs >= 1, "packed program: the network needs at least one input");
  RELAXOPS_CHECK(prog.num_slots >= prog.num_inputs && prog.num_slots < (int64_t(1) << 31),
                 "packed program: num_slots must be in [num_inputs, 2^31)");
  RELAXOPS_CHECK(prog.num_steps >= 0 && prog.num_outputs >= 1, "packed program: no steps or no outputs");
  RELAXOPS_CHECK(prog.op_start[0] == 0, "packed program: op_start[0] must be 0");
  for (int64_t i = 0; i < kPackedRuns * prog.num_steps; ++i)
    RELAXOPS_CHECK(prog.op_start[i] <= prog.op_start[i + 1], "packed program: op_start must be non-decreasing");
  const int64_t n = prog.op_start[kPackedRuns * prog.num_steps];
  RELAXOPS_CHECK(
      n == 0 || (prog.src_a != nullptr && prog.src_b != nullptr && prog.src_c != nullptr && prog.dst != nullptr),
      "packed program: null entries");
  RELAXOPS_CHECK(prog.out_slot != nullptr && prog.out_kind != nullptr, "packed program: null outputs");
  const uint32_t slots = uint32_t(prog.num_slots);
  RELAXOPS_CHECK(n == 0 || std::max(std::max(max_unsigned(prog.src_a, n), max_unsigned(prog.src_b, n)),
                                    std::max(max_unsigned(prog.src_c, n), max_unsigned(prog.dst, n))) < slots,
                 "packed program: src_a, src_b, src_c and dst must hold slots in [0, num_slots)");
  bool ok = true;
  for (int64_t d = 0; d < prog.num_outputs; ++d) ok &= (uint32_t(prog.out_slot[d]) < slots) & (prog.out_kind[d] <= 3);
  RELAXOPS_CHECK(ok, "packed program: out_slot must hold slots in [0, num_slots) and out_kind values in 0..3");
}

void check_counts(int64_t D, int64_t k) {
  RELAXOPS_CHECK(k >= 1, "k must be >= 1");
  RELAXOPS_CHECK(D % k == 0, "k = " + std::to_string(k) + " must divide the " + std::to_string(D) + " outputs");
}

void dispatch_forward(const PackedProgram& prog, int64_t B, const uint64_t* in_words, const uint8_t* in_bool,
                      uint64_t* out_words, int64_t k, int32_t* counts, int simd, int num_threads) {
  check_program(prog);
  RELAXOPS_CHECK(B >= 0, "batch size must be >= 0");
  RELAXOPS_CHECK(num_threads >= 0, "num_threads must be >= 0");
  const int level = resolve_simd(simd);
  if (B == 0) return;
#if RELAXOPS_X86_SIMD
  if (level == 2) return packed_avx512::forward_entry(prog, B, in_words, in_bool, out_words, k, counts, num_threads);
  if (level == 1) return packed_avx2::forward_entry(prog, B, in_words, in_bool, out_words, k, counts, num_threads);
#endif
  (void)level;
  packed_portable::forward_entry(prog, B, in_words, in_bool, out_words, k, counts, num_threads);
}

}  // namespace

void logic_pack_cpu(const uint8_t* x, int64_t B, int64_t D, uint64_t* words, int num_threads) {
  RELAXOPS_CHECK(B >= 0 && D >= 1 && num_threads >= 0, "logic_pack: invalid sizes");
  const int64_t W = packed_words(B);
  parallel_chunks(
      W, kPackItem,
      [&](int64_t w0, int64_t w1, int) {
        uint64_t* buf = thread_scratch<3, uint64_t>(2 * D);
        for (int64_t w = w0; w < w1; w += 2) {  // blocks of 2 words (the portable level's vector)
          packed_portable::pack_block<2, 1>(x, B, D, w, std::min<int64_t>(2, W - w), buf);
          for (int64_t d = 0; d < D; ++d)
            for (int64_t i = 0; i < std::min<int64_t>(2, W - w); ++i) words[d * W + w + i] = buf[2 * d + i];
        }
      },
      num_threads);
}

void logic_unpack_cpu(const uint64_t* words, int64_t B, int64_t D, uint8_t* x, int num_threads) {
  RELAXOPS_CHECK(B >= 0 && D >= 1 && num_threads >= 0, "logic_unpack: invalid sizes");
  const int64_t W = packed_words(B);
  parallel_chunks(
      B, 64 * kPackItem,
      [&](int64_t s0, int64_t s1, int) {
        for (int64_t s = s0; s < s1; ++s)
          for (int64_t d = 0; d < D; ++d) x[s * D + d] = uint8_t((words[d * W + s / 64] >> (s % 64)) & 1);
      },
      num_threads);
}

void logic_packed_layers_cpu(const PackedProgram& prog, int64_t B, const uint64_t* in, uint64_t* out, int simd,
                             int num_threads) {
  RELAXOPS_CHECK(in != nullptr && out != nullptr, "logic_packed_layers: null input or output");
  dispatch_forward(prog, B, in, nullptr, out, 1, nullptr, simd, num_threads);
}

void logic_group_count_cpu(const uint64_t* words, int64_t B, int64_t D, int64_t k, int32_t* counts, int simd,
                           int num_threads) {
  RELAXOPS_CHECK(B >= 0 && D >= 1 && num_threads >= 0, "logic_group_count: invalid sizes");
  check_counts(D, k);
  const int level = resolve_simd(simd);
  if (B == 0) return;
#if RELAXOPS_X86_SIMD
  if (level == 2) return packed_avx512::group_count_entry(words, B, D, k, counts, num_threads);
  if (level == 1) return packed_avx2::group_count_entry(words, B, D, k, counts, num_threads);
#endif
  (void)level;
  packed_portable::group_count_entry(words, B, D, k, counts, num_threads);
}

void logic_packed_forward_cpu(const PackedProgram& prog, int64_t B, const uint64_t* in_words, const uint8_t* in_bool,
                              int64_t k, int32_t* counts, int simd, int num_threads) {
  RELAXOPS_CHECK((in_words == nullptr) != (in_bool == nullptr), "logic_packed_forward: pass exactly one input");
  RELAXOPS_CHECK(counts != nullptr, "logic_packed_forward: null counts");
  check_counts(prog.num_outputs, k);
  dispatch_forward(prog, B, in_words, in_bool, nullptr, k, counts, simd, num_threads);
}

}  // namespace relaxops
