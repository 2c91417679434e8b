// AVX2 instantiation of the packed engine (4 words a vector); compiled with -mavx2, called only when the CPU
// has AVX2 (packed_cpu.cpp).
#define RELAXOPS_PACKED_NS packed_avx2
#define RELAXOPS_PACKED_LANES 4
#include "packed_kernels.h"
