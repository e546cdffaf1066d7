// The float64 GELU (erf form) loops alone, one thread, in cache: forward x Phi(x) and backward g (Phi(x) + x phi(x))
// from host_double::normal (kernels/activations.cuh), each built for AVX2 + FMA and for AVX-512 as the library's
// loops are (the flags and loop attributes of activations.py's CXX_FLAGS and ACTIVATIONS_CPU_WIDE_LOOP), over 4096
// inputs from a normal distribution of standard deviation SCALE (default 1). Prints the best of ten rounds of 1000
// calls, ns an element. -I picks the header: a tree of another commit compares its form with this one's.
//
//   g++ -O1 -ftree-vectorize -fvect-cost-model=dynamic -fno-trapping-math -ffp-contract=off -std=c++17 \
//       -I kernels tools/cpu_gelu_float64_loop.cpp -o /tmp/gelu64 && taskset -c 1 /tmp/gelu64 [SCALE]
#include <stdio.h>
#include <stdlib.h>

#include <random>
#include <vector>

#include "activations.cuh"
#include "cpu_loop.h"

using namespace activations;

#define GELU64_LOOPS(SUFFIX, ATTRIBUTES)                                                                 \
  ATTRIBUTES void forward_##SUFFIX(int64_t n, const double* __restrict x, double* __restrict y) {        \
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * host_double::normal(x[i]).cdf;                         \
  }                                                                                                      \
  ATTRIBUTES void backward_##SUFFIX(int64_t n, const double* __restrict g, const double* __restrict x,  \
                                    double* __restrict y) {                                              \
    for (int64_t i = 0; i < n; ++i) {                                                                    \
      const host_double::NormalCdfPdf p = host_double::normal(x[i]);                                     \
      y[i] = g[i] * fma(x[i], p.pdf, p.cdf);                                                             \
    }                                                                                                    \
  }
GELU64_LOOPS(avx2, AVX2_LOOP)
GELU64_LOOPS(avx512, LOOP)

int main(int argc, char** argv) {
  const int64_t n = 4096;
  const double scale = argc > 1 ? atof(argv[1]) : 1.0;
  std::vector<double> x(n), g(n), y(n);
  std::mt19937 rng(1);
  std::normal_distribution<double> normal;
  for (double& v : x) v = normal(rng) * scale;
  for (double& v : g) v = normal(rng);
  double best[4] = {1e30, 1e30, 1e30, 1e30};
  for (int round = 0; round < 10; ++round) {
    const double times[4] = {
        best_ns_per_element([&] { forward_avx2(n, x.data(), y.data()); }, n, 1000),
        best_ns_per_element([&] { backward_avx2(n, g.data(), x.data(), y.data()); }, n, 1000),
        best_ns_per_element([&] { forward_avx512(n, x.data(), y.data()); }, n, 1000),
        best_ns_per_element([&] { backward_avx512(n, g.data(), x.data(), y.data()); }, n, 1000)};
    for (int k = 0; k < 4; ++k) best[k] = std::min(best[k], times[k]);
  }
  printf("scale %g, ns an element: AVX2 forward %.2f backward %.2f; AVX-512 forward %.2f backward %.2f\n", scale,
         best[0], best[1], best[2], best[3]);
}
