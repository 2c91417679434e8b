// STUB (being implemented): AVX2 variant of the packed kernels (compiled with -mavx2 on x86-64).
#include "packed.h"
