// What the CPU loop tools (cpu_gelu_loop.cpp, cpu_gelu_table.cpp, cpu_sigmoid_loop.cpp, cpu_gelu_float64_loop.cpp)
// share: the build's loop attributes, AVX-512 (LOOP) and AVX2 (AVX2_LOOP) (ACTIVATIONS_CPU_LOOP_FOR and
// ACTIVATIONS_CPU_WIDE_LOOP in kernels/cpu_kernels.cpp, kept out of line here; compile with activations.py's
// CXX_FLAGS, as the tools' headers say), the best time of many calls of a loop over n elements, in ns an element, a
// walk over float32 inputs and the ulp measure of the tests.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <chrono>
#include <vector>

#define LOOP_FOR(isa) \
  __attribute__((target(isa), optimize("gcse", "no-thread-jumps", "expensive-optimizations"), flatten, noinline))
#define LOOP LOOP_FOR("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,prefer-vector-width=512")
#define AVX2_LOOP LOOP_FOR("avx2,fma,f16c")

template <class F>
double best_ns_per_element(F loop, int64_t n, int calls) {
  double best = 1e30;
  for (int call = 0; call < calls; ++call) {
    const auto start = std::chrono::steady_clock::now();
    loop();
    best = std::min(best, std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count());
  }
  return best / n;
}

// Calls check(in, n) on the float32 inputs whose bit patterns are the multiples of stride (all 2^32 at stride 1),
// 2^16 of them at a time.
template <class Check>
void for_float32_inputs(uint64_t stride, Check check) {
  const int64_t chunk = 1 << 16;
  std::vector<float> in(chunk);
  for (uint64_t base = 0; base < (1ull << 32); base += chunk * stride) {
    int64_t n = 0;
    for (; n < chunk && base + n * stride < (1ull << 32); ++n) {
      const uint32_t bits = uint32_t(base + n * stride);
      memcpy(&in[n], &bits, sizeof bits);
    }
    check(in.data(), n);
  }
}

// |actual - exact| in ulps of float at max(|exact|, 2^floor_exponent), as test_activations.py counts them.
inline long double float_ulps(float actual, long double exact, int floor_exponent) {
  const int exponent = std::max(exact == 0 ? floor_exponent : ilogbl(exact), floor_exponent);
  return fabsl(static_cast<long double>(actual) - exact) / ldexpl(1.0L, exponent - 23);
}
