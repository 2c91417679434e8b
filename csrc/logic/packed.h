// Bit-packed inference of discretized logic gate networks (docs/math/logic.md §4).
//
// Bit layout (difflogic's PackBitsTensor, docs/math/logic.md §4.1): a Boolean batch x [B, D] is stored FEATURE-MAJOR as
// uint64 words [D, W], W = ceil(B / 64): bit (s % 64) of word (s / 64) of row d is sample s of feature d
// (least significant bit = first sample). Padding bits (s >= B) are 0 after packing and UNSPECIFIED after a
// layer (not/nor/nand/one turn them on); every consumer ignores them.
//
// A layer evaluates out[j][w] = GATE_op[j](in[a[j]][w], in[b[j]][w]) with the bitwise forms of docs/math/logic.md §1.1,
// for every word w. Kernels take the gates sorted by op, so that a CPU kernel runs 16 branch-free loops per layer and
// the threads of a GPU warp share the op: the CUDA kernels take the layers as they are (PackedPlan), the CPU engine
// a simplified netlist in arena slots (PackedProgram).
//
// Group count (GroupSum on packed bits, docs/math/logic.md §4.3): with g = D / k (D % k == 0),
//   counts[s, c] = sum_{i < g} bit_{s % 64}(words[c g + i][s / 64]),   s < B,   int32 [B, k], not divided by tau.
#pragma once

#include <cstdint>

#include "../common/common.h"

namespace relaxops {

// CUDA form of a network: its layers, gates sorted by op. widths and op_start are HOST arrays; src_a, src_b, dst,
// op live on the device.
struct PackedPlan {
  int64_t num_layers;
  const int64_t* widths;    // [L + 1]: widths[0] = inputs of layer 0, widths[l + 1] = gates of layer l
  const int64_t* op_start;  // [17 L]: layer l's entries with op o are [op_start[17 l + o], op_start[17 l + o + 1])
                            // of its slice (op_start[17 l] = 0, op_start[17 l + 16] = widths[l + 1])
  const int32_t* src_a;     // [sum_l widths[l + 1]], layer l's slice starts at sum_{m < l} widths[m + 1]
  const int32_t* src_b;     // input rows A and B of each entry, in [0, widths[l])
  const int32_t* dst;       // output row of each entry; a permutation of [0, widths[l + 1]) per layer
  const uint8_t* op;        // gate id 0..15 of each entry (non-decreasing within a layer)
};

// CPU form of a network (built by python/relaxops/logic/netlist.py, usually simplified): an arena of num_slots word
// rows per block of the batch; input feature d is written to slot d. A step runs kPackedRuns runs of entries, run r
// of step s being [op_start[kPackedRuns s + r], op_start[kPackedRuns s + r + 1]):
// * runs r < 16 (plain gates, op = r):   slot[dst[i]] = GATE_r(slot[src_a[i]], slot[src_b[i]]);
// * runs r = 16 + 10 u + v (fused pairs: a gate and the single-fanout gate feeding its first input, evaluated in
//   registers), with inner op p = kFusableOps[u] and outer op q = kFusableOps[v]:
//     slot[dst[i]] = GATE_q(GATE_p(slot[src_a[i]], slot[src_b[i]]), slot[src_c[i]]).
// No entry of a step writes a slot that an entry of the same step reads. op[i] is r for plain entries, 16 p + q for
// fused ones (informative; the runs decide). Output d is out_kind[d]: 0 slot out_slot[d], 1 its negation,
// 2 constant 0, 3 constant 1.
struct PackedProgram {
  int64_t num_inputs;
  int64_t num_slots;  // >= num_inputs
  int64_t num_steps;
  const int64_t* op_start;  // [kPackedRuns num_steps + 1], non-decreasing
  const int32_t* src_a;     // [op_start[kPackedRuns num_steps]] slots in [0, num_slots)
  const int32_t* src_b;
  const int32_t* src_c;  // third input of fused entries (a valid slot, unused, in plain ones)
  const int32_t* dst;
  const uint8_t* op;
  int64_t num_outputs;
  const int32_t* out_slot;  // [num_outputs]
  const uint8_t* out_kind;  // [num_outputs] in 0..3
};

// The gates that depend on both inputs (all a simplified netlist keeps), in the order of the fused runs.
constexpr int kFusableOps[10] = {1, 2, 4, 6, 7, 8, 9, 11, 13, 14};
constexpr int64_t kPackedRuns = 16 + 100;

// Bitwise gate `op` on words: GATE_op(A, B) with the truth table of docs/math/logic.md §1.1
// (id = 8 T00 + 4 T01 + 2 T10 + T11).
template <typename W>
HOST_DEVICE inline W logic_gate_word(int op, W a, W b) {
  switch (op) {
    case 0: return W(0);
    case 1: return a & b;
    case 2: return a & ~b;
    case 3: return a;
    case 4: return ~a & b;
    case 5: return b;
    case 6: return a ^ b;
    case 7: return a | b;
    case 8: return ~(a | b);
    case 9: return ~(a ^ b);
    case 10: return ~b;
    case 11: return a | ~b;
    case 12: return ~a;
    case 13: return ~a | b;
    case 14: return ~(a & b);
    default: return ~W(0);
  }
}

inline int64_t packed_words(int64_t B) { return (B + 63) / 64; }

// --- CPU (packed_cpu.cpp; SIMD variants in packed_cpu_avx2.cpp / packed_cpu_avx512.cpp) ------------------
// simd: -1 = best the CPU supports, 0 = portable, 1 = AVX2, 2 = AVX-512 (a level the CPU or build lacks throws).
// num_threads: 0 = torch.get_num_threads() (cpu_parallel.h), else that many threads.

// The best SIMD level of this CPU and build (0, 1 or 2).
int logic_simd_best();

// x: uint8 [B, D] row-major, values 0/1 -> words [D, W] (padding bits 0).
void logic_pack_cpu(const uint8_t* x, int64_t B, int64_t D, uint64_t* words, int num_threads);
// words [D, W] -> x uint8 [B, D] in {0, 1} (padding bits ignored).
void logic_unpack_cpu(const uint64_t* words, int64_t B, int64_t D, uint8_t* x, int num_threads);
// The network's outputs: in [num_inputs, W] -> out [num_outputs, W].
void logic_packed_layers_cpu(const PackedProgram& prog, int64_t B, const uint64_t* in, uint64_t* out, int simd,
                             int num_threads);
// words [D, W] -> counts int32 [B, k].
void logic_group_count_cpu(const uint64_t* words, int64_t B, int64_t D, int64_t k, int32_t* counts, int simd,
                           int num_threads);
// Fused network: gates and group count block by block (the arena of a block of words stays in cache).
// Input: exactly one of in_words ([num_inputs, W]) and in_bool (uint8 [B, num_inputs], packed block by block).
void logic_packed_forward_cpu(const PackedProgram& prog, int64_t B, const uint64_t* in_words, const uint8_t* in_bool,
                              int64_t k, int32_t* counts, int simd, int num_threads);

// --- CUDA (packed.cu); device pointers, launched on `stream`, no sync ------------------------------------
void logic_pack_cuda(const uint8_t* x, int64_t B, int64_t D, uint64_t* words, std::uintptr_t stream);
void logic_unpack_cuda(const uint64_t* words, int64_t B, int64_t D, uint8_t* x, std::uintptr_t stream);
// uint64 words of device workspace logic_packed_layers_cuda needs for this plan and batch.
int64_t logic_packed_layers_cuda_workspace(const PackedPlan& plan, int64_t B);
void logic_packed_layers_cuda(const PackedPlan& plan, int64_t B, const uint64_t* in, uint64_t* out, uint64_t* workspace,
                              std::uintptr_t stream);
void logic_group_count_cuda(const uint64_t* words, int64_t B, int64_t D, int64_t k, int32_t* counts,
                            std::uintptr_t stream);

}  // namespace relaxops
