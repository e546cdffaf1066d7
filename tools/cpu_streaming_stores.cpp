// Plain against streaming (non-temporal) stores for a float32 ReLU on the CPU, alone and followed by a consumer
// that reads its output (z = 2 y + z): the measurement behind the threshold of kernels/cpu_kernels.cpp's streaming
// stores (the L3 cache's size). AVX-512; the least of many calls, OpenMP threads as OMP_NUM_THREADS says.
//
//   g++ -O2 -fopenmp tools/cpu_streaming_stores.cpp -o /tmp/streaming && OMP_NUM_THREADS=2 /tmp/streaming $((1<<22))
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

__attribute__((target("avx512f"), noinline)) void relu_plain(const float* x, float* y, long n) {
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; i += 16) _mm512_storeu_ps(y + i, _mm512_max_ps(_mm512_loadu_ps(x + i), _mm512_setzero_ps()));
}

__attribute__((target("avx512f"), noinline)) void relu_streamed(const float* x, float* y, long n) {
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; i += 16) _mm512_stream_ps(y + i, _mm512_max_ps(_mm512_load_ps(x + i), _mm512_setzero_ps()));
  _mm_sfence();
}

// The consumer: z = 2 y + z, plain stores.
__attribute__((target("avx512f"), noinline)) void consume(const float* y, float* z, long n) {
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; i += 16) {
    _mm512_storeu_ps(z + i, _mm512_fmadd_ps(_mm512_loadu_ps(y + i), _mm512_set1_ps(2.0f), _mm512_loadu_ps(z + i)));
  }
}

// Microseconds of the fastest of `calls` calls of f.
template <class F>
double least_us(F f, int calls) {
  double least = 1e18;
  for (int c = 0; c < calls; ++c) {
    const auto start = std::chrono::steady_clock::now();
    f();
    least = std::min(least, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  return least;
}

int main(int argc, char** argv) {
  const long n = argc > 1 ? atol(argv[1]) : 1L << 22;  // a multiple of 16
  float* x = static_cast<float*>(aligned_alloc(64, n * 4));
  float* y = static_cast<float*>(aligned_alloc(64, n * 4));
  float* z = static_cast<float*>(aligned_alloc(64, n * 4));
  for (long i = 0; i < n; ++i) x[i] = (i % 7) - 3.0f, y[i] = 0, z[i] = 0;
  const int calls = n <= (1L << 20) ? 300 : 30;
  for (int round = 0; round < 3; ++round) {
    const double plain = least_us([&] { relu_plain(x, y, n); }, calls);
    const double streamed = least_us([&] { relu_streamed(x, y, n); }, calls);
    const double plain_pair = least_us([&] { relu_plain(x, y, n), consume(y, z, n); }, calls);
    const double streamed_pair = least_us([&] { relu_streamed(x, y, n), consume(y, z, n); }, calls);
    printf("n=2^%d threads=%d  relu: plain %.0f nt %.0f us (nt/plain %.2f) | relu+consumer: plain %.0f nt %.0f us "
           "(%.2f)\n", __builtin_ctzl(n), omp_get_max_threads(), plain, streamed, streamed / plain, plain_pair,
           streamed_pair, streamed_pair / plain_pair);
  }
}
