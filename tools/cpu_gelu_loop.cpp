// The float32 GELU forward loop alone, one thread, in cache: float_math::normal_tail (kernels/activations.cuh)
// against its form before its exponential became half_square_exp_scaled (-a^2 / 2 in two parts, then
// exp_nonpositive_scaled), in turn; then both forms' largest error in ulps over every STRIDE-th float32 input
// (default 1: all 2^32, about 10 minutes a form) against x erfc(-x / sqrt(2)) / 2 in long double, counted as
// test_activations.py counts GELU's (at max(|exact|, 2^-100)), and the exponentials' own over every a in
// [0, 14.47] where the result is normal.
//
//   g++ -O1 -ftree-vectorize -fvect-cost-model=dynamic -fno-trapping-math -ffp-contract=off -std=c++17 \
//       tools/cpu_gelu_loop.cpp -o /tmp/cpu_gelu_loop && /tmp/cpu_gelu_loop [STRIDE]
//
// (The flags and the loop attribute are those of the build's AVX-512 loops: activations.py's CXX_FLAGS,
// ACTIVATIONS_CPU_WIDE_LOOP in kernels/cpu_kernels.cpp.)
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "../kernels/activations.cuh"
#include "cpu_loop.h"

using namespace activations;

// The exponential as it was: -a^2 / 2 = hi + lo from -a / 2 (exact), then exp_nonpositive_scaled.
inline float exp_before(float a) {
  const float minus_half_a = -0.5f * a;
  const float hi = minus_half_a * a;
  return float_math::exp_nonpositive_scaled(hi, fmaf(minus_half_a, a, -hi));
}
inline float tail_before(float x) {
  const float a = float_math::tail_magnitude(x);
  const float t = reciprocal_at_least_one(fmaf(a, 0.34375f, 1.0f));
  return exp_before(a) * (t * float_math::normal_tail_q(t));
}

LOOP void gelu_before(int64_t n, const float* __restrict x, float* __restrict y) {
  for (int64_t i = 0; i < n; ++i) {
    const float tail = tail_before(x[i]);
    y[i] = x[i] * (x[i] < 0.0f ? tail : 1.0f - tail);
  }
}
LOOP void gelu_now(int64_t n, const float* __restrict x, float* __restrict y) {
  for (int64_t i = 0; i < n; ++i) {
    const float tail = float_math::normal_tail(x[i]).tail;
    y[i] = x[i] * (x[i] < 0.0f ? tail : 1.0f - tail);
  }
}


template <class Loop>
void forward_error(const char* name, Loop loop, uint64_t stride) {
  std::vector<float> out(1 << 16);
  long double worst = 0;
  float at = 0;
  for_float32_inputs(stride, [&](const float* in, int64_t n) {
    loop(n, in, out.data());
    for (int64_t i = 0; i < n; ++i) {
      const long double x = in[i];
      if (!isfinite(in[i])) continue;
      const long double e = float_ulps(out[i], x * erfcl(-x / sqrtl(2.0L)) / 2, -100);
      if (e > worst) worst = e, at = in[i];
    }
  });
  printf("%s: forward within %.3Lf ulp (largest at x = %.9g)\n", name, worst, at);
}

int main(int argc, char** argv) {
  const uint64_t stride = argc > 1 ? strtoull(argv[1], nullptr, 10) : 1;
  const int64_t n = 16384;  // 64 KiB in and out: in L2
  std::vector<float> x(n), y(n);
  std::mt19937 generator(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float& v : x) v = normal(generator);
  for (int round = 0; round < 3; ++round) {
    const double before = best_ns_per_element([&] { gelu_before(n, x.data(), y.data()); }, n, 2000);
    const double now = best_ns_per_element([&] { gelu_now(n, x.data(), y.data()); }, n, 2000);
    printf("round %d: before %.3f, now %.3f ns an element\n", round + 1, before, now);
  }
  fflush(stdout);
  forward_error("before", gelu_before, stride);
  forward_error("now", gelu_now, stride);
  long double worst_before = 0, worst_now = 0;
  for (uint32_t bits = 0; bits <= bits_of(14.47f); ++bits) {
    const float a = float_from_bits(bits);
    const long double exact = expl(-static_cast<long double>(a) * a / 2) * 16777216.0L;
    if (exact < 1.17549435e-38L) break;  // a subnormal result: a is past 14.4
    worst_before = std::max(worst_before, float_ulps(exp_before(a), exact, -126));
    worst_now = std::max(worst_now, float_ulps(float_math::half_square_exp_scaled(a), exact, -126));
  }
  printf("2^24 exp(-a^2 / 2), every a where it is normal: before within %.3Lf ulp, now %.3Lf\n", worst_before,
         worst_now);
}
