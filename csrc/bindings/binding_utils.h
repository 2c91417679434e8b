// Argument conversion shared by the CPU and CUDA bindings (torch-free: raw addresses and sizes).
#pragma once

#include <cstdint>

#include "../common/relax.h"
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

// Calls F<float>::run or F<double>::run; dtype: 0 = float32, 1 = float64.
template <template <typename> class F, typename... Args>
auto dispatch(int dtype, Args... args) {
  RELAXOPS_CHECK(dtype == 0 || dtype == 1, "dtype must be 0 (float32) or 1 (float64)");
  if (dtype == 0) return F<float>::run(args...);
  return F<double>::run(args...);
}

}  // namespace relaxops
