// What the CPU loop tools (cpu_gelu_loop.cpp, cpu_sigmoid_loop.cpp) share: the build's AVX-512 loop attribute
// (ACTIVATIONS_CPU_WIDE_LOOP in kernels/cpu_kernels.cpp; compile with activations.py's CXX_FLAGS, as the tools'
// headers say) and the best time of many calls of a loop over n elements, in ns an element.
#pragma once

#include <stdint.h>

#include <algorithm>
#include <chrono>

#define LOOP                                                                                          \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,prefer-vector-width=512"), \
                 optimize("gcse", "no-thread-jumps", "expensive-optimizations"), flatten, noinline))

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
