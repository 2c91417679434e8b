// Shared by the CPU and CUDA code: host/device qualifiers and argument checks.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#if defined(__CUDACC__)
#define HOST_DEVICE __host__ __device__
#else
#define HOST_DEVICE
#endif

namespace relaxops {

// Throws std::invalid_argument (ValueError in Python) naming the failed invariant.
#define RELAXOPS_CHECK(cond, msg)                                                \
  do {                                                                           \
    if (!(cond)) throw std::invalid_argument(std::string("relaxops: ") + (msg)); \
  } while (0)

template <typename T>
inline T* as_ptr(std::uintptr_t p) {
  return reinterpret_cast<T*>(p);
}

}  // namespace relaxops
