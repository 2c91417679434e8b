// Argument conversion and the dtype dispatch shared by the CPU bindings (bindings/cpu/) and the CUDA bindings
// (bindings/cuda/).
//
// Parameter convention: the kernels are torch-free, so a buffer is a flat std::uintptr_t address of contiguous
// memory (0: absent or not wanted) and a size or option a flat scalar; the dtype code comes first. A parameter
// group that becomes one kernel struct comes as one tuple or vector (otsort's sizes and loop, shortest path's ints
// and floats, the conv layer's shape and geometry, the rasterizer's ints and floats), so that it is built and
// checked in one place below; otsort's gradient lists come as one vector. A CUDA binding takes its CPU twin's
// parameters in the same groups and order, then its workspace buffers and the stream (cudaStream_t as an
// integer). Where the kernels differ, the pair does: CPU-only options (sortnet_matrix's topk_layout and rows,
// thread counts), buffers that the CPU kernel writes and the CUDA kernel reads (the sort permutation of the
// baselines and fastsort forwards), state the CPU kernel keeps in memory and the CUDA one needs on the host
// (shortest path's step count: an int32 [1] buffer on CPU, K on CUDA); the Python launchers fix these signatures.
#pragma once

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "../algorithms/shortest_path.h"
#include "../common/relax.h"
#include "../logic/conv.h"
#include "../logic/packed.h"
#include "../otsort/otsort.h"
#include "../render/render.h"
#include "../sortnet/sortnet.h"

namespace relaxops {

// Network arguments, in this order everywhere: n, num_layers, num_comparators, layer_ptr, cmin, cmax.
inline NetView make_net(int64_t n, int64_t num_layers, int64_t num_comparators, std::uintptr_t layer_ptr,
                        std::uintptr_t cmin, std::uintptr_t cmax) {
  RELAXOPS_CHECK(n >= 1, "n must be >= 1");
  RELAXOPS_CHECK(num_layers >= 0 && num_comparators >= 0, "negative network size");
  return {n,
          num_layers,
          num_comparators,
          as_ptr<const int32_t>(layer_ptr),
          as_ptr<const int32_t>(cmin),
          as_ptr<const int32_t>(cmax)};
}

inline RelaxParams make_relax(int kind, double steepness, double art_lambda) {
  RELAXOPS_CHECK(kind >= 0 && kind < kNumRelaxations, "unknown relaxation id");
  return {kind, steepness, art_lambda};
}

// Packed logic network arguments, in this order everywhere: num_layers, widths, op_start (host int64 arrays),
// src_a, src_b, dst (int32), op (uint8) on the kernel's device (PackedPlan in logic/packed.h).
inline PackedPlan make_plan(int64_t num_layers, std::uintptr_t widths, std::uintptr_t op_start, std::uintptr_t src_a,
                            std::uintptr_t src_b, std::uintptr_t dst, std::uintptr_t op) {
  RELAXOPS_CHECK(num_layers >= 1, "a packed network needs at least one layer");
  return {num_layers,
          as_ptr<const int64_t>(widths),
          as_ptr<const int64_t>(op_start),
          as_ptr<const int32_t>(src_a),
          as_ptr<const int32_t>(src_b),
          as_ptr<const int32_t>(dst),
          as_ptr<const uint8_t>(op)};
}

// Packed logic program arguments (CPU), in this order everywhere: num_inputs, num_slots, num_steps, op_start
// (int64), src_a, src_b, dst (int32), op (uint8), num_outputs, out_slot (int32), out_kind (uint8); see
// PackedProgram in logic/packed.h.
inline PackedProgram make_program(int64_t num_inputs, int64_t num_slots, int64_t num_steps, std::uintptr_t op_start,
                                  std::uintptr_t src_a, std::uintptr_t src_b, std::uintptr_t src_c, std::uintptr_t dst,
                                  std::uintptr_t op, int64_t num_outputs, std::uintptr_t out_slot,
                                  std::uintptr_t out_kind) {
  return {num_inputs,
          num_slots,
          num_steps,
          as_ptr<const int64_t>(op_start),
          as_ptr<const int32_t>(src_a),
          as_ptr<const int32_t>(src_b),
          as_ptr<const int32_t>(src_c),
          as_ptr<const int32_t>(dst),
          as_ptr<const uint8_t>(op),
          num_outputs,
          as_ptr<const int32_t>(out_slot),
          as_ptr<const uint8_t>(out_kind)};
}

// Rasterizer options from the Python settings, in this order everywhere (N: the packed faces of the B meshes):
//   ints   B, N, H, W, T, dist, alpha, rgb, texture, squared, double_side
//   floats tau, shape, shift, eps, p, rgb_eps, gamma, near, far, bg_r, bg_g, bg_b
inline RenderParams make_render_params(const std::vector<int64_t>& i, const std::vector<double>& d) {
  RELAXOPS_CHECK(i.size() == 11 && d.size() == 12, "render parameters: expected 11 ints and 12 floats");
  RenderParams P{};
  P.B = i[0], P.N = i[1], P.H = i[2], P.W = i[3], P.T = i[4];
  P.dist = int(i[5]), P.alpha = int(i[6]), P.rgb = int(i[7]), P.texture = int(i[8]);
  P.squared = i[9] != 0, P.double_side = i[10] != 0;
  RELAXOPS_CHECK(P.B >= 0 && P.N >= 0 && P.H >= 1 && P.W >= 1 && P.T >= 1, "render: bad sizes");
  const int64_t big = int64_t(1) << 31;  // sizes below 2^31 and buffers below 2^60 elements: no index overflows
  RELAXOPS_CHECK(P.N < big, "render: at most 2^31 - 1 faces in a batch");
  RELAXOPS_CHECK(P.B < big && P.H < big && P.W < big && P.T < big, "render: sizes must be below 2^31");
  const int64_t most = (int64_t(1) << 60) / (P.B > 0 ? P.B : 1);
  RELAXOPS_CHECK(P.H * P.W < most && P.N * P.T < (int64_t(1) << 60), "render: buffers too large");
  RELAXOPS_CHECK(P.dist >= 0 && P.dist < kNumDistributions, "render: unknown distribution id");
  RELAXOPS_CHECK(P.alpha >= 0 && P.alpha < kNumTConorms, "render: unknown T-conorm id");
  RELAXOPS_CHECK((P.rgb == 0 || P.rgb == 1) && (P.texture == 0 || P.texture == 1), "render: bad rgb/texture id");
  RELAXOPS_CHECK(P.texture == 0 || P.T == 3, "render: vertex textures have 3 colours per face");
  P.tau = d[0], P.shape = d[1], P.shift = d[2], P.eps = d[3], P.p = d[4], P.rgb_eps = d[5], P.gamma = d[6];
  P.near_z = d[7], P.far_z = d[8], P.bg[0] = d[9], P.bg[1] = d[10], P.bg[2] = d[11];
  RELAXOPS_CHECK(P.tau >= 0 && P.eps >= 1 && P.gamma > 0 && P.near_z < P.far_z, "render: bad float parameters");
  P.margin = std::sqrt(P.eps * P.tau);
  P.cull2 = P.eps * P.tau;
  const bool gamma_family = P.dist == kDistGamma || P.dist == kDistGammaRev;
  RELAXOPS_CHECK(!gamma_family || P.shape > 0, "render: the gamma shape must be > 0");
  P.gamma_lg = gamma_family ? std::lgamma(P.shape) : 0.0;
  P.gamma_c0 = gamma_family ? 1.0 / std::tgamma(P.shape + 1) : 0.0;
  P.log_p = P.alpha == kFrank ? std::log(P.p) : 0.0;
  return P;
}

// Mesh offsets of packed faces in host memory: B + 1 entries, 0 first, non-decreasing, N last (what the CPU render
// kernels index with).
inline void check_mesh_offsets(const int64_t* offsets, int64_t B, int64_t N) {
  RELAXOPS_CHECK(offsets != nullptr && offsets[0] == 0 && offsets[B] == N, "render: mesh_offsets must go from 0 to N");
  for (int64_t b = 0; b < B; ++b)
    RELAXOPS_CHECK(offsets[b] <= offsets[b + 1], "render: mesh_offsets must not decrease");
}

// Optimal-transport sort: sizes (R, n, m), loop (epsilon, epsilon0, decay, tolerance, max_iterations, history_len).
using OtSizes = std::tuple<int64_t, int64_t, int64_t>;
using OtLoop = std::tuple<double, double, double, double, int64_t, int64_t>;
inline OtParams make_ot_params(const OtSizes& s, const OtLoop& l) {
  return {std::get<0>(s), std::get<1>(s), std::get<2>(s), std::get<0>(l), std::get<1>(l),
          std::get<2>(l), std::get<3>(l), std::get<4>(l), std::get<5>(l)};
}

// Convolutional logic layer: shape (B, C_in, H, W, C_out, L), geometry (kh, kw, sh, sw, ph, pw).
using ConvShape = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;
using ConvGeometry = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;
inline LogicConvParams make_conv_params(const ConvShape& s, const ConvGeometry& g) {
  return make_logic_conv_params(std::get<0>(s), std::get<1>(s), std::get<2>(s), std::get<3>(s), std::get<4>(s),
                                std::get<5>(s), std::get<0>(g), std::get<1>(g), std::get<2>(g), std::get<3>(g),
                                std::get<4>(g), std::get<5>(g));
}

// Shortest path: ints (B, H, W, n_iter, n_trace, loop, t_conorm, max_iter), floats (beta, hamacher_p, epsilon).
using SpInts = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int, int, int64_t>;
using SpFloats = std::tuple<double, double, double>;
inline SpParams make_sp_params(const SpInts& i, const SpFloats& f) {
  SpParams P{std::get<0>(i), std::get<1>(i), std::get<2>(i), std::get<3>(i), std::get<4>(i), std::get<5>(i),
             std::get<6>(i), std::get<0>(f), std::get<1>(f), std::get<2>(f), std::get<7>(i)};
  sp_check_params(P);
  return P;
}

// Dtype codes of every binding (relaxops/_ext.py: dtype_code; the logic CUDA launchers also pass 2 and 3).
enum DtypeCode : int64_t { kFloat32 = 0, kFloat64 = 1, kFloat16 = 2, kBFloat16 = 3 };

// Checks a binding's `dtype` argument: a code in [kFloat32, last], last = kFloat64 or kBFloat16.
inline void check_dtype(int64_t code, int64_t last) {
  if (code >= kFloat32 && code <= last) return;
  const char* codes = last == kFloat64 ? "0 (float32) or 1 (float64)" : "0..3 (float32, float64, float16, bfloat16)";
  throw std::invalid_argument(std::string("relaxops: dtype must be ") + codes + ", got " + std::to_string(code));
}

// The one dtype dispatch: returns f(float{}) for code 0 and f(double{}) for code 1 (f reads the type as
// decltype of its argument). Kernels that also take float16 / bfloat16 take the code itself (their element
// types exist only in device code), checked with check_dtype(code, kBFloat16).
template <class F>
decltype(auto) by_dtype(int64_t code, F&& f) {
  check_dtype(code, kFloat64);
  if (code == kFloat32) return f(float{});
  return f(double{});
}

}  // namespace relaxops
