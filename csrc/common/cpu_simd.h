// SIMD dispatch of CPU kernels shared by the families.
#pragma once

// GCC on x86-64 compiles a function so marked for AVX-512, AVX2 and baseline x86-64, and picks the clone at load
// time (ifunc); elsewhere the function is compiled once for the build's target.
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define RELAXOPS_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define RELAXOPS_SIMD_CLONES
#endif
