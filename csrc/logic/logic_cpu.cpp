// STUB (being implemented): training kernels on the CPU, see logic.h.
#include "logic.h"

namespace relaxops {

template <typename T>
void logic_forward_cpu(int64_t, int64_t, int64_t, const T*, const int64_t*, const int64_t*, const T*, T*) {
  RELAXOPS_CHECK(false, "logic_forward_cpu: not implemented yet");
}
template <typename T>
void logic_backward_cpu(int64_t, int64_t, int64_t, const T*, const int64_t*, const int64_t*, const T*, const T*,
                        const int64_t*, const int64_t*, T*, T*) {
  RELAXOPS_CHECK(false, "logic_backward_cpu: not implemented yet");
}

template void logic_forward_cpu<float>(int64_t, int64_t, int64_t, const float*, const int64_t*, const int64_t*,
                                       const float*, float*);
template void logic_forward_cpu<double>(int64_t, int64_t, int64_t, const double*, const int64_t*, const int64_t*,
                                        const double*, double*);
template void logic_backward_cpu<float>(int64_t, int64_t, int64_t, const float*, const int64_t*, const int64_t*,
                                        const float*, const float*, const int64_t*, const int64_t*, float*, float*);
template void logic_backward_cpu<double>(int64_t, int64_t, int64_t, const double*, const int64_t*, const int64_t*,
                                         const double*, const double*, const int64_t*, const int64_t*, double*,
                                         double*);

}  // namespace relaxops
