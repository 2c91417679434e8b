// STUB (being implemented): packed inference on the CPU, see packed.h.
#include "packed.h"

namespace relaxops {

int logic_simd_best() { return 0; }
void logic_pack_cpu(const uint8_t*, int64_t, int64_t, uint64_t*, int) {
  RELAXOPS_CHECK(false, "logic_pack_cpu: not implemented yet");
}
void logic_unpack_cpu(const uint64_t*, int64_t, int64_t, uint8_t*, int) {
  RELAXOPS_CHECK(false, "logic_unpack_cpu: not implemented yet");
}
void logic_packed_layers_cpu(const PackedPlan&, int64_t, const uint64_t*, uint64_t*, int, int) {
  RELAXOPS_CHECK(false, "logic_packed_layers_cpu: not implemented yet");
}
void logic_group_count_cpu(const uint64_t*, int64_t, int64_t, int64_t, int32_t*, int, int) {
  RELAXOPS_CHECK(false, "logic_group_count_cpu: not implemented yet");
}
void logic_packed_forward_cpu(const PackedPlan&, int64_t, const uint64_t*, const uint8_t*, int64_t, int32_t*, int,
                              int) {
  RELAXOPS_CHECK(false, "logic_packed_forward_cpu: not implemented yet");
}

}  // namespace relaxops
