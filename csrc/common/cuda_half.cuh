// float16/bfloat16 loads and stores of the CUDA kernels that compute in float (or double): load_as<A>(p) reads
// *p as A, store_as<T>(v) writes v as T (round to nearest even); the plain types convert with static_cast.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common.h"

namespace relaxops {

template <typename A, typename T>
__host__ __device__ inline A load_as(const T* p) {
  return static_cast<A>(*p);
}
template <>
__device__ inline float load_as<float, __half>(const __half* p) {
  return __half2float(*p);
}
template <>
__device__ inline float load_as<float, __nv_bfloat16>(const __nv_bfloat16* p) {
  return __bfloat162float(*p);
}

template <typename T, typename A>
__device__ inline T store_as(A v) {
  return static_cast<T>(v);
}
template <>
__device__ inline __half store_as<__half, float>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ inline __nv_bfloat16 store_as<__nv_bfloat16, float>(float v) {
  return __float2bfloat16_rn(v);
}

// Calls f(T{}, A{}) for the data type code (0 float32, 1 float64, 2 float16, 3 bfloat16): T the storage type, A
// the arithmetic type (double for float64, else float).
template <typename F>
void by_dtype(int dtype, F&& f) {
  switch (dtype) {
    case 0: return f(float{}, float{});
    case 1: return f(double{}, double{});
    case 2: return f(__half{}, float{});
    case 3: return f(__nv_bfloat16{}, float{});
    default: RELAXOPS_CHECK(false, "dtype must be 0..3 (float32, float64, float16, bfloat16)");
  }
}

}  // namespace relaxops
