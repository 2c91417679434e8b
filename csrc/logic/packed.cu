// Packed inference on CUDA (contracts and layouts in packed.h).
//
// * pack: one thread per (feature, word); consecutive threads take consecutive features, so the 64 reads of a
//   thread's samples are coalesced across the warp.
// * layers, fused: when the hidden layers' two ping-pong buffers fit in shared memory for one word per block
//   (2 * max hidden width * 8 bytes; up to 64 layers), one launch runs every layer: block = one word column (64
//   samples), threads stride over the plan's entries (op-sorted, so a warp mostly shares the op), __syncthreads between
//   layers; the first layer reads global memory, the last writes it.
// * layers, per layer: otherwise one launch per layer, thread per (entry, word) (consecutive threads on
//   consecutive words: coalesced), ping-pong buffers in the workspace [2][max width][W].
// * group count: one thread per (class, sample), samples fastest, testing its bit in the class's g words.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../common/cuda_utils.cuh"
#include "packed.h"

namespace relaxops {

namespace {

constexpr int kThreads = 256;
constexpr int kFusedThreads = 1024;

__global__ void pack_kernel(const uint8_t* __restrict__ x, int64_t B, int64_t D, int64_t W,
                            uint64_t* __restrict__ words) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < D * W; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t w = t / D, d = t % D;
    uint64_t word = 0;
    const int64_t n = min(int64_t(64), B - w * 64);
    for (int64_t j = 0; j < n; ++j) word |= uint64_t(x[(w * 64 + j) * D + d] != 0) << j;
    words[d * W + w] = word;
  }
}

__global__ void unpack_kernel(const uint64_t* __restrict__ words, int64_t B, int64_t D, int64_t W,
                              uint8_t* __restrict__ x) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < B * D; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t s = t / D, d = t % D;
    x[t] = uint8_t((words[d * W + s / 64] >> (s % 64)) & 1);
  }
}

// One layer: entries [0, n) of the plan slice, words [0, W).
__global__ void layer_kernel(const uint64_t* __restrict__ in, uint64_t* __restrict__ out, const int32_t* src_a,
                             const int32_t* src_b, const int32_t* dst, const uint8_t* op, int64_t n, int64_t W) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n * W; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = t / W, w = t % W;
    out[int64_t(dst[i]) * W + w] =
        logic_gate_word<uint64_t>(op[i], in[int64_t(src_a[i]) * W + w], in[int64_t(src_b[i]) * W + w]);
  }
}

constexpr int kMaxFusedLayers = 64;

// Entry offsets of the layers, passed by value (no copy to the device, no synchronization).
struct LayerOffsets {
  int64_t v[kMaxFusedLayers + 1];
};

// Every layer for word column blockIdx.x; layer l's entries are [entry_offset.v[l], entry_offset.v[l + 1]).
__global__ void fused_kernel(const uint64_t* __restrict__ in, uint64_t* __restrict__ out, const int32_t* src_a,
                             const int32_t* src_b, const int32_t* dst, const uint8_t* op, LayerOffsets entry_offset,
                             int64_t num_layers, int64_t max_hidden, int64_t W) {
  extern __shared__ uint64_t smem[];
  uint64_t* buf[2] = {smem, smem + max_hidden};
  for (int64_t w = blockIdx.x; w < W; w += gridDim.x) {
    for (int64_t l = 0; l < num_layers; ++l) {
      const bool first = l == 0, last = l == num_layers - 1;
      const uint64_t* src = first ? in : buf[(l + 1) % 2];
      uint64_t* target = last ? out : buf[l % 2];
      const int64_t stride_in = first ? W : 1, stride_out = last ? W : 1;
      const int64_t off_in = first ? w : 0, off_out = last ? w : 0;
      for (int64_t i = entry_offset.v[l] + threadIdx.x; i < entry_offset.v[l + 1]; i += blockDim.x) {
        target[int64_t(dst[i]) * stride_out + off_out] = logic_gate_word<uint64_t>(
            op[i], src[int64_t(src_a[i]) * stride_in + off_in], src[int64_t(src_b[i]) * stride_in + off_in]);
      }
      __syncthreads();
    }
  }
}

// Consecutive threads take consecutive samples of one class: the 64 threads of a word read the same address
// (one sector per warp load), where class-major threads read k words g * W apart.
__global__ void group_count_kernel(const uint64_t* __restrict__ words, int64_t B, int64_t W, int64_t k, int64_t g,
                                   int32_t* __restrict__ counts) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < B * k; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = t / B, s = t % B;
    int32_t n = 0;
    for (int64_t i = 0; i < g; ++i) n += int32_t((words[(c * g + i) * W + s / 64] >> (s % 64)) & 1);
    counts[s * k + c] = n;
  }
}

int launch_blocks(int64_t items) { return grid_blocks((items + kThreads - 1) / kThreads); }

int64_t max_hidden_width(const PackedPlan& plan) {
  int64_t m = 0;
  for (int64_t l = 1; l < plan.num_layers; ++l) m = std::max(m, plan.widths[l]);
  return m;
}

int64_t max_width(const PackedPlan& plan) {
  int64_t m = 0;
  for (int64_t l = 0; l <= plan.num_layers; ++l) m = std::max(m, plan.widths[l]);
  return m;
}

// Bytes of shared memory the fused kernel needs, or -1 when it cannot run (too many layers, or the buffers do
// not fit in the current device's shared memory).
int64_t fused_smem_bytes(const PackedPlan& plan) {
  if (plan.num_layers > kMaxFusedLayers) return -1;
  int device = 0, limit = 0;
  check_call(cudaGetDevice(&device), "cudaGetDevice");
  check_call(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "cudaDeviceGetAttribute");
  const int64_t bytes = 2 * std::max<int64_t>(1, max_hidden_width(plan)) * int64_t(sizeof(uint64_t));
  return bytes <= limit ? bytes : -1;
}

void check_plan(const PackedPlan& plan) {
  RELAXOPS_CHECK(plan.widths != nullptr && plan.widths[0] >= 1, "packed plan: the network needs inputs");
  for (int64_t l = 0; l < plan.num_layers; ++l)
    RELAXOPS_CHECK(plan.widths[l + 1] >= 1, "packed plan: every layer needs at least one gate");
}

}  // namespace

void logic_pack_cuda(const uint8_t* x, int64_t B, int64_t D, uint64_t* words, std::uintptr_t stream) {
  RELAXOPS_CHECK(B >= 0 && D >= 1, "logic_pack: invalid sizes");
  const int64_t W = packed_words(B);
  if (W == 0) return;
  DeviceGuard guard(words);
  pack_kernel<<<launch_blocks(D * W), kThreads, 0, as_stream(stream)>>>(x, B, D, W, words);
  check_launch("logic pack");
}

void logic_unpack_cuda(const uint64_t* words, int64_t B, int64_t D, uint8_t* x, std::uintptr_t stream) {
  RELAXOPS_CHECK(B >= 0 && D >= 1, "logic_unpack: invalid sizes");
  if (B == 0) return;
  DeviceGuard guard(x);
  unpack_kernel<<<launch_blocks(B * D), kThreads, 0, as_stream(stream)>>>(words, B, D, packed_words(B), x);
  check_launch("logic unpack");
}

int64_t logic_packed_layers_cuda_workspace(const PackedPlan& plan, int64_t B) {
  check_plan(plan);
  // fused: none; per layer: the ping-pong buffers
  return fused_smem_bytes(plan) >= 0 ? 0 : 2 * max_width(plan) * packed_words(B);
}

void logic_packed_layers_cuda(const PackedPlan& plan, int64_t B, const uint64_t* in, uint64_t* out, uint64_t* workspace,
                              std::uintptr_t stream) {
  check_plan(plan);
  RELAXOPS_CHECK(B >= 0, "batch size must be >= 0");
  const int64_t W = packed_words(B), L = plan.num_layers;
  if (W == 0) return;
  DeviceGuard guard(out);
  cudaStream_t s = as_stream(stream);
  std::vector<int64_t> offset(L + 1, 0);
  for (int64_t l = 0; l < L; ++l) offset[l + 1] = offset[l] + plan.widths[l + 1];
  const int64_t smem = fused_smem_bytes(plan);
  if (smem >= 0) {
    LayerOffsets entry_offset{};
    std::copy(offset.begin(), offset.end(), entry_offset.v);
    check_call(cudaFuncSetAttribute(fused_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
               "cudaFuncSetAttribute");
    fused_kernel<<<grid_blocks(W), kFusedThreads, size_t(smem), s>>>(in, out, plan.src_a, plan.src_b, plan.dst, plan.op,
                                                                     entry_offset, L,
                                                                     std::max<int64_t>(1, max_hidden_width(plan)), W);
    check_launch("logic packed layers (fused)");
    return;
  }
  RELAXOPS_CHECK(workspace != nullptr, "logic_packed_layers: null workspace");
  uint64_t* ping = workspace;
  uint64_t* pong = ping + max_width(plan) * W;
  const uint64_t* cur = in;
  for (int64_t l = 0; l < L; ++l) {
    uint64_t* next = l == L - 1 ? out : (l % 2 == 0 ? ping : pong);
    const int64_t o = offset[l], n = plan.widths[l + 1];
    layer_kernel<<<launch_blocks(n * W), kThreads, 0, s>>>(cur, next, plan.src_a + o, plan.src_b + o, plan.dst + o,
                                                           plan.op + o, n, W);
    check_launch("logic packed layer");
    cur = next;
  }
}

void logic_group_count_cuda(const uint64_t* words, int64_t B, int64_t D, int64_t k, int32_t* counts,
                            std::uintptr_t stream) {
  RELAXOPS_CHECK(B >= 0 && D >= 1, "logic_group_count: invalid sizes");
  RELAXOPS_CHECK(k >= 1 && D % k == 0,
                 "k = " + std::to_string(k) + " must divide the " + std::to_string(D) + " outputs");
  if (B == 0) return;
  DeviceGuard guard(counts);
  group_count_kernel<<<launch_blocks(B * k), kThreads, 0, as_stream(stream)>>>(words, B, packed_words(B), k, D / k,
                                                                               counts);
  check_launch("logic group count");
}

}  // namespace relaxops
