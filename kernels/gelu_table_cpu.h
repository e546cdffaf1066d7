// The float32 GELU (erf form) forward on AVX-512 CPUs by a table of polynomials (gelu_table_cpu.cpp, a unit of
// its own: it includes immintrin.h, which the other units avoid for their compile time). Plain types only, as
// kernels.h.
#pragma once

#include <stdint.h>

namespace activations {

// The generic loop of the float32 GELU forward (cpu_kernels.cpp): y[i] = gelu(x[i]) for i < n.
using GeluLoop = void (*)(int64_t n, const float* x, float* y);

// y[i] = gelu(x[i]) for i < n, y either x itself or disjoint from it: by the table where x[i] >= -4.75 (or NaN), by
// `generic` elsewhere. Defined where ACTIVATIONS_CPU_AVX512 is.
void gelu_forward_by_table(int64_t n, const float* x, float* y, GeluLoop generic);

}  // namespace activations
