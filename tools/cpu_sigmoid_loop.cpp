// The float32 sigmoid forward and SiLU forward and backward loops alone, one thread, 16384 elements in cache, in ns
// an element (the best of 3000 calls): the CPU's sigmoid_parts (kernels/activations.cuh) as the build compiles it.
// Run it in two trees to compare them:
//
//   g++ -O1 -ftree-vectorize -fvect-cost-model=dynamic -fno-trapping-math -ffp-contract=off -std=c++17 \
//       tools/cpu_sigmoid_loop.cpp -o /tmp/cpu_sigmoid_loop && /tmp/cpu_sigmoid_loop
//
// (The flags and the loop attribute are those of the build's AVX-512 loops: activations.py's CXX_FLAGS,
// ACTIVATIONS_CPU_WIDE_LOOP in kernels/cpu_kernels.cpp.)
#include <stdio.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "../kernels/activations.cuh"
#include "cpu_loop.h"

using namespace activations;

LOOP void sigmoid_forward(int64_t n, const float* __restrict x, float* __restrict y) {
  const Sigmoid<float> f(nullptr);
  for (int64_t i = 0; i < n; ++i) y[i] = f.forward(x[i]);
}
LOOP void silu_forward(int64_t n, const float* __restrict x, float* __restrict y) {
  const Silu<float> f(nullptr);
  for (int64_t i = 0; i < n; ++i) y[i] = f.forward(x[i]);
}
LOOP void silu_backward(int64_t n, const float* __restrict x, const float* __restrict g, float* __restrict y) {
  const Silu<float> f(nullptr);
  for (int64_t i = 0; i < n; ++i) y[i] = f.backward(g[i], x[i]);
}


int main() {
  const int64_t n = 16384;
  std::vector<float> x(n), g(n), y(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float& v : x) v = normal(rng);
  for (float& v : g) v = normal(rng);
  printf("ns an element: sigmoid forward %.4f, silu forward %.4f, silu backward %.4f\n",
         best_ns_per_element([&] { sigmoid_forward(n, x.data(), y.data()); }, n, 3000),
         best_ns_per_element([&] { silu_forward(n, x.data(), y.data()); }, n, 3000),
         best_ns_per_element([&] { silu_backward(n, x.data(), g.data(), y.data()); }, n, 3000));
}
