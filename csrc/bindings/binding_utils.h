// Argument conversion shared by the CPU and CUDA bindings (torch-free: raw addresses and sizes).
#pragma once

#include <cstdint>

#include "../common/relax.h"
#include "../logic/packed.h"
#include "../sortnet/sortnet.h"

namespace relaxops {

// Network arguments, in this order everywhere: n, num_layers, num_comparators, layer_ptr, cmin, cmax.
inline NetView make_net(int64_t n, int64_t num_layers, int64_t num_comparators, std::uintptr_t layer_ptr,
                        std::uintptr_t cmin, std::uintptr_t cmax) {
  RELAXOPS_CHECK(n >= 1, "n must be >= 1");
  RELAXOPS_CHECK(num_layers >= 0 && num_comparators >= 0, "negative network size");
  return {n, num_layers, num_comparators, as_ptr<const int32_t>(layer_ptr), as_ptr<const int32_t>(cmin),
          as_ptr<const int32_t>(cmax)};
}

inline RelaxParams make_relax(int kind, double steepness, double art_lambda) {
  RELAXOPS_CHECK(kind >= 0 && kind < kNumRelaxations, "unknown relaxation id");
  return {kind, steepness, art_lambda};
}

// Packed logic network arguments, in this order everywhere: num_layers, widths, op_start (host int64 arrays),
// src_a, src_b, dst (int32), op (uint8) on the kernel's device (spec of PackedPlan in logic/packed.h).
inline PackedPlan make_plan(int64_t num_layers, std::uintptr_t widths, std::uintptr_t op_start, std::uintptr_t src_a,
                            std::uintptr_t src_b, std::uintptr_t dst, std::uintptr_t op) {
  RELAXOPS_CHECK(num_layers >= 1, "a packed network needs at least one layer");
  return {num_layers,          as_ptr<const int64_t>(widths), as_ptr<const int64_t>(op_start),
          as_ptr<const int32_t>(src_a), as_ptr<const int32_t>(src_b), as_ptr<const int32_t>(dst),
          as_ptr<const uint8_t>(op)};
}

// Calls F<float>::run or F<double>::run; dtype: 0 = float32, 1 = float64.
template <template <typename> class F, typename... Args>
auto dispatch(int dtype, Args... args) {
  RELAXOPS_CHECK(dtype == 0 || dtype == 1, "dtype must be 0 (float32) or 1 (float64)");
  if (dtype == 0) return F<float>::run(args...);
  return F<double>::run(args...);
}

}  // namespace relaxops
