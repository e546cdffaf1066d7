// The float32 GELU forward loop alone, one thread, in cache: float_math::normal_tail (kernels/activations.cuh)
// against its form before the clamp became an integer minimum and -x^2 / 2 was formed from -|x| / 2, in turn; then
// whether the two give the same bits over every float32 input.
//
//   g++ -O1 -ftree-vectorize -fvect-cost-model=dynamic -fno-trapping-math -ffp-contract=off -std=c++17 \
//       tools/cpu_gelu_loop.cpp -o /tmp/cpu_gelu_loop && /tmp/cpu_gelu_loop
//
// (The flags and the loop attribute are those of the build's AVX-512 loops: activations.py's CXX_FLAGS,
// ACTIVATIONS_CPU_WIDE_LOOP in kernels/cpu_kernels.cpp.)
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "../kernels/activations.cuh"

#define LOOP                                                                                          \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,prefer-vector-width=512"), \
                 optimize("gcse", "no-thread-jumps", "expensive-optimizations"), flatten, noinline))

using namespace activations;

// The tail as it was: a float compare and select for the clamp, x^2 and its rounding error each halved.
inline float tail_before(float x) {
  const float magnitude = fabsf(x);
  const float a = magnitude < 14.47f ? magnitude : 14.47f;
  const float square = a * a;
  const float e = float_math::exp_nonpositive_scaled(-0.5f * square, -0.5f * fmaf(a, a, -square));
  const float t = 1.0f / fmaf(a, 0.34375f, 1.0f);
  return e * (t * float_math::normal_tail_q(t));
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

template <class F>
double best_ns_per_element(F loop, int64_t n) {
  double best = 1e30;
  for (int call = 0; call < 2000; ++call) {
    const auto start = std::chrono::steady_clock::now();
    loop();
    best = std::min(best, std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count());
  }
  return best / n;
}

int main() {
  const int64_t n = 16384;  // 64 KiB in and out: in L2
  std::vector<float> x(n), y(n);
  std::mt19937 generator(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float& v : x) v = normal(generator);
  for (int round = 0; round < 3; ++round) {
    const double before = best_ns_per_element([&] { gelu_before(n, x.data(), y.data()); }, n);
    const double now = best_ns_per_element([&] { gelu_now(n, x.data(), y.data()); }, n);
    printf("round %d: before %.3f, now %.3f ns an element\n", round + 1, before, now);
  }
  const int64_t chunk = 1 << 20;
  std::vector<float> in(chunk), out_before(chunk), out_now(chunk);
  int64_t differ = 0;
  for (uint64_t base = 0; base < (1ull << 32); base += chunk) {
    for (int64_t i = 0; i < chunk; ++i) in[i] = float_from_bits(static_cast<uint32_t>(base + i));
    gelu_before(chunk, in.data(), out_before.data());
    gelu_now(chunk, in.data(), out_now.data());
    for (int64_t i = 0; i < chunk; ++i) differ += memcmp(&out_before[i], &out_now[i], sizeof(float)) != 0;
  }
  printf("every float32 input: %lld results differ in their bits\n", static_cast<long long>(differ));
}
