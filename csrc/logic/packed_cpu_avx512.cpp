// STUB (being implemented): AVX-512 variant of the packed kernels (compiled with -mavx512f -mavx512bw on x86-64).
#include "packed.h"
