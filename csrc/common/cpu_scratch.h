// Per-thread scratch shared by the CPU kernels.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace relaxops {

// Grow-only scratch of the calling thread, one buffer per slot: reused across calls, so a call does not pay
// for allocation, zeroing or first-touch page faults of its work buffers (the pool's threads persist). A kernel
// must not hold two pointers to the same <slot, T> at once.
template <int kSlot, typename T>
T* thread_scratch(int64_t count) {
  thread_local std::vector<unsigned char> buf;
  const size_t bytes = size_t(std::max<int64_t>(count, 1)) * sizeof(T);
  if (buf.size() < bytes) buf.resize(bytes);
  return reinterpret_cast<T*>(buf.data());
}

}  // namespace relaxops
