// Plain against streaming (non-temporal) stores for a float32 ReLU on the CPU, alone and followed by a consumer
// that reads its output (z = 2 y + z): the measurement behind the threshold of kernels/cpu_kernels.cpp's streaming
// stores (the L3 cache's size). AVX-512; the least of many calls, OpenMP threads as OMP_NUM_THREADS says.
//
//   g++ -O2 -fopenmp tools/cpu_streaming_stores.cpp -o /tmp/streaming && OMP_NUM_THREADS=2 /tmp/streaming $((1<<22))
#include <immintrin.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <omp.h>
__attribute__((target("avx512f"), noinline)) void relu_plain(const float* __restrict x, float* __restrict y, long n) {
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; i += 16) _mm512_storeu_ps(y + i, _mm512_max_ps(_mm512_loadu_ps(x + i), _mm512_setzero_ps()));
}
__attribute__((target("avx512f"), noinline)) void relu_nt(const float* __restrict x, float* __restrict y, long n) {
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; i += 16) _mm512_stream_ps(y + i, _mm512_max_ps(_mm512_load_ps(x + i), _mm512_setzero_ps()));
  _mm_sfence();
}
// the consumer: z = y * 2 + z  (reads y and z, writes z), plain stores
__attribute__((target("avx512f"), noinline)) void consume(const float* __restrict y, float* __restrict z, long n) {
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; i += 16) _mm512_storeu_ps(z + i, _mm512_fmadd_ps(_mm512_loadu_ps(y + i), _mm512_set1_ps(2.0f), _mm512_loadu_ps(z + i)));
}
template <class F> double best(F f, int reps) {
  double b = 1e18;
  for (int r = 0; r < reps; ++r) { auto t0 = std::chrono::steady_clock::now(); f(); b = std::min(b, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count()); }
  return b;
}
int main(int argc, char** argv) {
  long n = atol(argv[1]);
  float* x = (float*)aligned_alloc(64, n * 4); float* y = (float*)aligned_alloc(64, n * 4); float* z = (float*)aligned_alloc(64, n * 4);
  for (long i = 0; i < n; ++i) { x[i] = (i % 7) - 3.0f; y[i] = 0; z[i] = 0; }
  int reps = n <= (1 << 20) ? 300 : 30;
  for (int round = 0; round < 3; ++round) {
    double a = best([&] { relu_plain(x, y, n); }, reps);
    double b = best([&] { relu_nt(x, y, n); }, reps);
    double c = best([&] { relu_plain(x, y, n); consume(y, z, n); }, reps);
    double d = best([&] { relu_nt(x, y, n); consume(y, z, n); }, reps);
    printf("n=2^%d threads=%d  relu: plain %.0f nt %.0f us (nt/plain %.2f) | relu+consumer: plain %.0f nt %.0f us (%.2f)\n", __builtin_ctzl(n), omp_get_max_threads(), a, b, b / a, c, d, d / c);
  }
}
