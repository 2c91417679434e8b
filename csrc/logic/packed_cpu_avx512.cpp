// AVX-512 instantiation of the packed engine (8 words a vector); compiled with -mavx512f..., called only when the
// CPU has AVX-512F/BW/VL (packed_cpu.cpp).
#define RELAXOPS_PACKED_NS packed_avx512
#define RELAXOPS_PACKED_LANES 8
#include "packed_kernels.h"
