// OpenMP thread count of a CPU kernel call: the requested count, or OpenMP's default for 0 (1 without OpenMP).
#pragma once

#ifdef _OPENMP
#include <omp.h>
#endif

namespace relaxops {

inline int cpu_threads(int requested) {
#ifdef _OPENMP
  return requested > 0 ? requested : omp_get_max_threads();
#else
  (void)requested;
  return 1;
#endif
}

}  // namespace relaxops
