// STUB (being implemented): packed inference on CUDA, see packed.h.
#include "packed.h"

namespace relaxops {

void logic_pack_cuda(const uint8_t*, int64_t, int64_t, uint64_t*, std::uintptr_t) {
  RELAXOPS_CHECK(false, "logic_pack_cuda: not implemented yet");
}
void logic_unpack_cuda(const uint64_t*, int64_t, int64_t, uint8_t*, std::uintptr_t) {
  RELAXOPS_CHECK(false, "logic_unpack_cuda: not implemented yet");
}
int64_t logic_packed_layers_cuda_workspace(const PackedPlan&, int64_t) { return 0; }
void logic_packed_layers_cuda(const PackedPlan&, int64_t, const uint64_t*, uint64_t*, uint64_t*, std::uintptr_t) {
  RELAXOPS_CHECK(false, "logic_packed_layers_cuda: not implemented yet");
}
void logic_group_count_cuda(const uint64_t*, int64_t, int64_t, int64_t, int32_t*, std::uintptr_t) {
  RELAXOPS_CHECK(false, "logic_group_count_cuda: not implemented yet");
}

}  // namespace relaxops
