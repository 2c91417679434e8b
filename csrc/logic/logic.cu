// STUB (being implemented): training kernels on CUDA, see logic.h.
#include "logic.h"

namespace relaxops {

void logic_forward_cuda(int, int64_t, int64_t, int64_t, const void*, const int64_t*, const int64_t*, const void*,
                        void*, std::uintptr_t) {
  RELAXOPS_CHECK(false, "logic_forward_cuda: not implemented yet");
}
void logic_backward_cuda(int, int64_t, int64_t, int64_t, const void*, const int64_t*, const int64_t*, const void*,
                         const void*, const int64_t*, const int64_t*, void*, void*, std::uintptr_t) {
  RELAXOPS_CHECK(false, "logic_backward_cuda: not implemented yet");
}

}  // namespace relaxops
