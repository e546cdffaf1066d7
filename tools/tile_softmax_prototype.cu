// Candidate column-tile softmax forward: tile (n rows x 64 bytes) copied by cp.async 16 B at a time, stats from
// shared memory, written 16 B at a time. Compared with a plain copy of the same bytes.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

__device__ __forceinline__ void cp16(void* s, const void* g) {
  unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(s));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(a), "l"(g) : "memory");
}
__device__ __forceinline__ float ld(float v) { return v; }
__device__ __forceinline__ float ld(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class S> __device__ __forceinline__ S st(float v);
template <> __device__ __forceinline__ float st<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 st<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <class S, int E> struct alignas(16) Chunk { S v[E]; };

template <class S, int T, int MODE>
__global__ void __launch_bounds__(T) tile_fwd(const S* __restrict__ x, S* __restrict__ y, int n, long inner, int width, long tiles) {
  constexpr int E = 16 / sizeof(S);
  extern __shared__ __align__(16) unsigned char mem[];
  S* tile = reinterpret_cast<S*>(mem);
  __shared__ float partial[T];
  __shared__ float col_m[128], col_s[128];
  const int cpr = width / E;
  const long outer = blockIdx.x / tiles, first = (blockIdx.x % tiles) * (long)width;
  const long base = outer * n * inner + first;
  const int chunks = n * cpr;
  for (int c = threadIdx.x; c < chunks; c += T) {
    const int r = c / cpr, q = c % cpr;
    cp16(tile + r * width + q * E, x + base + r * inner + q * E);
  }
  asm volatile("cp.async.wait_all;" ::: "memory");
  __syncthreads();
  const int lane = threadIdx.x % width, group = threadIdx.x / width, groups = T / width;
  float m = -INFINITY;
  if (group < groups)
    for (int j = group; j < n; j += groups) m = fmaxf(m, ld(tile[j * width + lane]));
  partial[threadIdx.x] = m;
  __syncthreads();
  m = partial[lane];
  for (int k = 1; k < groups; ++k) m = fmaxf(m, partial[k * width + lane]);
  __syncthreads();
  float s = 0, lost = 0;
  if (group < groups)
    for (int j = group; j < n; j += groups) {
      const float term = __expf(ld(tile[j * width + lane]) - m) - lost;
      const float sum = s + term;
      lost = (sum - s) - term;
      s = sum;
    }
  partial[threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.x < width) {
    float r = partial[lane];
    for (int k = 1; k < groups; ++k) r += partial[k * width + lane];
    col_m[lane] = m;
    col_s[lane] = 1.0f / r;
  }
  __syncthreads();
  const int q = threadIdx.x % cpr;  // fixed: T % cpr == 0
  float mm[E], ss[E];
#pragma unroll
  for (int k = 0; k < E; ++k) { mm[k] = col_m[q * E + k]; ss[k] = col_s[q * E + k]; }
#pragma unroll 4
  for (int c = threadIdx.x; c < chunks; c += T) {
    const int r = c / cpr;
    const Chunk<S, E> v = *reinterpret_cast<const Chunk<S, E>*>(tile + r * width + q * E);
    Chunk<S, E> o;
#pragma unroll
    for (int k = 0; k < E; ++k) o.v[k] = st<S>(__expf(ld(v.v[k]) - mm[k]) * ss[k]);
    *reinterpret_cast<Chunk<S, E>*>(y + base + r * inner + q * E) = o;
  }
}

__global__ void plain_copy(const uint4* x, uint4* y, long n16) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n16; i += (long)gridDim.x * blockDim.x) y[i] = x[i];
}

template <class F> float time_ms(F f) {
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  for (int i = 0; i < 3; ++i) f();
  std::vector<float> t;
  for (int i = 0; i < 15; ++i) { cudaEventRecord(a); f(); cudaEventRecord(b); cudaEventSynchronize(b); float ms; cudaEventElapsedTime(&ms, a, b); t.push_back(ms); }
  std::sort(t.begin(), t.end());
  cudaError_t e = cudaGetLastError(); if (e) { printf("error %s\n", cudaGetErrorString(e)); exit(1); }
  return t[t.size() / 2];
}

template <class S, int T>
void run(const char* name, long O, int n, long inner, int widthbytes, double floor_ms) {
  long elems = O * n * inner;
  S *x, *y; cudaMalloc(&x, elems * sizeof(S)); cudaMalloc(&y, elems * sizeof(S));
  cudaMemset(x, 0, elems * sizeof(S));
  int width = widthbytes / sizeof(S);
  long tiles = inner / width;
  size_t sm = (size_t)n * widthbytes;
  auto k = tile_fwd<S, T, 0>;
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
  int occ = 0; cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k, T, sm);
  float ms = time_ms([&] { k<<<O * tiles, T, sm>>>(x, y, n, inner, width, tiles); });
  printf("%-8s tile %3d B x %d rows, T %d, occ %d: %.3f ms  %.1f %% of copy\n", name, widthbytes, n, T, occ, ms, 100 * floor_ms / ms);
  cudaFree(x); cudaFree(y);
}

int main() {
  long bytes = 1024L * 1024 * 1024 * 4;
  uint4 *x, *y; cudaMalloc(&x, bytes); cudaMalloc(&y, bytes); cudaMemset(x, 0, bytes);
  float c4 = time_ms([&] { cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice); });
  float c2 = time_ms([&] { cudaMemcpyAsync(y, x, bytes / 2, cudaMemcpyDeviceToDevice); });
  cudaFree(x); cudaFree(y);
  printf("memcpy 4 GiB %.3f ms, 2 GiB %.3f ms\n", c4, c2);
  run<float, 512>("float32", 1024, 1024, 1024, 64, c4);
  run<float, 384>("float32", 1024, 1024, 1024, 64, c4);
  run<float, 256>("float32", 1024, 1024, 1024, 64, c4);
  run<float, 512>("float32", 1024, 1024, 1024, 32, c4);
  run<float, 512>("float32", 1024, 1024, 1024, 128, c4);
  run<__nv_bfloat16, 512>("bfloat16", 1024, 1024, 1024, 64, c2);
  run<__nv_bfloat16, 384>("bfloat16", 1024, 1024, 1024, 64, c2);
  run<__nv_bfloat16, 256>("bfloat16", 1024, 1024, 1024, 64, c2);
  run<__nv_bfloat16, 512>("bfloat16", 1024, 1024, 1024, 32, c2);
  run<__nv_bfloat16, 512>("bfloat16", 1024, 1024, 1024, 128, c2);
}
