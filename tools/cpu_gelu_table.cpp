// The float32 GELU forward on AVX-512 CPUs: the table form (kernels/gelu_table_cpu.cpp) against the generic loop
// (float_math::normal_tail, what the other CPUs and the GPU run), one thread, in cache, in turn, on inputs of
// several spreads: normal with standard deviation 1, 2, 3 and 5, and uniform on [-6, 6], [-9, 9] and [-12, 12] (the
// share of elements below the table's -4.75, which take the generic formula as well, is printed); GELU_N elements
// (environment; default 16384, in L2: 4194304 times them out of cache). Then the table
// form's largest error in ulps over every STRIDE-th float32 input (default 1: all 2^32, about 10 minutes) against
// x erfc(-x / sqrt(2)) / 2 in long double, counted as test_activations.py counts GELU's (at max(|exact|, 2^-100)),
// both over all inputs and over those the table computes (x >= -4.75), and whether every result is the same when
// the input's element sits at each of the 16 lanes of a vector and in a block among elements below -4.75.
//
//   g++ -O1 -ftree-vectorize -fvect-cost-model=dynamic -fno-trapping-math -ffp-contract=off -std=c++17 \
//       -DACTIVATIONS_CPU_AVX512 tools/cpu_gelu_table.cpp -o /tmp/cpu_gelu_table && /tmp/cpu_gelu_table [STRIDE]
//
// (The flags are those of the build's CPU units: activations.py's CXX_FLAGS and cpu_flags() on an AVX-512 CPU.)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <random>
#include <vector>

#include "../kernels/activations.cuh"
#include "../kernels/gelu_table_cpu.cpp"
#include "cpu_loop.h"

using namespace activations;

LOOP void gelu_generic(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const float tail = float_math::normal_tail(x[i]).tail;
    y[i] = x[i] * (x[i] < 0.0f ? tail : 1.0f - tail);
  }
}
void gelu_table(int64_t n, const float* x, float* y) { gelu_forward_by_table(n, x, y, gelu_generic); }

void timings() {
  const int64_t n = getenv("GELU_N") ? atoll(getenv("GELU_N")) : 16384;  // 64 KiB in and out: in L2
  std::vector<float> x(n), y(n);
  for (float spread : {1.0f, 2.0f, 3.0f, 5.0f, -6.0f, -9.0f, -12.0f}) {  // negative: uniform on [spread, -spread]
    std::mt19937 generator(1);
    std::normal_distribution<float> normal(0.0f, spread);
    std::uniform_real_distribution<float> uniform(spread, -spread);
    int64_t below = 0;
    for (float& v : x) {
      v = spread > 0 ? normal(generator) : uniform(generator);
      below += v < kTableFrom;
    }
    double generic = 1e30, table = 1e30;
    for (int round = 0; round < 5; ++round) {
      generic = std::min(generic, best_ns_per_element([&] { gelu_generic(n, x.data(), y.data()); }, n, 400));
      table = std::min(table, best_ns_per_element([&] { gelu_table(n, x.data(), y.data()); }, n, 400));
    }
    printf("%s %4.1f (%5.2f %% below -4.75): generic %.3f, table %.3f ns an element\n",
           spread > 0 ? "normal, deviation" : "uniform, half-width", fabsf(spread), 100.0 * below / n, generic, table);
  }
  fflush(stdout);
}

int main(int argc, char** argv) {
  const uint64_t stride = argc > 1 ? strtoull(argv[1], nullptr, 10) : 1;
  timings();
  std::vector<float> out(1 << 16), alone(16), far(16, -9.0f), mixed(16);
  long double worst = 0, worst_table = 0;
  float at = 0, at_table = 0;
  int64_t moved = 0;
  for_float32_inputs(stride, [&](const float* in, int64_t n) {
    gelu_table(n, in, out.data());
    for (int64_t i = 0; i < n; ++i) {
      if (i % 997 == 0) {  // the same bits at another lane, alone, and among elements below -4.75
        const int lane = int(i % 16);
        gelu_table(lane + 1, far.data(), alone.data());
        memcpy(mixed.data(), far.data(), sizeof(float) * 16);
        mixed[lane] = in[i];
        gelu_table(16, mixed.data(), alone.data());
        moved += memcmp(&alone[lane], &out[i], sizeof(float)) != 0;
      }
      if (!isfinite(in[i])) continue;
      const long double x = in[i];
      const long double e = float_ulps(out[i], x * erfcl(-x / sqrtl(2.0L)) / 2, -100);
      if (e > worst) worst = e, at = in[i];
      if (in[i] >= kTableFrom && e > worst_table) worst_table = e, at_table = in[i];
    }
  });
  printf("table form: forward within %.3Lf ulp (largest at x = %.9g); where x >= -4.75, %.3Lf (at x = %.9g)\n", worst,
         at, worst_table, at_table);
  printf("elements whose result changed with their lane and neighbours: %lld\n", static_cast<long long>(moved));
}
